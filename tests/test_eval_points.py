"""Actor-learner's evaluation points: the learner's weights at each eval_every mark, through real Redis to the
driver's background evaluations, which hand results back in order, and how far behind them the results come."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import redis
import torch
from torch import nn

from ddq.bookkeeping import play_evaluation
from ddq.config import config_of
from ddq.models import FlatParameters
from ddq.modes.background_eval import BackgroundEvaluations, ThreadTimes, idle_share
from ddq.modes.evaluators import LAG_WARNING_S, LagClock
from ddq.transport.eval_points import EvaluationPoint, PointReader, publish_point
from ddq.transport.redis_server import EmbeddedRedis
from ddq.transport.wire import WEIGHTS, Header, encode, layout_bytes


@pytest.fixture(scope="module")
def client():
    with EmbeddedRedis() as server:
        yield redis.Redis.from_url(server.url)


def _network(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_points_arrive_in_order_with_their_counts_and_are_deleted_once_read(client):
    flat = FlatParameters(_network(0))
    layout = layout_bytes(flat.layout_hash())
    client.set("acted", 5300)
    for version, trained in ((40, 5003), (90, 10_010)):
        message = encode(Header(WEIGHTS, layout, version, flat.size), flat.data.numpy() + version)
        publish_point(client, "points", message, trained, "acted")
    reader = PointReader(client, "points", layout, flat.size)
    points = reader.read_new()
    assert [(p.version, p.trained_steps, p.env_steps) for p in points] == [(40, 5003, 5300), (90, 10_010, 10_010)]
    np.testing.assert_array_equal(points[1].weights, flat.data.numpy() + 90)
    assert reader.read_new() == [] and client.xlen("points") == 0
    # Weights of another model are refused with a line that says where they came from; the next point still counts.
    other = encode(Header(WEIGHTS, b"\x01" * 8, 1, flat.size), flat.data.numpy())
    publish_point(client, "points", other, 15_000, "acted")
    publish_point(client, "points", encode(Header(WEIGHTS, layout, 140, flat.size), flat.data.numpy()), 15_020, "acted")
    assert [p.version for p in reader.read_new()] == [140] and client.xlen("points") == 0
    assert len(reader.refused) == 1 and "evaluation point in points is malformed" in reader.refused[0]
    assert "layout" in reader.refused[0]
    # learners that played what they trained on (data-parallel's workers) keep their own count, not Redis's
    client.set("acted", 30_000)
    publish_point(client, "points", encode(Header(WEIGHTS, layout, 160, flat.size), flat.data.numpy()), 20_008, None)
    assert [(p.trained_steps, p.env_steps) for p in reader.read_new()] == [(20_008, 20_008)]


def test_a_blocked_read_returns_the_point_published_while_it_waits(client):
    """The driver's reader waits on the stream instead of polling it: a point published during the wait comes
    back from that read."""
    flat = FlatParameters(_network(0))
    layout = layout_bytes(flat.layout_hash())
    reader = PointReader(client, "waited", layout, flat.size)
    assert reader.read_new(block_ms=50) == []  # nothing there: the wait ends empty
    message = encode(Header(WEIGHTS, layout, 7, flat.size), flat.data.numpy())
    publisher = threading.Timer(0.2, publish_point, (redis.Redis(connection_pool=client.connection_pool), "waited",
                                                     message, 5000, None))
    publisher.start()
    try:
        points = reader.read_new(block_ms=60_000)  # returns with the point, not after the minute
    finally:
        publisher.join()
    assert [(p.version, p.env_steps) for p in points] == [(7, 5000)]


def _points(flat: FlatParameters, count: int) -> list[EvaluationPoint]:
    """Points 1000, 2000, ... env steps in, each with weights of its own."""
    return [EvaluationPoint(k, 1000 * (k + 1), 1000 * (k + 1),
                            np.random.default_rng(k).normal(size=flat.size).astype(np.float32)) for k in range(count)]


def _played_as_the_run_would(point: EvaluationPoint, config, index: int) -> list[float]:
    network = _network(2)
    FlatParameters(network).assign(point.weights)
    return play_evaluation(network, config, index, torch.device("cpu")).returns


def test_a_point_that_waits_for_a_busy_thread_gives_way_to_a_newer_one():
    """One core, evaluations that keep it busy: one thread. Points that come while it plays wait, the newest
    in place of the older (skipped, counted), so the next result is about the newest weights; results come
    in order, each played with its point's weights and the episodes of its point's index in the run (skipped
    points counted: a point plays the same episodes whichever were skipped)."""
    config = config_of(env="CartPole-v1", eval_episodes=5, seed=3)
    network = _network(1)
    points = _points(FlatParameters(network), 4)
    inside, leave = threading.Event(), threading.Event()  # the thread holds on in the result's callback

    def hold() -> None:
        inside.set()
        assert leave.wait(60)

    background = BackgroundEvaluations(network, config, torch.device("cpu"), first_index=7, cores=1, on_result=hold)
    try:
        background.submit(points[0])
        assert inside.wait(120)  # the first is played, and its thread busy
        for point in points[1:]:
            background.submit(point)
        assert background.skipped == 2 and background.pending() == 2  # the first's result, and the last point
        inside.clear()
        leave.set()
        assert inside.wait(120)
        results = background.finished()
    finally:
        background.close()
    assert [finished.point.trained_steps for finished in results] == [1000, 4000] and background.pending() == 0
    assert len(background.threads) == 1
    assert [finished.result.returns for finished in results] == [
        _played_as_the_run_would(points[0], config, 7), _played_as_the_run_would(points[3], config, 10)]


def test_evaluations_that_wait_on_their_simulator_get_a_thread_for_each_point():
    """On a simulator slept 2 ms a step, an evaluation spends most of its time off the core: points that
    come while one plays each get a thread of their own (up to `max_threads`), none skipped."""
    config = config_of(env="CartPole-v1", eval_episodes=2, seed=3, step_latency_ms=2.0)
    network = _network(1)
    points = _points(FlatParameters(network), 4)
    woken = threading.Semaphore(0)
    background = BackgroundEvaluations(network, config, torch.device("cpu"), max_threads=3, cores=1,
                                       on_result=woken.release)
    try:
        background.submit(points[0])
        assert woken.acquire(timeout=120)  # the first result shows it: more threads than cores from now
        for point in points[1:]:
            background.submit(point)
        results = background.finished()
        while len(results) < 4:
            assert woken.acquire(timeout=120)
            results += background.finished()
    finally:
        background.close()
    assert [finished.point.trained_steps for finished in results] == [1000, 2000, 3000, 4000]
    assert background.skipped == 0 and len(background.threads) == 3


def test_a_threads_idle_share_is_its_time_neither_on_a_core_nor_queued_for_one():
    """Read from the kernel's scheduler statistics: a thread that sleeps is idle, one that computes is not,
    however busy the machine's cores are (time queued for one counts as busy)."""
    shares = {}

    def measure(name: str, work) -> None:
        before, started = ThreadTimes.now(), time.monotonic()
        work()
        shares[name] = idle_share(before, ThreadTimes.now(), time.monotonic() - started)

    def spin() -> None:
        until = time.thread_time() + 0.2
        while time.thread_time() < until:
            pass

    for name, work in (("sleeps", lambda: time.sleep(0.2)), ("computes", spin)):
        thread = threading.Thread(target=measure, args=(name, work))
        thread.start()
        thread.join()
    assert shares["sleeps"] > 0.9 and shares["computes"] < 0.1, shares
    assert idle_share(None, ThreadTimes(1.0, 0.0), 1.0) == 0.0  # the kernel did not say: taken as busy


def test_the_lag_clock_measures_each_result_from_its_points_arrival_and_warns_once():
    """The longest wait is kept, and only the first result LAG_WARNING_S or more behind its point gets a line
    (a driver whose host is busy learns of its target that much late)."""
    clock = LagClock()
    assert clock.answered(0.0, 3.0) is None and clock.lag_s == 3.0  # the first point, 3 s after it arrived
    line = clock.answered(1.0, 1.0 + LAG_WARNING_S + 4.0)
    assert line is not None and f"came {LAG_WARNING_S + 4.0:.0f} s after" in line and "--eval-every" in line
    assert clock.answered(2.0, 2.0 + LAG_WARNING_S + 9.0) is None  # said once
    assert clock.lag_s == LAG_WARNING_S + 9.0
    clock.abandoned(None, 100.0)  # nothing was left unanswered
    assert clock.lag_s == LAG_WARNING_S + 9.0
    clock.abandoned(30.0, 30.0 + LAG_WARNING_S + 20.0)  # the run ended first: it had waited this long at least
    assert clock.lag_s == LAG_WARNING_S + 20.0
