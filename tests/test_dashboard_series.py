"""Downsampling of long series and the telemetry merges behind the dashboard (pure logic)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ddq.dashboard.series import MAX_COLUMNS, Columns, bucket_starts, downsample
from ddq.services.telemetry import json_object, merge_layers, merge_server, progress_point
from ddq.transport.values import counter_value


def test_columns_grow_and_fill_gaps_with_nan():
    columns = Columns(capacity=2)
    columns.append([{"a": 1, "b": "text"}, {"a": 2.5}])
    columns.append([{"a": 3, "c": 7}, {"c": True}])  # booleans are not numbers here
    assert columns.size == 4
    assert columns.get("a")[:3].tolist() == [1, 2.5, 3] and math.isnan(columns.get("a")[3])
    assert "b" not in columns.names()  # text is not a number
    assert np.isnan(columns.get("c")[[0, 1, 3]]).all() and columns.get("c")[2] == 7
    assert np.isnan(columns.get("never")).all() and len(columns.get("never")) == 4


def test_columns_take_finite_numbers_and_at_most_max_columns_names():
    """Entries come from Redis, where every executor may write: NaN, 1e400 and 10**400 (which Python's JSON
    reads) are not numbers here, and a flood of new names costs no more than MAX_COLUMNS columns."""
    columns = Columns()
    columns.append([{"a": json.loads("NaN"), "b": json.loads("1e400"), "c": 10**400, "d": 1.5}])
    assert columns.names() == ["d"]
    columns.append([{f"name{k}": k for k in range(2 * MAX_COLUMNS)}])
    assert len(columns.names()) == MAX_COLUMNS and columns.get("d").tolist()[0] == 1.5


@pytest.mark.parametrize("rows,points", [(0, 10), (5, 10), (10, 10), (11, 10), (1_000_003, 500), (999, 998)])
def test_buckets_cover_every_row_once(rows, points):
    starts = bucket_starts(rows, points)
    assert len(starts) == min(rows, points)
    if rows:
        assert starts[0] == 0 and (np.diff(starts) > 0).all() and starts[-1] < rows
        sizes = np.diff(np.append(starts, rows))
        assert sizes.max() - sizes.min() <= 1  # nearly equal buckets


def test_downsample_keeps_means_and_ranges_and_ignores_nan():
    values = np.arange(10, dtype=float)
    values[3] = np.nan
    gaps = np.full(10, np.nan)
    out = downsample({"x": np.arange(10.0), "y": values, "gap": gaps}, points=2, spread=("y",))
    assert out["x"] == [2.0, 7.0]
    assert out["y"] == [pytest.approx((0 + 1 + 2 + 4) / 4), 7.0]
    assert out["y_min"] == [0.0, 5.0] and out["y_max"] == [4.0, 9.0]
    assert out["gap"] == [None, None]  # JSON-ready: no NaN


def test_short_series_come_back_whole():
    out = downsample({"y": np.array([1.0, np.inf, 3.0])}, points=10, spread=("y",))
    assert out == {"y": [1.0, None, 3.0], "y_min": [1.0, None, 3.0], "y_max": [1.0, None, 3.0]}
    assert downsample({"y": np.array([])}, 10, spread=("y",)) == {"y": [], "y_min": [], "y_max": []}


def test_json_object_accepts_only_objects():
    assert json_object(b'{"a": 1}') == {"a": 1}
    for raw in (None, b"[1]", b"not json", b"\xff\xfe", b"3", b"[" * 100_000 + b"]" * 100_000,
                b'{"a": ' + b"[" * 500 + b"]" * 500 + b"}"):  # (the dashboard's readers recurse into what they get)
        assert json_object(raw) is None


def test_a_counter_in_redis_is_a_whole_number_of_int64s_range_or_missing():
    assert counter_value(b"1234") == 1234 and counter_value("-1") == -1 and counter_value(None) == 0
    for raw in (b"12.5", b"abc", "\u00b2", b"1" * 19, b"1" * 5000, b"\xff"):  # (int() takes "²"; 5,000 digits raise)
        assert counter_value(raw, missing=-7) == -7


def test_server_merge_reads_a_shards_report_as_data():
    """A report that is not what a shard writes (from anything that can write to the run's Redis) merges as
    if its bad values were missing: the driver's loop and the dashboard's pages read these."""
    hostile = {"version": json.loads("NaN"), "applied": 10**400, "updates_per_s": "fast", "dropped_stale": 1e400,
               "rejected": [1], "staleness": {"x": 1, "3": json.loads("Infinity"), "2": 4}, "layers": "w",
               "learning_rate": True, "mean_loss": json.loads("-Infinity")}
    merged = merge_server([hostile])
    assert (merged["version"], merged["applied"], merged["updates_per_s"], merged["dropped_stale"]) == (0, 0, 0, 0)
    assert merged["rejected"] == {} and merged["staleness"] == {"2": 4} and merged["layers"] == []
    assert merged["learning_rate"] is None and merged["mean_loss"] is None
    odder = {"layers": 5, "staleness": {"\u00b2": 1, "9" * 400: 1, "1" * 5000: 1, "3": 2}}
    assert merge_server([odder])["layers"] == [] and merge_server([odder])["staleness"] == {"3": 2}
    huge = merge_server([{"layers": [{"name": "w", "weight_norm": 1e200, "update_norm": 1e199}]}])["layers"]
    assert huge[0]["weight_norm"] == pytest.approx(1e200) and huge[0]["update_ratio"] == pytest.approx(0.1)


def test_server_merge_takes_the_slowest_shard_and_adds_rejections():
    reports = [
        {"version": 10, "applied": 10, "updates_per_s": 5.0, "dropped_stale": 1, "rejected": {"size": 2},
         "staleness": {"0": 3, "2": 1}, "layers": [{"name": "w", "weight_norm": 3.0, "grad_norm": 0.0,
                                                     "update_norm": 0.3}], "learning_rate": 0.1, "mean_loss": 1.0},
        {"version": 9, "applied": 9, "updates_per_s": 4.0, "dropped_stale": 0, "rejected": {"size": 1, "layout": 4},
         "staleness": {"0": 2, "10": 1}, "layers": [{"name": "w", "weight_norm": 4.0, "grad_norm": 0.0,
                                                      "update_norm": 0.4}, {"name": "b", "weight_norm": 0.0}],
         "learning_rate": 0.1, "mean_loss": None},
    ]
    merged = merge_server(reports)
    assert (merged["version"], merged["applied"], merged["updates_per_s"]) == (9, 9, 4.0)
    assert merged["rejected"] == {"size": 3, "layout": 4} and merged["rejected_total"] == 7
    assert list(merged["staleness"].items()) == [("0", 5), ("2", 1), ("10", 1)]  # numeric order
    w, b = merged["layers"]
    assert w["weight_norm"] == pytest.approx(5.0) and w["update_ratio"] == pytest.approx(0.1)
    assert b["update_ratio"] is None  # a zero weight norm has no ratio
    assert merged["mean_loss"] == 1.0 and merged["learner"] is None
    assert merge_server([])["version"] == 0


def test_an_actor_learner_runs_learner_numbers_come_through():
    merged = merge_server([{"role": "learner", "version": 300, "applied": 300, "ingested": 1200, "replay_size": 1100,
                            "publications": 30, "policy_lag": "junk"}])
    assert merged["learner"]["updates_per_env_step"] == 0.25 and merged["learner"]["replay_size"] == 1100
    assert merged["learner"]["policy_lag"] is None and merged["learner"]["publications"] == 30


def test_layers_ignore_rows_that_are_not_layers():
    assert merge_layers([[{"name": 3}, "junk", {"name": "w", "weight_norm": "big"}]]) == [
        {"name": "w", "weight_norm": 0.0, "grad_norm": 0.0, "update_norm": 0.0, "update_ratio": None}]


def test_progress_point_sums_running_workers_only():
    server = merge_server([{"version": 7, "updates_per_s": 2.0, "layers": [{"name": "w", "weight_norm": 1.0,
                                                                            "update_norm": 1e-3}]}])
    workers = [{"state": "running", "env_steps_per_s": 10.0, "pushes_per_s": 1.0, "loss": 0.5, "mean_max_q": 2.0},
               {"state": "running", "env_steps_per_s": 30.0, "pushes_per_s": 3.0, "loss": None, "mean_max_q": 4.0},
               {"state": "finished", "env_steps_per_s": 99.0, "pushes_per_s": 99.0, "loss": 9.0}]
    point = progress_point(server, workers, env_steps=1234, started=100.0, epsilon=0.3, now=160.0)
    assert point["env_steps_per_s"] == 40.0 and point["pushes_per_s"] == 4.0
    assert point["loss"] == 0.5 and point["mean_max_q"] == 3.0 and point["wall_time_s"] == 60.0
    assert point["updates"] == 7 and point["layer_ratios"] == {"w": pytest.approx(1e-3)}


def test_a_closing_point_takes_the_runs_rate_since_the_point_it_is_given():
    """No worker runs at a run's closing point: its env steps a second are the run's since `previous` (not 0,
    a drop at every run's end), its pushes a second unknown; with no point before it, unknown too. Which
    point the reporter gives it: test_dashboard_api's closing-point test."""
    finished = [{"state": "finished", "env_steps_per_s": 99.0, "pushes_per_s": 99.0}]
    previous = {"time": 150.0, "env_steps": 1000}
    point = progress_point(merge_server([]), finished, env_steps=1600, started=100.0, epsilon=0.3, now=152.0,
                           previous=previous)
    assert point["env_steps_per_s"] == 300.0 and point["pushes_per_s"] is None
    first = progress_point(merge_server([]), [], env_steps=0, started=100.0, epsilon=1.0, now=101.0)
    assert first["env_steps_per_s"] is None


def test_progress_point_without_a_parameter_server_or_workers_losses():
    """Data-parallel (no weights server): updates are the workers' weights version, at their push rate.
    Actor-learner (actors train nothing): the loss, max-Q and the policy lag are the learner's."""
    workers = [{"state": "running", "weights_version": 40, "pushes_per_s": 8.0, "loss": 0.5},
               {"state": "running", "weights_version": 41, "pushes_per_s": 10.0, "loss": None}]
    point = progress_point(merge_server([]), workers, env_steps=900, started=0.0, epsilon=0.1, now=1.0)
    assert (point["updates"], point["updates_per_s"], point["loss"], point["policy_lag"]) == (41, 9.0, 0.5, None)
    learner = merge_server([{"role": "learner", "version": 300, "updates_per_s": 50.0, "mean_loss": 0.2,
                             "mean_max_q": 7.5, "policy_lag": 3.5}])
    point = progress_point(learner, [{"state": "running", "loss": None}], env_steps=900, started=0.0, epsilon=0.1,
                           now=1.0, staleness=None)
    assert (point["updates"], point["updates_per_s"], point["loss"], point["policy_lag"]) == (300, 50.0, 0.2, 3.5)
    assert point["mean_max_q"] == 7.5


def test_only_a_parameter_servers_shards_count_as_shards():
    """The header's shards: downpour's that report; none for actor-learner or data-parallel, whose learner,
    or worker 0, reports where shard 0 would (and says which, for the dashboard's panel)."""
    assert merge_server([{"version": 3}, {"version": 4}])["shards"] == 2
    assert merge_server([])["shards"] == 0
    assert merge_server([{"role": "learner", "version": 300}])["shards"] == 0
    averaged = merge_server([{"role": "data-parallel", "version": 90, "staleness": {"0": 90}}])
    assert averaged["shards"] == 0 and averaged["reports"] == 1 and averaged["role"] == "data-parallel"
    assert averaged["learner"] is None and averaged["staleness"] == {"0": 90}
    assert merge_server([{"role": 7, "version": 3}])["role"] is None  # only a name is passed on


def test_mean_staleness_is_of_the_gradients_judged_since_the_previous_reading():
    from ddq.services.telemetry import mean_staleness

    assert mean_staleness({"0": 3, "2": 1}, {}) == 0.5
    assert mean_staleness({"0": 3, "2": 3, "4": 1}, {"0": 3, "2": 1}) == 8 / 3  # two of 2, one of 4
    assert mean_staleness({"0": 3}, {"0": 3}) is None  # none judged since
    assert mean_staleness({"1": 2}, {"1": 5}) == 1.0  # a restarted shard counts from its start again


def test_lost_and_redone_name_dead_attempts_and_their_retries():
    from ddq.services.telemetry import lost_and_redone

    rows = [{"worker": 0, "attempt": 0, "restarts": 0, "state": "replaced", "env_steps": 900, "pushes": 40},
            {"worker": 0, "attempt": 1, "restarts": 1, "state": "finished", "env_steps": 300, "pushes": 10},
            {"worker": 1, "attempt": 0, "restarts": 0, "state": "finished", "env_steps": 5000, "pushes": 200}]
    named = lost_and_redone(rows)
    assert [(r["worker"], r["attempt"], r["env_steps"]) for r in named["lost"]] == [(0, 0, 900)]
    assert [(r["worker"], r["attempt"], r["state"]) for r in named["redone"]] == [(0, 1, "finished")]
    assert lost_and_redone(rows[2:]) == {"lost": [], "redone": []}


def test_the_steps_the_workers_rows_say_they_played_bound_a_count_redis_rolled_back():
    """A Redis restored from its snapshot as the workers ended forgot what they counted since; the summary's
    env steps are at least the session's start and every attempt's steps (a row is written after its
    report), a row whose number is missing or malformed counting none."""
    from ddq.services.telemetry import played

    rows = [{"env_steps": 900}, {"env_steps": 300}, {"env_steps": 5000}, {"env_steps": "x"}, {}]
    assert played(rows) == 6200 and played([]) == 0


def test_worker_rows_redis_forgot_or_holds_older_stay_as_last_read():
    from ddq.services.telemetry import newest_rows

    known = [{"worker": 0, "restarts": 0, "heartbeat": 50.0, "env_steps": 900},
             {"worker": 1, "restarts": 0, "heartbeat": 50.0, "env_steps": 800}]
    # a Redis restored from an older snapshot: worker 0's row is gone, worker 1's is older than the one read;
    # then worker 1 beats again, and its retried attempt appears
    read = [{"worker": 1, "restarts": 0, "heartbeat": 40.0, "env_steps": 100}]
    assert newest_rows(known, read) == known and newest_rows(known, []) == known
    read = [{"worker": 1, "restarts": 0, "heartbeat": 51.0, "env_steps": 850},
            {"worker": 1, "restarts": 1, "heartbeat": 51.0, "env_steps": 5}]
    assert [(r["worker"], r["restarts"], r["env_steps"]) for r in newest_rows(known, read)] == [
        (0, 0, 900), (1, 0, 850), (1, 1, 5)]
