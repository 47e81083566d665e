"""A long run's telemetry written straight into a real Redis, as the driver, workers, shards and Celery write it.

Long enough to matter (a million updates, 16 workers, 2 shards) without
training for hours; every value is computed here, so tests can check the API's
answers against them.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import redis

from ddq.config import settings_document
from ddq.core.agent import env_spec, model_parameters
from ddq.core.replay import state_shape
from ddq.core.settings import build_config
from ddq.services.telemetry import network_info
from ddq.transport.keys import RunKeys, shard_bounds
from ddq.transport.wire import WEIGHTS, Header, encode, layout_bytes

CHUNK = 10_000


@dataclass
class SyntheticRun:
    run: str
    episode_returns: np.ndarray
    episode_steps: np.ndarray
    weights: np.ndarray  # the published flat weights
    started: float
    updates: int
    workers: int
    malformed: int  # entries in the lists that are not JSON objects


def write_synthetic_run(client: redis.Redis, run: str = "big-000001", updates: int = 1_000_000, workers: int = 16,
                        episodes: int = 200_000, progress_points: int = 20_000, evaluations: int = 300,
                        silent_worker: int = 5) -> SyntheticRun:
    keys = RunKeys(run)
    config = build_config({"env": "ddq/Snake-v0", "workers": workers, "server": {"shards": 2},
                           "total_steps": 4 * updates})
    rng = np.random.default_rng(7)
    now = time.time()
    started = now - progress_points
    flat = model_parameters(config.agent)
    state = state_shape(env_spec(config.agent).frame_shape, config.agent.frame_stack)
    client.set(keys.info, json.dumps({"run": run, "started": started, "state": "running", "run_dir": "/nowhere",
                                      "settings": settings_document(config),
                                      "network": network_info(flat.layout, flat.layout_hash(), state)}))
    steps = np.sort(rng.integers(0, 4 * updates, episodes))
    returns = np.round(rng.normal(steps / 1e6, 1.0), 1)
    pipe = client.pipeline(transaction=False)
    for i in range(episodes):
        pipe.rpush(keys.episodes, json.dumps({"worker": i % workers, "time": started + i * progress_points / episodes,
                                              "env_steps": int(steps[i]), "episode_return": float(returns[i]),
                                              "length": 20, "truncated": False}))
        if i % CHUNK == CHUNK - 1:
            pipe.execute()
    pipe.rpush(keys.episodes, "not json", json.dumps([1, 2]))  # must be skipped, not trusted
    layers = ["2.weight", "2.bias", "4.weight", "4.bias", "6.weight", "6.bias"]
    for i in range(progress_points):
        pipe.rpush(keys.progress, json.dumps({
            "time": started + i, "wall_time_s": float(i), "env_steps": 4 * updates * i // progress_points,
            "updates": updates * i // progress_points, "updates_per_s": 50.0, "env_steps_per_s": 200.0,
            "pushes_per_s": 50.0, "loss": 0.01 + 0.001 * np.sin(i), "mean_max_q": i / progress_points,
            "epsilon": max(0.05, 1 - i / 1000), "rejected_total": 3, "dropped_stale": 0,
            "layer_ratios": {name: 1e-3 * (1 + k) for k, name in enumerate(layers)}}))
        if i % CHUNK == CHUNK - 1:
            pipe.execute()
    for i in range(evaluations):
        pipe.rpush(keys.evaluations, json.dumps({"source": "celery", "version": updates * i // evaluations,
                                                 "time": started + i * progress_points / evaluations,
                                                 "env_steps": 4 * updates * i // evaluations,
                                                 "mean_return": i / evaluations, "returns": [i / evaluations]}))
    pipe.execute()
    beat_workers(client, run, workers, silent_worker)

    weights = flat.data.numpy().copy()
    layout = layout_bytes(flat.layout_hash())
    for shard, (start, end) in enumerate(shard_bounds(flat.size, 2)):
        shard_keys = keys.shard(shard)
        client.set(shard_keys.weights, encode(Header(WEIGHTS, layout, updates, end - start, start, shard),
                                              weights[start:end]))
        client.set(shard_keys.metrics, json.dumps({
            "shard": shard, "version": updates - shard, "applied": updates - shard, "updates_per_s": 50.0 - shard,
            "dropped_stale": 0, "rejected": {"layout": 1 + shard, "non_finite": 2}, "rejected_total": 3 + shard,
            "staleness": {"0": 10, "1": 30 + shard, "15": 1}, "mean_loss": 0.01, "learning_rate": 2.5e-4,
            "time": now, "layers": [{"name": "2.weight", "weight_norm": 3.0, "grad_norm": 4.0,
                                     "update_norm": 3e-3 if shard == 0 else 4e-3, "update_ratio": 1e-3}]
            + ([{"name": "6.bias", "weight_norm": 1.0, "grad_norm": 1.0, "update_norm": 0.5}] if shard else [])}))
    frames = np.zeros((3, 14, 14), np.uint8)
    frames[:, 0, :] = 64
    client.hset(keys.replay, mapping={"version": updates, "episode": json.dumps({
        "version": updates, "time": now, "env_steps": 4 * updates, "mean_return": 2.0, "side": 14, "count": 3,
        "palette": {"0": "#000000", "64": "#888888"}, "frames": base64.b64encode(frames.tobytes()).decode()})})
    return SyntheticRun(run, returns, steps, weights, started, updates, workers, malformed=2)


def beat_workers(client: redis.Redis, run: str, workers: int = 16, silent_worker: int = 5) -> None:
    """Every worker's stats with a fresh heartbeat, but `silent_worker`'s a minute old; worker 3 was restarted."""
    now = time.time()
    for worker in range(workers):
        beat = now - (60.0 if worker == silent_worker else 0.5)
        client.hset(RunKeys(run).workers, str(worker), json.dumps({
            "worker": worker, "attempt": 1 if worker == 3 else 0, "env_steps": 1000 * worker, "pushes": 250 * worker,
            "episodes": 50, "backlog_waits": 0, "wall_time_s": 0.0, "state": "running", "heartbeat": beat,
            "pid": 1000 + worker, "env_steps_per_s": 12.5, "pushes_per_s": 3.1, "loss": 0.01, "mean_max_q": 0.5,
            "epsilon": 0.05}))


@contextmanager
def keep_workers_beating(client: redis.Redis, run: str, period_s: float = 1.0) -> Iterator[None]:
    """Calls `beat_workers` now and every `period_s` until the block ends: live workers stay fresh however slow
    the test is, and the silent one stays a minute old."""
    done = threading.Event()
    beat_workers(client, run)

    def beat() -> None:
        while not done.wait(period_s):
            beat_workers(client, run)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
