"""Where a shard's gradients and weights live (`ddq.transport.shard_stores`): a store's URL read back from the
run's Redis is checked before anything connects to it, and gets the run's password from the reader's own URL."""

from __future__ import annotations

import secrets

import pytest

from conftest import run_ddq
from ddq.config import settings_document
from ddq.core.settings import build_config
from ddq.transport.credentials import split_password
from ddq.transport.redis_server import EmbeddedRedis
from ddq.transport.resp import RespConnection
from ddq.transport.run_store import RunStore
from ddq.transport.shard_stores import checked_store_url, registered_url, store_keys, store_urls, with_password
from ddq.transport.shards_link import ShardsLink
from ddq.transport.wire import HEADER

RUN_URL = "unix:///tmp/r.sock?db=0&username=ddq&password=s3cret"
STORE = "rediss://ddq:$DDQ_REDIS_PASSWORD@10.0.0.2:7000/0?ssl_ca_data=-----BEGIN%20CERTIFICATE-----"


def test_a_shard_registers_its_store_without_the_password():
    assert registered_url("rediss://ddq:s3cret@10.0.0.2:7000/0?ssl_ca_data=X") == \
        "rediss://ddq:$DDQ_REDIS_PASSWORD@10.0.0.2:7000/0?ssl_ca_data=X"


def test_each_shard_reads_its_own_store_or_the_runs():
    urls = store_urls([None, STORE.encode()], "r", RUN_URL)
    assert urls[0] == RUN_URL
    assert urls[1] == STORE.replace("$DDQ_REDIS_PASSWORD", "s3cret")
    assert store_keys("r", 2) == ["ddq:r:ps:0:store", "ddq:r:ps:1:store"]


@pytest.mark.parametrize("url, refused", [
    ("unix:///tmp/other.sock", "no rediss://HOST:PORT"),  # no host, no port
    ("redis://10.0.0.2:7000/0", "no rediss://HOST:PORT"),  # the run's password in the clear on a network
    ("rediss://10.0.0.2/0", "no rediss://HOST:PORT"),
    ("rediss://ddq:other@10.0.0.2:7000/0", "a password of its own"),  # a password the reader would not send
    ("rediss://ddq:$DDQ_REDIS_PASSWORD@$DDQ_REDIS_PASSWORD:7000/0", "in another place"),  # to DNS
    ("rediss://$DDQ_REDIS_PASSWORD:$DDQ_REDIS_PASSWORD@h:7000/0", "in another place"),
    ("rediss://10.0.0.2:7000/$DDQ_REDIS_PASSWORD", "no database number"),  # into an error line
    ("rediss://10.0.0.2:7000/0?ssl_ca_certs=/etc/shadow", "asks for ssl_ca_certs"),  # files of the reader's host
    ("rediss://10.0.0.2:7000/0?ssl_cert_reqs=none", "asks for ssl_cert_reqs"),  # a store that proves nothing
])
def test_a_store_url_read_from_redis_is_refused_unless_it_is_one_a_shard_registers(url, refused):
    with pytest.raises(ValueError, match=refused):
        checked_store_url(url, "ddq:r:ps:1:store")


def test_a_store_that_wants_the_password_needs_a_run_url_that_holds_one():
    with pytest.raises(ValueError, match="holds none"):
        with_password(STORE, "unix:///tmp/r.sock?db=0")


