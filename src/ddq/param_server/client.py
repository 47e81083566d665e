"""A worker's side of the parameter server: pull weights when they moved, push gradients to every shard.

`ParameterClient` is the Redis implementation of the core's `ParameterSource`
(`ddq.core.weights`): a Barista holds one without knowing it is remote.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import torch

from ddq.models import FlatParameters
from ddq.transport.keys import shard_bounds
from ddq.transport.redis_client import OUTAGE_S
from ddq.transport.resp import LOST, RespConnection, RespError
from ddq.transport.shard_stores import store_keys, store_urls
from ddq.transport.shards_link import Published, ShardsLink
from ddq.transport.wire import (
    GRADIENT,
    HEADER,
    Header,
    WireError,
    layout_bytes,
    pack_header,
    read_header,
    read_weights_header,
)

T = TypeVar("T")
BACKLOG_DEADLINE_S = 120.0  # a wait for a backlog to drain gives up (a failed task, retried by Spark) after this


class ParameterClient:
    """Keeps `flat` (and optionally `target`) in step with a run's shards, and sends gradients to them.

    Versions are per shard: a gradient carries, for each shard, the version of
    that shard's weights it was computed from.
    """

    def __init__(self, redis_url: str, run: str, flat: FlatParameters, shards: int = 1, worker: int = 0,
                 target: FlatParameters | None = None, max_backlog: int = 8):
        self.flat, self.target, self.worker, self.max_backlog = flat, target, worker, max_backlog
        # each push is numbered, under a sender number of this client's own: no shard applies one twice
        self.sender, self.pushed = secrets.randbits(32), 0
        self.bounds = shard_bounds(flat.size, shards)
        self.layout = layout_bytes(flat.layout_hash())
        self.versions = [-1] * shards
        self.target_versions = [-1] * shards
        self.url, self.run = redis_url, run
        self.buffer_bytes = 4 * max(end - start for start, end in self.bounds) + HEADER.size + 4096
        self.conn = RespConnection(redis_url, buffer_bytes=self.buffer_bytes)
        self.link = ShardsLink(self.conn, run, shards, self._stores())
        self.waits = 0  # times a push waited for a backlog to drain
        self.lost = 0  # pushes whose connection broke: perhaps applied, never sent again

    def _stores(self, outage_s: float = OUTAGE_S) -> list[RespConnection]:
        """A connection to each shard's store (`ddq.transport.shard_stores`): the run's Redis, or a Redis of
        the shard's own. A store that does not answer is waited for up to `outage_s`, where its shard
        registers it each time: a shard started again (by hand, on its host or another) registers anew."""
        since, failures = time.monotonic(), 0
        opened = {self.url: self.conn}
        while True:
            urls = store_urls(self.conn.command("MGET", *store_keys(self.run, len(self.bounds))), self.run,
                              self.url)
            try:
                for url in urls:
                    if url not in opened:
                        opened[url] = RespConnection(url, buffer_bytes=self.buffer_bytes)
                return [opened[url] for url in urls]
            except (OSError, RespError) as error:  # refused, reset, no route; a store still starting
                failures += 1
                if time.monotonic() - since >= outage_s:
                    for conn in opened.values():
                        if conn is not self.conn:
                            conn.close()
                    raise ConnectionError(f"a parameter-server shard's Redis stayed unreachable for "
                                          f"{outage_s:.0f} s: {error}") from error
                time.sleep(min(0.05 * 2 ** failures, 1.0))

    def _reconnect(self) -> None:
        """Connects again to the run's Redis and to every shard's store, after one of them was lost (which,
        the caller cannot tell), at the stores' URLs as now registered."""
        self.conn.reconnect()
        for conn in self.link.connections:
            if conn is not self.conn:
                conn.close()
        self.link.use(self._stores())

    def close(self) -> None:
        for conn in self.link.connections:
            conn.close()

    @property
    def pushes(self) -> int:
        return self.pushed

    @property
    def version(self) -> int:
        """Updates applied so far, summed over shards (each shard applies every gradient it accepts)."""
        return max(sum(self.versions), 0)

    def _refresh(self, groups: list[tuple[Published, list[int], FlatParameters]]) -> bool:
        """For each (what the shards publish, versions, flat to fill) group: one round trip reads every
        shard's 64-byte header, a second fetches the slices whose version moved. True if any did."""
        shards = len(self.bounds)
        heads = self.link.heads([kind for kind, _, _ in groups])
        moved = []
        for index, head in enumerate(heads):
            (kind, versions, into), shard = groups[index // shards], index % shards
            if not head:
                raise RuntimeError(f"no weights in Redis under {self.link.where(kind, shard)}: is the parameter "
                                   "server running for this run?")
            if read_header(head, whole=False).version != versions[shard]:
                moved.append((kind, versions, into, shard))
        for kind, _, _, shard in moved:
            self.link.request(kind, shard)
        for _, versions, into, shard in moved:
            versions[shard] = self._receive_weights(shard, into)
        return bool(moved)

    def _weights(self) -> tuple[Published, list[int], FlatParameters]:
        return ("weights", self.versions, self.flat)

    def _target(self) -> tuple[Published, list[int], FlatParameters]:
        if self.target is None:
            raise ValueError("this client was made without a target network")
        return ("target", self.target_versions, self.target)

    def _receive_weights(self, shard: int, into: FlatParameters) -> int:
        """Reads one weights reply straight into `into` once its header checked out; its version."""
        received: list[Header] = []

        def place(head: memoryview, size: int) -> memoryview:
            header = read_weights_header(head, self.layout, self.bounds[shard])
            if size != HEADER.size + 4 * header.count:
                raise WireError("size", f"{size} bytes do not hold {header.count} values")
            received.append(header)
            start, end = self.bounds[shard]
            if into.data.device.type == "cpu":
                return into.data[start:end].numpy().data
            self._staging = np.empty(end - start, np.float32)
            return self._staging.data

        if not self.link.stores[shard].read_bulk_into(HEADER.size, place):
            raise RuntimeError(f"the weights of shard {shard} vanished from Redis")
        if into.data.device.type != "cpu":
            into.assign(self._staging, self.bounds[shard][0])
        return received[0].version

    def _reading(self, read: Callable[[], T]) -> T:
        """`read()`, and once more after reconnecting if the connection was lost (a read is safe to repeat)."""
        try:
            return read()
        except (*LOST, TimeoutError):  # a store's host gone silent times out (no reset comes from it)
            self._reconnect()
            return read()

    def pull(self) -> bool:
        """Fetches the weights of every shard whose version moved; True if any did."""
        return self._reading(lambda: self._refresh([self._weights()]))

    def pull_target(self) -> bool:
        """The same for the target network's weights (they move every C updates)."""
        return self._reading(lambda: self._refresh([self._target()]))

    def sync(self) -> bool:
        """pull() and pull_target() in the same round trips (the weights alone for a client without a target:
        an actor that only acts)."""
        groups = [self._weights()] + ([self._target()] if self.target is not None else [])
        return self._reading(lambda: self._refresh(groups))

    def push(self, grad: torch.Tensor | np.ndarray, samples: int = 0, loss: float = 0.0,
             versions: list[int] | None = None) -> None:
        """Sends each shard its slice of `grad`, computed from the weights last pulled (or, when given, from
        those of `versions`, one per shard: an older pull's).

        When a shard's queue is longer than `max_backlog`, waits for it to drain:
        a worker faster than the server would otherwise only add staleness. It stops
        waiting once the run is told to stop, as the shards then stop draining.
        """
        if min(self.versions) < 0:
            raise RuntimeError("pull the weights before pushing a gradient computed from them")
        if isinstance(grad, torch.Tensor):
            grad = grad.detach().cpu().numpy()
        if grad.dtype != np.float32 or grad.shape != (self.flat.size,):
            raise WireError("size", f"a gradient must be {self.flat.size} float32 values")
        messages = []
        self.pushed += 1
        for shard, (start, end) in enumerate(self.bounds):
            computed_from = self.versions[shard] if versions is None else versions[shard]
            header = Header(GRADIENT, self.layout, computed_from, end - start, offset=start, shard=shard,
                            sender=self.sender, worker=self.worker, samples=samples, loss=loss,
                            sequence=self.pushed)
            messages.append((pack_header(header), grad[start:end].data.cast("B")))
        try:  # one transaction: a link cut mid-write applies all of it or none, so the count bounds what arrived
            lengths = self.link.push(messages)
        except (*LOST, TimeoutError):  # sent or not, it is not sent again: a lost gradient costs nothing, a
            # doubled one would
            self._reconnect()
            self.lost += 1
            return
        started = time.monotonic()
        while max(lengths) > self.max_backlog:
            self.waits += 1
            waited = time.monotonic() - started
            time.sleep(0.0005 if waited < 1.0 else 0.02)  # a shard that is slow, then one that may be gone
            lengths, stopping = self._reading(self.link.backlog)
            if stopping:
                break
            if waited > BACKLOG_DEADLINE_S:
                raise RuntimeError(f"no parameter-server shard drained its queue for {BACKLOG_DEADLINE_S:.0f} s "
                                   "(is the parameter server running?)")
