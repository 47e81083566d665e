"""Where a distributed run's parts listen, and how executors on other hosts get ddq: the one part of a run
that knows about hosts.

On a laptop (`local[N]`) everything stays on this host: Spark's driver binds 127.0.0.1 and the private
Redis a unix socket. With a cluster master (spark://, yarn, k8s://), executors run elsewhere: the driver
advertises the address of this host that reaches the master, the private Redis listens there (TLS, a
password made for the run; unless the run names its own Redis), and the job carries ddq itself as a zip
(`SparkContext.addPyFile`, `ddq.shipping`), so executors need only ddq's dependencies.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from ddq.config import TrainConfig
from ddq.config.masters import is_cluster, is_standalone, master_host
from ddq.transport.redis_server import ANY_ADDRESS, address_toward_host

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Placement:
    cluster: bool  # executors may run on other hosts
    listen: str | None  # where the private Redis serves other hosts (None: this host only, or no private Redis)
    advertise: str  # the address other hosts reach this one at (Spark's driver, the private Redis)
    bind: str  # where Spark's driver listens (the advertised address, or --listen's 0.0.0.0)
    ship: bool  # the job carries ddq to its executors


def address_toward(master: str) -> str:
    """This host's address on the route to the Spark master (no packet is sent: a UDP socket's connect only
    picks the route); for a master without a host (yarn), this host name's address."""
    host = master_host(master)
    return address_toward_host(host, 7077) if host else socket.gethostbyname(socket.gethostname())


def placement(config: TrainConfig, spark_submit: bool) -> Placement:
    """Where this run's parts listen: `--listen` when given; with a cluster master and no `--redis-url`, the
    address toward the master; else this host only."""
    d = config.distributed
    remote_master = is_cluster(d.spark_master)
    cluster = remote_master or (spark_submit and d.listen is not None)
    advertise = d.listen if d.listen and d.listen not in ANY_ADDRESS else None
    if advertise is None:
        advertise = address_toward(str(d.spark_master)) if remote_master else LOOPBACK
    listen = d.listen or (advertise if remote_master else None)
    return Placement(cluster, None if d.redis_url else listen, advertise, d.listen or advertise,
                     cluster and not spark_submit)


def unreachable_note(config: TrainConfig) -> str | None:
    """A warning for a cluster manager's master (YARN, Kubernetes, Mesos) whose executors would be told a
    loopback address for Spark's driver and the run's private Redis: a YARN master names no host to route
    toward, and a host's own name often resolves to 127.0.1.1 (Debian's /etc/hosts); a Kubernetes API server
    on this host (kind, minikube) is reached over loopback, which no pod reaches. A standalone master reached
    over loopback has its workers on this host too. None where --listen names an address, for any other
    master, or where the address cannot be found now (the run's start then says why)."""
    d = config.distributed
    if not is_cluster(d.spark_master) or is_standalone(str(d.spark_master)) or d.listen not in (None, *ANY_ADDRESS):
        return None
    try:
        advertised = placement(config, spark_submit=False).advertise
    except OSError:  # this host's name resolves to nothing, or the master's host to no address of its family
        return None
    if not ipaddress.ip_address(advertised).is_loopback:
        return None
    parts = "Spark's driver" if d.redis_url else "Spark's driver or the run's Redis"
    given = f" (--listen {d.listen} listens everywhere, but executors are told this address)" if d.listen else ""
    return (f"--spark-master {d.spark_master}: this host's address toward it is {advertised}, a loopback address, "
            f"so executors on other hosts will not reach {parts}{given}; give --listen ADDRESS, an address of "
            "this host they reach")
