"""One run's shared state in Redis as named operations, for the driver, Celery, the dashboard and the
workers: its info, counters, the workers' rows, the weights owners' reports, the append-only series
(episodes, progress points, evaluations), the latest Snake replay. What the rows and reports mean (merges,
silent workers) is `ddq.services.telemetry`'s; everything here is JSON in, raw JSON out.
"""

from __future__ import annotations

import json
from typing import cast

from ddq.transport.eval_points import PointReader
from ddq.transport.keys import RunKeys
from ddq.transport.redis_client import Connection
from ddq.transport.values import counter_value
from ddq.transport.wire import HEADER

MAX_DEPTH = 32  # ddq's own JSON nests a few levels; what nests deeper would cost its readers' recursion


def json_object(raw: bytes | str | None) -> dict | None:
    """`raw` parsed as a JSON object, or None for anything else (missing, malformed, another type, nested
    deeper than MAX_DEPTH)."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):  # (RecursionError: arrays nested thousands deep)
        return None
    return value if isinstance(value, dict) and _depth(value) <= MAX_DEPTH else None


def _depth(value: object) -> int:
    """How deep `value`'s lists and objects nest (1: none), counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children)
    return deepest


def runs_in(client: Connection) -> list[str]:
    """Ids of the ddq runs whose info this Redis holds."""
    return sorted(key.decode()[len("ddq:"):-len(":info")] for key in client.scan_iter("ddq:*:info"))


class ListCursor:
    """Reads an append-only Redis list of JSON objects from where it last stopped."""

    def __init__(self, client: Connection, key: str, batch: int = 5000):
        self.client, self.key, self.batch = client, key, batch
        self.position = 0
        self.malformed = 0

    def read_new(self) -> list[dict]:
        """Every entry appended since the last call, parsed; malformed entries are counted and skipped."""
        entries: list[dict] = []
        while True:
            raw = self.client.lrange(self.key, self.position, self.position + self.batch - 1)
            self.position += len(raw)
            for item in map(json_object, raw):
                if item is None:
                    self.malformed += 1
                else:
                    entries.append(item)
            if len(raw) < self.batch:
                if not raw and self.position > (length := int(self.client.llen(self.key))):
                    self.position = length  # the list came back shorter, from Redis' snapshot: read on from there
                return entries


