"""Every Redis connection ddq opens: a deadline on each wait, TCP keepalive, TLS that trusts the CA the
run's URL names (`ssl_ca_data`), and reconnection while the server restarts, so a connection to a vanished
host never hangs a process and a restarted Redis does not end one.

The socket timeout is longer than any blocking command ddq sends (BRPOP waits at most a quarter second),
so it fires only when the server stopped answering. Keepalive probes a silent idle connection after
`KEEPALIVE_IDLE_S`, which ends one to a host that is gone without a word (a cut link, a crash). A refused
or dropped connection (a server restarting) is tried again for up to OUTAGE_S; a timeout is not, as it
already waited SOCKET_TIMEOUT_S.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

SOCKET_TIMEOUT_S = 30.0  # no reply for this long: the server, or the path to it, is gone
CONNECT_TIMEOUT_S = 10.0
OUTAGE_S = 30.0  # a server that refuses connections this long is not restarting: it is gone
T = TypeVar("T")
_NESTING = threading.local()  # how deep in nested retries (a reconnection inside a command) this thread is
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


class OutageRetry(Retry):
    """Tries a command again after a refused or dropped connection, backing off from 50 ms to 1 s, until
    `outage_s` has passed since the first failure of the outage: a deadline, not a count, so the retries
    redis-py nests (a reconnection inside a command) do not multiply it. A command that may have been applied
    can be applied again: the receivers of gradients and experience number what they take
    (`ddq.core.senders`); a counter (env steps, episodes) may count a retried increment twice."""

    def __init__(self, outage_s: float = OUTAGE_S):
        super().__init__(ExponentialBackoff(cap=1.0, base=0.05), -1, supported_errors=(redis.ConnectionError,))
        self.outage_s = outage_s
        self.outage_since: float | None = None  # when the command being tried first failed
        self.gone = threading.Event()  # the server is gone for good: no outage to wait out (`give_up_waiting`)

    def __deepcopy__(self, memo: dict) -> OutageRetry:
        """redis-py gives each connection its own copy: the outage clock is the connection's, and `gone` is
        shared by every connection of the client."""
        copy = OutageRetry(self.outage_s)
        copy.gone = self.gone
        return copy

    def call_with_retry(self, do: Callable[[], T], fail: Callable[..., Any],
                        is_retryable: Callable[[Exception], bool] | None = None,
                        with_failure_count: bool = False) -> T:
        failures, depth = 0, getattr(_NESTING, "depth", 0)
        _NESTING.depth = depth + 1
        try:
            while True:
                try:
                    result = do()
                    if depth == 0:  # only the whole command's success ends the outage, not a reconnection's
                        self.outage_since = None
                    return result
                except self._supported_errors as error:
                    failures += 1
                    now = time.monotonic()
                    self.outage_since = self.outage_since or now
                    fail(error, failures) if with_failure_count else fail(error)
                    if isinstance(error, redis.AuthenticationError) or (is_retryable and not is_retryable(error)) \
                            or now - self.outage_since >= self.outage_s or self.gone.is_set():
                        raise
                    time.sleep(self._backoff.compute(failures))
        finally:
            # only a success ends an outage: once one outlasted its deadline, every command fails at once
            # until the server answers again (a driver ending a run with Redis gone makes many calls)
            _NESTING.depth = depth


def give_up_waiting(client: redis.Redis) -> None:
    """From now on, `client`'s commands fail at once while the server is away: it is gone for good (the
    process that ran it died and was not restarted), so there is no outage to wait out."""
    retry = client.get_retry()
    if isinstance(retry, OutageRetry):
        retry.gone.set()


def connect(url: str, **options: Any) -> redis.Redis:
    """A redis-py client for `url` with ddq's deadlines, keepalive and retries (`options` override them)."""
    settings: dict[str, Any] = {"socket_timeout": SOCKET_TIMEOUT_S, "socket_connect_timeout": CONNECT_TIMEOUT_S,
                                "health_check_interval": 15, "retry": OutageRetry()}
    if not url.startswith("unix:"):
        settings.update(socket_keepalive=True, socket_keepalive_options=keepalive_options())
    settings.update(options)
    return redis.Redis.from_url(url, **settings)


# What the modules above the transport hold and catch, so none of them imports redis: a connection they pass
# to the transport's named operations, and the errors those raise.
Connection = redis.Redis
StoreError = redis.RedisError  # any failure of the store: the base of the two below
StoreUnavailable = redis.ConnectionError  # the server cannot be reached (gone, restarting, refusing)
StoreAuthenticationError = redis.AuthenticationError  # the server refused the password
StoreRefused = redis.ResponseError  # the server answered with an error


def snapshot_failed(error: BaseException) -> bool:
    """Whether Redis refused a write because it could not save its own snapshot (a full disk, most often):
    it refuses writes until a snapshot succeeds (`stop-writes-on-bgsave-error yes`)."""
    return isinstance(error, StoreRefused) and str(error).startswith("MISCONF")


def ping(url: str, timeout_s: float) -> None:
    """Whether a Redis answers at `url` within `timeout_s`, at once (no outage is waited out): returns when it
    does, raises StoreAuthenticationError when it refused the password, another StoreError (or ValueError,
    OSError) when it did not answer."""
    client = connect(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s, retry=OutageRetry(0))
    try:
        client.ping()
    finally:
        client.close()


def server_version(url: str) -> str:
    """The version of the redis-server answering at `url`."""
    return str(connect(url).info("server")["redis_version"])
