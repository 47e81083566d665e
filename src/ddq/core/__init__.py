"""The DQN algorithm: envs aside, everything one agent needs (targets, replay, optimizers, learner, actor,
evaluation, checkpoints). It knows no wire, no service and no command line."""
