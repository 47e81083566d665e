"""`ddq bench peers`: ddq's defaults beside Stable-Baselines3 and CleanRL, seed by seed, in one invocation.

Each seed runs ddq (`ddq train --mode serial --env ENV --seed S` and the criterion's flags, nothing
else), then Stable-Baselines3's DQN with rl-baselines3-zoo's tuned settings for the env, then CleanRL's
`dqn.py` with its own defaults, one at a time, each with one torch thread on the CPU, so no run shares
the machine with another. All are held to one criterion: every EVAL_EVERY env steps, 10 greedy
episodes played side by side; the first time their mean reaches the target, the run has reached it.
Every clock runs from the process's start (the kernel's record) to that evaluation: starting up,
evaluating and training all count, for every learner alike.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ddq.benchmarks.peer_runs import CLEANRL_SCRIPT, EVAL_EPISODES
from ddq.benchmarks.stats import quantile
from ddq.processes import how_it_ended


@dataclasses.dataclass(frozen=True)
class Criterion:
    target: float
    eval_every: int  # env steps between evaluations: LunarLander's episodes are long, so it evaluates less often


CRITERIA = {"CartPole-v1": Criterion(475.0, 1_000), "LunarLander-v3": Criterion(200.0, 10_000)}
PEER_NAMES = {"ddq": "ddq", "sb3": "Stable-Baselines3", "cleanrl": "CleanRL"}
WHAT_RAN = {"ddq": "ddq with its defaults (serial mode)",
            "sb3": "Stable-Baselines3's DQN with rl-baselines3-zoo's settings",
            "cleanrl": "CleanRL's dqn.py with its own"}
SB3_HINT = "ddq bench peers needs Stable-Baselines3: pip install 'ddq[peers]' (or stable-baselines3)"
CLEANRL_HINT = ("--cleanrl {path}: no {script} there; give a checkout of CleanRL's repository "
                "(git clone https://github.com/vwxyzjn/cleanrl), or leave CleanRL out with --peers ddq sb3")


def check_peers(peers: list[str], cleanrl: str | None) -> None:
    """One line naming what is missing, before any run."""
    if "sb3" in peers:
        try:
            import stable_baselines3  # noqa: F401
        except ImportError:
            raise ValueError(SB3_HINT) from None
    if "cleanrl" in peers:
        if cleanrl is None or not (Path(cleanrl) / CLEANRL_SCRIPT).is_file():
            raise ValueError(CLEANRL_HINT.format(path=cleanrl or "(not given)", script=CLEANRL_SCRIPT))
        try:  # and tensorboard, which ddq itself requires
            import tyro  # noqa: F401
        except ImportError:
            raise ValueError("CleanRL's dqn.py needs tyro: pip install 'ddq[peers]'") from None


def ddq_command(env_id: str, seed: int, run_dir: Path) -> list[str]:
    """ddq's defaults for the env in serial mode, with only the criterion's flags."""
    criterion = CRITERIA[env_id]
    return [sys.executable, "-m", "ddq", "train", "--mode", "serial", "--env", env_id, "--seed", str(seed),
            "--target-return", f"{criterion.target:g}", "--eval-every", str(criterion.eval_every),
            "--eval-episodes", str(EVAL_EPISODES), "--no-progress", "--run-dir", str(run_dir)]


def run_one(peer: str, env_id: str, seed: int, folder: Path, cleanrl: str | None) -> dict[str, Any]:
    """One learner's run of `seed`: its summary-like result (seed, steps_to_target, time_to_target_s)."""
    criterion = CRITERIA[env_id]
    result_file = folder / f"{peer}-{seed}.json"
    if peer == "ddq":
        command = ddq_command(env_id, seed, folder / f"ddq-{seed}")
        result_file = folder / f"ddq-{seed}" / "summary.json"
    else:
        command = [sys.executable, "-m", "ddq.benchmarks.peer_runs", peer, env_id, str(seed), f"{criterion.target:g}",
                   str(criterion.eval_every), str(result_file), *([cleanrl] if cleanrl else [])]
    # The peers' loggers write under the working folder (CleanRL's runs/, SB3's SB3_LOGDIR): the bench's own.
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=folder,
                          env={**os.environ, "SB3_LOGDIR": str(folder / "sb3-log")})
    if done.returncode != 0:
        raise RuntimeError(f"{PEER_NAMES[peer]}'s run of seed {seed} failed ({how_it_ended(done.returncode)}): "
                           f"{done.stderr.strip().splitlines()[-1:]}")
    return json.loads(result_file.read_text())


