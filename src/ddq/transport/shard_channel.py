"""A parameter-server shard's keys in Redis, as named operations: gradients in, weights and reports out.

Gradients come off the shard's list first in, first out, over the hot-path
connection (`RespConnection`, which reads them into its own buffer); weights
go out as wire-format messages, announced on the shard's channel before they
are stored (Redis runs the two in that order). Publishing and asking for the
next queued gradients share one round trip.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ddq.transport import snapshots
from ddq.transport.keys import RunKeys
from ddq.transport.redis_client import Connection
from ddq.transport.resp import Reply, RespConnection
from ddq.transport.wire import WEIGHTS, Header, pack_header

Publication = list[tuple]  # the commands that publish one version of the weights (and maybe the target)


class ShardChannel:
    """Shard `shard`'s keys of `run`, through a client (reports, snapshots) and the hot-path connection."""

    def __init__(self, client: Connection, fast: RespConnection, run: str, shard: int, layout: bytes,
                 bounds: tuple[int, int]):
        self.client, self.fast, self.shard = client, fast, shard
        self.keys, self.layout, self.bounds = RunKeys(run).shard(shard), layout, bounds

    def _weights_message(self, version: int, values: torch.Tensor) -> tuple[bytes, memoryview]:
        start, end = self.bounds
        header = Header(WEIGHTS, self.layout, version, end - start, offset=start, shard=self.shard)
        return pack_header(header), values.numpy().data.cast("B")

    def publication(self, version: int, weights: torch.Tensor, target_version: int,
                    target: torch.Tensor | None) -> Publication:
        """Announces `version`, then stores the weights (and the target, when given)."""
        commands: Publication = [("PUBLISH", self.keys.applied, str(version)),
                                 ("SET", self.keys.weights, self._weights_message(version, weights))]
        if target is not None:
            commands.append(("SET", self.keys.target, self._weights_message(target_version, target)))
        return commands

    def hand_back(self, publication: Publication) -> None:
        """A shard with a store of its own, stopping: its last weights (and target) go to the run's Redis and
        its store's registration goes, in one transaction, so readers after it (the driver's closing
        evaluation, the dashboard) find the final weights where a shard without a store keeps them."""
        with self.client.pipeline(transaction=True) as pipe:
            for command, key, *values in publication:
                if command == "SET":
                    pipe.set(key, b"".join(bytes(part) for part in values[0]))
            pipe.delete(self.keys.store)
            pipe.execute()

    def publish(self, publication: Publication) -> None:
        self.fast.pipeline(publication)

    def wait_for_gradient(self, timeout_s: float) -> Reply:
        """The oldest gradient message, waiting up to `timeout_s` for one; None when none came."""
        reply = self.fast.command("BRPOP", self.keys.grads, f"{timeout_s:g}")
        return None if reply is None else reply[1]

    def publish_and_take(self, publication: Publication, count: int) -> list:
        """Publishes (an empty publication: nothing), and takes up to `count` queued gradients, oldest first,
        in the same round trip."""
        return self.fast.pipeline(publication + [("RPOP", self.keys.grads, str(count))])[-1] or []

    def take_queued(self, count: int) -> list:
        """Up to `count` queued gradients, oldest first, without waiting."""
        return self.fast.command("RPOP", self.keys.grads, str(count)) or []

    def queued(self) -> int:
        """How many gradients wait in the shard's list."""
        return int(self.fast.command("LLEN", self.keys.grads))  # where the gradients live: maybe not the run's Redis

    def reconnect(self) -> None:
        self.fast.reconnect()

    def write_report(self, report: dict, store: str | None = None) -> None:
        """The shard's babysitting numbers, where telemetry reads them; with `store`, the URL of the Redis of
        its own that holds its gradients and weights (`ddq.transport.shard_stores`), in the same round trip."""
        if store is None:
            self.client.set(self.keys.metrics, json.dumps(report))
            return
        with self.client.pipeline(transaction=False) as pipe:
            pipe.set(self.keys.store, store)
            pipe.set(self.keys.metrics, json.dumps(report))
            pipe.execute()

    def save_snapshot(self, state: snapshots.ShardState, path: Path | None) -> None:
        snapshots.save(self.client, self.keys.snapshot, path, state, self.layout, self.bounds)

    def newest_snapshot(self, path: Path | None) -> snapshots.ShardState | None:
        return snapshots.load_newest(self.client, self.keys.snapshot, path, self.layout, self.bounds)
