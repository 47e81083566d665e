"""A worker's keys of every shard of a run, as named operations over the hot-path connections: the
headers of the published weights (or targets), a request for a shard's message, a gradient pushed to every
shard at once, the shards' backlog. The parameter client (`ddq.param_server.client`) reads the replies.

A shard's keys live in the run's Redis or in a store of the shard's own (`ddq.transport.shard_stores`): each
operation goes to every store at once, one round trip for all of them, with one transaction in each."""

from __future__ import annotations

from typing import Literal, cast

from ddq.transport.control import is_stop
from ddq.transport.keys import RunKeys
from ddq.transport.resp import Reply, RespConnection
from ddq.transport.wire import HEADER

Published = Literal["weights", "target"]  # what a shard publishes: its slice of the weights, or of the target


class ShardsLink:
    """The keys of `shards` shards of `run`: shard k's at `stores[k]` (default: all at `conn`, the run's
    Redis, which also holds the run's control key)."""

    def __init__(self, conn: RespConnection, run: str, shards: int, stores: list[RespConnection] | None = None):
        self.conn, self.run_keys = conn, RunKeys(run)
        self.keys = [self.run_keys.shard(k) for k in range(shards)]
        self.use(stores or [conn] * shards)

    def use(self, stores: list[RespConnection]) -> None:
        """Shard k's keys are at `stores[k]` from now on."""
        self.stores = stores
        self.connections = list({id(c): c for c in [self.conn, *stores]}.values())  # each once, the run's first
        # each connection's shards, worked out here once rather than on every push
        self.groups = [(c, [k for k, store in enumerate(stores) if store is c]) for c in self.connections]

    def _round_trip(self, commands: list[tuple[RespConnection, tuple]]) -> list[Reply]:
        """Sends each command on its connection, every one before any reply is read: one round trip to all
        stores at once. The replies, in the commands' order."""
        for conn in self.connections:
            conn.compact()
        for conn, args in commands:
            conn.send(*args)
        return [conn.read_reply() for conn, _ in commands]  # each connection's replies come in its own order

    def heads(self, kinds: list[Published]) -> list[bytes | None]:
        """The header of every shard's published message of each kind (kind by kind, shard by shard), in
        one round trip; None where a shard published none."""
        return self._round_trip([(self.stores[k], ("GETRANGE", getattr(keys, kind), "0", str(HEADER.size - 1)))
                                 for kind in kinds for k, keys in enumerate(self.keys)])

    def where(self, kind: Published, shard: int) -> str:
        """Where shard `shard` publishes `kind`, for a person to read."""
        return str(getattr(self.keys[shard], kind))

    def request(self, kind: Published, shard: int) -> None:
        """Asks for shard `shard`'s whole message of `kind`; its reply is read from `self.stores[shard]`."""
        self.stores[shard].send("GET", getattr(self.keys[shard], kind))

    def push(self, messages: list[tuple]) -> list[int]:
        """Queues one gradient message per shard (shard k's at k), as one transaction in each store (a link
        cut mid-write applies all of it there or none), and counts the push in the run's Redis: in the
        transaction of the shards it holds, so the count bounds what arrived there; alone, in the same round
        trip, when every shard has a store of its own. Each shard's queue length after it."""
        commands: list[tuple[RespConnection, tuple]] = []
        execs: list[tuple[list[int], int]] = []  # each transaction's shards, and where its EXEC's reply comes
        for conn, shards in self.groups:
            count = [(conn, ("INCR", self.run_keys.pushes))] if conn is self.conn else []
            if shards:
                commands += [(conn, ("MULTI",)), *[(conn, ("LPUSH", self.keys[k].grads, messages[k]))
                                                   for k in shards], *count, (conn, ("EXEC",))]
                execs.append((shards, len(commands) - 1))
            else:
                commands += count
        replies, lengths = self._round_trip(commands), [0] * len(self.keys)
        for shards, at in execs:  # EXEC's replies: each list's length (then the count)
            for shard, length in zip(shards, cast(list, replies[at])):
                lengths[shard] = length
        return lengths

    def backlog(self) -> tuple[list[int], bool]:
        """(each shard's queue length, whether the run is stopping), in one round trip."""
        queues = [(self.stores[k], ("LLEN", keys.grads)) for k, keys in enumerate(self.keys)]
        *lengths, control = self._round_trip([*queues, (self.conn, ("GET", self.run_keys.control))])
        return cast(list[int], lengths), is_stop(control)

    def subscribe_applied(self) -> None:
        """Subscribes the run's connection to every shard's announcements of applied versions (one reply
        each): shards that live in the run's Redis (`ddq bench ps`'s)."""
        for keys in self.keys:
            self.conn.command("SUBSCRIBE", keys.applied)
