"""Where a run's parts listen (pure logic; the address toward the master is replaced by a fixed one)."""

import pytest

from ddq.core.settings import build_config
from ddq.modes.launch import spark_driver
from ddq.spark import placement as placement_module
from ddq.spark.context import executor_wait
from ddq.spark.placement import LOOPBACK, placement

TOWARD_MASTER = "198.18.74.1"


@pytest.fixture(autouse=True)
def fixed_route(monkeypatch):
    monkeypatch.setattr(placement_module, "address_toward", lambda master: TOWARD_MASTER)


def place(submitted: bool = False, **settings):
    return placement(build_config({"env": "CartPole-v1", **settings}), submitted)


def test_a_local_master_keeps_everything_on_this_host():
    assert place() == placement_module.Placement(False, None, LOOPBACK, LOOPBACK, False)


def test_a_cluster_master_serves_the_private_redis_toward_it_and_ships_ddq():
    assert place(spark_master="spark://m:7077") == placement_module.Placement(
        True, TOWARD_MASTER, TOWARD_MASTER, TOWARD_MASTER, True)


def test_a_cluster_master_with_its_own_redis_still_advertises_the_driver_toward_the_master():
    got = place(spark_master="spark://m:7077", redis_url="redis://r:6379/0")
    assert (got.listen, got.advertise, got.bind, got.ship) == (None, TOWARD_MASTER, TOWARD_MASTER, True)


def test_listen_names_the_address_and_all_addresses_only_when_asked():
    got = place(spark_master="spark://m:7077", listen="0.0.0.0")
    assert (got.listen, got.advertise, got.bind) == ("0.0.0.0", TOWARD_MASTER, "0.0.0.0")
    got = place(listen="127.0.0.2")  # a local master, and a Redis for other hosts all the same
    assert (got.cluster, got.listen, got.advertise, got.bind, got.ship) == (False, "127.0.0.2", "127.0.0.2",
                                                                             "127.0.0.2", False)
    got = place(submitted=True, listen="198.18.74.9")  # spark-submit ships ddq itself (--py-files)
    assert (got.cluster, got.advertise, got.ship) == (True, "198.18.74.9", False)


def test_a_clusters_tasks_wait_for_a_slot_per_worker_and_a_local_masters_need_not():
    assert executor_wait("local[2,4]", 2, 1) == {}
    assert executor_wait("spark://h0:7077", 3, 2) == {"spark.scheduler.minRegisteredResourcesRatio": "1.0",
                                                      "spark.cores.max": "6"}
    assert executor_wait("yarn", 3, 1) == {"spark.scheduler.minRegisteredResourcesRatio": "1.0"}


def test_a_kubernetes_master_names_its_api_server_as_spark_reads_it():
    from ddq.config.masters import kubernetes_address

    assert kubernetes_address("k8s://10.0.0.1:6443") == ("10.0.0.1", 6443)  # no scheme: https
    assert kubernetes_address("k8s://https://api.example") == ("api.example", 443)
    assert kubernetes_address("k8s://http://127.0.0.1") == ("127.0.0.1", 80)
    assert kubernetes_address("k8s://https://h:port") is None and kubernetes_address("k8s://") is None
    assert kubernetes_address("k8s://https://[::1") is None  # (urlsplit's ValueError)


def test_the_driver_takes_the_route_toward_the_host_a_master_names():
    """A standalone cluster's first master, a Kubernetes API server (its URL's https was once read as the
    host), and none for YARN, whose URL names none."""
    from ddq.config.masters import master_host
    from ddq.spark.placement import address_toward

    assert master_host("spark://10.0.0.5:7077,10.0.0.6:7077") == "10.0.0.5"
    assert master_host("spark://[::1]:7077") == "::1"
    assert master_host("k8s://https://api.example:6443") == "api.example"
    assert master_host("yarn") is None and master_host("local[2]") is None
    assert address_toward("k8s://https://127.0.0.1:6443") == address_toward("spark://127.0.0.1:7077")  # this host's


@pytest.mark.parametrize("master, toward, warned", [
    ("yarn", "127.0.1.1", True),  # this host's name, as Debian's /etc/hosts resolves it
    ("k8s://https://127.0.0.1:6443", "127.0.0.1", True),  # kind's or minikube's API server: no pod reaches it
    ("yarn", TOWARD_MASTER, False),
    ("spark://127.0.0.1:7077", "127.0.0.1", False),  # a standalone master on this host: its workers are too
    ("local[2]", "127.0.0.1", False),
])
def test_a_yarn_or_kubernetes_run_told_a_loopback_address_is_warned_before_it_starts(monkeypatch, master, toward,
                                                                                     warned):
    monkeypatch.setattr(placement_module, "address_toward", lambda _: toward)
    config = build_config({"env": "CartPole-v1", "mode": "downpour", "spark_master": master})
    note = placement_module.unreachable_note(config)
    assert (note is not None) == warned, note
    if warned:
        assert note.startswith(f"--spark-master {master}: this host's address toward it is {toward}, a loopback")
        assert "give --listen ADDRESS" in note
    named = build_config({"env": "CartPole-v1", "mode": "downpour", "spark_master": master, "listen": "10.0.0.5"})
    assert placement_module.unreachable_note(named) is None  # an address named: the operator's choice


def test_the_loopback_warning_says_what_applies_and_never_stops_a_run(monkeypatch):
    def warned(**settings):
        return placement_module.unreachable_note(build_config({"env": "CartPole-v1", "mode": "downpour",
                                                               "spark_master": "yarn", **settings}))

    monkeypatch.setattr(placement_module, "address_toward", lambda _: "127.0.1.1")
    assert "(--listen 0.0.0.0 listens everywhere, but executors are told this address)" in warned(listen="0.0.0.0")
    assert "will not reach Spark's driver;" in warned(redis_url="redis://redis.example:6379/0")  # theirs: by its URL

    def unresolved(_master):
        raise OSError("[Errno -2] Name or service not known")  # this host's own name resolves to nothing

    monkeypatch.setattr(placement_module, "address_toward", unresolved)
    assert warned() is None  # the run's start says why, as before


@pytest.mark.parametrize("given, used", [
    (None, "local[2,4]"), ("local", "local[1,4]"), ("local[3]", "local[3,4]"), ("local[*]", "local[*,4]"),
    ("local[2,7]", "local[2,7]"), ("spark://m:7077", "spark://m:7077"),
])
def test_a_local_master_of_ones_own_retries_a_failed_task_as_the_default_does(given, used):
    """Spark's local mode retries a task only when its URL says how often; every master tries one 4 times."""
    config = build_config({"env": "CartPole-v1", "mode": "downpour", "workers": 2,
                           **({"spark_master": given} if given else {})})
    assert spark_driver(config, submitted=False).master == used


def test_a_local_masters_task_slots_are_its_threads():
    from ddq.config.cores import usable_cores
    from ddq.config.masters import local_slots

    assert [local_slots(master) for master in ("local", "local[3]", "local[2, 4]", "local[0]")] == [1, 3, 2, 0]
    assert local_slots("local[*]") == usable_cores() and local_slots("spark://m:7077") is None
