"""`ddq bench actors`: serial against actor-learner with N actors, to the same target, side by side.

The question of Grandio's MPI-based distributed DQN (one process trains, the
others simulate): how much sooner does a run reach its target when simulation is
the cost? Each env step can be given a latency (`--step-latency-ms`, slept:
a stand-in for an expensive simulator). For every seed, the configurations
run one after another in the same order on the same machine; the table has
each one's median wall time and env steps to the target, and its speedup
over serial (the ratio of the medians).
"""

from __future__ import annotations

import statistics
from typing import Any

from ddq.benchmarks.serial import run_seeds


def configurations(actors: list[int]) -> list[tuple[str, dict[str, Any]]]:
    """(label, settings) of serial and of actor-learner with each number of actors."""
    runs: list[tuple[str, dict[str, Any]]] = [("serial", {"mode": "serial"})]
    runs += [(f"actor-learner, {n} actor{'s' if n > 1 else ''}", {"mode": "actor-learner", "workers": n})
             for n in actors]
    return runs


def run_bench(env: str, actors: list[int], seeds: list[int], target: float, latency_ms: float,
              total_steps: int | None) -> dict[str, list[dict[str, Any]]]:
    """Each configuration's summaries, seed by seed (all configurations of one seed before the next)."""
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in configurations(actors)}
    for seed in seeds:
        for label, settings in configurations(actors):
            overrides = {**settings, "target_return": target, "step_latency_ms": latency_ms}
            if total_steps:
                overrides["total_steps"] = total_steps
            results[label] += run_seeds(env, [seed], overrides)
    return results


def _median(values: list[float | None]) -> float | None:
    return statistics.median(values) if values and None not in values else None  # type: ignore[type-var]


def table(env: str, target: float, latency_ms: float, results: dict[str, list[dict[str, Any]]]) -> str:
    serial = _median([s["time_to_target_s"] for s in results["serial"]])
    lines = ["| configuration | seeds reaching the target | median time to target (s) | median env steps to "
             "target | speedup vs serial |", "|---|---|---|---|---|"]
    for label, summaries in results.items():
        reached = sum(1 for s in summaries if s["reached_target"])
        time_s = _median([s["time_to_target_s"] for s in summaries])
        steps = _median([s["steps_to_target"] for s in summaries])
        speedup = f"{serial / time_s:.2f}x" if serial and time_s else "—"
        lines.append(f"| {label} | {reached} of {len(summaries)} | {f'{time_s:,.1f}' if time_s else '—'} | "
                     f"{f'{steps:,.0f}' if steps else '—'} | {speedup} |")
    return (f"{env} to a greedy {target:g}, {latency_ms:g} ms per env step (slept); time counts from the "
            "command's start (Spark's start included)\n\n" + "\n".join(lines))
