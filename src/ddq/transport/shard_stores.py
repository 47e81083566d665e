"""Where each parameter-server shard's gradients and weights live: in the run's Redis, or in a Redis of the
shard's own on the host it runs on (a shard started by hand with `ddq param-server --listen`), so that its
bytes go over that host's link and not the driver's.

A shard with a store of its own registers the store's URL under its `store` key in the run's Redis, with
`$DDQ_REDIS_PASSWORD` where the password goes: the store takes the run's password, which every reader already
holds, so no secret is written anywhere. A URL read back from Redis is checked, never trusted: TLS anywhere,
and nothing in its query but the certificate authority's PEM text (no file paths). That CA is whoever
wrote the key: anyone who may write the run's Redis holds its password already.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from ddq.transport.credentials import PLACEHOLDER, split_password
from ddq.transport.keys import RunKeys

STORE_QUERY = {"ssl_ca_data"}  # the only query a registered store's URL may carry


def registered_url(remote_url: str) -> str:
    """What a shard registers for its store reachable at `remote_url`: the URL with PLACEHOLDER for its
    password."""
    return split_password(remote_url)[0]


def checked_store_url(url: str, where: str) -> str:
    """`url`, a store's URL read from `where`, if it is one a shard registers: TLS to a host and port, the
    password's placeholder (or none) and nothing else in its user part, a database number for its path, and
    the certificate authority's PEM text alone in its query; else ValueError in one line. So a reader opens no
    file of its host, checks the store's certificate, and puts the run's password nowhere but in AUTH."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "rediss" or not parts.hostname or port is None:
        raise ValueError(f"{where} holds no rediss://HOST:PORT URL, as a shard registers: not a store to use")
    elsewhere = f"{parts.hostname} {parts.username or ''}".lower()  # (urlsplit lowercases the host name)
    if parts.password not in (None, PLACEHOLDER) or PLACEHOLDER.lower() in elsewhere:
        raise ValueError(f"{where} names a store with a password of its own, or the run's in another place")
    if not re.fullmatch(r"(/\d*)?", parts.path):
        raise ValueError(f"{where} names a store whose path is no database number")
    extra = sorted({key for key, _ in parse_qsl(parts.query, keep_blank_values=True)} - STORE_QUERY)
    if extra:
        raise ValueError(f"{where} names a store whose URL asks for {', '.join(extra)}: a shard's store URL "
                         f"carries only {', '.join(sorted(STORE_QUERY))}")
    return url


def with_password(store_url: str, run_url: str) -> str:
    """A store's registered (checked) URL with the password of the run's Redis (from the run's URL, as this
    process holds it) in its user part, where the placeholder was."""
    parts = urlsplit(store_url)
    if parts.password is None:
        return store_url
    password = split_password(run_url)[1]
    if password is None:
        raise ValueError("a shard's store wants the run's password, and this process's URL of the run's Redis "
                         "holds none")
    host = f"[{parts.hostname}]" if ":" in str(parts.hostname) else parts.hostname
    netloc = f"{parts.username or ''}:{quote(password, safe='')}@{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def store_keys(run: str, shards: int) -> list[str]:
    """The keys where shards register their stores, shard by shard (read them in one MGET)."""
    return [RunKeys(run).shard(k).store for k in range(shards)]


def store_url(registered: bytes | memoryview | str | None, key: str, run_url: str) -> str:
    """The URL of a shard's store for this process, from what its `key` held (`registered`): the run's own,
    `run_url`, where the shard registered none, else the registered one, checked, with the run's password."""
    if registered is None:
        return run_url
    text = registered if isinstance(registered, str) else bytes(registered).decode()
    return with_password(checked_store_url(text, key), run_url)


def store_urls(registered: Sequence[bytes | memoryview | None], run: str, run_url: str) -> list[str]:
    """`store_url` of each shard, from what `store_keys` held, in one MGET."""
    return [store_url(value, key, run_url) for key, value in zip(store_keys(run, len(registered)), registered)]
