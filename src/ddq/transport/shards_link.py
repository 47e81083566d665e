"""A worker's keys of every shard of a run, as named operations over the hot-path connection: the
headers of the published weights (or targets), a request for a shard's message, a gradient pushed to every
shard at once, the shards' backlog. The parameter client (`ddq.param_server.client`) reads the replies."""

from __future__ import annotations

from typing import Literal, cast

from ddq.transport.control import is_stop
from ddq.transport.keys import RunKeys
from ddq.transport.resp import RespConnection
from ddq.transport.wire import HEADER

Published = Literal["weights", "target"]  # what a shard publishes: its slice of the weights, or of the target


class ShardsLink:
    """The keys of `shards` shards of `run`, through one connection."""

    def __init__(self, conn: RespConnection, run: str, shards: int):
        self.conn, self.run_keys = conn, RunKeys(run)
        self.keys = [self.run_keys.shard(k) for k in range(shards)]

    def heads(self, kinds: list[Published]) -> list[bytes | None]:
        """The header of every shard's published message of each kind (kind by kind, shard by shard), in
        one round trip; None where a shard published none."""
        return self.conn.pipeline([("GETRANGE", getattr(keys, kind), "0", str(HEADER.size - 1))
                                   for kind in kinds for keys in self.keys])

    def where(self, kind: Published, shard: int) -> str:
        """Where shard `shard` publishes `kind`, for a person to read."""
        return str(getattr(self.keys[shard], kind))

    def request(self, kind: Published, shard: int) -> None:
        """Asks for shard `shard`'s whole message of `kind`; its reply is read from the connection."""
        self.conn.send("GET", getattr(self.keys[shard], kind))

    def push(self, messages: list[tuple]) -> list[int]:
        """Queues one gradient message per shard (shard k's at k) and counts the push, as one transaction (a
        link cut mid-write applies all of it or none); each shard's queue length after it."""
        commands = [("LPUSH", keys.grads, message) for keys, message in zip(self.keys, messages)]
        done = self.conn.pipeline([("MULTI",), *commands, ("INCR", self.run_keys.pushes), ("EXEC",)])[-1]
        return cast(list, done)[:-1]  # EXEC's replies: each list's length, then the count

    def backlog(self) -> tuple[list[int], bool]:
        """(each shard's queue length, whether the run is stopping), in one round trip."""
        *lengths, control = self.conn.pipeline([("LLEN", keys.grads) for keys in self.keys]
                                               + [("GET", self.run_keys.control)])
        return lengths, is_stop(control)

    def subscribe_applied(self) -> None:
        """Subscribes the connection to every shard's announcements of applied versions (one reply each)."""
        for keys in self.keys:
            self.conn.command("SUBSCRIBE", keys.applied)
