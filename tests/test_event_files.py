"""A run's TensorBoard event files: which scalars a metrics point becomes, and that they reach the files whole
(read back with TensorBoard's own reader). The modes' runs check theirs in their own tests."""

from __future__ import annotations

import errno
import math
import re
import threading

import pytest

from conftest import assert_events_match_metrics, event_scalars
from ddq.run_folder import RunLog, read_metrics, scalars


def test_each_kind_of_point_becomes_its_tagged_scalars():
    assert scalars({"kind": "episode", "env_steps": 40, "worker": 1, "episode_return": 12.0, "length": 12,
                    "truncated": False}) == {"train/episode_return": 12.0, "train/episode_length": 12.0}
    train = {"kind": "train", "env_steps": 1000, "updates": 500, "wall_time_s": 3.0, "epsilon": 0.5, "loss": 0.25,
             "mean_max_q": None, "env_steps_per_s": 300.0, "updates_per_s": 150, "staleness": 2.5, "policy_lag": None}
    assert scalars(train) == {"train/epsilon": 0.5, "train/loss": 0.25, "speed/env_steps_per_s": 300.0,
                              "speed/updates_per_s": 150.0, "train/staleness": 2.5}  # None: no point
    evaluation = {"kind": "eval", "env_steps": 5000, "mean_return": 8.0, "mean_rewarded_steps": 3.5, "returns": [8.0]}
    assert scalars(evaluation) == {"eval/mean_return": 8.0}  # the return is the score
    assert scalars(evaluation, score="apples") == {"eval/mean_return": 8.0, "eval/mean_apples": 3.5}
    assert scalars({"kind": "train", "env_steps": 1, "loss": math.nan, "epsilon": True}) == {}
    assert scalars({"kind": "something new", "env_steps": 1, "loss": 1.0}) == {}


def test_a_run_log_writes_every_point_to_its_event_file_by_the_time_it_is_closed(tmp_path):
    log = RunLog(tmp_path, score="apples")
    for step in (30, 10, 20):  # workers' episodes arrive out of step order: each is kept
        log.write("episode", env_steps=step, episode_return=float(step), length=step, truncated=False)
    log.write("eval", env_steps=30, mean_return=2.0, mean_rewarded_steps=1.0, returns=[2.0])
    log.close()
    log.close()  # again, as a run's last resort does: nothing happens
    assert event_scalars(tmp_path)["train/episode_return"] == [(30, 30.0), (10, 10.0), (20, 20.0)]
    assert summary_events(tmp_path) == 4  # a point's scalars share one event: each costs the writer ~70 us
    assert_events_match_metrics(tmp_path, {"train/episode_return", "eval/mean_apples"}, score="apples")

    resumed = RunLog(tmp_path, score="apples")  # a resumed run: a second event file, read with the first
    resumed.write("eval", env_steps=60, mean_return=4.0, mean_rewarded_steps=2.0, returns=[4.0])
    resumed.close()
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 2
    assert event_scalars(tmp_path)["eval/mean_apples"] == [(30, 1.0), (60, 2.0)]
    with pytest.raises(AssertionError):  # what the modes' tests ask of their runs can fail
        assert_events_match_metrics(tmp_path, {"train/loss"}, score="apples")


def summary_events(run_dir) -> int:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    return sum(1 for path in run_dir.glob("events.out.tfevents.*") for event in EventFileLoader(str(path)).Load()
               if event.HasField("summary"))


def test_a_full_disk_under_the_event_files_is_one_line_naming_them(tmp_path, monkeypatch):
    """TensorBoard's writer thread fails to append (as on a full disk): the next write or the close raises
    one OSError naming the event files, the thread prints no traceback, and a run's error stays its own."""
    from tensorboard.compat.tensorflow_stub.io import gfile

    def full(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    told: list[threading.Thread | None] = []  # the threads whose exceptions would have been printed
    monkeypatch.setattr(threading, "excepthook", lambda args: told.append(args.thread))
    log = RunLog(tmp_path)
    monkeypatch.setattr(gfile.LocalFileSystem, "append", full)
    said = f"cannot write {tmp_path}/events.out.tfevents.*: No space left on device"
    with pytest.raises(OSError, match=f"^{re.escape(said)}$"):
        log.write("eval", env_steps=10, mean_return=1.0)
        log.close()  # waits for the thread's write: it raises here if the write did not see it yet
    for thread in threading.enumerate():
        if type(thread).__module__.startswith("tensorboard."):
            thread.join()  # its hook has run
    assert told == []
    log.close()  # once was enough

    failing = RunLog(tmp_path / "other")
    failing.write("eval", env_steps=10, mean_return=1.0)
    with pytest.raises(ValueError, match="the run's own error"), failing:  # closing fails too: not what is told
        raise ValueError("the run's own error")


def test_a_point_cut_short_by_a_killed_writer_is_left_out_and_the_resumed_log_starts_a_line(tmp_path):
    """A run killed mid-write leaves a torn last line: its resume appended its first point to that line, and
    reading the metrics (the summary's curve, `ddq plot`) then failed."""
    log = RunLog(tmp_path)
    log.write("episode", env_steps=10, episode_return=1.0)
    log.close()
    with open(tmp_path / "metrics.jsonl", "a") as torn:
        torn.write('{"kind": "episode", "env_st')
    resumed = RunLog(tmp_path)
    resumed.write("episode", env_steps=20, episode_return=2.0)
    resumed.close()
    assert [point["env_steps"] for point in read_metrics(tmp_path)] == [10, 20]
