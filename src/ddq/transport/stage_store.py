"""torch.distributed's key-value store for a barrier stage's process group, kept in the run's Redis: where the
stage's tasks tell each other the addresses of their gloo (or NCCL) links.

Why not Spark's `BarrierTaskContext.allGather` and a `TCPStore` on worker 0: Spark polls a barrier call's
answer once a second (`Thread.sleep(1000)`), so each stage spent a second meeting (1.00-2.00 s a call in a bare
pyspark script) before its first update; and a `TCPStore` listens with no authentication. The run's Redis is
already where every task reports, behind the run's password (and TLS where it leaves the host). The stage
still forms the Spark way: Spark starts its tasks together and gives each its rank.

Each start of a stage (the driver starts a failed one again) has keys of its own (`RunKeys.stage_store`),
which expire a day after they were written. A key asked for waits until some task writes it, at most
`timeout_s` (a task gone fails the stage).
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import torch.distributed as dist

from ddq.transport.redis_client import Connection

KEY_LIFETIME_S = 24 * 3600  # long past any stage's forming, short enough that Redis forgets old stages' keys
FIRST_POLL_S, LAST_POLL_S = 0.001, 0.05  # a waiting read asks again after 1 ms, then 2, 4, ... at most 50
T = TypeVar("T")


class StageStore(dist.Store):
    """The c10d store's operations that gloo's and NCCL's rendezvous use (set, get, add, check, wait,
    delete_key), each on a Redis key under `prefix`. torch calls them from its own threads: one connection,
    one call at a time."""

    def __init__(self, redis: Connection, prefix: str, timeout_s: float):
        super().__init__()
        self.redis, self.prefix, self.timeout_s = redis, prefix, timeout_s
        self.lock = threading.Lock()

    def _key(self, key: str) -> str:
        return f"{self.prefix}:{key}"

    def _call(self, command: Callable[[], T]) -> T:
        with self.lock:
            return command()

    def set(self, key: str, value: bytes | str) -> None:
        data = value.encode() if isinstance(value, str) else bytes(value)
        self._call(lambda: self.redis.set(self._key(key), data, ex=KEY_LIFETIME_S))

    def get(self, key: str) -> bytes:
        self.wait([key])
        value = self._call(lambda: self.redis.get(self._key(key)))
        if not isinstance(value, bytes):  # None: deleted since (ddq's clients never decode replies)
            raise LookupError(f"the stage's key {key!r} was deleted as it was read")
        return value

    def add(self, key: str, amount: int) -> int:
        def increment() -> int:
            total = int(self.redis.incrby(self._key(key), amount))
            self.redis.expire(self._key(key), KEY_LIFETIME_S)
            return total

        return self._call(increment)

    def check(self, keys: list[str]) -> bool:
        names = [self._key(key) for key in keys]
        return not names or self._call(lambda: int(self.redis.exists(*names))) == len(names)

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        """Returns once every one of `keys` exists; raises TimeoutError after `timeout` (the store's own when
        None), naming the first that does not."""
        limit = self.timeout_s if timeout is None else timeout.total_seconds()
        deadline, pause = time.monotonic() + limit, FIRST_POLL_S
        while not self.check(keys):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no task of the stage wrote {keys} within {limit:g} s (a task gone?)")
            time.sleep(pause)
            pause = min(2 * pause, LAST_POLL_S)

    def delete_key(self, key: str) -> bool:
        return bool(self._call(lambda: self.redis.delete(self._key(key))))

    def close(self) -> None:
        """Closes the connection (the process group has its peers' addresses by now)."""
        self.redis.close()
