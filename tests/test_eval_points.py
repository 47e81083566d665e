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

from ddq.bookkeeping import EVAL_SEED_OFFSET, evaluation_seed, play_evaluation
from ddq.config import config_of
from ddq.models import FlatParameters
from ddq.modes.background_eval import BackgroundEvaluations, ThreadTimes, busy_seconds
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


def _played_as_the_run_would(point: EvaluationPoint, config) -> list[float]:
    """Its weights' evaluation at the env steps they were trained on, as serial training's at that mark."""
    network = _network(2)
    FlatParameters(network).assign(point.weights)
    return play_evaluation(network, config, evaluation_seed(config, point.trained_steps), torch.device("cpu")).returns


class Held:
    """An `on_result` that holds each evaluation's thread until let go: a thread kept busy on cue."""

    def __init__(self) -> None:
        self.inside, self.leave = threading.Semaphore(0), threading.Event()

    def __call__(self) -> None:
        self.inside.release()
        assert self.leave.wait(60)

    def entered(self) -> bool:
        return self.inside.acquire(timeout=120)


def test_points_that_wait_while_a_cpu_bound_evaluation_plays_give_way_to_the_newest():
    """Evaluations that keep a core busy play one at a time (Python's lock lets one thread compute; a second
    would slow the first). Points that come while one plays wait, the newest in place of the older
    (skipped, counted), so the next result is about the newest weights; results come in order, each played
    with its point's weights and its mark's episodes, whatever was skipped before it."""
    config = config_of(env="CartPole-v1", eval_episodes=200, seed=3, eval_every=1000)  # ~0.1 s on a core
    network = _network(1)
    points = _points(FlatParameters(network), 4)
    held = Held()
    background = BackgroundEvaluations(network, config, torch.device("cpu"), max_threads=3,
                                       on_result=held)
    try:
        background.submit(points[0])
        assert held.entered()  # the first is played, and its thread held
        for point in points[1:]:
            background.submit(point)
        assert background.limit == 1, (background.busy_s, background.played_s)  # the first kept its core busy
        assert background.skipped == 2 and background.pending() == 2  # the first's result, and the last point
        held.leave.set()
        assert held.entered()
        results = background.finished()
    finally:
        held.leave.set()
        background.close()
    assert [finished.point.trained_steps for finished in results] == [1000, 4000] and background.pending() == 0
    assert len(background.threads) == 1
    assert [finished.result.returns for finished in results] == [
        _played_as_the_run_would(points[0], config), _played_as_the_run_would(points[3], config)]
    assert [finished.result.seed for finished in results] == [evaluation_seed(config, 1000),
                                                              evaluation_seed(config, 4000)]


def test_an_evaluation_plays_the_episodes_of_its_mark_and_a_closing_one_those_of_the_next():
    """Seeds follow the eval_every mark the weights reached, not how many evaluations were played (which
    skipped points would shift): mark k plays set k-1 wherever past it its point was taken, and the
    evaluation that closes a run past its last mark plays the set of the mark it does not reach."""
    config = config_of(env="CartPole-v1", eval_every=1000, seed=3)

    def episode_set(steps: int, closing: bool = False) -> int:
        return (evaluation_seed(config, steps, closing) - 3) // EVAL_SEED_OFFSET - 1

    assert [episode_set(steps) for steps in (1000, 1999, 2000, 2003, 205_002)] == [0, 0, 1, 1, 204]
    assert [episode_set(steps, closing=True) for steps in (500, 2500, 4000, 4100)] == [0, 2, 4, 4]


def test_evaluations_that_wait_on_their_simulator_play_side_by_side():
    """On a simulator slept 20 ms a step, an evaluation spends most of its time off the core: points that
    come while one plays each get a thread of their own (up to `max_threads`), none skipped."""
    config = config_of(env="CartPole-v1", eval_episodes=2, seed=3, step_latency_ms=20.0, eval_every=1000)
    network = _network(1)
    points = _points(FlatParameters(network), 4)
    held = Held()
    background = BackgroundEvaluations(network, config, torch.device("cpu"), max_threads=3, on_result=held)
    try:
        background.submit(points[0])
        assert held.entered()  # the first result shows it waited: up to three play from now
        assert background.limit == 3, (background.busy_s, background.played_s)
        for point in points[1:]:
            background.submit(point)
        held.leave.set()
        results = background.finished()
        while len(results) < 4:
            assert held.entered()
            results += background.finished()
    finally:
        held.leave.set()
        background.close()
    assert [finished.point.trained_steps for finished in results] == [1000, 2000, 3000, 4000]
    assert background.skipped == 0 and len(background.threads) == 3


