"""The parameter server against a real redis-server: exact updates, shards, staleness, snapshots, bad input."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
import torch

from conftest import run_ddq
from ddq.core.agent import model_parameters
from ddq.core.optimizers import FlatOptimizer
from ddq.core.settings import build_config
from ddq.param_server.client import ParameterClient
from ddq.param_server.launch import start_shards, stop_servers, wait_until_serving
from ddq.transport.keys import RunKeys, readable_names
from ddq.transport.redis_server import EmbeddedRedis
from ddq.transport.wire import GRADIENT, HEADER, Header, encode, layout_bytes


@pytest.fixture(scope="module")
def redis_server():
    server = EmbeddedRedis()
    yield server
    server.stop()
    assert server.process.poll() is not None


def wait_for(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


class Harness:
    """A run's shards started as real `ddq param-server` processes, and a client for them."""

    def __init__(self, redis_server: EmbeddedRedis, folder: Path, **settings):
        self.run = uuid.uuid4().hex[:8]
        self.url = redis_server.url
        self.config = build_config({"env": "CartPole-v1", "algo": "dqn", "hidden": [32, 32], "run_dir": str(folder / "run"),
                                    **settings})
        self.admin = redis.Redis.from_url(self.url)
        self.folder = folder
        self.processes = self.start()
        self.flat = model_parameters(self.config.agent)
        self.client = ParameterClient(self.url, self.run, self.flat, shards=self.config.distributed.server.shards)
        self.client.pull()

    def start(self):
        processes = start_shards(self.config, self.url, self.run, self.folder)
        wait_until_serving(self.admin, self.run, self.config.distributed.server.shards, processes)
        return processes

    def metrics(self, shard: int = 0) -> dict:
        raw = self.admin.get(RunKeys(self.run).shard(shard).metrics)
        return json.loads(raw) if raw else {}

    def wait_version(self, version: int) -> None:
        def reached() -> bool:
            self.client.pull()
            return self.client.versions == [version] * len(self.client.versions)
        wait_for(reached, what=f"version {version}")

    def stop(self) -> list[int | None]:
        self.client.close()
        codes = stop_servers(self.admin, self.run, self.processes)
        self.admin.delete(RunKeys(self.run).control)
        return codes


@contextlib.contextmanager
def harness(redis_server, folder, **settings):
    h = Harness(redis_server, folder, **settings)
    try:
        yield h
    finally:
        if any(p.poll() is None for p in h.processes):
            assert h.stop() == [0] * len(h.processes)  # the shards finish by themselves when told


def gradients(size: int, count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(size).astype(np.float32) for _ in range(count)]


# ------------------------------------------------------------------ Redis itself
def test_embedded_redis_is_private_and_stops(tmp_path):
    with EmbeddedRedis() as server:
        client = server.client()
        assert server.url.startswith("unix://") and client.config_get("port")["port"] == "0"
        assert oct(os.stat(server.socket_path).st_mode & 0o777) == "0o700"
        pid, folder = server.pid, server.folder
    assert server.process.poll() is not None and not folder.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_tcp_redis_binds_loopback_and_urls_carry_passwords():
    with EmbeddedRedis(tcp=True) as server:
        admin = server.client()
        assert admin.config_get("bind")["bind"] == "127.0.0.1" and server.port > 0
        admin.config_set("requirepass", "s3cret")
        url = f"redis://:s3cret@127.0.0.1:{server.port}/0"
        assert redis.Redis.from_url(url).ping()
        from ddq.transport.resp import RespConnection, RespError
        assert RespConnection(url).command("PING") == "PONG"
        with pytest.raises(RespError, match="WRONGPASS|invalid"):
            RespConnection(f"redis://:wrong@127.0.0.1:{server.port}/0")


