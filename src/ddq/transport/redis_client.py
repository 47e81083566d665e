"""Every Redis connection ddq opens: a deadline on each wait, TCP keepalive, and TLS that trusts the CA the
run's URL names (`ssl_ca_data`), so a connection to a vanished host never hangs a process.

The socket timeout is longer than any blocking command ddq sends (BRPOP waits at most a quarter second),
so it fires only when the server stopped answering. Keepalive probes a silent idle connection after
`KEEPALIVE_IDLE_S`, which ends one to a host that is gone without a word (a cut link, a crash).
"""

from __future__ import annotations

import socket
from typing import Any

import redis

SOCKET_TIMEOUT_S = 30.0  # no reply for this long: the server, or the path to it, is gone
CONNECT_TIMEOUT_S = 10.0
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_PROBES = 10, 5, 3


def keepalive_options() -> dict[int, int]:
    """TCP keepalive: first probe after KEEPALIVE_IDLE_S of silence, then every KEEPALIVE_INTERVAL_S; a
    connection is dropped after KEEPALIVE_PROBES unanswered probes (Linux's names)."""
    options = {}
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE_S), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
                        ("TCP_KEEPCNT", KEEPALIVE_PROBES)):
        if hasattr(socket, name):
            options[getattr(socket, name)] = value
    return options


def set_keepalive(sock: socket.socket) -> None:
    """KEEPALIVE_* on an open TCP socket (a unix socket needs none)."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for option, value in keepalive_options().items():
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


def connect(url: str, **options: Any) -> redis.Redis:
    """A redis-py client for `url` with ddq's deadlines and keepalive (`options` override them)."""
    settings: dict[str, Any] = {"socket_timeout": SOCKET_TIMEOUT_S, "socket_connect_timeout": CONNECT_TIMEOUT_S,
                                "health_check_interval": 15}
    if not url.startswith("unix:"):
        settings.update(socket_keepalive=True, socket_keepalive_options=keepalive_options())
    settings.update(options)
    return redis.Redis.from_url(url, **settings)
