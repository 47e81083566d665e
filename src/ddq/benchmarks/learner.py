"""`ddq bench learner`: the actor-learner learner's update rate on a device, uniform and prioritized replay.

Times the learner's own training step (`train_from_replay` on one replay memory per actor, applied by the
learner's optimizer at once) on memories filled with random frames of the env's layout, so what is
measured is the learner alone: sampling, stacking, the (Double-)DQN gradient and the optimizer step,
plus the priority updates when prioritized. No env, Redis or Spark.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from ddq.config import TrainConfig
from ddq.core.agent import env_spec, make_learner, make_replay, resolve_device, seed_everything
from ddq.core.replay_training import train_from_replay
from ddq.core.settings import build_config
from ddq.core.weights import LocalParameters


@dataclass
class LearnerRow:
    device: str
    model: str
    batch_size: int
    prioritized: bool
    updates_per_s: float


def filled_memories(config: TrainConfig, frames: int) -> list:
    """One replay memory per actor, each holding `frames` vector steps of random frames and rewards."""
    spec = env_spec(config.agent)
    frame_shape, dtype, num_actions = spec.frame_shape, spec.frame_dtype, spec.num_actions
    rng = np.random.default_rng(0)
    memories = []
    for actor in range(config.distributed.workers):
        capacity = max(config.agent.buffer_size // config.distributed.workers, 1)
        memory = make_replay(config.agent, frame_shape, dtype, actor, config.run.total_steps, capacity)
        streams = config.agent.num_envs
        memory.start(np.zeros((streams, *frame_shape), dtype))
        for _ in range(frames):
            observed = (rng.random((streams, *frame_shape)) * (255 if dtype == np.uint8 else 1)).astype(dtype)
            memory.add(observed, rng.integers(0, num_actions, streams), rng.random(streams).astype(np.float32),
                       rng.random(streams) < 0.02, np.ones(streams, bool))
        memories.append(memory)
    return memories


def measure(config: TrainConfig, updates: int) -> LearnerRow:
    seed_everything(config.agent.seed, config.agent.threads)
    device = resolve_device(config.agent.device)
    spec = env_spec(config.agent)
    learner = make_learner(config.agent, spec.frame_shape, spec.num_actions, device)
    memories = filled_memories(config, 2_000)
    local = LocalParameters(learner)
    train_from_replay(learner, memories, local, 20, config.agent.batch_size)  # warm-up: kernels, allocator
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    train_from_replay(learner, memories, local, updates, config.agent.batch_size, beta=0.7)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return LearnerRow(str(device), config.agent.model, config.agent.batch_size, config.agent.prioritized,
                      updates / (time.perf_counter() - started))


def run_bench(env: str, devices: list[str], batch_sizes: list[int], updates: int, model: str | None,
              workers: int) -> list[LearnerRow]:
    rows = []
    for device in devices:
        for batch_size in batch_sizes:
            for prioritized in (False, True):
                values = {"env": env, "device": device, "batch_size": batch_size, "prioritized": prioritized,
                          "workers": workers, "mode": "actor-learner", "progress": False}
                if model:
                    values["model"] = model
                rows.append(measure(build_config(values), updates))
    return rows


def table(env: str, rows: list[LearnerRow]) -> str:
    lines = ["| device | model | batch | replay | updates/s | samples trained/s |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.device} | {r.model} | {r.batch_size} | {'prioritized' if r.prioritized else 'uniform'} | "
                     f"{r.updates_per_s:,.0f} | {r.updates_per_s * r.batch_size:,.0f} |")
    return f"The actor-learner learner's update rate on {env} (random frames, one memory per actor)\n\n" + \
        "\n".join(lines)
