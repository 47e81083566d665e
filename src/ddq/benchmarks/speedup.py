"""`ddq bench speedup`: time to a target return, serial on one core against a distributed mode on N cores.

What a user gets from more machines. Each run is one real `ddq train` with
ddq's defaults for the env, its target return and a seed, timed from the
command's start (Spark's and the services' start-up included) to the first
greedy evaluation at the target. The serial run is held to one core and the
distributed run to N (`taskset`: a core stands for a one-core host), so the
speedup compares equal cores; the distributed run's driver, Redis and
evaluator share its N cores (they get no host of their own here, which can
only slow it). Both modes evaluate at the preset's `eval_every` mark, serial
in line, the distributed driver beside the run. Configurations alternate
seed by seed, one run at a time, so a slow spell of the machine falls on both.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddq.processes import how_it_ended

# The tasks of the scaling issue: each env's target, and what the command adds to ddq's defaults for it.
TASKS: dict[str, tuple[float, list[str]]] = {
    "LunarLander-v3": (200.0, []),
    "MinAtar/Breakout-v1": (7.0, ["--algo", "pqn"]),
    "CartPole-v1": (475.0, []),
}


@dataclass
class Outcome:
    configuration: str
    seed: int
    seconds: float | None  # from the command's start to the target; None: not reached
    env_steps: int | None


def run_one(env: str, mode: str, workers: int, seed: int, folder: Path) -> Outcome:
    target, extra = TASKS[env]
    cores = 1 if mode == "serial" else workers
    run_dir = folder / f"{mode}-{workers}-seed{seed}"
    command = ["taskset", "-c", f"0-{cores - 1}", sys.executable, "-m", "ddq", "train", "--env", env,
               "--seed", str(seed), "--target-return", str(target), "--no-progress", "--run-dir", str(run_dir),
               *extra, *(["--mode", "serial"] if mode == "serial" else ["--mode", mode, "--workers", str(workers)])]
    finished = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    if finished.returncode != 0:
        raise RuntimeError(f"{' '.join(command[3:])} failed ({how_it_ended(finished.returncode)}):\n"
                           f"{finished.stderr[-2000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    return Outcome(configuration_name(mode, workers), seed, summary["time_to_target_s"], summary["steps_to_target"])


def configuration_name(mode: str, workers: int) -> str:
    return "serial, 1 core" if mode == "serial" else f"{mode}, {workers} workers on {workers} cores"


def run_bench(env: str, modes: list[str], workers: int, seeds: list[int]) -> list[Outcome]:
    if os.cpu_count() is not None and workers > os.cpu_count():  # type: ignore[operator]
        raise ValueError(f"--workers {workers} needs {workers} cores; this machine has {os.cpu_count()}")
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="ddq-bench-speedup-") as tmp:
        for seed in seeds:
            for mode in ["serial", *modes]:
                outcomes.append(run_one(env, mode, workers, seed, Path(tmp)))
                done = outcomes[-1]
                print(f"ddq: {env} {done.configuration} seed {seed}: {done.seconds} s, {done.env_steps} env steps",
                      file=sys.stderr, flush=True)
    return outcomes


def _median(values: list[Any]) -> float | None:
    return statistics.median(values) if values and None not in values else None


def table(env: str, outcomes: list[Outcome]) -> str:
    target, extra = TASKS[env]
    names = list(dict.fromkeys(o.configuration for o in outcomes))
    seeds = list(dict.fromkeys(o.seed for o in outcomes))
    serial = _median([o.seconds for o in outcomes if o.configuration == names[0]])
    lines = [f"{env} to a greedy {target:g} (ddq's defaults{', ' + ' '.join(extra) if extra else ''}; seconds from "
             "the command's start, env steps in brackets)", "",
             "| configuration | " + " | ".join(f"seed {s}" for s in seeds) + " | median | x serial's time | "
             "speedup | efficiency |", "|---" * (len(seeds) + 5) + "|"]
    for name in names:
        runs = {o.seed: o for o in outcomes if o.configuration == name}
        cells = [f"{runs[s].seconds:.1f} ({runs[s].env_steps:,})" if runs[s].seconds is not None else "not reached"
                 for s in seeds]
        median = _median([runs[s].seconds for s in seeds])
        cores = 1 if name == names[0] else int(name.split(" on ")[1].split()[0])
        if median is None or serial is None:
            ratio = speedup = efficiency = "—"
        else:
            ratio, speedup = f"{median / serial:.2f}x", f"{serial / median:.2f}x"
            efficiency = f"{serial / median / cores:.0%}"
        shown = f"{median:.1f}" if median is not None else "—"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {shown} | {ratio} | {speedup} | {efficiency} |")
    return "\n".join(lines)
