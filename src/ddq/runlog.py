"""A run's folder: metrics.jsonl (one JSON object per logged point) and summary.json."""

from __future__ import annotations

import dataclasses

import json
import math
from pathlib import Path
from typing import Any


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN or Infinity
    return value


class RunLog:
    """Appends metric points to `run_dir/metrics.jsonl`; flushed so a dashboard can tail it."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._file = open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8")

    def write(self, kind: str, **values: Any) -> None:
        point = {"kind": kind, **{k: _plain(v) for k, v in values.items()}}
        self._file.write(json.dumps(point) + "\n")
        self._file.flush()

    def write_summary(self, summary: dict[str, Any]) -> Path:
        path = self.run_dir / "summary.json"
        path.write_text(json.dumps({k: _plain(v) for k, v in summary.items()}, indent=2) + "\n")
        return path

    def close(self) -> None:
        self._file.close()


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    with open(Path(run_dir) / "metrics.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def run_summary(config, counters: dict[str, Any], last_eval: tuple[int, float, float], updates: int,
                checkpoint: Path) -> dict[str, Any]:
    """The summary.json of a finished run, the same for every mode."""
    return {
        "env": config.env, "mode": config.mode, "seed": config.seed,
        "wall_time_s": counters["wall_time_s"], "env_steps": counters["env_steps"],
        "updates": updates, "episodes": counters["episodes"],
        "final_eval_return": last_eval[1], "final_eval_rewarded_steps": last_eval[2],
        "target_return": config.target_return,
        "reached_target": counters["steps_to_target"] is not None,
        "time_to_target_s": counters["time_to_target_s"],
        "steps_to_target": counters["steps_to_target"],
        "checkpoint": str(checkpoint), "config": dataclasses.asdict(config),
    }
