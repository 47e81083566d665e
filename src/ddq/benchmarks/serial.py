"""`ddq bench train`: time and env steps to a target return over several seeds, as a Markdown table."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ddq.benchmarks.stats import median
from ddq.config import TrainConfig, flat_settings
from ddq.core.settings import build_config
from ddq.gamesim.spec import score_of
from ddq.modes import run_training


def run_seeds(env_id: str, seeds: list[int], overrides: dict[str, Any]) -> list[dict[str, Any]]:
    """One quiet run per seed (in this process, one after another), in any mode."""
    summaries = []
    with tempfile.TemporaryDirectory(prefix="ddq-bench-") as tmp:
        for seed in seeds:
            config = build_config({**overrides, "env": env_id, "seed": seed, "progress": False})
            summaries.append(bench_run(config, Path(tmp) / f"seed{seed}"))
    return summaries


class BenchStopped(SystemExit):
    """A bench's run stopped by a signal (Ctrl-C, SIGTERM): the bench ends with the run's exit code, its
    temporary folders removed on the way out. `partial`: the results a bench that prints what it has keeps
    (grandio's), set as it passes."""

    def __init__(self, code: int):
        super().__init__(code)
        self.partial: Any = None


def bench_run(config: TrainConfig, run_dir: Path) -> dict[str, Any]:
    """One of a bench's runs, in this process: its summary, a failed run's included (a miss in the table).
    A run a signal stopped raises BenchStopped: it had ended only that run, the next one starting at once,
    one Ctrl-C per run."""
    summary, code = run_training(config, run_dir, time.time())
    if code > 128:  # 128 + the signal's number (`StopSignals.exit_code`)
        print(f"ddq: the bench stops: its run of {config.agent.env} (seed {config.agent.seed}) was "
              f"{summary['stop_reason']}", file=sys.stderr, flush=True)
        raise BenchStopped(code)
    return summary


def _median(values: list[float | None]) -> str:
    """The median (`stats.median`: a miss counts as the slowest), "—" where half the runs or more missed."""
    middle = median(values)
    if middle is None:
        return "—"
    return f"{middle:,.1f}" if any(isinstance(v, float) for v in values) else f"{middle:,.0f}"


def serial_table(env_id: str, summaries: list[dict[str, Any]], settings: dict[str, Any] | None = None) -> str:
    """One row per seed and their medians; `settings`, what the runs set beyond the preset, in the title."""
    score = score_of(env_id)
    rewarded = f"final greedy {score.name}" if score.rewarded_steps else "final rewarded steps"
    rows = ["| seed | steps to target | time to target (s) | env steps | updates | final greedy return | "
            f"{rewarded} |", "|---|---|---|---|---|---|---|"]
    for s in summaries:
        time_s = f"{s['time_to_target_s']:.1f}" if s["time_to_target_s"] is not None else "—"
        steps = f"{s['steps_to_target']:,}" if s["steps_to_target"] is not None else "—"
        rows.append(f"| {s['seed']} | {steps} | {time_s} | {s['env_steps']:,} | {s['updates']:,} | "
                    f"{s['final_eval_return']:.1f} | {s['final_eval_rewarded_steps']:.2f} |")
    rows.append(f"| **median** | {_median([s['steps_to_target'] for s in summaries])} | "
                f"{_median([s['time_to_target_s'] for s in summaries])} | | | "
                f"{statistics.median(s['final_eval_return'] for s in summaries):.1f} | "
                f"{statistics.median(s['final_eval_rewarded_steps'] for s in summaries):.2f} |")
    config = flat_settings(summaries[0]["config"])
    mode = "serial mode" if config["mode"] == "serial" else f"{config['mode']}, {config['workers']} workers"
    mode += "".join(f", {name.replace('_', ' ')}" for name in ("prioritized", "per_actor_epsilon", "sync")
                    if config.get(name))
    mode += "".join(f", {key} = {value}" for key, value in (settings or {}).items())
    return f"{env_id}, {mode}\n\n" + "\n".join(rows)