def run_bench(env_id: str, seeds: list[int], peers: list[str], cleanrl: str | None) -> dict[str, list[dict[str, Any]]]:
    if env_id not in CRITERIA:
        raise ValueError(f"--env {env_id}: ddq bench peers runs {' or '.join(CRITERIA)}")
    check_peers(peers, cleanrl)
    results: dict[str, list[dict[str, Any]]] = {peer: [] for peer in peers}
    with tempfile.TemporaryDirectory(prefix="ddq-peers-") as tmp:
        for seed in seeds:
            for peer in peers:
                results[peer].append(run_one(peer, env_id, seed, Path(tmp), cleanrl))
            print(f"ddq: {env_id} seed {seed} done", file=sys.stderr, flush=True)
    return results


def _median_and_quartiles(values: list[float | None], digits: int = 1) -> tuple[float, str]:
    """The median and the interquartile range; a run that never reached the target counts as slower
    than any that did (infinite)."""
    ordered = sorted(math.inf if v is None else float(v) for v in values)
    if len(ordered) < 2:
        return (ordered[0] if ordered else math.inf), "—"
    low, median, high = (quantile(ordered, q) for q in (0.25, 0.5, 0.75))
    return median, f"{_cell(low, digits)}-{_cell(high, digits)}"


def _cell(value: float | None, digits: int = 1) -> str:
    if value is None or not math.isfinite(value):
        return "not reached"
    return f"{value:,.{digits}f}"


def table(env_id: str, results: dict[str, list[dict[str, Any]]]) -> str:
    """A row per seed (each learner's env steps and seconds to the target), the medians with their
    interquartile ranges, and ddq's median time over each peer's."""
    peers = list(results)
    criterion = CRITERIA[env_id]
    head = "| seed | " + " | ".join(f"{PEER_NAMES[p]} steps | {PEER_NAMES[p]} s" for p in peers) + " |"
    lines = [head, "|---" * (1 + 2 * len(peers)) + "|"]
    for row in zip(*(results[p] for p in peers)):
        cells = [f"{_cell(r['steps_to_target'], 0)} | {_cell(r['time_to_target_s'])}" for r in row]
        lines.append(f"| {row[0]['seed']} | " + " | ".join(cells) + " |")
    medians: dict[str, float] = {}
    median_cells, spread_cells = [], []
    for peer in peers:
        steps, steps_spread = _median_and_quartiles([r["steps_to_target"] for r in results[peer]], 0)
        seconds, seconds_spread = _median_and_quartiles([r["time_to_target_s"] for r in results[peer]])
        medians[peer] = seconds
        median_cells.append(f"{_cell(steps, 0)} | {_cell(seconds)}")
        spread_cells.append(f" {steps_spread} | {seconds_spread} |")
    lines.append("| **median** | " + " | ".join(median_cells) + " |")
    lines.append("| quartiles |" + "".join(spread_cells))
    ratios = [f"ddq's median time / {PEER_NAMES[p]}'s: "
              + (f"{medians['ddq'] / medians[p]:.2f}" if math.isfinite(medians["ddq"] + medians[p]) else "—")
              for p in peers if p != "ddq" and "ddq" in medians]
    ran = "; ".join(WHAT_RAN[p] for p in peers)
    return (f"{env_id}: time to a greedy mean of {criterion.target:g} over {EVAL_EPISODES} episodes, evaluated every "
            f"{criterion.eval_every:,} env steps. {ran}; one run at a time, one torch thread each, each clock from "
            f"its process's start\n\n" + "\n".join(lines) + "\n\n" + "\n".join(ratios))
