"""Spark master URLs by kind, the one place that reads a master URL's scheme: a local master (this process's
own executors), a standalone cluster's (spark://), or another cluster manager's (YARN, Kubernetes, Mesos)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from ddq.config.cores import usable_cores

MASTER_URL = re.compile(r"^(local(\[(\d+|\*)(,\s*\d+)?\])?|spark://.+|yarn|k8s://.+|mesos://.+)$")
STANDALONE = "spark://"
KUBERNETES = "k8s://"


def is_local(master: str | None) -> bool:
    """A local master's URL (local, local[N], local[N, retries]); None, spark-submit's choice, is not known
    to be one."""
    return master is not None and master.startswith("local")


def with_task_retries(master: str, tries: int) -> str:
    """`master`, a local one made to try a failed task `tries` times in all, as ddq's cluster masters do
    (spark.task.maxFailures): Spark's local mode retries only when its URL says so (local[N, tries]). One
    that says so already, and any other master, as given."""
    threads = re.fullmatch(r"local(?:\[(\d+|\*)\])?", master)
    return master if threads is None else f"local[{threads.group(1) or 1},{tries}]"


def local_slots(master: str) -> int | None:
    """The task slots a local master offers: its threads (local: 1, local[*]: this machine's cores); None for
    any other master."""
    found = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master)
    if found is None:
        return None
    threads = found.group(1)
    if threads == "*":
        return usable_cores()
    return 1 if threads is None else int(threads)


def is_cluster(master: str | None) -> bool:
    """A named master whose executors may run on other hosts."""
    return master is not None and not is_local(master)


def is_standalone(master: str) -> bool:
    return master.startswith(STANDALONE)


def is_kubernetes(master: str) -> bool:
    return master.startswith(KUBERNETES)


def standalone_addresses(master: str) -> list[str]:
    """HOST:PORT of each standalone master a spark:// URL names (one with standbys names several)."""
    return master[len(STANDALONE):].split(",")


def kubernetes_address(master: str) -> tuple[str, int] | None:
    """The host and port of the API server a k8s:// URL names (Spark reads k8s://HOST:PORT as https), or None
    for a URL without a host, or one that does not parse (a port that is not a number, an unclosed bracket)."""
    server = master[len(KUBERNETES):]
    try:
        parts = urlsplit(server if "://" in server else f"https://{server}")
        port = parts.port or (80 if parts.scheme == "http" else 443)
    except ValueError:
        return None
    return (parts.hostname, port) if parts.hostname else None


def master_host(master: str) -> str | None:
    """The host a cluster master's URL names (a standalone cluster's first master, a Kubernetes API server), or
    None for one that names none (yarn, local)."""
    if is_standalone(master):
        host = standalone_addresses(master)[0].rpartition(":")[0]
        return host.strip("[]") or None
    if is_kubernetes(master):
        server = kubernetes_address(master)
        return server[0] if server else None
    return None