def test_embedded_redis_dies_with_the_process_that_started_it(tmp_path):
    code = ("from ddq.transport.redis_server import EmbeddedRedis; import time; r = EmbeddedRedis(); "
            "print(r.pid, r.folder, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pid, folder = parent.stdout.readline().split()
    redis_pid = int(pid)
    os.kill(redis_pid, 0)
    parent.send_signal(signal.SIGKILL)
    parent.wait()

    def gone():
        try:
            with open(f"/proc/{redis_pid}/stat") as stat:
                return stat.read().split()[2] == "Z"  # a zombie has exited; only its entry is left
        except FileNotFoundError:
            return True
    wait_for(gone, 10, "the orphaned redis-server to exit")
    assert not (Path(folder) / "redis.sock").exists()  # it shut down, removing its socket
    shutil.rmtree(folder)  # its log: what the killed parent would have removed, and this test made


# ------------------------------------------------------------------ updates
@pytest.mark.parametrize("shards, optimizer", [(1, "rmsprop"), (2, "adagrad"), (3, "sgd")])
def test_applied_updates_equal_the_optimizer_bit_for_bit(redis_server, tmp_path, shards, optimizer):
    optim = {"optimizer": optimizer, "lr": 0.01, "momentum": 0.9 if optimizer == "sgd" else 0.0,
             "weight_decay": 1e-4}
    with harness(redis_server, tmp_path, optim=optim, target_update=3, server={"shards": shards}) as h:
        local = h.flat.data.clone()
        reference = FlatOptimizer(h.config.agent.optim, h.flat.size)
        for i, grad in enumerate(gradients(h.flat.size, 7)):
            h.client.push(grad, samples=32, loss=1.0)
            reference.step(local, torch.from_numpy(grad))
            h.wait_version(i + 1)
            if i + 1 == 6:
                after_six = local.clone()
        assert torch.equal(h.flat.data, local)
        h.client.target = model_parameters(h.config.agent)
        h.client.pull_target()  # refreshed every 3 updates: it holds the weights after update 6
        assert h.client.target_versions == [6] * shards and torch.equal(h.client.target.data, after_six)
        metrics = wait_for(lambda: (m := h.metrics(shards - 1))["applied"] == 7 and m, what="metrics")
        assert metrics["staleness"] == {"0": 7} and metrics["rejected_total"] == 0


def test_staleness_limit_drops_and_scaling_shrinks_old_gradients(redis_server, tmp_path):
    optim = {"optimizer": "sgd", "lr": 0.1}
    with harness(redis_server, tmp_path, optim=optim, server={"max_staleness": 2, "staleness_scaling": True}) as h:
        local = h.flat.data.clone()
        reference = FlatOptimizer(h.config.agent.optim, h.flat.size)
        grads = gradients(h.flat.size, 4, seed=1)
        for grad in grads:  # all computed from version 0: staleness 0, 1, 2 and 3 when applied
            h.client.push(grad)
        wait_for(lambda: h.metrics().get("dropped_stale") == 1 and h.metrics()["applied"] == 3, what="four handled")
        for grad, scale in zip(grads[:3], (1.0, 1.0, 0.5)):
            reference.step(local, torch.from_numpy(grad), lr_scale=scale)
        h.wait_version(3)
        assert torch.equal(h.flat.data, local)
        assert h.metrics()["staleness"] == {"0": 1, "1": 1, "2": 1, "3": 1}


# ------------------------------------------------------------------ bad input
def malformed_messages(layout: bytes, size: int, version: int, rng: np.random.Generator) -> list[tuple[str, bytes]]:
    good = encode(Header(GRADIENT, layout, version, size), np.zeros(size, np.float32))
    nan = bytearray(good)
    at = HEADER.size + 4 * int(rng.integers(size))
    nan[at:at + 4] = np.float32(rng.choice([np.nan, np.inf, -np.inf])).tobytes()
    dtype = bytearray(good)
    dtype[5] = 2
    return [
        ("truncated", good[:int(rng.integers(0, HEADER.size))]),
        ("bad_header", b"\x80\x04" + rng.bytes(int(rng.integers(HEADER.size, 400)))),  # a pickle's opening bytes
        ("size", good[:-4 * int(rng.integers(1, 100))]),
        ("size", good + rng.bytes(4)),
        ("layout", encode(Header(GRADIENT, b"XXXXXXXX", version, size), np.zeros(size, np.float32))),
        ("non_finite", bytes(nan)),
        ("dtype", bytes(dtype)),
        ("future_version", encode(Header(GRADIENT, layout, version + 1000, size), np.zeros(size, np.float32))),
        ("kind", encode(Header(2, layout, version, size), np.zeros(size, np.float32))),
    ]


def test_a_gradient_sent_twice_is_applied_once(redis_server, tmp_path):
    """As when a push is sent again after a lost reply, or a queue comes back from Redis' persistence."""
    with harness(redis_server, tmp_path) as h:
        key = RunKeys(h.run).shard(0)
        grad = gradients(h.flat.size, 1)[0]
        numbered = [encode(Header(GRADIENT, h.client.layout, 0, h.flat.size, sender=5, sequence=n), grad)
                    for n in (1, 1, 2, 1)]
        for message in numbered:
            h.admin.lpush(key.grads, message)
        wait_for(lambda: h.metrics()["rejected_total"] == 2, 30, "both repeats refused")
        assert h.metrics()["rejected"] == {"repeat": 2} and h.metrics()["applied"] == 2


FUZZ_SECONDS = float(os.environ.get("DDQ_FUZZ_SECONDS", "3"))  # docs/benchmarks.md runs 60


def test_thousands_of_malformed_messages_change_nothing(redis_server, tmp_path):
    with harness(redis_server, tmp_path, optim={"optimizer": "adam", "lr": 0.01}) as h:
        key = RunKeys(h.run).shard(0)
        weights_before = h.admin.get(key.weights)
        rng = np.random.default_rng(7)
        sent: dict[str, int] = {}
        deadline = time.monotonic() + FUZZ_SECONDS
        while time.monotonic() < deadline or sum(sent.values()) < 3000:
            raw = h.admin.pipeline(transaction=False)
            for _ in range(50):
                for reason, message in malformed_messages(h.client.layout, h.flat.size, 0, rng):
                    raw.lpush(key.grads, message)
                    sent[reason] = sent.get(reason, 0) + 1
            raw.lpush(key.grads, b"\0" * (8 * h.flat.size + 1024))  # over the size limit: never even buffered
            sent["oversized"] = sent.get("oversized", 0) + 1
            raw.execute()
            while h.admin.llen(key.grads) > 2000:  # a bounded queue: the fuzzer waits for the server
                time.sleep(0.01)
        total = sum(sent.values())
        wait_for(lambda: h.metrics()["rejected_total"] == total, 60, "every message rejected")
        assert h.metrics()["rejected"] == sent
        assert h.admin.get(key.weights) == weights_before  # bit-identical
        assert all(p.poll() is None for p in h.processes)
        h.client.push(gradients(h.flat.size, 1)[0])  # and it still serves
        h.wait_version(1)
        log = (tmp_path / "param-server-0.log").read_text()
        assert log.count("rejected a message (non_finite)") == 1  # one clear line per reason


# ------------------------------------------------------------------ snapshots, metrics, shutdown
def test_restart_resumes_from_the_newest_snapshot(redis_server, tmp_path):
    with harness(redis_server, tmp_path, optim={"optimizer": "rmsprop", "lr": 0.01},
                 server={"snapshot_every": 5}) as h:
        for i, grad in enumerate(gradients(h.flat.size, 7)):
            h.client.push(grad)
            h.wait_version(i + 1)
        at_five = h.admin.hget(RunKeys(h.run).shard(0).snapshot, "version")
        assert at_five == b"5" and (tmp_path / "run" / "param-server-shard0.pt").exists()
        h.processes[0].send_signal(signal.SIGKILL)  # a crash: only the snapshot at 5 survives
        h.processes[0].wait()
        h.processes = h.start()
        resumed = ParameterClient(h.url, h.run, model_parameters(h.config.agent))
        resumed.pull()
        assert resumed.versions == [5]
        h.client.close()
        h.client = resumed
        assert h.stop() == [0]  # a clean stop snapshots the final state
        saved = torch.load(tmp_path / "run" / "param-server-shard0.pt", weights_only=True)
        assert saved["version"] == 5 and torch.equal(saved["weights"], resumed.flat.data)


def queue_numbered(h: Harness, queued: int) -> tuple[Any, dict[int, bytes]]:
    """Shard 0's keys, and messages 1-5 of one gradient from worker 0's incarnation 9, the first `queued`
    of them put in its queue as a client's pushes would be."""
    key, grad = RunKeys(h.run).shard(0), gradients(h.flat.size, 1)[0]
    numbered = {n: encode(Header(GRADIENT, h.client.layout, 0, h.flat.size, sender=9, sequence=n), grad)
                for n in range(1, 6)}
    for n in range(1, queued + 1):
        h.admin.lpush(key.grads, numbered[n])
    return key, numbered


def test_a_gradient_its_snapshot_holds_is_refused_after_a_shard_restart(redis_server, tmp_path):
    """Exactly once across a crash: the shard's snapshot keeps which gradients its weights hold, so a
    restarted shard refuses one of them delivered again (as a queue restored from an older RDB would) and
    applies one that came after the snapshot and was rolled back with it."""
    with harness(redis_server, tmp_path, server={"snapshot_every": 3}) as h:
        key, numbered = queue_numbered(h, 4)
        wait_for(lambda: h.metrics().get("applied") == 4, 30, "four applied")
        assert h.admin.hget(key.snapshot, "version") == b"3"  # the snapshot holds 1, 2 and 3
        h.processes[0].send_signal(signal.SIGKILL)  # a crash: update 4 is lost with the process
        h.processes[0].wait()
        h.processes = h.start()
        h.admin.lpush(key.grads, numbered[2])  # held by the snapshot: a repeat
        h.admin.lpush(key.grads, numbered[4])  # rolled back with the crash: new to the restored shard
        wait_for(lambda: h.metrics().get("rejected_total") == 1 and h.metrics().get("applied") == 1, 30,
                 "the repeat refused, the lost one applied")
        assert h.metrics()["rejected"] == {"repeat": 1}
        h.wait_version(4)
        # the exact account went on from the snapshot's: 4 sent, each applied once, 1 refused, none lost
        assert h.metrics()["senders"] == [{"sender": 0, "incarnation": 9, "sent": 4, "applied": 4, "dropped": 0,
                                           "repeats": 1, "lost": 0}]


def test_a_gradient_delivered_again_after_redis_restarts_from_its_snapshot_is_refused_and_counted(tmp_path):
    """Exactly once across Redis' own restart: the run's Redis is SIGKILLed by PID and restarted from its RDB,
    which may hand back gradients the shard already applied; one is delivered again on purpose too. The shard
    (which kept running) refuses each, counts it in its account, and its version moves only for new ones."""
    server = EmbeddedRedis(persist=tmp_path / "redis")
    try:
        with harness(server, tmp_path) as h:
            key, numbered = queue_numbered(h, 4)
            h.wait_version(4)
            os.kill(server.pid, signal.SIGKILL)
            server.process.wait()
            server.restart()  # from its newest RDB: older than the shard's version 4
            h.admin = redis.Redis.from_url(h.url)
            wait_for(lambda: h.metrics().get("version") == 4 and h.metrics().get("time", 0) > time.time() - 1, 60,
                     "the shard back at version 4")
            h.admin.lpush(key.grads, numbered[2])  # applied before Redis died: a repeat
            h.admin.lpush(key.grads, numbered[5])
            h.client.close()
            h.client = ParameterClient(h.url, h.run, model_parameters(h.config.agent))
            h.wait_version(5)
            account = wait_for(lambda: (m := h.metrics()).get("version") == 5 and m["senders"], 30, "its account")
            [row] = account
            assert (row["sent"], row["applied"], row["dropped"], row["lost"]) == (5, 5, 0, 0)
            assert row["repeats"] >= 1 and row["repeats"] == h.metrics()["rejected"]["repeat"]
    finally:
        server.stop()


def test_metrics_hold_the_babysitting_numbers(redis_server, tmp_path):
    with harness(redis_server, tmp_path, optim={"optimizer": "sgd", "lr": 0.001}) as h:
        for i, grad in enumerate(gradients(h.flat.size, 20)):
            h.client.push(grad * 0.01)
            h.wait_version(i + 1)
        metrics = wait_for(lambda: (m := h.metrics())["applied"] == 20 and m, what="metrics")
        assert metrics["updates_per_s"] >= 0 and metrics["learning_rate"] == 0.001
        names = [layer["name"] for layer in metrics["layers"]]
        assert names == readable_names(h.flat.layout)  # every parameter, named by layer (fc1.weight, ...)
        for layer in metrics["layers"]:
            assert layer["weight_norm"] > 0 and layer["grad_norm"] > 0
            assert 0 < layer["update_ratio"] < 1  # ||lr * g|| / ||w|| for a small SGD step


def test_shards_exit_when_the_driver_dies(redis_server, tmp_path):
    code = (f"import sys, time; from pathlib import Path; from ddq.core.settings import build_config; "
            f"import redis; from ddq.param_server.launch import start_shards, wait_until_serving; "
            f"c = build_config({{'env': 'CartPole-v1', 'server': {{'shards': 2}}}}); "
            f"ps = start_shards(c, {redis_server.url!r}, 'orphans', Path({str(tmp_path)!r})); "
            f"wait_until_serving(redis.Redis.from_url({redis_server.url!r}), 'orphans', 2, ps); "  # alive, serving
            f"print(' '.join(str(p.pid) for p in ps), flush=True); time.sleep(120)")
    driver = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in driver.stdout.readline().split()]
    assert len(pids) == 2, "the shards never served"  # (the child exits, printing nothing, if one dies first)
    driver.send_signal(signal.SIGKILL)
    driver.wait()

    def all_gone():
        alive = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    alive.append(stat.read().split()[2] != "Z")
            except FileNotFoundError:
                alive.append(False)
        return not any(alive)
    wait_for(all_gone, 30, "orphaned shards to exit")


