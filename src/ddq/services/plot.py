"""The learning curve of a run as a PNG: training returns and greedy evaluations against env steps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ddq.gamesim.spec import score_of
from ddq.run_folder import read_metrics, write_whole


def _env_of(run_dir: Path) -> str | None:
    try:
        return str(json.loads((run_dir / "summary.json").read_text())["env"])
    except (OSError, ValueError, KeyError):
        return None


class NothingToPlot(ValueError):
    """A run that ended before its first episode or evaluation: it has no curve."""


def plot_run(run_dir: str | Path, output: str | Path | None = None, env_id: str | None = None) -> Path:
    """The curve as `output` (default RUN_DIR/learning_curve.png). For an env whose score counts rewarded
    steps (`env_id`, else the run's summary.json says; Snake's apples) the greedy evaluations show that
    count per episode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    score = score_of(env_id or _env_of(run_dir) or "")
    points = read_metrics(run_dir)
    episodes = [p for p in points if p["kind"] == "episode"]
    evals = [p for p in points if p["kind"] == "eval"]
    if not episodes and not evals:
        raise NothingToPlot(f"{run_dir}/metrics.jsonl holds no episodes or evaluations to plot")
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    if episodes:
        steps = np.array([p["env_steps"] for p in episodes])
        returns = np.array([p["episode_return"] for p in episodes], dtype=float)
        ax.plot(steps, returns, ".", color="tab:blue", alpha=0.15, markersize=2, label="training episode")
        window = max(1, min(100, len(returns) // 10))
        smooth = np.convolve(returns, np.ones(window) / window, mode="valid")
        ax.plot(steps[window - 1:], smooth, color="tab:blue", label=f"training mean of {window}")
    if evals:
        key, label = ("mean_rewarded_steps", f"greedy {score.name} {score.unit}") if score.rewarded_steps else \
            ("mean_return", "greedy evaluation")
        ax.plot([p["env_steps"] for p in evals], [p[key] for p in evals], "o-", color="tab:red", label=label)
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"return; {score.name} per greedy episode" if score.rewarded_steps else "return")
    ax.set_title(run_dir.name)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    output = Path(output) if output else run_dir / "learning_curve.png"
    fig.tight_layout()
    write_whole(output, lambda file: fig.savefig(file, format=output.suffix.lstrip(".") or "png"))  # (a reader
    # that opens it mid-write, a browser, sees the previous curve or this one)
    plt.close(fig)
    return output
