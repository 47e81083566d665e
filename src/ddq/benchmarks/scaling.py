"""`ddq bench scaling`: serial on one core against a distributed mode on N cores, to a target or for a fixed time.

What a user gets from more machines. Each run is one real `ddq train` with
ddq's defaults for the env and a seed. A task with a target return is timed
from the command's start (Spark's and the services' start-up included) to
the first greedy evaluation at the target; Snake is scored by the greedy
apples its closing evaluation finds after a fixed wall time from the
command's start, with `make run`'s settings. The serial run is held to one
core. A distributed run is held to N cores (`taskset`), its driver, Redis
and evaluator sharing them; with `--hosts` it runs on N one-core test hosts
(a Spark standalone cluster, each host's processes held to a core of their
own) beside a services host with one more core, as on N machines and the
one that starts the run. Both modes evaluate at the preset's `eval_every`
mark, serial in line, the distributed driver beside the run. Configurations
alternate seed by seed, one run at a time, so a slow spell of the machine
falls on both. Each run's line also says what a distributed run waited on
(its summary's `collective_s` as a share of each worker's time, and
`evaluation_lag_s`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from ddq.benchmarks.snake import DEFAULT_CONFIG, MAKE_RUN_ENV
from ddq.benchmarks.stats import median
from ddq.gamesim.spec import score_of
from ddq.processes import how_it_ended
from ddq.services.telemetry import collective_share

WALL_TIME_S = 300.0  # a fixed-time task's default: a few of make run's 28 minutes, so that seeds fit in an hour


@dataclass(frozen=True)
class Task:
    """How runs of `env` are measured: by the time to a greedy `target` return, or, with no target, by the
    greedy score (`score_of`) their closing evaluation finds after a fixed wall time. `flags` and `config` (a
    config file, from the folder the bench runs in): what the command adds to ddq's defaults."""

    env: str
    target: float | None = None
    flags: tuple[str, ...] = ()
    config: str | None = None

    @property
    def fixed_time(self) -> bool:
        return self.target is None

    @property
    def score_words(self) -> str:
        score = score_of(self.env)
        return f"greedy {score.name} {score.unit}"

    def command_flags(self, wall_time_s: float, config_at: str | None = None) -> list[str]:
        """What `ddq train` is given beside the env, the seed and the mode: the flags that end a run where this
        task measures it, then the task's own. `config_at`: where the run finds the config file (default:
        the file itself, from this folder)."""
        goal = ["--time-budget-s", str(wall_time_s)] if self.fixed_time else ["--target-return", str(self.target)]
        config = ["--config", config_at or str(Path(self.config).resolve())] if self.config else []
        return goal + config + list(self.flags)

    def described(self, wall_time_s: float) -> str:
        """The task in words, for its table's title."""
        settings = f"the settings of {self.config}" if self.config else "ddq's defaults"
        settings += "".join(f", {flag}" if flag.startswith("--") else f" {flag}" for flag in self.flags)
        if self.fixed_time:
            return (f"{self.score_words} after {wall_time_s:g} s from the command's start ({settings}; env steps "
                    "played in brackets)")
        return f"to a greedy {self.target:g} ({settings}; seconds from the command's start, env steps in brackets)"

    def check(self, wall_time_s: float) -> None:
        """Raises ValueError, in one line, where this bench cannot run the task as asked."""
        if self.config is not None and not Path(self.config).is_file():
            raise ValueError(f"{self.env} trains with the settings of {self.config}, which is not in {Path.cwd()}: "
                             "run the bench from a checkout of ddq")
        if self.fixed_time and not wall_time_s > 0:
            raise ValueError(f"--wall-time-s {wall_time_s:g}: {self.env} trains for a fixed time, which must be "
                             "above 0")


# The tasks of the scaling issue. Snake trains as `make run` does (its config file), for a fixed time: its
# target, a board half filled, takes longer than a bench can give it. Breakout's 20 is a target serial
# reaches in a few minutes (a median 150 s over 5 seeds on 2026-11-30's 2-core machine); its earlier 7 took
# 20-29 s, most of which a cluster's start took away from a distributed run (`--target` gives it again).
TASKS: dict[str, Task] = {task.env: task for task in (
    Task("LunarLander-v3", 200.0),
    Task("MinAtar/Breakout-v1", 20.0, ("--algo", "pqn")),
    Task("CartPole-v1", 475.0),
    Task(MAKE_RUN_ENV, config=DEFAULT_CONFIG),
)}


