"""The learner of actor-learner training as a process: Redis I/O and threads around the core's CentralLearner,
which owns the replay memory and the optimizer (as `param_server/` is the process around the core's Shard)."""