def test_param_server_refuses_to_start_without_redis():
    result = run_ddq("param-server", "--env", "CartPole-v1")
    assert result.returncode == 2 and "needs a Redis URL" in result.stderr, result.stderr
    assert "--redis-url, or $DDQ_REDIS_URL" in result.stderr and len(result.stderr.splitlines()) == 1


def test_bench_ps_prints_a_row_per_size_and_shard_count():
    result = run_ddq("bench", "ps", "--sizes", "16", "--shards", "1", "2", "--repeats", "3", "--seconds", "0.5")
    assert result.returncode == 0, result.stderr
    rows = [line.split("|") for line in result.stdout.splitlines() if line.startswith("| 16x16")]
    assert [row[2].strip() for row in rows] == ["1", "2"]
    for row in rows:
        pull, applied, fresh = float(row[5]), float(row[6]), float(row[7])
        assert row[3].strip() == "228,132" and 0 < pull and 0 < applied < fresh and row[8].strip() == "5"
        assert float(row[9].replace(",", "")) > 0 and float(row[10].replace(",", "")) > 0


def test_nothing_under_src_unpickles():
    """`grep -rn pickle src/` finds nothing, and every torch.load is restricted to tensors."""
    sources = {path: path.read_text() for path in (Path(__file__).parents[1] / "src").rglob("*.py")}
    assert [str(path) for path, text in sources.items() if "pickle" in text.lower()] == []
    loads = [line for text in sources.values() for line in text.splitlines()
             if "torch.load(" in line and "`" not in line]  # calls, not their mentions in docstrings
    assert loads and all("weights_only=True" in line for line in loads)