@dataclass
class Outcome:
    configuration: str
    cores: int  # what the run had: 1 for serial; a distributed run's worker cores (its services' core not counted)
    seed: int
    seconds: float | None  # from the command's start to the target; None: not reached (or no target)
    env_steps: int | None  # to the target; a fixed-time task's: all the run played
    where_time_went: str = ""  # a distributed run's waits (`waits`), for the bench's line about the run
    score: float | None = None  # a fixed-time task's greedy score at the end


def train_command(task: Task, mode: str, workers: int, seed: int, run_dir: str, spark_master: str | None = None,
                  wall_time_s: float = WALL_TIME_S, config_at: str | None = None) -> list[str]:
    """`ddq train` with ddq's defaults for the task's env, its goal and `seed`: the command a user types.
    `config_at`: where the run finds the task's config file (`Task.command_flags`)."""
    return [sys.executable, "-m", "ddq", "train", "--env", task.env, "--seed", str(seed),
            "--no-progress", "--run-dir", run_dir, *task.command_flags(wall_time_s, config_at),
            *(["--spark-master", spark_master] if spark_master else []),
            *(["--mode", "serial"] if mode == "serial" else ["--mode", mode, "--workers", str(workers)])]


def run_one(task: Task, mode: str, workers: int, seed: int, folder: Path, cores: list[int],
            wall_time_s: float = WALL_TIME_S) -> Outcome:
    """One run on this machine, held to `cores` (`taskset`), its services sharing them."""
    run_dir = folder / f"{mode}-{workers}-seed{seed}"
    pinned = ["taskset", "-c", ",".join(map(str, cores[:1] if mode == "serial" else cores[:workers]))]
    command = pinned + train_command(task, mode, workers, seed, str(run_dir), wall_time_s=wall_time_s)
    finished = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    if finished.returncode != 0:
        failed(command[3:], finished.returncode, finished.stdout + finished.stderr)  # without taskset's
    return outcome(configuration_name(mode, workers), 1 if mode == "serial" else workers, seed, run_dir, task)


def failed(command: list[str], code: int, output: str) -> NoReturn:
    """Stops the bench: the run's own last output, then the one line that names it."""
    print(output[-3000:], file=sys.stderr, flush=True)
    raise RuntimeError(f"{' '.join(command)} failed ({how_it_ended(code)}); its output ends above")


def cluster_failed(error: Exception) -> NoReturn:
    """Stops the bench where the cluster failed: the logs its error carries (gone with the hosts), then one
    line."""
    first, _, logs = str(error).partition("\n")
    print(logs[-3000:], file=sys.stderr, flush=True)
    raise RuntimeError(f"the test hosts' cluster: {first}{' (its logs end above)' if logs else ''}") from None


def outcome(configuration: str, cores: int, seed: int, run_dir: Path, task: Task) -> Outcome:
    """What the run's summary says of it, as `task` measures it."""
    summary = json.loads((run_dir / "summary.json").read_text())
    if task.fixed_time:
        score = summary[score_of(task.env).summary_field]
        return Outcome(configuration, cores, seed, None, summary["env_steps"], waits(summary), score)
    return Outcome(configuration, cores, seed, summary["time_to_target_s"], summary["steps_to_target"],
                   waits(summary))


def waits(summary: dict[str, Any]) -> str:
    """What a distributed run waited on, from its summary: the share of each data-parallel worker's time in
    the all-reduces, how far behind its weights the driver's slowest evaluation came (the run learns of
    its target that much late), and the evaluation points a newer one replaced as they waited. Empty for a
    serial run."""
    shares = [share for share in map(collective_share, summary.get("workers") or []) if share is not None]
    said = []
    if len(shares) > 1 and summary.get("mode") == "data-parallel":  # one worker alone all-reduces nothing
        low, high = min(shares), max(shares)
        span = f"{low:.0%}" if f"{low:.0%}" == f"{high:.0%}" else f"{100 * low:.0f}-{high:.0%}"
        said.append(f"workers {span} in all-reduces")
    if summary.get("evaluation_lag_s"):  # none for serial's in-line evaluations, nor downpour's of the moment
        said.append(f"evaluations up to {summary['evaluation_lag_s']:.1f} s behind")
    if skipped := summary.get("evaluation_points_skipped"):
        said.append(f"{skipped} evaluation point{'s' if skipped != 1 else ''} skipped")
    return "; ".join(said)


