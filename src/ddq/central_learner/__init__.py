"""The learner of actor-learner training: one process that owns the replay memory and the optimizer."""