def test_a_mark_published_again_by_a_restarted_stage_is_evaluated_once():
    """A data-parallel stage started again can publish once more the mark its rank 0 had run ahead to: the
    second point of a mark (1,250 steps, mark 1 again) is dropped, not counted as skipped, and the next
    mark is evaluated as usual."""
    config = config_of(env="CartPole-v1", eval_episodes=2, seed=3, eval_every=1000)
    network = _network(1)
    first, second = _points(FlatParameters(network), 2)
    again = EvaluationPoint(7, 1250, 1250, second.weights)
    woken = threading.Semaphore(0)
    background = BackgroundEvaluations(network, config, torch.device("cpu"), on_result=woken.release)
    try:
        for point in (first, again, second):
            background.submit(point)
        results: list = []
        while len(results) < 2:
            assert woken.acquire(timeout=120)
            results += background.finished()
    finally:
        background.close()
    assert [finished.point.trained_steps for finished in results] == [1000, 2000]
    assert background.skipped == 0 and background.pending() == 0


def test_a_failed_evaluation_stops_the_others_and_is_kept_for_the_driver_to_raise():
    config = config_of(env="CartPole-v1", eval_episodes=2, seed=3, eval_every=1000)
    network = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))  # CartPole's observations have 4 values
    woken = threading.Semaphore(0)
    background = BackgroundEvaluations(network, config, torch.device("cpu"), on_result=woken.release)
    try:
        background.submit(_points(FlatParameters(network), 1)[0])
        assert woken.acquire(timeout=120)
        assert isinstance(background.failed, RuntimeError) and background.stopping and background.finished() == []
    finally:
        background.close()


@pytest.mark.skipif(ThreadTimes.now() is None, reason="this kernel keeps no scheduler statistics per thread")
def test_a_threads_busy_time_is_its_time_on_a_core_or_queued_for_one():
    """Read from the kernel's scheduler statistics: a thread that sleeps is not busy, one that computes is,
    however busy the machine's cores are (time queued for one counts)."""
    busy = {}

    def measure(name: str, work) -> None:
        before, started = ThreadTimes.now(), time.monotonic()
        work()
        busy[name] = busy_seconds(before, ThreadTimes.now()) / (time.monotonic() - started)

    def spin() -> None:
        until = time.thread_time() + 0.2
        while time.thread_time() < until:
            pass

    # (a second's sleep: what a loaded machine queues the thread for at its start and end is a small share)
    for name, work in (("sleeps", lambda: time.sleep(1.0)), ("computes", spin)):
        thread = threading.Thread(target=measure, args=(name, work))
        thread.start()
        thread.join()
    assert busy["sleeps"] < 0.1 and busy["computes"] > 0.5, busy
    assert busy_seconds(None, ThreadTimes(1.0, 0.0)) is None  # the kernel did not say


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


def test_downpours_inline_evaluator_counts_the_marks_passed_between_two_looks_as_skipped():
    """The driver evaluates downpour's weights of the moment as it looks (twice a second, or sooner): marks the
    workers passed meanwhile are evaluated once, and the others are the summary's skipped points."""
    from types import SimpleNamespace

    from ddq.modes.evaluators import InlineEvaluator

    evaluated: list[int] = []
    record = SimpleNamespace(counters=SimpleNamespace(env_steps=0), config=config_of(eval_every=1000))
    mirror = SimpleNamespace(evaluate=lambda record, services, closing: evaluated.append(1) or False)
    evaluator = InlineEvaluator(mirror, record, None, threading.Event())
    for steps in (900, 3500, 3900, 4000, 4100):
        evaluator.periodic(steps, stopping=False)
    assert len(evaluated) == 2 and evaluator.skipped == 2  # 1,000-3,000 at 3,500 (two skipped); 4,000
