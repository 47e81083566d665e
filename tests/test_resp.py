"""The hot-path Redis connection against a real redis-server: replies, buffer reuse, skipping, direct reads."""

import numpy as np
import pytest

from ddq.param_server.staleness import StalenessPolicy
from ddq.transport.keys import shard_bounds
from ddq.transport.redis_server import EmbeddedRedis
from ddq.transport.resp import Oversized, RespConnection, RespError
from ddq.transport.wire import WireError


@pytest.fixture(scope="module")
def url():
    with EmbeddedRedis() as server:
        yield server.url


def test_reply_kinds(url):
    conn = RespConnection(url, buffer_bytes=64)
    assert conn.command("PING") == "PONG"
    assert conn.command("SET", "k", b"v" * 1000) == "OK"  # larger than the buffer: it grows
    assert bytes(conn.command("GET", "k")) == b"v" * 1000
    assert conn.command("GET", "missing") is None
    assert conn.command("RPUSH", "list", "a", "b") == 2
    assert [bytes(x) for x in conn.command("LRANGE", "list", "0", "-1")] == [b"a", b"b"]
    with pytest.raises(RespError, match="WRONGTYPE"):
        conn.command("GET", "list")
    assert conn.command("PING") == "PONG"  # still in step after an error


def test_pipeline_replies_stay_valid_while_the_buffer_grows(url):
    conn = RespConnection(url, buffer_bytes=1024)
    values = [np.full(50_000 * (i + 1), i, np.float32) for i in range(3)]
    conn.pipeline([("SET", f"big{i}", memoryview(v)) for i, v in enumerate(values)])
    replies = conn.pipeline([("GET", f"big{i}") for i in range(3)])
    for reply, value in zip(replies, values):
        assert np.array_equal(np.frombuffer(reply, np.float32), value)


def test_oversized_values_are_skipped_without_disturbing_their_neighbours(url):
    conn = RespConnection(url, max_bulk=10_000)
    conn.command("DEL", "queue")
    conn.command("RPUSH", "queue", b"a" * 5000, b"b" * 20_000_00, b"c" * 5000, b"d" * 30_000)
    batch = conn.command("LRANGE", "queue", "0", "-1")
    assert bytes(batch[0]) == b"a" * 5000 and bytes(batch[2]) == b"c" * 5000
    assert batch[1] == Oversized(2_000_000) and batch[3] == Oversized(30_000)
    assert conn.command("PING") == "PONG"


def test_read_bulk_into_places_the_body_and_survives_a_refusal(url):
    conn = RespConnection(url, buffer_bytes=128)
    body = np.arange(10_000, dtype=np.float32)
    conn.command("SET", "msg", (b"HEAD", memoryview(body)))  # an argument sent in two pieces
    dest = np.zeros(10_000, np.float32)
    conn.send("GET", "msg")
    assert conn.read_bulk_into(4, lambda head, size: memoryview(dest) if bytes(head) == b"HEAD" else None)
    assert np.array_equal(dest, body)

    def refuse(head, size):
        raise WireError("bad_header", "no")
    conn.send("GET", "msg")
    with pytest.raises(WireError):
        conn.read_bulk_into(4, refuse)
    assert conn.command("PING") == "PONG"  # the refused body was read past
    conn.send("GET", "nothing")
    assert conn.read_bulk_into(4, refuse) is False


def test_staleness_policy():
    keep_all, limited, scaled = StalenessPolicy(), StalenessPolicy(max_staleness=2), StalenessPolicy(scaling=True)
    assert keep_all.judge(10, 0) == (10, 1.0)
    assert limited.judge(10, 8) == (2, 1.0) and limited.judge(10, 7) == (3, None)
    assert scaled.judge(5, 5) == (0, 1.0) and scaled.judge(5, 4) == (1, 1.0) and scaled.judge(5, 1) == (4, 0.25)
    with pytest.raises(WireError, match="future_version"):
        keep_all.judge(3, 4)


def test_shard_bounds_cover_the_vector_evenly():
    bounds = shard_bounds(10, 3)
    assert bounds[0][0] == 0 and bounds[-1][1] == 10
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    assert max(e - s for s, e in bounds) - min(e - s for s, e in bounds) <= 1
    with pytest.raises(ValueError):
        shard_bounds(2, 3)