def configuration_name(mode: str, workers: int, on_hosts: bool = False) -> str:
    if mode == "serial":
        return "serial, 1 core"
    if on_hosts:
        return f"{mode}, {workers} one-core worker host{'s' if workers != 1 else ''} + a services host"
    return f"{mode}, {workers} workers on {workers} cores"


def task_with_target(given: str) -> Task:
    """The task `ENV=RETURN` (the bench's --target) names, with that target return."""
    env, equals, value = given.partition("=")
    if env not in TASKS or TASKS[env].fixed_time or not equals:
        targeted = ", ".join(name for name, task in TASKS.items() if not task.fixed_time)
        raise ValueError(f"--target {given}: give ENV=RETURN for a task with a target ({targeted})")
    try:
        target = float(value)
    except ValueError:
        raise ValueError(f"--target {given}: {value!r} is not a return (a number)") from None
    if not math.isfinite(target):
        raise ValueError(f"--target {given}: a return no run reaches (give a finite number)")
    return dataclasses.replace(TASKS[env], target=target)


def run_bench(task: Task, modes: list[str], workers: int, seeds: list[int], cores: list[int] | None = None,
              on_hosts: bool = False, wall_time_s: float = WALL_TIME_S) -> list[Outcome]:
    """Serial and each of `modes`, alternating seed by seed, one run at a time. `on_hosts`: each distributed
    run goes to a Spark cluster on test hosts (`HostsRunner`); else it runs on this machine's first
    `workers` of `cores`. `wall_time_s`: how long a task without a target trains."""
    task.check(wall_time_s)
    needed = workers + 1 if on_hosts else workers
    given = f"--cores gave {cores}" if cores is not None else "--cores was not given"
    cores = cores if cores is not None else list(range(needed))
    if len(set(cores)) < needed or len(set(cores)) < len(cores) or not set(cores) <= os.sched_getaffinity(0):
        raise ValueError(f"--workers {workers}{' on test hosts' if on_hosts else ''} needs {needed} of this "
                         f"machine's cores, each named once (it may use {sorted(os.sched_getaffinity(0))}); {given}")
    if on_hosts:
        from ddq.benchmarks.testhosts import why_not_here

        if (reason := why_not_here()) is not None:
            raise ValueError(f"--hosts: {reason}")
    outcomes = []
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory(prefix="ddq-bench-scaling-") as tmp:
        hosts = stack.enter_context(HostsRunner(workers, cores)) if on_hosts else None
        for seed in seeds:
            for mode in ["serial", *modes]:
                if hosts is not None and mode != "serial":
                    outcomes.append(hosts.run(task, mode, seed, wall_time_s))
                else:
                    outcomes.append(run_one(task, mode, workers, seed, Path(tmp), cores, wall_time_s))
                done = outcomes[-1]
                result = f"{done.score} {task.score_words}" if task.fixed_time else \
                    "target not reached" if done.seconds is None else f"{done.seconds:.1f} s"
                print(f"ddq: {task.env} {done.configuration} seed {seed}: {result}, {done.env_steps or 0:,} env steps"
                      + (f" ({done.where_time_went})" if done.where_time_went else ""), file=sys.stderr, flush=True)
    return outcomes


