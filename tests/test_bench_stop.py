"""Ctrl-C ends a bench whose runs train in its own process (`ddq bench train`, `ddq bench minatar`): each run
stops cleanly on it, and the bench had then started the next, one Ctrl-C per run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from ddq.run_folder import read_metrics


def test_ctrl_c_ends_the_bench_not_only_its_run(tmp_path):
    process = subprocess.Popen([sys.executable, "-m", "ddq", "bench", "train", "--env", "CartPole-v1", "--seeds", "0",
                                "1", "--total-steps", "10000000"], env=dict(os.environ, TMPDIR=str(tmp_path)),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not [run for run in tmp_path.glob("ddq-bench-*/seed0") if (run / "metrics.jsonl").exists() and
                   any(point["kind"] == "train" for point in read_metrics(run))]:  # the first run trains
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the first run did not train within 120 s"
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)  # (before: the second run started, and trained on)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, err[-3000:]
    assert err.splitlines()[-1] == "ddq: the bench stops: its run of CartPole-v1 (seed 0) was stopped by the user"
    assert out == "" and list(tmp_path.iterdir()) == []  # no table of a bench cut short, its runs' folder gone
