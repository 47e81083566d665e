"""`ddq bench actors`: serial against actor-learner with N actors, to the same target, side by side.

The question of Grandio's MPI-based distributed DQN (one process trains, the
others simulate): how much sooner does a run reach its target when simulation is
the cost? Each env step can be given a latency (`--step-latency-ms`, slept:
a stand-in for an expensive simulator). For every seed, the configurations
run one after another in the same order on the same machine; the table has
each one's median wall time and env steps to the target, and its speedup
over serial (the ratio of the medians). Beside it stand the speedups Grandio's study
measured for 500 training episodes on CartPole and LunarLander ("2 processes": one
simulating, one training; "MP(N)": N simulating processes in collective rounds, which
`--sync` is), a different yardstick (a fixed number of episodes, not a target) on
other hardware: compare the shape, not the figures.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ddq.benchmarks.serial import run_seeds

# Grandio's runtime tables (seconds for 500 training episodes, one machine): speedups over the standard
# implementation, by configuration: "2 processes" and "MP(N)" (N simulating processes, collective rounds).
GRANDIO_SPEEDUPS: dict[str, dict[str, float]] = {
    "CartPole-v1": {"standard": 1.0, "2 processes": 1.506, "MP(2)": 1.407, "MP(3)": 1.368, "MP(4)": 1.564,
                    "MP(5)": 1.426},
    "LunarLander-v3": {"standard": 1.0, "2 processes": 1.354, "MP(2)": 1.171, "MP(3)": 2.408, "MP(4)": 3.320,
                       "MP(5)": 4.938},
}


@dataclass
class Configuration:
    label: str
    settings: dict[str, Any]
    grandio: str | None = None  # the column of Grandio's tables this row stands for, if any


def configurations(actors: list[int], sync: bool = False) -> list[Configuration]:
    """Serial, actor-learner with each number of actors, and (`sync`) the same in collective rounds."""
    def named(n: int) -> str:
        return f"{n} actor{'s' if n > 1 else ''}"
    runs = [Configuration("serial", {"mode": "serial"}, "standard")]
    runs += [Configuration(f"actor-learner, {named(n)}", {"mode": "actor-learner", "workers": n},
                           "2 processes" if n == 1 else None) for n in actors]
    if sync:
        runs += [Configuration(f"actor-learner --sync, {named(n)}", {"mode": "actor-learner", "workers": n,
                                                                      "sync": True}, f"MP({n})") for n in actors]
    return runs


def grandio_figure(env: str, configuration: Configuration) -> str:
    """The speedup Grandio's study measured for what this row stands for, or a dash."""
    speedups, name = GRANDIO_SPEEDUPS.get(env, {}), configuration.grandio
    return f"{speedups[name]:.2f}x ({name})" if name in speedups else "—"


Results = list[tuple[Configuration, list[dict[str, Any]]]]


def run_bench(env: str, actors: list[int], seeds: list[int], target: float, latency_ms: float,
              total_steps: int | None, sync: bool = False) -> Results:
    """Each configuration's summaries, seed by seed (all configurations of one seed before the next)."""
    results: Results = [(configuration, []) for configuration in configurations(actors, sync)]
    for seed in seeds:
        for configuration, summaries in results:
            overrides = {**configuration.settings, "target_return": target, "step_latency_ms": latency_ms}
            if total_steps:
                overrides["total_steps"] = total_steps
            summaries += run_seeds(env, [seed], overrides)
    return results


def _median(values: list[float | None]) -> float | None:
    return statistics.median(values) if values and None not in values else None  # type: ignore[type-var]


def table(env: str, target: float, latency_ms: float, results: Results) -> str:
    serial = _median([s["time_to_target_s"] for c, summaries in results if c.settings["mode"] == "serial"
                      for s in summaries])
    lines = ["| configuration | seeds reaching the target | median time to target (s) | median env steps to "
             "target | speedup vs serial | Grandio's speedup |", "|---|---|---|---|---|---|"]
    for configuration, summaries in results:
        reached = sum(1 for s in summaries if s["reached_target"])
        time_s = _median([s["time_to_target_s"] for s in summaries])
        steps = _median([s["steps_to_target"] for s in summaries])
        speedup = f"{serial / time_s:.2f}x" if serial and time_s else "—"
        cells = [configuration.label, f"{reached} of {len(summaries)}", f"{time_s:,.1f}" if time_s else "—",
                 f"{steps:,.0f}" if steps else "—", speedup, grandio_figure(env, configuration)]
        lines.append("| " + " | ".join(cells) + " |")
    return (f"{env} to a greedy {target:g}, {latency_ms:g} ms per env step (slept); time counts from the "
            "command's start (Spark's start included); Grandio's speedups: 500 training episodes, no slept "
            "latency\n\n" + "\n".join(lines))
