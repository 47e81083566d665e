"""`ddq bench dashboard`: what babysitting costs training.

Runs the same downpour Snake training twice per repeat, alternating: once
bare (`--no-celery --no-dashboard`) and once watched (Celery evaluating
snapshots in the background, the dashboard served, and a headless Chromium
showing the whole page, every panel on screen, for the whole run). Rates are the workers' own (env
steps/s and gradient pushes/s over their active time), so the JVM's start-up
is left out of both.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ddq.benchmarks.throughput import worker_rates
from ddq.gamesim.spec import BOARD_GAME

PAGE_HEIGHT = 2600


@dataclass
class WatchRow:
    watched: bool
    env_steps_per_s: float
    pushes_per_s: float
    evaluations: int  # greedy evaluations the dashboard showed (the driver's and Celery's)
    page_polls: int  # times the open page refreshed its charts


def _wait_for_file(path: Path, process: subprocess.Popen, timeout: float = 120.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.is_file():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the training run never served its dashboard ({path} missing)")
        time.sleep(0.1)
    return path.read_text()


def run_once(watched: bool, run_dir: Path, total_steps: int, workers: int, eval_every_s: float) -> WatchRow:
    command = [sys.executable, "-m", "ddq", "train", "--mode", "downpour", "--workers", str(workers),
               "--env", "ddq/Snake-v0", "--total-steps", str(total_steps), "--no-progress", "--run-dir", str(run_dir)]
    if not watched:
        command += ["--no-celery", "--no-dashboard"]
    run_dir.mkdir(parents=True)
    env = dict(os.environ, DDQ_EVAL_EVERY_S=str(eval_every_s))
    with open(run_dir / "train.log", "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        polls = evaluations = 0
        if watched:
            from ddq.dashboard.browser import open_page

            # tall enough that every panel is on screen, the replay animating included
            with open_page(_wait_for_file(run_dir / "dashboard.url", process), height=PAGE_HEIGHT) as page:
                while process.poll() is None:
                    page.wait_for_timeout(1000)
                    seen = page.evaluate("window.ddq.run ? window.ddq.run.evaluations : 0")
                    evaluations, polls = max(evaluations, seen), page.evaluate("window.ddq.polls")
        if process.wait() != 0:
            raise RuntimeError(f"the training run failed; see {run_dir / 'train.log'}:\n"
                               f"{(run_dir / 'train.log').read_text()[-2000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    return WatchRow(watched, *worker_rates(summary), evaluations, polls)


def run_bench(repeats: int = 2, total_steps: int = 200_000, workers: int = 2,
              eval_every_s: float = 30.0) -> list[WatchRow]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="ddq-bench-dashboard-") as tmp:
        for repeat in range(repeats):
            for watched in (False, True):
                name = f"{'watched' if watched else 'bare'}-{repeat}"
                rows.append(run_once(watched, Path(tmp) / name, total_steps, workers, eval_every_s))
                print(f"ddq: measured {name}: {rows[-1].env_steps_per_s:,.0f} env steps/s", file=sys.stderr)
    return rows


def table(rows: list[WatchRow], total_steps: int, workers: int, eval_every_s: float) -> str:
    def median(watched: bool, key: str) -> float:
        return statistics.median(getattr(r, key) for r in rows if r.watched == watched)

    lines = ["| setting | env steps/s | gradient pushes/s | evaluations shown | page refreshes |",
             "|---|---|---|---|---|"]
    for r in rows:
        setting = "Celery + dashboard + open page" if r.watched else "`--no-celery --no-dashboard`"
        lines.append(f"| {setting} | {r.env_steps_per_s:,.0f} | {r.pushes_per_s:,.1f} | "
                     f"{r.evaluations if r.watched else '—'} | {r.page_polls if r.watched else '—'} |")
    steps, pushes = (median(True, key) / median(False, key) for key in ("env_steps_per_s", "pushes_per_s"))
    lines.append(f"| **watched / bare (medians)** | **{steps:.1%}** | **{pushes:.1%}** | | |")
    return (f"Downpour {BOARD_GAME}, {workers} workers, {total_steps:,} env steps per run, Celery evaluating every "
            f"{eval_every_s:g} s, runs alternating\n\n" + "\n".join(lines))
