"""`ddq bench snake`: the Snake ablation, what each of `make run`'s settings and each change tried buys in apples.

Each row trains with the settings `make run` uses (a config file,
`configs/smart-snake.toml`) with one change: a setting undone (up to the
DQN row, the settings `make run` used before PQN) or one tried against the
plateau (the rows after it), in serial mode, for the
same number of env steps on each seed, and reports the greedy apples per
episode over 50 episodes at the end. Runs go side by side, one per core (each
pinned to its core, one torch thread); a row's apples do not depend on what
else ran, since serial mode's env steps and updates are the same however
fast they come, and its minutes are the run's own wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddq.gamesim import SNAKE_ID
from ddq.processes import how_it_ended, spawn

DEFAULT_CONFIG = "configs/smart-snake.toml"
MAKE_RUN_ENV = SNAKE_ID  # what `make run` trains with DEFAULT_CONFIG (`ddq bench scaling` trains it too)


@dataclass(frozen=True)
class Ablation:
    """One row: `change` in words and the `ddq train` flags that make it."""

    change: str
    flags: tuple[str, ...]


ROWS = (
    Ablation("make run's settings", ()),
    Ablation("without board symmetries", ("--no-board-symmetries",)),
    Ablation("without dueling heads", ("--no-dueling",)),
    Ablation("gamma 0.95", ("--gamma", "0.95")),
    Ablation("the gray board instead of its planes (small-conv)", ("--model", "small-conv")),
    Ablation("MLP 256x256 instead of the conv net", ("--model", "mlp")),
    # Not one change but the algorithm: make run's DQN settings before PQN (configs/snake-dqn.toml). About
    # 370 env steps/s on one core against PQN's 3,400: at 1M env steps, about 45 minutes a run.
    Ablation("DQN as make run trained before PQN", ("--algo", "dqn", "--model", "small-conv", "--num-envs", "16",
                                                    "--epsilon-steps", "100000", "--gamma", "0.95", "--lr", "5e-4",
                                                    "--lr-gamma", "0.3", "--lr-stepsize", "125000")),
    # Changes tried against the plateau at about 38 greedy apples (docs/benchmarks.md), where most greedy
    # games end with the snake hitting its own body:
    Ablation("gamma 0.995", ("--gamma", "0.995")),  # a long snake's apple can be 50+ moves away
    Ablation("the wide board net, not turned (snake-conv-wide)", ("--model", "snake-conv-wide")),  # room to plan
    Ablation("Q(lambda) 0.9", ("--q-lambda", "0.9")),  # a dead end's cost carried further back
    # What two data-parallel workers of 64 boards each learn per env step (their gradients averaged)
    Ablation("128 boards (minibatches of 512)", ("--num-envs", "128")),
    # The board as the snake sees it, as the published agents that fill most of the board see it: make run
    # turns it so that the snake heads up (one pattern for "a wall ahead" whichever way it goes); these undo
    # that, and centre it on the head as well
    Ablation("the board not turned (snake-conv)", ("--model", "snake-conv")),
    Ablation("the board turned and centred on the head (snake-conv-egocentric)",
             ("--model", "snake-conv-egocentric")),
)


@dataclass
class Trial:
    row: int
    seed: int
    run_dir: Path
    process: subprocess.Popen | None = None
    apples: float | None = None  # None: the run failed (its log says why)
    wall_time_s: float | None = None
    board: int | None = None  # the board's side n


def _command(config: str, budget: int, trial: Trial) -> list[str]:
    return [sys.executable, "-m", "ddq", "train", "--mode", "serial", "--config", config, "--env", SNAKE_ID,
            "--seed", str(trial.seed), "--total-steps", str(budget), "--eval-every", str(budget),
            "--eval-episodes", "50", "--time-budget-s", "none", "--threads", "1", "--no-progress",
            "--run-dir", str(trial.run_dir), *ROWS[trial.row].flags]


def _log(trial: Trial) -> Path:
    return trial.run_dir.with_suffix(".log")


def _finish(trial: Trial) -> None:
    """Reads a finished run's summary; a failed run is said in one line (with its log's last line) and
    left without apples, so the other runs still count."""
    assert trial.process is not None
    label = f"{ROWS[trial.row].change}, seed {trial.seed}"
    if trial.process.returncode != 0:
        tail = _log(trial).read_text(errors="replace").strip().splitlines()[-1:]
        print(f"ddq: {label} failed ({how_it_ended(trial.process.returncode)}): {' '.join(tail)}", file=sys.stderr)
        return
    summary = json.loads((trial.run_dir / "summary.json").read_text())
    trial.apples = float(summary["final_eval_mean_apples"])
    trial.wall_time_s = float(summary["wall_time_s"])
    trial.board = int(summary["config"]["agent"]["env_options"]["snake_size"])
    print(f"ddq: {label}: {trial.apples:.2f} apples", file=sys.stderr)


def _check(rows: Sequence[int], seeds: Sequence[int], budget: int, config: str, jobs: int | None) -> None:
    if not Path(config).is_file():
        raise ValueError(f"--config {config}: no such file (run from the repository's folder, or name the file)")
    for row in rows:
        if not 0 <= row < len(ROWS):
            raise ValueError(f"--rows {row}: rows are 0 to {len(ROWS) - 1}")
    for name, values in (("--rows", rows), ("--seeds", seeds)):
        if len(set(values)) != len(values):
            raise ValueError(f"{name} {' '.join(map(str, values))}: each may appear once")
    if budget < 1:
        raise ValueError(f"--total-steps {budget}: must be positive")
    if jobs is not None and jobs < 1:
        raise ValueError(f"--jobs {jobs}: must be positive")


def run_ablation(rows: Sequence[int], seeds: Sequence[int], budget: int, config: str = DEFAULT_CONFIG,
                 jobs: int | None = None) -> list[Trial]:
    """Every (row, seed) run, `jobs` at a time (default: one per core this process may use), each pinned
    to a core of its own while there are enough; in the order of `rows`, then `seeds`."""
    _check(rows, seeds, budget, config, jobs)
    cores = sorted(os.sched_getaffinity(0))
    jobs = jobs or len(cores)
    with tempfile.TemporaryDirectory(prefix="ddq-bench-snake-") as tmp:
        trials = [Trial(row, seed, Path(tmp) / f"row{row}-seed{seed}") for row in rows for seed in seeds]
        waiting, running = list(trials), dict[int, Trial]()  # running: by the slot (core) it holds
        try:
            while waiting or running:
                for slot in range(jobs):
                    if slot not in running and waiting:
                        trial = running[slot] = waiting.pop(0)
                        core = cores[slot] if jobs <= len(cores) else None
                        trial.process = spawn(_command(config, budget, trial), _log(trial), core=core)
                for slot, trial in list(running.items()):
                    if trial.process is not None and trial.process.poll() is not None:
                        del running[slot]
                        _finish(trial)
                time.sleep(0.5)
        finally:  # stopped early (Ctrl-C): what runs is thrown away, so it is killed, not asked to finish
            for trial in running.values():
                if trial.process is not None and trial.process.poll() is None:
                    trial.process.kill()
                    trial.process.wait()
    return trials


def table(trials: list[Trial], budget: int) -> str:
    """One line per row: apples per seed, their median, and the median's change from the first row's
    (the first of those run); a failed run's cell says so and leaves its row without a median."""
    seeds = list(dict.fromkeys(trial.seed for trial in trials))
    rows = list(dict.fromkeys(trial.row for trial in trials))
    sides = {trial.board for trial in trials if trial.board is not None}
    board = "{0}x{0}".format(*sides) if len(sides) == 1 else "sizes differ" if sides else "?"
    lines = [f"Snake {board}, serial mode, greedy apples per episode (50 episodes) after {budget:,} env steps",
             "", "| change | " + " | ".join(f"seed {seed}" for seed in seeds) + " | median | vs first row | "
             "minutes per run |", "|---" * (len(seeds) + 4) + "|"]
    first: float | None = None
    for row in rows:
        mine = {trial.seed: trial for trial in trials if trial.row == row}
        apples = [mine[seed].apples for seed in seeds]
        cells = " | ".join("failed" if value is None else f"{value:.2f}" for value in apples)
        if any(value is None for value in apples):
            lines.append(f"| {ROWS[row].change} | {cells} | — | — | — |")
            continue
        median = statistics.median(value for value in apples if value is not None)
        if row == rows[0]:
            first, versus = median, "—"
        else:
            versus = "—" if first is None else f"{median - first:+.2f}"
        minutes = statistics.median((mine[seed].wall_time_s or 0.0) / 60 for seed in seeds)
        lines.append(f"| {ROWS[row].change} | {cells} | **{median:.2f}** | {versus} | {minutes:.1f} |")
    return "\n".join(lines)