def test_a_push_waiting_on_a_full_backlog_gives_up_when_the_run_stops(redis_server):
    """Shards stop draining when the run stops; a worker waiting for its backlog must not wait forever."""
    from ddq.transport.wire import WEIGHTS

    flat = model_parameters(build_config({"env": "CartPole-v1", "hidden": [8]}).agent)
    run, admin = f"stuck-{uuid.uuid4().hex[:6]}", redis_server.client()
    keys = RunKeys(run)
    admin.set(keys.shard(0).weights, encode(Header(WEIGHTS, layout_bytes(flat.layout_hash()), 0, flat.size),
                                            flat.data.numpy()))
    client = ParameterClient(redis_server.url, run, flat, max_backlog=1)  # no shard serves this run
    try:
        client.pull()
        grad = np.zeros(flat.size, np.float32)
        client.push(grad)  # the queue holds 1: within the backlog
        waiting = threading.Thread(target=client.push, args=(grad,), daemon=True)
        waiting.start()  # 2 > 1: waits for a shard that never drains
        wait_for(lambda: client.waits > 0, 60, "the push to begin waiting")  # a condition, not a time
        assert waiting.is_alive()
        admin.set(keys.control, "stop")
        waiting.join(timeout=5)
        assert not waiting.is_alive(), "the push still waits after the run stopped"
        assert admin.llen(keys.shard(0).grads) == 2
    finally:
        client.close()


