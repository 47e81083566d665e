"""Environments: Snake (single and vectorized), and any Gymnasium env by id."""

import gymnasium as gym

SNAKE_ID = "ddq/Snake-v0"

if SNAKE_ID not in gym.registry:
    gym.register(id=SNAKE_ID, entry_point="ddq.gamesim.snake:SnakeEnv")


def eats_apples(env_id: str) -> bool:
    """Whether an env's rewarded steps are apples eaten (Snake): then ddq reports them as apples."""
    return env_id == SNAKE_ID
