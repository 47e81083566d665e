"""A parameter-server shard on a host of its own (`ddq param-server --listen ADDR`): it starts a Redis there
for its gradients and weights, registers it with the run, and serves, so that the workers' pushes and pulls
of its slice go over this host's link and not the driver's.

The store speaks only TLS, with a certificate authority made here and the run's own password (the one every
worker already holds: nothing new to hand out). The shard's snapshots and reports go to the run's Redis, so a
shard started again, on this host or another, resumes where it stopped. The run's settings come from the run's
Redis too (the driver wrote them there), unless a settings file is given.
"""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

from ddq.config import TrainConfig, config_from_document
from ddq.config.documents import shown_url
from ddq.lifecycle import RunControl
from ddq.param_server.server import ShardServer
from ddq.transport.credentials import PASSWORD_VARIABLE, split_password
from ddq.transport.reach import Unanswered, refusal
from ddq.transport.redis_client import CONNECT_TIMEOUT_S, Connection
from ddq.transport.redis_client import connect as connect_redis
from ddq.transport.redis_server import ANY_ADDRESS, EmbeddedRedis, address_toward_host
from ddq.transport.run_store import RunStore
from ddq.transport.shard_stores import registered_url, store_url


def run_settings(store: RunStore, run: str) -> TrainConfig:
    """The settings the driver resolved for `run`, from its info in the run's Redis; ValueError when the run
    has none there (no driver started it, or another run id was given)."""
    info = store.info()
    if not info or "settings" not in info:
        raise ValueError(f"the run's Redis holds no run {run!r} (its driver writes ddq:{run}:info as it starts): "
                         "start ddq train first, and give the run id it prints")
    return config_from_document(info["settings"], f"run {run}'s info")


def reached(run_url: str) -> Connection:
    """A client of the run's Redis, which answered; ValueError in one line, saying what to do, when it did not."""
    refused = refusal(run_url, CONNECT_TIMEOUT_S)
    if refused is None:
        return connect_redis(run_url)
    shown = shown_url(run_url)
    if refused.why is Unanswered.PASSWORD:
        line = f"the run's Redis refused this host's password: set {PASSWORD_VARIABLE} to the one ddq train has"
    elif refused.why is Unanswered.CERTIFICATE:  # the URL's CA is not the run's: another run's command?
        line = (f"the Redis at {shown} gave a TLS certificate this URL does not trust: paste the command ddq "
                "train printed for this run, whose URL holds its CA")
    elif refused.why is Unanswered.MALFORMED:  # mangled on its way from ddq train's printed command
        line = f"{shown} is not a Redis URL ddq can use ({refused.detail}): paste the command ddq train printed"
    elif refused.why is Unanswered.CONNECTION:
        line = f"the Redis at {shown} refused this connection ({refused.detail})"
    else:
        line = (f"no Redis answers at {shown}: the run has ended, or ddq train's --listen address is not one "
                f"this host reaches ({refused.detail})")
    raise ValueError(line) from refused.error


def served_at(store: RunStore, run_url: str, shard: int) -> str | None:
    """HOST:PORT of the store that serves `shard` now, if one is registered and answers (a crashed shard's
    registration stays behind it, unanswered)."""
    key = store.keys.shard(shard).store
    registered = store.client.get(key)
    if registered is None:
        return None
    try:
        url = store_url(registered, key, run_url)
    except ValueError:
        return None
    if refusal(url, CONNECT_TIMEOUT_S) is not None:
        return None
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}"


def advertised(listen: str, run_url: str) -> str:
    """The address other hosts reach a store listening on `listen` at: `listen` itself, or for a wildcard
    address this host's on the route toward the run's Redis (whose workers come the same way)."""
    if listen not in ANY_ADDRESS:
        return listen
    host = urlsplit(run_url).hostname
    return address_toward_host(host, 6379) if host else "127.0.0.1"


def serve_with_own_store(run_url: str, run: str, shard: int, listen: str, port: int | None = None,
                         config: TrainConfig | None = None) -> int:
    """Serves shard `shard` of `run` from a Redis of its own listening on `listen` (`port`, default a free
    one) until the run stops; the exit code."""
    password = split_password(run_url)[1]
    if password is None:
        raise ValueError("a shard with a store of its own gives it the run's password, and this URL of the run's "
                         "Redis holds none: the run's Redis must serve other hosts (ddq train --listen ADDR)")
    store = RunStore(reached(run_url), run)
    config = config or run_settings(store, run)
    config.distributed.redis_url = run_url
    config.run.run_dir = None  # the driver's folder is on its host: snapshots go to the run's Redis alone
    shards = config.distributed.server.shards
    if not 0 <= shard < shards:
        raise ValueError(f"--shard {shard} is not one of run {run}'s {shards} shards (0-{shards - 1})")
    if RunControl(store.client, run).stopping():
        raise ValueError(f"run {run} is stopping or has stopped: a shard joins a run that trains")
    if (serving := served_at(store, run_url, shard)) is not None:
        raise ValueError(f"shard {shard} of run {run} is served already, at {serving}: stop that one first, or "
                         "start another --shard")
    address = advertised(listen, run_url)
    with EmbeddedRedis(listen=listen, advertise=address, run=run, password=password, listen_port=port) as own:
        # it registers the store with each report, the first right after it published its weights there
        server = ShardServer.connect(config, run_url, run, shard, store_url=own.url,
                                     registration=registered_url(own.remote_url))
        print(f"ddq param-server: shard {shard} of run {run} serves its gradients and weights at "
              f"{address}:{own.listen_port} (TLS, the run's password)", file=sys.stderr, flush=True)
        return server.serve()