def test_layers_are_named_for_a_person_not_by_sequential_index():
    nature = [("0.weight", (32, 4, 8, 8)), ("0.bias", (32,)), ("2.weight", (64, 32, 4, 4)), ("2.bias", (64,)),
              ("5.weight", (512, 3136)), ("5.bias", (512,)), ("7.weight", (4, 512)), ("7.bias", (4,))]
    assert readable_names(nature) == ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                      "fc3.weight", "fc3.bias", "fc4.weight", "fc4.bias"]
    assert readable_names([("ip1.weight", (2, 3)), ("ip1.bias", (2,))]) == ["ip1.weight", "ip1.bias"]  # a prototxt's
    dueling = [("1.weight", (16, 1, 3, 3)), ("4.weight", (128, 1152)), ("6.value.weight", (1, 128)),
               ("6.advantage.bias", (4,))]
    assert readable_names(dueling) == ["conv1.weight", "fc2.weight", "fc3.value.weight", "fc3.advantage.bias"]
    layer_norm = [("0.weight", (64, 4)), ("0.bias", (64,)), ("1.weight", (64,)), ("1.bias", (64,)), ("3.weight", (2, 64))]
    assert readable_names(layer_norm) == ["fc1.weight", "fc1.bias", "norm2.weight", "norm2.bias", "fc3.weight"]


