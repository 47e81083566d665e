"""`ddq bench throughput`: distributed throughput with 1, 2, 4, ... workers on an env with a slow simulator.

Each env step sleeps a fixed latency (a stand-in for an expensive simulator,
like the 3D simulator of Grandio's MPI-based distributed DQN), so the workers' waiting leaves the cores free and
what limits the speedup is ddq itself: Spark, Redis, the parameter server,
and each worker's own acting and learning. Each row is one real `ddq train
--mode downpour` run; rates are summed over the workers' active time, which
leaves out the JVM's and the workers' start-up.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ddq.processes import how_it_ended


@dataclass
class ScalingRow:
    workers: int
    env_steps_per_s: float
    pushes_per_s: float
    updates: int


def run_workers(workers: int, latency_ms: float, steps_per_worker: int, folder: Path,
                mode: str = "downpour") -> ScalingRow:
    run_dir = folder / f"workers{workers}"
    command = [sys.executable, "-m", "ddq", "train", "--mode", mode, "--workers", str(workers),
               "--env", "CartPole-v1", "--algo", "dqn", "--num-envs", "1", "--step-latency-ms", str(latency_ms),
               "--total-steps", str(workers * steps_per_worker), "--learning-starts", "100",
               "--train-frequency", "10", "--replay-ratio", "0.1", "--eval-every", str(10**9),
               "--eval-episodes", "1", "--no-progress", "--run-dir", str(run_dir)]
    finished = subprocess.run(command, capture_output=True, text=True)
    if finished.returncode != 0:
        raise RuntimeError(f"the {workers}-worker run failed ({how_it_ended(finished.returncode)}):\n"
                           f"{finished.stderr[-2000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    return ScalingRow(workers, *worker_rates(summary), summary["updates"])


def worker_rates(summary: dict) -> tuple[float, float]:
    """(env steps/s, gradient pushes/s) of a finished downpour run, each worker's over its own active
    time, summed: the JVM's and the workers' start-up stay out of it."""
    stats = summary["workers"]
    return (sum(w["env_steps"] / w["wall_time_s"] for w in stats),
            sum(w["pushes"] / w["wall_time_s"] for w in stats))


def run_bench(worker_counts: list[int], latency_ms: float = 10.0, steps_per_worker: int = 1000,
              mode: str = "downpour") -> list[ScalingRow]:
    with tempfile.TemporaryDirectory(prefix="ddq-bench-throughput-") as tmp:
        rows = []
        for workers in worker_counts:
            rows.append(run_workers(workers, latency_ms, steps_per_worker, Path(tmp), mode))
            print(f"ddq: measured {workers} worker{'' if workers == 1 else 's'}", file=sys.stderr)
        return rows


def table(rows: list[ScalingRow], latency_ms: float, mode: str = "downpour") -> str:
    base = rows[0].env_steps_per_s / rows[0].workers
    sent = "gradient pushes/s" if mode == "downpour" else "experience messages/s"
    lines = [f"| workers | env steps/s | {sent} | updates | speedup vs 1 worker | efficiency |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        speedup = r.env_steps_per_s / base
        lines.append(f"| {r.workers} | {r.env_steps_per_s:,.0f} | {r.pushes_per_s:,.1f} | {r.updates:,} | "
                     f"{speedup:.2f}x | {speedup / r.workers:.0%} |")
    return (f"{mode.capitalize()} on CartPole-v1 with {latency_ms:g} ms per env step (slept), 1 env per worker, "
            "replay ratio 0.1\n\n" + "\n".join(lines))
