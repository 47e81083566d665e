"""Environments: Snake (single and vectorized), and any Gymnasium env by id."""

import gymnasium as gym

SNAKE_ID = "ddq/Snake-v0"
DEFAULT_ENV_ID = SNAKE_ID  # what a run plays when no env is named

if SNAKE_ID not in gym.registry:
    gym.register(id=SNAKE_ID, entry_point="ddq.gamesim.snake:SnakeEnv")


