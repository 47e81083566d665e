"""The training mode `ddq train` runs when none is named: the one measured best to a target return on a
machine like the one the run starts on (docs/benchmarks.md, "Which mode reaches a target first")."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ddq.config.sections import DistributedConfig, ServerConfig

# Settings that only a distributed run reads: naming one asks for a distributed run.
DISTRIBUTED_SETTINGS = frozenset(f.name for kind in (DistributedConfig, ServerConfig)
                                 for f in dataclasses.fields(kind) if f.name != "server")
MEASURED_CORES = 2  # the most cores the comparison has been measured on


@dataclass(frozen=True)
class ModeChoice:
    mode: str
    why: str  # one line, for the run's first lines


def measured_mode(named: set[str], spark_master: str | None, cores: int) -> ModeChoice:
    """The mode for a run that names none. A cluster master, or a setting only distributed runs read, asks
    for Spark: downpour, ddq's distributed wiring until a cluster comparison says otherwise. Otherwise
    serial: on a local master with 2 cores data-parallel reached MinAtar Breakout's and LunarLander-v3's targets
    sooner (0.72x and 0.76x serial's time) but CartPole-v1's 3.1x later, its Spark start costing more than a task
    that serial solves in seconds."""
    if spark_master is not None and not spark_master.startswith("local"):
        return ModeChoice("downpour", "downpour: a cluster master was named (--mode names another)")
    asked = sorted(named & DISTRIBUTED_SETTINGS)
    if asked:
        return ModeChoice("downpour", f"downpour: {asked[0]} was named, which only a distributed run reads "
                                      "(--mode names another)")
    beyond = "" if cores <= MEASURED_CORES else f"; this machine's {cores} cores are more than measured so far"
    return ModeChoice("serial", "serial: on one machine data-parallel took 3.1x serial's time to CartPole-v1's "
                                "target (0.72x on MinAtar Breakout and 0.76x on LunarLander-v3, with 2 cores: "
                                "docs/benchmarks.md)"
                                f"{beyond}; --mode data-parallel --workers N trains on N")
