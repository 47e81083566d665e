"""Where a shard's gradients and weights live (`ddq.transport.shard_stores`): a store's URL read back from the
run's Redis is checked before anything connects to it, and gets the run's password from the reader's own URL."""

from __future__ import annotations

import pytest

from ddq.transport.shard_stores import checked_store_url, registered_url, store_keys, store_urls, with_password

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
    ("unix:///tmp/other.sock", "not a shard's store"),  # no host, no port
    ("redis://10.0.0.2:7000/0", "plain-TCP store on 10.0.0.2"),  # a password in the clear on a network
    ("rediss://10.0.0.2:7000/0?ssl_ca_certs=/etc/shadow", "asks for ssl_ca_certs"),  # files of the reader's host
    ("rediss://10.0.0.2:7000/0?ssl_cert_reqs=none", "asks for ssl_cert_reqs"),  # a store that proves nothing
    ("rediss://10.0.0.2/0", "not a shard's store"),
])
def test_a_store_url_read_from_redis_is_refused_unless_it_is_one_a_shard_registers(url, refused):
    with pytest.raises(ValueError, match=refused):
        checked_store_url(url, "ddq:r:ps:1:store")


def test_loopback_may_be_plain_tcp():
    assert checked_store_url("redis://127.0.0.1:7000/0", "k") == "redis://127.0.0.1:7000/0"


def test_a_store_that_wants_the_password_needs_a_run_url_that_holds_one():
    with pytest.raises(ValueError, match="holds none"):
        with_password(STORE, "unix:///tmp/r.sock?db=0")
