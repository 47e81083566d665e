"""`ddq bench minatar`: the MinAtar paper's protocol, training returns against frames averaged over runs.

For each game, configuration and seed, one serial run of `--frames` env steps (frames: MinAtar has no
frame skip) with the MinAtar preset (the paper's DQN) and the configuration's settings over it (`algo=pqn`
brings PQN's MinAtar settings with it). A run's
training return at F frames is the mean return of its last 100 training episodes that ended by F, as
the paper plots them; the table gives, per game and configuration, its mean over the seeds with the
standard error, and the median wall time to reach F (from the run's start).
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ddq.benchmarks.serial import bench_run
from ddq.benchmarks.stats import median
from ddq.core.settings import build_config
from ddq.gamesim.envs import MINATAR_ACTION_SETS, minatar_id
from ddq.run_folder import read_metrics

RECENT_EPISODES = 100


def training_return_at(records: list[dict[str, Any]], frames: int) -> float | None:
    """The mean return of a run's last RECENT_EPISODES training episodes that ended by `frames`."""
    ended = [r["episode_return"] for r in records if r.get("kind") == "episode" and r["env_steps"] <= frames]
    return statistics.fmean(ended[-RECENT_EPISODES:]) if ended else None


def wall_time_at(records: list[dict[str, Any]], frames: int) -> float | None:
    """Seconds from the run's start to its first record (evaluation or log) at `frames` env steps or more."""
    times = [r["wall_time_s"] for r in records if "wall_time_s" in r and r["env_steps"] >= frames]
    return times[0] if times else None


def run_one(game: str, settings: dict[str, Any], seed: int, frames: int, folder: Path,
            action_set: str = "minimal") -> list[dict[str, Any]]:
    """One run's metrics records."""
    values = {**settings, "env": minatar_id(game, action_set), "mode": "serial", "seed": seed, "total_steps": frames,
              "progress": False}
    run_dir = folder / f"{game}-{seed}-{time.monotonic_ns()}"
    bench_run(build_config(values), run_dir)
    return read_metrics(run_dir)


def run_bench(games: list[str], configurations: list[tuple[str, dict[str, Any]]], seeds: list[int],
              frames: int, action_set: str = "minimal") -> dict[tuple[str, str], list[list[dict[str, Any]]]]:
    """Every run's metrics, by (game, configuration name)."""
    for game in games:
        build_config({"env": minatar_id(game, action_set)})  # a misspelt game or setting is named before any run
    for _, settings in configurations:
        build_config({**settings, "env": minatar_id(games[0], action_set)})
    results: dict[tuple[str, str], list[list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory(prefix="ddq-minatar-") as tmp:
        for game in games:
            for name, settings in configurations:
                for seed in seeds:
                    results.setdefault((game, name), []).append(run_one(game, settings, seed, frames, Path(tmp),
                                                                        action_set))
                    print(f"ddq: {game} {name} seed {seed} done", file=sys.stderr, flush=True)
    return results


def _mean_and_error(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "—"
    error = statistics.stdev(known) / math.sqrt(len(known)) if len(known) > 1 else 0.0
    return f"{statistics.fmean(known):.1f} ± {error:.1f}" + ("" if len(known) == len(values) else " (not all runs)")


def _median_time(values: list[float | None]) -> str:
    middle = median(values)  # a run that never reached the frames counts as the slowest
    return "—" if middle is None else f"{middle:,.0f} s"


def table(results: dict[tuple[str, str], list[list[dict[str, Any]]]], checkpoints: list[int],
          action_set: str = "minimal") -> str:
    """A row per game and configuration: training return (mean ± standard error over runs) and median wall
    time at each checkpoint."""
    head = "| game | configuration | runs | " + " | ".join(f"{f / 1e6:g}M frames: return | time" for f in checkpoints)
    lines = [head + " |", "|---|---|---|" + "---|---|" * len(checkpoints)]
    for (game, name), runs in results.items():
        cells = []
        for frames in checkpoints:
            cells.append(_mean_and_error([training_return_at(run, frames) for run in runs]))
            cells.append(_median_time([wall_time_at(run, frames) for run in runs]))
        lines.append(f"| {game} | {name} | {len(runs)} | " + " | ".join(cells) + " |")
    return (f"MinAtar (-{MINATAR_ACTION_SETS[action_set]} ids: the {action_set} action set), serial mode, the "
            "MinAtar preset and each configuration's settings over it; training return: "
            f"the mean of the last {RECENT_EPISODES} training episodes by then, averaged over runs (± standard "
            "error); time: median wall time from each run's start\n\n" + "\n".join(lines))
