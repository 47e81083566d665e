"""`ddq bench ps`: parameter-server latency and throughput by model size, beside the original's.

For the DeepQ network at each input size, against a real redis-server and a
real `ddq param-server` process: the time to pull fresh weights into a
network, the time from pushing a gradient until the server has applied and
published it, and the updates per second the server sustains while one or
two client processes push (each pulling the weights it moved before every
push, as a worker does). Beside them: the original's server latency, and
this machine's memory-bandwidth bound, an in-place NumPy RMSprop step on a
vector of the same size.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ddq.config import TrainConfig
from ddq.core.agent import model_parameters
from ddq.core.settings import build_config
from ddq.param_server.client import ParameterClient
from ddq.param_server.launch import start_shards, stop_servers, wait_until_serving
from ddq.transport.redis_client import connect as connect_redis
from ddq.transport.redis_client import server_version
from ddq.transport.redis_server import EmbeddedRedis
from ddq.transport.resp import RespConnection
from ddq.transport.shards_link import ShardsLink
from ddq.transport.wire import read_header

ORIGINAL_LATENCY_MS = {16: 5, 32: 15, 64: 40, 128: 116}  # results_server-latency.txt / cost-vs-image-size


@dataclass
class PsRow:
    size: int
    shards: int
    params: int
    pull_ms: float
    push_applied_ms: float
    push_fresh_ms: float
    updates_per_s: dict[int, float]  # clients -> applied updates per second
    numpy_rmsprop_ms: float


def bench_config(size: int, shards: int = 1) -> TrainConfig:
    """A run whose network is DeepQ at size x size with 4 frames and 4 actions (Snake with walls)."""
    return build_config({"env": "ddq/Snake-v0", "snake_size": size - 2, "frame_stack": 4, "model": "deepq",
                         "target_update": 10**9, "progress": False, "optim": {"optimizer": "rmsprop", "lr": 1e-6},
                         "server": {"snapshot_every": 10**9, "shards": shards}})


def _server_version(conn: RespConnection, run: str) -> int:
    """Updates shard 0 has applied (every shard applies every gradient)."""
    head = ShardsLink(conn, run, 1).heads(["weights"])[0]
    return read_header(head or b"", whole=False).version


def _median_ms(times: list[float]) -> float:
    return statistics.median(times) * 1e3


def _latencies(client: ParameterClient, run: str, repeats: int, redis_url: str) -> tuple[float, float, float]:
    """Median ms of a full pull; of a push until every shard announced it applied the gradient; and
    of a push until the new weights were pulled back (what a synchronous worker waits)."""
    pulls, applied, fresh = [], [], []
    shards = len(client.bounds)
    announcements = RespConnection(redis_url)
    ShardsLink(announcements, run, shards).subscribe_applied()
    grad = np.full(client.flat.size, 1e-3, dtype=np.float32)
    for _ in range(repeats):
        client.versions = [-2] * shards  # force a full fetch
        start = time.perf_counter()
        client.pull()
        pulls.append(time.perf_counter() - start)
    for _ in range(repeats):
        wanted = [v + 1 for v in client.versions]
        start = time.perf_counter()
        client.push(grad)
        for _ in range(shards):
            announcements.read_reply()  # blocks until a shard applied it
        applied.append(time.perf_counter() - start)
        while client.versions != wanted:
            client.pull()
        fresh.append(time.perf_counter() - start)
    announcements.close()
    return _median_ms(pulls), _median_ms(applied), _median_ms(fresh)


def _pushing_client(url: str, run: str, size: int, shards: int, worker: int, ready, go, stop) -> None:
    flat = model_parameters(bench_config(size, shards).agent)
    client = ParameterClient(url, run, flat, shards=shards, worker=worker)
    grad = np.full(flat.size, 1e-3, dtype=np.float32)
    client.pull()
    ready.release()
    go.wait()
    while not stop.is_set():
        client.pull()
        client.push(grad)
    client.close()


def _throughput(url: str, run: str, size: int, shards: int, clients: int, seconds: float,
                conn: RespConnection) -> float:
    context = multiprocessing.get_context("spawn")
    ready, go, stop = context.Semaphore(0), context.Event(), context.Event()
    workers = [context.Process(target=_pushing_client, args=(url, run, size, shards, w, ready, go, stop), daemon=True)
               for w in range(clients)]
    for process in workers:
        process.start()
    for _ in workers:
        ready.acquire()
    go.set()
    time.sleep(0.5)  # let the queue fill before the window opens
    start_version, start = _server_version(conn, run), time.perf_counter()
    time.sleep(seconds)
    applied = _server_version(conn, run) - start_version
    rate = applied / (time.perf_counter() - start)
    stop.set()
    for process in workers:
        process.join(30)
    return rate


def numpy_rmsprop_ms(size: int, repeats: int = 20) -> float:
    """One in-place RMSprop step in NumPy with preallocated buffers: what memory bandwidth allows."""
    w, g = np.zeros(size, np.float32), np.full(size, 1e-3, np.float32)
    square, scratch = np.zeros(size, np.float32), np.empty(size, np.float32)
    times = []
    for _ in range(repeats + 2):
        start = time.perf_counter()
        np.multiply(square, 0.99, out=square)
        np.multiply(g, g, out=scratch)
        scratch *= 0.01
        square += scratch
        np.sqrt(square, out=scratch)
        scratch += 1e-8
        np.divide(g, scratch, out=scratch)
        scratch *= -1e-3
        w += scratch
        times.append(time.perf_counter() - start)
    return _median_ms(times[2:])


def measure(size: int, redis_url: str, folder: Path, repeats: int, seconds: float, shards: int = 1) -> PsRow:
    config = bench_config(size, shards)
    run = f"bench-ps-{size}-{shards}"
    processes = start_shards(config, redis_url, run, folder / run)
    admin = connect_redis(redis_url)
    try:
        wait_until_serving(admin, run, shards, processes)
        flat = model_parameters(config.agent)
        client = ParameterClient(redis_url, run, flat, shards=shards)
        latencies = _latencies(client, run, repeats, redis_url)
        rates = {n: _throughput(redis_url, run, size, shards, n, seconds, client.conn) for n in (1, 2)}
        client.close()
    finally:
        stop_servers(admin, run, processes)
        admin.close()
    return PsRow(size, shards, flat.size, *latencies, rates, numpy_rmsprop_ms(flat.size))


def run_bench(sizes: list[int], shard_counts: list[int], repeats: int = 30, seconds: float = 3.0,
              redis_url: str | None = None) -> tuple[list[PsRow], str]:
    """The rows, and which redis-server answered."""
    with tempfile.TemporaryDirectory(prefix="ddq-bench-ps-") as tmp:
        with contextlib.ExitStack() as stack:
            url = redis_url or stack.enter_context(EmbeddedRedis()).url
            version = server_version(url)
            rows = [measure(size, url, Path(tmp), repeats, seconds, shards)
                    for size in sizes for shards in shard_counts]
    return rows, f"redis-server {version}"


def table(rows: list[PsRow], server: str) -> str:
    lines = ["| input | shards | parameters | message MB | pull ms | push → applied ms | push → new weights "
             "pulled ms | original latency ms | updates/s, 1 client | updates/s, 2 clients | NumPy RMSprop step ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        original = ORIGINAL_LATENCY_MS.get(r.size)
        lines.append(f"| {r.size}x{r.size} | {r.shards} | {r.params:,} | {4 * r.params / 1e6:.2f} | {r.pull_ms:.2f} | "
                     f"{r.push_applied_ms:.2f} | {r.push_fresh_ms:.2f} | {original if original else '—'} | "
                     f"{r.updates_per_s[1]:,.0f} | "
                     f"{r.updates_per_s[2]:,.0f} | {r.numpy_rmsprop_ms:.2f} |")
    return (f"Parameter server (RMSprop) on {server}, over a unix socket unless --redis-url said otherwise; "
            "latencies are medians\n\n" + "\n".join(lines))
