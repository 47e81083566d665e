"""`ddq bench grandio`: Grandio's MPI runtime study re-done on ddq, serial beside actor-learner with N actors.

J. Grandio's "Distributed Deep Q-Learning algorithm based on MPI" trained for 500
episodes on CartPole and LunarLander, one process that trains and the others
simulating, and timed it: "standard" (one process), "2 processes" (one
simulating, one training) and "MP(N)" (N simulating processes in collective
rounds, which `--sync` is). This bench runs the same shapes on ddq, for every
env and seed one configuration after another on the same machine: serial, actor-
learner with each number of actors, and (`--sync`) the same in collective rounds,
all with DQN (actor-learner's only algorithm), whatever the env's default.

Two yardsticks. By default the study's own: each run stops once its training
episodes (every actor's together) reach `episodes`, evaluating only at the end;
the table has each configuration's median time, its speedup over serial (the
ratio of the medians) and its final greedy return beside Grandio's time and
speedup. With a target return instead: time and env steps to that greedy return.
Each env step can be given a latency (`--step-latency-ms`, slept): a stand-in for
the expensive simulator that made distribution pay in the study.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ddq.benchmarks.serial import BenchStopped, run_seeds
from ddq.benchmarks.stats import median
from ddq.config import flat_settings

# Grandio's runtime tables: seconds for 500 training episodes on one machine, by configuration.
GRANDIO_TIMES: dict[str, dict[str, float]] = {
    "CartPole-v1": {"standard": 110.5, "2 processes": 73.38, "MP(2)": 78.54, "MP(3)": 80.75, "MP(4)": 70.63,
                    "MP(5)": 77.5},
    "LunarLander-v3": {"standard": 432.63, "2 processes": 319.52, "MP(2)": 369.43, "MP(3)": 179.68, "MP(4)": 130.31,
                       "MP(5)": 87.61},
}
GRANDIO_EPISODES = 500
MAX_STEPS_PER_EPISODE = 1000  # LunarLander's time limit: an episode budget's step cap


@dataclass
class Configuration:
    label: str
    settings: dict[str, Any]
    grandio: str | None = None  # the column of Grandio's tables this row stands for, if any


def configurations(actors: list[int], sync: bool = False) -> list[Configuration]:
    """Serial, actor-learner with each number of actors, and (`sync`) the same in collective rounds for two
    actors or more (a round of one actor is Grandio's "2 processes" with a barrier added)."""
    def named(n: int) -> str:
        return f"{n} actor{'s' if n > 1 else ''}"
    # serial DQN: actor-learner runs only DQN, and the study compares the modes, not the algorithms
    runs = [Configuration("serial", {"mode": "serial", "algo": "dqn"}, "standard")]
    runs += [Configuration(f"actor-learner, {named(n)}", {"mode": "actor-learner", "workers": n},
                           "2 processes" if n == 1 else None) for n in actors]
    if sync:
        runs += [Configuration(f"actor-learner --sync, {named(n)}", {"mode": "actor-learner", "workers": n,
                                                                      "sync": True}, f"MP({n})")
                 for n in actors if n > 1]
    return runs


def grandio_cells(env: str, configuration: Configuration) -> list[str]:
    """Grandio's time and speedup for what this row stands for, or dashes."""
    times, name = GRANDIO_TIMES.get(env, {}), configuration.grandio
    if name not in times:
        return ["—", "—"]
    return [f"{times[name]:,.1f}", f"{times['standard'] / times[name]:.2f}x ({name})"]


Results = list[tuple[Configuration, list[dict[str, Any]]]]


def run_bench(env: str, actors: list[int], seeds: list[int], target: float | None, latency_ms: float,
              total_steps: int | None, sync: bool = False, episodes: int = GRANDIO_EPISODES) -> Results:
    """Each configuration's summaries, seed by seed (all configurations of one seed before the next). Without
    a target every run stops at `episodes` training episodes and evaluates once, at its end. A run stopped
    by the user (Ctrl-C, SIGTERM) ends the bench: BenchStopped, with the finished runs' results as its
    `partial`."""
    results: Results = [(configuration, []) for configuration in configurations(actors, sync)]
    for seed in seeds:
        for configuration, summaries in results:
            overrides = {**configuration.settings, "step_latency_ms": latency_ms}
            if target is not None:
                overrides["target_return"] = target
                overrides.update({"total_steps": total_steps} if total_steps else {})
            else:
                overrides["total_episodes"] = episodes
                overrides["total_steps"] = total_steps or episodes * MAX_STEPS_PER_EPISODE
                overrides["eval_every"] = overrides["total_steps"]  # the study timed training alone
            try:
                summaries += run_seeds(env, [seed], overrides)
            except BenchStopped as stopped:
                stopped.partial = [(c, s) for c, s in results if s]
                raise
    return results


def _number(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _seconds(value: float | None) -> str:
    """A time, to two figures under 10 s (a tiny study's serial run takes a few hundredths of a second)."""
    return _number(value, 2 if value is not None and value < 10 else 1)


def table(env: str, target: float | None, latency_ms: float, results: Results) -> str:
    """The markdown table of one env's results, to a target return or (`target` None) for an episode budget,
    then each run's own figures (the medians hide how far seeds and runs differ)."""
    text = _target_table(env, target, latency_ms, results) if target is not None else \
        _episodes_table(env, latency_ms, results)
    return text + "\n\n" + "\n".join(_run_line(c, s, target) for c, summaries in results for s in summaries)


def _run_line(configuration: Configuration, summary: dict[str, Any], target: float | None) -> str:
    if target is not None:
        figures = (f"{_number(summary['time_to_target_s'])} s and {_number(summary['steps_to_target'], 0)} env steps "
                   f"to {target:g}" if summary["reached_target"] else f"did not reach {target:g}")
    else:
        figures = (f"{_seconds(summary['wall_time_s'])} s, {summary['env_steps']:,} env steps, final greedy return "
                   f"{_number(summary['final_eval_return'])}")
    return f"- seed {summary.get('seed', '?')}, {configuration.label}: {figures}"


def _episodes_table(env: str, latency_ms: float, results: Results) -> str:
    serial = median([s["wall_time_s"] for c, summaries in results if c.settings["mode"] == "serial"
                      for s in summaries])
    lines = ["| configuration | runs | median time (s) | median env steps | speedup vs serial | median final greedy "
             "return | Grandio's time (s) | Grandio's speedup |", "|---|---|---|---|---|---|---|---|"]
    for configuration, summaries in results:
        time_s = median([s["wall_time_s"] for s in summaries])
        speedup = f"{serial / time_s:.2f}x" if serial and time_s else "—"
        cells = [configuration.label, str(len(summaries)), _seconds(time_s),
                 _number(median([s["env_steps"] for s in summaries]), 0), speedup,
                 _number(median([s["final_eval_return"] for s in summaries], worst=-math.inf)),
                 *grandio_cells(env, configuration)]
        lines.append("| " + " | ".join(cells) + " |")
    episodes = GRANDIO_EPISODES
    if results and results[0][1]:
        episodes = flat_settings(results[0][1][0]["config"])["total_episodes"]
    return (f"{env}, {episodes} training episodes, {latency_ms:g} ms per env step (slept); time counts from the "
            "command's start (Spark's start included) to the end of the final greedy evaluation; Grandio's: "
            f"{GRANDIO_EPISODES} episodes, no slept latency, other hardware\n\n" + "\n".join(lines))


def _target_table(env: str, target: float, latency_ms: float, results: Results) -> str:
    serial = median([s["time_to_target_s"] for c, summaries in results if c.settings["mode"] == "serial"
                      for s in summaries])
    lines = ["| configuration | seeds reaching the target | median time to target (s) | median env steps to "
             "target | speedup vs serial | Grandio's speedup |", "|---|---|---|---|---|---|"]
    for configuration, summaries in results:
        reached = sum(1 for s in summaries if s["reached_target"])
        time_s = median([s["time_to_target_s"] for s in summaries])
        steps = median([s["steps_to_target"] for s in summaries])
        speedup = f"{serial / time_s:.2f}x" if serial and time_s else "—"
        cells = [configuration.label, f"{reached} of {len(summaries)}", _number(time_s), _number(steps, 0), speedup,
                 grandio_cells(env, configuration)[1]]
        lines.append("| " + " | ".join(cells) + " |")
    return (f"{env} to a greedy {target:g}, {latency_ms:g} ms per env step (slept); time counts from the "
            f"command's start (Spark's start included); Grandio's speedups: {GRANDIO_EPISODES} training episodes, no "
            "slept latency\n\n" + "\n".join(lines))