SHARD_ON_A_FULL_DISK = """
import resource, signal, sys
from ddq.cli import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))  # the log fits, the snapshot (about 1 MB) does not
sys.exit(main(sys.argv[1:]))
"""


def test_a_shard_whose_snapshot_cannot_be_written_warns_once_and_goes_on(redis_server, tmp_path):
    """A full disk under a shard's snapshot file: torch.save's failed write (RuntimeError) used to end the
    shard, restarted three times until the run ended. Now one warning, the weights keep moving, and the
    shard stops cleanly when told."""
    from ddq.config import write_settings

    run = uuid.uuid4().hex[:8]
    config = build_config({"env": "CartPole-v1", "algo": "dqn", "hidden": [256, 256], "run_dir": str(tmp_path / "run"),
                           "server": {"snapshot_every": 1}})
    admin = redis.Redis.from_url(redis_server.url)
    log = tmp_path / "shard.log"
    shard = subprocess.Popen([sys.executable, "-c", SHARD_ON_A_FULL_DISK, "param-server", "--settings",
                              str(write_settings(config, tmp_path / "config.json")), "--run", run, "--shard", "0"],
                             env=dict(os.environ, DDQ_REDIS_URL=redis_server.url), stdout=log.open("w"),
                             stderr=subprocess.STDOUT)
    try:
        wait_until_serving(admin, run, 1, [shard])
        client = ParameterClient(redis_server.url, run, model_parameters(config.agent))
        client.pull()
        for gradient in gradients(client.flat.size, 3):
            client.push(gradient)
        wait_for(lambda: client.pull() or client.versions == [3], what="version 3")
        client.close()
        assert stop_servers(admin, run, [shard]) == [0], log.read_text()[-3000:]
    finally:
        if shard.poll() is None:
            shard.kill()
            shard.wait()
    text = log.read_text()
    assert text.count("could not save its snapshot") == 1 and "Traceback" not in text, text[-3000:]
    assert "without its final snapshot" in text