def test_a_push_reaches_each_shards_store_in_one_round_trip_and_is_counted_in_the_runs_redis():
    """The run's Redis holds shard 0, a TLS store of its own shard 1 (as `ddq param-server --listen` starts it),
    both with the run's password; then both shards in the store, the run's Redis holding only the count."""
    password = secrets.token_urlsafe(12)
    with EmbeddedRedis(listen="127.0.0.1", password=password) as run, \
            EmbeddedRedis(listen="127.0.0.1", password=password) as own:
        main = RespConnection(run.url)
        main.command("SET", "ddq:r:ps:1:store", registered_url(own.remote_url))
        urls = store_urls(main.command("MGET", *store_keys("r", 2)), "r", run.url)
        assert urls[0] == run.url and password in urls[1] and urls[1].startswith("rediss://")
        store = RespConnection(urls[1])
        mixed = ShardsLink(main, "r", 2, [main, store])
        assert mixed.push([(b"g0",), (b"g1",)]) == [1, 1]
        assert main.command("LRANGE", "ddq:r:ps:0:grads", "0", "-1") == [b"g0"]
        assert bytes(store.command("LRANGE", "ddq:r:ps:1:grads", "0", "-1")[0]) == b"g1"
        apart = ShardsLink(main, "r", 2, [store, store])
        assert apart.push([(b"h0",), (b"h1",)]) == [1, 2]
        assert [int(main.command("GET", "ddq:r:pushes")), store.command("EXISTS", "ddq:r:pushes")] == [2, 0]
        assert apart.backlog() == ([1, 2], False)
        main.command("SET", "ddq:r:control", "stop")
        assert apart.backlog() == ([1, 2], True)
        store.command("SET", "ddq:r:ps:1:weights", b"W" * HEADER.size + b"values")
        assert [bytes(h or b"") for h in apart.heads(["weights"])] == [b"", b"W" * HEADER.size]  # none published
        main.close()
        store.close()


@pytest.fixture(scope="module")
def run_redis():
    """A run's Redis serving other hosts (TLS, a password), holding run r's info as a driver writes it."""
    password = secrets.token_urlsafe(12)
    with EmbeddedRedis(listen="127.0.0.1", password=password) as server:
        config = build_config({"env": "CartPole-v1", "mode": "downpour", "shards": 2, "shard_hosts": "by-hand"})
        RunStore(server.client(), "r").write_info({"settings": settings_document(config)})
        yield server, password


@pytest.mark.parametrize("case, line", [
    ("wrong password", "the run's Redis refused this host's password: set DDQ_REDIS_PASSWORD to the one ddq train has"),
    ("no run there", "no Redis answers at rediss://***@127.0.0.1:1/0"),
    ("another run's CA", "the Redis at rediss://***@127.0.0.1:"),  # ... gave a TLS certificate this URL does not trust
    ("served already", "shard 0 of run r is served already, at 127.0.0.1:"),
    ("stopping", "run r is stopping or has stopped: a shard joins a run that trains"),
])
def test_a_shard_started_by_hand_that_cannot_join_says_why_in_one_line(run_redis, case, line):
    server, password = run_redis
    client = RunStore(server.client(), "r")
    url = split_password(server.remote_url)[0]
    env = {"DDQ_REDIS_PASSWORD": "wrong" if case == "wrong password" else password,
           "DDQ_REDIS_URL": url.replace(url.split("@")[1].split("/")[0], "127.0.0.1:1") if case == "no run there"
           else url}
    if case == "served already":  # a store that answers: the run's own Redis stands in for one
        client.client.set("ddq:r:ps:0:store", registered_url(server.remote_url))
    if case == "stopping":
        client.client.set("ddq:r:control", "stop")
    if case == "another run's CA":  # this run's address, the CA of another run's Redis
        with EmbeddedRedis(listen="127.0.0.1", password=password) as other:
            env["DDQ_REDIS_URL"] = url.split("?")[0] + "?" + split_password(other.remote_url)[0].split("?")[1]
    try:  # a process of its own, with a deadline: a shard that is not refused serves until the run stops
        done = run_ddq("param-server", "--run", "r", "--shard", "0", "--listen", "127.0.0.1", timeout=60, env=env)
    finally:
        client.client.delete("ddq:r:ps:0:store", "ddq:r:control")
    assert done.returncode == 2 and done.stderr.startswith(f"ddq: error: {line}"), done.stderr
    assert case != "another run's CA" or "certificate this URL does not trust" in done.stderr, done.stderr
    assert "BEGIN%20CERTIFICATE" not in done.stderr and len(done.stderr) < 400, done.stderr  # no CA's PEM
    assert len(done.stderr.splitlines()) == 1 and password not in done.stderr
