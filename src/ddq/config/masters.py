"""Spark master URLs by kind, the one place that reads a master URL's scheme: a local master (this process's
own executors), a standalone cluster's (spark://), or another cluster manager's (YARN, Kubernetes, Mesos)."""

from __future__ import annotations

import re

MASTER_URL = re.compile(r"^(local(\[(\d+|\*)(,\s*\d+)?\])?|spark://.+|yarn|k8s://.+|mesos://.+)$")
STANDALONE = "spark://"


def is_local(master: str | None) -> bool:
    """A local master's URL (local, local[N], local[N, retries]); None, spark-submit's choice, is not known
    to be one."""
    return master is not None and master.startswith("local")


def is_cluster(master: str | None) -> bool:
    """A named master whose executors may run on other hosts."""
    return master is not None and not is_local(master)


def is_standalone(master: str) -> bool:
    return master.startswith(STANDALONE)


def standalone_addresses(master: str) -> list[str]:
    """HOST:PORT of each standalone master a spark:// URL names (one with standbys names several)."""
    return master[len(STANDALONE):].split(",")