def describe_rows() -> str:
    return "; ".join(f"{i}: {row.change} ({' '.join(row.flags) or 'as configured'})" for i, row in enumerate(ROWS))


def _command_line(args: argparse.Namespace) -> int:
    print(table(run_ablation(args.rows, args.seeds, args.total_steps, args.config, args.jobs), args.total_steps))
    return 0


def add_command(kinds: Any) -> None:
    """Adds `ddq bench snake` to the `ddq bench` subparsers `kinds`."""
    snake = kinds.add_parser("snake", help="the Snake ablation: make run's settings, then each with one change "
                                           "undone; greedy apples at a fixed budget, several seeds side by side")
    snake.add_argument("--rows", type=int, nargs="+", default=list(range(len(ROWS))),
                       help=f"rows to run: {describe_rows()}")
    snake.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of each row")
    snake.add_argument("--total-steps", type=int, default=1_000_000,
                       help="env steps of every run (default: 1000000)")
    snake.add_argument("--config", default=DEFAULT_CONFIG,
                       help=f"the settings rows start from (default: {DEFAULT_CONFIG})")
    snake.add_argument("--jobs", type=int, default=None, help="runs at once, each pinned to its own core while "
                                                              "there are enough (default: one per core)")
    snake.set_defaults(func=_command_line)