class HostsRunner:
    """A Spark standalone cluster on test hosts, each held to one core: h0, the services host (the master,
    and the driver with its Redis, evaluator, Celery and dashboard) on `cores[0]`, and a one-core worker host
    per worker on each of the next cores. What a user gets from `ddq train --spark-master` on N one-core
    machines beside a machine for the services; the serial run it is compared with has `cores[0]` alone."""

    def __init__(self, workers: int, cores: list[int]):
        from ddq.benchmarks.testhosts import TestHosts

        self.names = [f"h{index}" for index in range(workers + 1)]
        self.workers, self.cores = workers, cores
        self.hosts = TestHosts(self.names)

    def __enter__(self) -> HostsRunner:
        from ddq.benchmarks.spark_cluster import Cluster, ClusterError

        self.hosts.__enter__()
        try:
            self.cluster = Cluster(self.hosts, Path(sys.executable), tuple(self.names[1:]),
                                   pin=dict(zip(self.names, self.cores, strict=False)))
            self.cluster.start()
        except BaseException as error:
            self.hosts.close()
            if isinstance(error, ClusterError):
                cluster_failed(error)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.hosts.close()

    def run(self, task: Task, mode: str, seed: int, wall_time_s: float = WALL_TIME_S) -> Outcome:
        from ddq.benchmarks.spark_cluster import ClusterError

        name = f"{mode}-seed{seed}"
        config = task.config
        if config is not None:  # h0 has a /tmp of its own, where a checkout under /tmp is not: the file goes there
            shutil.copyfile(config, self.hosts.tmp("h0") / Path(config).name)
        command = train_command(task, mode, self.workers, seed, f"/tmp/{name}", self.cluster.master, wall_time_s,
                                f"/tmp/{Path(config).name}" if config else None)
        try:
            self.cluster.wait_for_workers()  # the last run's executors gone: this one starts on free cores
            driver = self.hosts.start("h0", command, self.hosts.folder / f"{name}.log",
                                      {"PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1",
                                       "SPARK_CONF_DIR": str(self.cluster.conf_dir)}, core=self.cluster.pin["h0"])
            code, _, log = self.cluster.finish(name, driver, timeout=1800 + wall_time_s)
        except ClusterError as error:
            cluster_failed(error)
        if code != 0:
            failed(command, code, log)
        return outcome(configuration_name(mode, self.workers, on_hosts=True), self.workers, seed,
                       self.hosts.tmp("h0") / name, task)


def table(task: Task, outcomes: list[Outcome], wall_time_s: float = WALL_TIME_S) -> str:
    """The bench's table for `task`: a row per configuration, a column per seed, serial's row first."""
    names = list(dict.fromkeys(o.configuration for o in outcomes))
    seeds = list(dict.fromkeys(o.seed for o in outcomes))
    if task.fixed_time:
        return score_table(task, outcomes, names, seeds, wall_time_s)
    serial = median([o.seconds for o in outcomes if o.configuration == names[0]])
    lines = [f"{task.env} {task.described(wall_time_s)}", "",
             "| configuration | " + " | ".join(f"seed {s}" for s in seeds) + " | median | x serial's time | "
             "speedup | efficiency |", "|---" * (len(seeds) + 5) + "|"]
    for name in names:
        runs = {o.seed: o for o in outcomes if o.configuration == name}
        cells = [f"{runs[s].seconds:.1f} ({runs[s].env_steps:,})" if runs[s].seconds is not None else "not reached"
                 for s in seeds]
        middle = median([runs[s].seconds for s in seeds])
        cores = next(o.cores for o in outcomes if o.configuration == name)
        if middle is None or serial is None:
            ratio = speedup = efficiency = "—"
        else:
            ratio, speedup = f"{middle / serial:.2f}x", f"{serial / middle:.2f}x"
            efficiency = f"{serial / middle / cores:.0%}"
        shown = f"{middle:.1f}" if middle is not None else "—"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {shown} | {ratio} | {speedup} | {efficiency} |")
    return "\n".join(lines)


def score_table(task: Task, outcomes: list[Outcome], names: list[str], seeds: list[int],
                wall_time_s: float) -> str:
    """A fixed-time task's table: each run's score and env steps, the medians, and each against serial's.
    (No speedup: a score twice serial's is not twice as fast.)"""
    lines = [f"{task.env}: {task.described(wall_time_s)}", "",
             "| configuration | " + " | ".join(f"seed {s}" for s in seeds) + " | median | x serial's | median env "
             "steps | x serial's |", "|---" * (len(seeds) + 5) + "|"]
    def medians(name: str) -> tuple[dict[int, Outcome], float | None, float]:
        runs = {o.seed: o for o in outcomes if o.configuration == name}
        return (runs, median([runs[s].score for s in seeds], worst=-math.inf),
                statistics.median(runs[s].env_steps or 0 for s in seeds))

    _, serial_score, serial_steps = medians(names[0])
    for name in names:
        runs, score, steps = medians(name)
        cells = [f"{'not scored' if (value := runs[s].score) is None else f'{value:.2f}'} ({runs[s].env_steps or 0:,})"
                 for s in seeds]
        shown = "—" if score is None else f"{score:.2f}"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {shown} | {times(score, serial_score)} | "
                     f"{steps:,.0f} | {times(steps, serial_steps)} |")
    return "\n".join(lines)


def times(value: float | None, serial: float | None) -> str:
    """`value` as a multiple of serial's; a dash where either is missing or serial's is 0."""
    return f"{value / serial:.2f}x" if value is not None and serial else "—"
