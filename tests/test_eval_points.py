"""Actor-learner's evaluation points: the learner's weights at each eval_every mark, through real Redis to the
driver's background evaluations, which hand results back in order, and how far behind them the results come."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import redis
import torch
from torch import nn

from ddq.bookkeeping import play_evaluation
from ddq.config import config_of
from ddq.models import FlatParameters
from ddq.modes.background_eval import BackgroundEvaluations
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


def test_background_evaluations_play_each_point_with_its_own_weights_and_report_in_order():
    config = config_of(env="CartPole-v1", eval_episodes=5, seed=3)
    network = _network(1)
    flat = FlatParameters(network)
    weights = [np.random.default_rng(k).normal(size=flat.size).astype(np.float32) for k in range(3)]
    woken = threading.Semaphore(0)  # released by each result as it is done: the driver's loop wakes on it
    background = BackgroundEvaluations(network, config, torch.device("cpu"), max_threads=2, on_result=woken.release)
    try:
        for index, values in enumerate(weights):
            background.submit(EvaluationPoint(index, 1000 * (index + 1), 1000 * (index + 1), values), index)
        results: list = []
        for _ in weights:
            assert woken.acquire(timeout=120)
            results += background.finished()
    finally:
        background.close()
    assert [point.trained_steps for point, _ in results] == [1000, 2000, 3000] and background.pending() == 0
    assert len(background.threads) == 2  # a thread per waiting point, up to the most allowed
    for (point, result), values in zip(results, weights):  # the same episodes as the run's evaluation index
        expected_net = _network(2)
        FlatParameters(expected_net).assign(values)
        assert result.returns == play_evaluation(expected_net, config, point.version, torch.device("cpu")).returns


def test_the_lag_clock_measures_each_result_from_its_points_arrival_and_warns_once():
    """Results come back in the order their points arrived; the longest wait is kept, and only the first
    result LAG_WARNING_S or more behind its point gets a line (a driver whose host is busy learns of its
    target that much late)."""
    clock = LagClock()
    for arrival in (0.0, 1.0, 2.0):
        clock.arrived(arrival)
    assert clock.answered(3.0) is None and clock.lag_s == 3.0  # the first point, 3 s after it arrived
    line = clock.answered(1.0 + LAG_WARNING_S + 4.0)
    assert line is not None and f"came {LAG_WARNING_S + 4.0:.0f} s after" in line and "--eval-every" in line
    assert clock.answered(2.0 + LAG_WARNING_S + 9.0) is None  # said once
    assert clock.lag_s == LAG_WARNING_S + 9.0
    clock.arrived(30.0)
    clock.abandoned(30.0 + LAG_WARNING_S + 20.0)  # the run ended first: it had waited this long at least
    assert clock.lag_s == LAG_WARNING_S + 20.0 and not clock.arrivals
