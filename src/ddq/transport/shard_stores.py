"""Where each parameter-server shard's gradients and weights live: in the run's Redis, or in a Redis of the
shard's own on the host it runs on (a shard started by hand with `ddq param-server --listen`), so that its
bytes go over that host's link and not the driver's.

A shard with a store of its own registers the store's URL under its `store` key in the run's Redis, with
`$DDQ_REDIS_PASSWORD` where the password goes: the store takes the run's password, which every reader already
holds, so no secret is written anywhere. A URL read back from Redis is checked, never trusted: TLS anywhere,
plain TCP to loopback only, and nothing in its query but the certificate authority's PEM text (no file paths).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import parse_qsl, quote, urlsplit

from ddq.transport.credentials import PLACEHOLDER, split_password
from ddq.transport.keys import RunKeys

STORE_QUERY = {"ssl_ca_data"}  # the only query a registered store's URL may carry


def registered_url(remote_url: str) -> str:
    """What a shard registers for its store reachable at `remote_url`: the URL with PLACEHOLDER for its
    password."""
    return split_password(remote_url)[0]


def checked_store_url(url: str, where: str) -> str:
    """`url`, a store's URL read from `where`, if it is one a shard registers; else ValueError in one line."""
    parts = urlsplit(url)
    allowed = "rediss:// to any host, or redis:// to 127.0.0.1"
    if parts.scheme not in ("redis", "rediss") or not parts.hostname or parts.port is None:
        raise ValueError(f"{where} holds {parts.scheme or 'no'}:// with no host and port, not a shard's store: "
                         f"{allowed}")
    if parts.scheme == "redis" and not _loopback(parts.hostname):
        raise ValueError(f"{where} names a plain-TCP store on {parts.hostname}, which is not this host: {allowed}")
    extra = sorted({key for key, _ in parse_qsl(parts.query, keep_blank_values=True)} - STORE_QUERY)
    if extra:
        raise ValueError(f"{where} names a store whose URL asks for {', '.join(extra)}: a shard's store URL "
                         f"carries only {', '.join(sorted(STORE_QUERY))}")
    return url


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def with_password(store_url: str, run_url: str) -> str:
    """A store's registered URL with the password of the run's Redis (from the run's URL, as this process
    holds it) where the placeholder is."""
    if PLACEHOLDER not in store_url:
        return store_url
    password = split_password(run_url)[1]
    if password is None:
        raise ValueError("a shard's store wants the run's password, and this process's URL of the run's Redis "
                         "holds none")
    return store_url.replace(PLACEHOLDER, quote(password, safe=""))


def store_keys(run: str, shards: int) -> list[str]:
    """The keys where shards register their stores, shard by shard (read them in one MGET)."""
    return [RunKeys(run).shard(k).store for k in range(shards)]


def store_urls(registered: Sequence[bytes | memoryview | None], run: str, run_url: str) -> list[str]:
    """The URL of each shard's store for this process, from what `store_keys` held (`registered`): the run's
    own, `run_url`, where a shard registered none, else the registered one, checked, with the run's password."""
    keys = store_keys(run, len(registered))
    return [run_url if value is None else with_password(checked_store_url(bytes(value).decode(), key), run_url)
            for key, value in zip(keys, registered)]


def address_toward_host(host: str, port: int) -> str:
    """This host's address on the route to `host` (no packet is sent: a UDP socket's connect only picks the
    route)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, port))
        return str(probe.getsockname()[0])
