"""The training mode `ddq train` runs when none is named: the one measured best to a target return on a
machine like the one the run starts on (docs/benchmarks.md, "Which mode reaches a target first")."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ddq.config.sections import DistributedConfig, ServerConfig

# Settings that only a distributed run reads: naming one asks for a distributed run.
DISTRIBUTED_SETTINGS = frozenset(f.name for kind in (DistributedConfig, ServerConfig)
                                 for f in dataclasses.fields(kind) if f.name != "server")
# Those that only downpour's parameter server or actor-learner's actors read: data-parallel reads none of them
# (its worker 0 snapshots the weights every snapshot_every updates, as a shard would).
OTHER_WIRINGS_SETTINGS = frozenset({f.name for f in dataclasses.fields(ServerConfig)} - {"snapshot_every"}
                                   | {"send_every", "actor_backlog", "per_actor_epsilon", "sync", "sync_every"})
# The cluster masters the comparison of wirings ran on: a standalone master on test hosts. YARN and Kubernetes
# often allocate executors as they go, which a barrier stage (data-parallel's) cannot run under.
MEASURED_CLUSTER_MASTERS = ("spark://",)
MEASURED_CORES = 2  # the most cores the comparison has been measured on


@dataclass(frozen=True)
class ModeChoice:
    mode: str
    why: str  # one line, for the run's first lines


def measured_mode(named: set[str], spark_master: str | None, cores: int) -> ModeChoice:
    """The mode for a run that names none. A standalone cluster master asks for data-parallel: on one-core test
    hosts it reached CartPole-v1's, MinAtar Breakout's and LunarLander-v3's targets sooner than downpour.
    Downpour where a setting only another wiring reads is named, on another cluster master (not compared yet),
    or (on a local master) where any setting only distributed runs read is named, the local comparison of the
    two not yet redone. Otherwise serial: on a local master with 2 cores
    data-parallel reached MinAtar Breakout's and LunarLander-v3's targets sooner (0.72x and 0.76x serial's
    time) but CartPole-v1's 3.1x later, its Spark start costing more than a task that serial solves in
    seconds."""
    other_wiring = sorted(named & OTHER_WIRINGS_SETTINGS)
    if spark_master is not None and spark_master.startswith(MEASURED_CLUSTER_MASTERS):
        if other_wiring:
            return ModeChoice("downpour", f"downpour: a cluster master was named, and {other_wiring[0]}, which "
                                          "data-parallel does not read (--mode names another)")
        return ModeChoice("data-parallel", "data-parallel: a standalone cluster master was named; on one-core "
                                           "test hosts it reached CartPole-v1's, MinAtar Breakout's and "
                                           "LunarLander-v3's targets sooner than downpour (docs/benchmarks.md; "
                                           "--mode names another)")
    if spark_master is not None and not spark_master.startswith("local"):
        return ModeChoice("downpour", "downpour: a cluster master was named, and no comparison has run on its kind "
                                      "yet (--mode names another)")
    asked = sorted(named & DISTRIBUTED_SETTINGS)
    if asked:
        return ModeChoice("downpour", f"downpour: {asked[0]} was named, which only a distributed run reads "
                                      "(--mode names another)")
    beyond = "" if cores <= MEASURED_CORES else f"; this machine's {cores} cores are more than measured so far"
    return ModeChoice("serial", "serial: on one machine data-parallel took 3.1x serial's time to CartPole-v1's "
                                "target (0.72x on MinAtar Breakout and 0.76x on LunarLander-v3, with 2 cores: "
                                "docs/benchmarks.md)"
                                f"{beyond}; --mode data-parallel --workers N trains on N")