def test_an_overlapped_client_sends_every_gradient_once_merging_what_waits(redis_server, tmp_path):
    """A downpour worker's client: gradients handed over while a push is on the wire join the next push (as
    their mean); the shard applies exactly the pushes sent, each once; `sync` takes the weights the thread
    fetched, with the versions they came with."""
    from ddq.core.agent import env_spec, make_learner
    from ddq.param_server.overlap import OverlappedClient

    with harness(redis_server, tmp_path) as h:
        spec = env_spec(h.config.agent)
        learner = make_learner(h.config.agent, spec.frame_shape, spec.num_actions, torch.device("cpu"))
        client = OverlappedClient(learner, lambda weights, target: ParameterClient(h.url, h.run, weights, 1,
                                                                                    target=target))
        with pytest.raises(RuntimeError, match="sync the weights before pushing"):
            client.push(np.zeros(learner.flat.size, np.float32))
        assert client.sync() and client.version == 0  # the first fetch, on the caller's thread
        assert torch.equal(learner.flat.data, h.flat.data)
        for gradient in gradients(learner.flat.size, 300):
            client.push(gradient, samples=32)
        client.close()
        assert 1 <= client.pushes < 300  # handed over faster than round trips: merged
        h.wait_version(client.pushes)  # every push applied, once: the shard's version is their count


@pytest.mark.parametrize("max_lag, push_every, fetch_every", [(0, 1, 1), (1, 1, 1), (0, 2, 2)])
def test_an_overlapped_client_computes_on_weights_at_most_max_lag_gradients_behind_its_own(
        redis_server, tmp_path, max_lag, push_every, fetch_every):
    """Stale Synchronous Parallel's bound on the overlap: after `sync`, the weights a worker holds were fetched
    after all but at most `max_lag` of its own gradients were pushed (0: every one, as without overlap, though
    a shard may not have applied the newest yet; at least push_every * fetch_every - 1,
    which a merged push and a skipped fetch need, so those settings never wait on each other for ever)."""
    from ddq.core.agent import env_spec, make_learner
    from ddq.param_server.overlap import OverlappedClient

    with harness(redis_server, tmp_path) as h:
        spec = env_spec(h.config.agent)
        learner = make_learner(h.config.agent, spec.frame_shape, spec.num_actions, torch.device("cpu"))
        client = OverlappedClient(learner, lambda weights, target: ParameterClient(h.url, h.run, weights, 1,
                                                                                    target=target),
                                  push_every=push_every, fetch_every=fetch_every, max_lag=max_lag)
        client.sync()
        allowed = max(max_lag, push_every * fetch_every - 1)
        for handed, gradient in enumerate(gradients(learner.flat.size, 40), start=1):
            client.push(gradient, samples=32)
            client.sync()
            assert client.held_covers >= handed - allowed  # pushed, then the weights fetched after
            if allowed == 0:  # each gradient pushed on its own before the next was computed
                assert client.pushes == handed
        client.close()
        h.wait_version(client.pushes)
        assert client.waits > 0  # it did wait: its pushes are slower than handing a gradient over