class RunStore:
    """One run's keys, through a connection."""

    SERIES = ("episodes", "progress", "evaluations")

    def __init__(self, client: Connection, run: str):
        self.client, self.run, self.keys = client, run, RunKeys(run)

    # ---------------------------------------------------------------- the run's info
    def info(self) -> dict | None:
        return json_object(self.client.get(self.keys.info))

    def write_info(self, info: dict) -> None:
        self.client.set(self.keys.info, json.dumps(info))

    # ---------------------------------------------------------------- counters
    def env_steps(self) -> int:
        """Env steps played by all workers together."""
        return counter_value(self.client.get(self.keys.env_steps))

    def set_env_steps(self, env_steps: int) -> None:
        self.client.set(self.keys.env_steps, env_steps)

    def set_episode_count(self, episodes: int) -> None:
        self.client.set(self.keys.episode_count, episodes)

    def episode_count(self) -> int:
        """Training episodes ended by all workers together (a resumed run's earlier ones included)."""
        return counter_value(self.client.get(self.keys.episode_count))

    def add_env_steps(self, env_steps: int) -> int:
        """Counts `env_steps` more; returns the new total."""
        return int(self.client.incrby(self.keys.env_steps, env_steps))

    def counts_at_least(self, env_steps: int, episodes: int) -> int:
        """Raises the env step and episode counts to at least these (the driver's last reads), as a Redis
        that came back from its own snapshot, a second or two old, counts from it: the workers read their
        budgets here. Returns the env steps counted now. The difference is added, not set, so that what a
        worker counts meanwhile is kept."""
        steps, done = map(counter_value, self.client.mget([self.keys.env_steps, self.keys.episode_count]))
        if episodes > done:
            self.client.incrby(self.keys.episode_count, episodes - done)
        return self.add_env_steps(env_steps - steps) if env_steps > steps else steps

    def pushes(self) -> int:
        """Gradients pushed by all workers together, counted as each arrived."""
        return counter_value(self.client.get(self.keys.pushes))

    def trained_steps(self) -> int:
        """Actor-learner: the env steps the learner has trained on (0 before it wrote any)."""
        return counter_value(self.client.get(self.keys.trained_steps))

    def start_trained_steps(self, env_steps: int) -> None:
        """Actor-learner: the count a resumed run starts from, unless one was written."""
        self.client.set(self.keys.trained_steps, env_steps, nx=True)

    # ---------------------------------------------------------------- rows and reports
    def worker_rows(self) -> list[bytes]:
        """Every worker attempt's latest row, raw."""
        return cast(list[bytes], self.client.hvals(self.keys.workers))

    def shard_reports(self, shards: int) -> list[bytes | None]:
        """Each weights owner's latest report, raw (None where none was published)."""
        return cast(list, self.client.mget([self.keys.shard(k).metrics for k in range(shards)]))

    def forget_stores(self, shards: int) -> None:
        """Every shard's gradients and weights live in the run's Redis again (an earlier start's stores are
        gone with their shards)."""
        self.client.delete(*[self.keys.shard(k).store for k in range(shards)])

    def forget_shard_reports(self, shards: int) -> None:
        """The shards' reports go (an earlier start's: each shard reports anew once it serves)."""
        self.client.delete(*[self.keys.shard(k).metrics for k in range(shards)])

    def store_registrations(self, shards: int) -> list[bytes | None]:
        """What each shard registered as its store (`ddq.transport.shard_stores.store_url` reads it), raw."""
        return cast(list, self.client.mget([self.keys.shard(k).store for k in range(shards)]))

    def gradients_queued(self, shards: int) -> bool:
        """Whether any shard's gradient list holds something."""
        return any(self.shard_queue_length(k) for k in range(shards))

    def shard_queue_length(self, shard: int) -> int:
        """How many gradients wait in shard `shard`'s list (in this client's Redis: the run's, or the shard's
        own store)."""
        return int(self.client.llen(self.keys.shard(shard).grads))

    def weights_prefix(self, shard: int, count: int) -> tuple[bytes, bytes]:
        """Shard `shard`'s published weights message: its header, and the first `count` values' bytes."""
        key = self.keys.shard(shard).weights
        head = cast(bytes, self.client.getrange(key, 0, HEADER.size - 1))  # no decode_responses
        return head, cast(bytes, self.client.getrange(key, HEADER.size, HEADER.size + 4 * count - 1))

    # ---------------------------------------------------------------- series
    def cursor(self, series: str) -> ListCursor:
        """A reader of one of `SERIES` from its start."""
        assert series in self.SERIES, series
        return ListCursor(self.client, getattr(self.keys, series))

    def length(self, series: str) -> int:
        assert series in self.SERIES, series
        return int(self.client.llen(getattr(self.keys, series)))

    def append(self, series: str, entry: dict) -> None:
        assert series in self.SERIES, series
        self.client.rpush(getattr(self.keys, series), json.dumps(entry))

    def evaluation_points(self, layout: bytes, size: int) -> PointReader:
        """Actor-learner: a reader of the learner's weights at each eval_every mark, from the first."""
        return PointReader(self.client, self.keys.eval_points, layout, size)

    # ---------------------------------------------------------------- the latest Snake replay
    def write_replay(self, version: int, episode: dict) -> None:
        self.client.hset(self.keys.replay, mapping={"version": version, "episode": json.dumps(episode)})

    def replay_version(self) -> int | None:
        version = counter_value(self.client.hget(self.keys.replay, "version"), missing=-1)
        return version if version >= 0 else None

    def replay(self) -> dict | None:
        return json_object(self.client.hget(self.keys.replay, "episode"))
