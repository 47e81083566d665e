"""Greedy evaluation: the mean return of a Q-network over fresh episodes."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ddq.dqn import epsilon_greedy
from ddq.gamesim.envs import EnvOptions, make_vector_env
from ddq.replay import FrameStacker


@dataclass
class Evaluation:
    """Per-episode returns and counts of positively rewarded steps (apples, in Snake)."""

    returns: list[float]
    rewarded_steps: list[int]

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns))

    @property
    def mean_rewarded_steps(self) -> float:
        return float(np.mean(self.rewarded_steps))


def evaluate(q_net: nn.Module, env_id: str, episodes: int, frame_stack: int = 1,
             env_options: EnvOptions | None = None, seed: int | None = None, epsilon: float = 0.0,
             device: torch.device | str = "cpu") -> Evaluation:
    """`episodes` episodes played side by side with (near-)greedy actions."""
    envs = make_vector_env(env_id, episodes, env_options)
    was_training = q_net.training
    q_net.train(False)  # inference mode for layers such as dropout
    try:
        frames, _ = envs.reset(seed=seed)
        space = envs.single_observation_space
        stacker = FrameStacker(episodes, space.shape, space.dtype, frame_stack)
        states = stacker.reset(frames)
        returns = np.zeros(episodes)
        rewarded = np.zeros(episodes, dtype=np.int64)
        done = np.zeros(episodes, dtype=bool)
        rng = np.random.default_rng(seed)
        no_restart = np.zeros(episodes, dtype=bool)
        while not done.all():
            actions = epsilon_greedy(q_net, torch.from_numpy(states).to(device), epsilon, rng)
            frames, rewards, terminated, truncated, _ = envs.step(actions)
            returns += np.where(done, 0.0, rewards)
            rewarded += ~done & (rewards > 0)
            done |= terminated | truncated
            states = stacker.push(frames, no_restart)
        return Evaluation(returns.tolist(), rewarded.tolist())
    finally:
        q_net.train(was_training)
        envs.close()


EVAL_SEED_OFFSET = 1_000_003  # evaluation episodes never share seeds with training episodes


def evaluate_and_record(network: nn.Module, config, log, counters: dict, env_steps: int, updates: int,
                        started_at: float, device: torch.device) -> tuple[tuple[int, float, float], bool]:
    """A run's periodic greedy evaluation, the same in every mode: evaluates on fresh seeds, logs the
    point, notes the first time the target return was reached in `counters`.

    Returns (env steps, mean return, mean rewarded steps) and whether the target is reached.
    """
    result = evaluate(network, config.env, config.eval_episodes, config.frame_stack, config.env_options,
                      seed=config.seed + EVAL_SEED_OFFSET * (1 + counters["evaluations"]),
                      epsilon=config.eval_epsilon, device=device)
    counters["evaluations"] += 1
    log.write("eval", env_steps=env_steps, updates=updates, wall_time_s=counters["wall_time_s"],
              mean_return=result.mean_return, returns=result.returns, mean_rewarded_steps=result.mean_rewarded_steps)
    reached = config.target_return is not None and result.mean_return >= config.target_return
    if reached and counters["steps_to_target"] is None:
        counters["steps_to_target"] = env_steps
        counters["time_to_target_s"] = time.time() - started_at
    return (env_steps, result.mean_return, result.mean_rewarded_steps), reached
