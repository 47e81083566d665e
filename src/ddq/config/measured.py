"""The training mode `ddq train` runs when none is named: the one measured best to a target return on a
machine like the one the run starts on (docs/benchmarks.md, "Which mode reaches a target first"); and which
settings each mode ignores, which a run says in its first lines."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ddq.config.masters import is_local, is_standalone
from ddq.config.sections import DistributedConfig, ServerConfig, is_distributed

# Settings that only a distributed run reads: naming one asks for a distributed run.
DISTRIBUTED_SETTINGS = frozenset(f.name for kind in (DistributedConfig, ServerConfig)
                                 for f in dataclasses.fields(kind) if f.name != "server")
# Those that only downpour's parameter server reads, and those only actor-learner's actors read: data-parallel
# reads none of them (its worker 0 snapshots the weights every snapshot_every updates, as a shard would).
DOWNPOUR_SETTINGS = frozenset({f.name for f in dataclasses.fields(ServerConfig)} - {"snapshot_every"})
ACTOR_LEARNER_SETTINGS = frozenset({"send_every", "actor_backlog", "per_actor_epsilon", "sync", "sync_every"})


# What each mode does not read: downpour's parameter server and actor-learner's actors each have settings of
# their own, and data-parallel's worker 0 and actor-learner's learner publish every publish_every updates.
UNREAD_BY_MODE = {
    "downpour": ACTOR_LEARNER_SETTINGS | {"publish_every"},
    "data-parallel": DOWNPOUR_SETTINGS | ACTOR_LEARNER_SETTINGS,
    "actor-learner": DOWNPOUR_SETTINGS,
}


def unread_in(mode: str, named: set[str], workers: int) -> list[str]:
    """The named settings a run in `mode` ignores (sorted). Serial: any distributed run's, but redis_url, which
    is often exported for every run ($DDQ_REDIS_URL), and `workers` 1, which a serial run is. `--mode serial
    --workers 4` had trained one process, and said nothing; `--mode downpour --send-every 4` alike."""
    if not is_distributed(mode):
        return sorted(named & DISTRIBUTED_SETTINGS - {"redis_url", *(["workers"] if workers == 1 else [])})
    return sorted(named & UNREAD_BY_MODE.get(mode, frozenset()))


# The cluster masters the comparison of wirings ran on were standalone masters on test hosts (`master_kind`). YARN
# and Kubernetes often allocate executors as they go, which a barrier stage (data-parallel's) cannot run under.
MEASURED_CORES = 2  # the most cores the comparison has been measured on


@dataclass(frozen=True)
class ModeChoice:
    mode: str
    why: str  # one line, for the run's first lines


def measured_mode(named: set[str], spark_master: str | None, cores: int, submitted: bool = False) -> ModeChoice:
    """The mode for a run that names none. Serial on one machine, unless a setting only distributed runs read
    is named: on a local master with 2 cores data-parallel reached MinAtar Breakout's and LunarLander-v3's
    targets sooner (0.68x and 0.86x serial's time) but CartPole-v1's 3.1x later, its Spark start costing more
    than a task that serial solves in seconds. A distributed run, on one machine or a standalone cluster
    master, gets data-parallel, which reached all three targets sooner than downpour there (on one machine,
    2 workers on 2 cores; on one-core test hosts). Downpour or actor-learner where a setting only that wiring
    reads is named; downpour on a master no comparison has run on: another cluster master, or spark-submit's
    (`submitted` with no master named), which ddq does not see before Spark starts."""
    master = master_kind(spark_master, submitted)
    if master == "unmeasured":
        why = ("spark-submit's master is not seen before Spark starts (--spark-master names it; --mode names "
               "another)" if spark_master is None else "no comparison of the wirings has run on this kind of "
               "cluster master yet (--mode names another)")
        return ModeChoice("downpour", f"downpour: {why}")
    asked = sorted(named & DISTRIBUTED_SETTINGS)
    if master == "local" and not asked:
        beyond = "" if cores <= MEASURED_CORES else f"; the {cores} cores this run may use are more than measured " \
                                                    "so far"
        return ModeChoice("serial", "serial: on one machine data-parallel took 3.1x serial's time to CartPole-v1's "
                                    "target (0.68x on MinAtar Breakout and 0.86x on LunarLander-v3, with 2 cores: "
                                    "docs/benchmarks.md)"
                                    f"{beyond}; --mode data-parallel --workers N trains on N")
    for mode, only_its in (("downpour", DOWNPOUR_SETTINGS), ("actor-learner", ACTOR_LEARNER_SETTINGS)):
        if named & only_its:  # (a setting of each: downpour, which refuses actor-learner's by name)
            return ModeChoice(mode, f"{mode}: {sorted(named & only_its)[0]} was named, which only {mode} reads "
                                    "(--mode names another)")
    why = ("a standalone cluster master was named" if master == "standalone"
           else f"{asked[0]} was named, which only a distributed run reads")
    return ModeChoice("data-parallel", f"data-parallel: {why}; it reached CartPole-v1's, MinAtar Breakout's and "
                                       "LunarLander-v3's targets sooner than downpour, on one machine and on one-core "
                                       "test hosts (docs/benchmarks.md; --mode names another)")


def master_kind(spark_master: str | None, submitted: bool) -> str:
    """"local", "standalone" (the cluster master the wirings were compared on) or "unmeasured": another cluster
    master, or spark-submit's where none is named (ddq does not see it before Spark starts)."""
    if spark_master is None:
        return "unmeasured" if submitted else "local"
    if is_local(spark_master):
        return "local"
    return "standalone" if is_standalone(spark_master) else "unmeasured"
