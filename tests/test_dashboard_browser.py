"""The dashboard in a real headless Chromium (Debian's, driven by Playwright): a live run, a finished one,
and a long one with 16 workers. Screenshots land in test-output/<test>/."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import redis

from ddq.dashboard.browser import open_page
from ddq.dashboard.reader import runs_in
from ddq.transport.keys import RunKeys
from ddq.transport.redis_server import EmbeddedRedis
from synthetic_run import keep_workers_beating, write_synthetic_run

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHARTS = ("returns", "loss", "q", "throughput", "staleness", "ratios")
# True once every chart holds data points, the workers table has `rows` rows, and both canvases are drawn.
PAGE_FILLED = """rows => {
  const d = window.ddq, has = name => d.charts[name] && d.charts[name].data.slice(1).some(s => s.some(v => v !== null));
  return %s.every(has) && document.querySelectorAll("#workers tbody tr").length === rows
    && d.replayVersion !== null && document.getElementById("filters").width > 1;
}""" % list(CHARTS)


def _wait_until(condition, what: str, process: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    """Polls `condition` until it holds; fails at once if `process` exits, or after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"{what} not seen after {timeout} s"
        time.sleep(0.1)


def _wait_for_file(path: Path, process: subprocess.Popen, log: Path, timeout: float = 120) -> str:
    _wait_until(path.is_file, path.name, process, log, timeout)
    return path.read_text()


def _serve_dashboard(source: list[str], folder: Path, tmpdir: Path | None = None) -> tuple[subprocess.Popen, str]:
    """`ddq dashboard SOURCE...` (a Redis URL and run, or a run folder); its process and its URL. `tmpdir`:
    its TMPDIR, where a private Redis of its own makes its folder."""
    log = folder / "dashboard.log"
    command = [sys.executable, "-m", "ddq", "dashboard", *source, "--url-file", str(folder / "url")]
    env = dict(os.environ, **({"TMPDIR": str(tmpdir)} if tmpdir else {}))
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log.open("w"), env=env)
    return process, _wait_for_file(folder / "url", process, log)


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    process.wait(30)


def test_dashboard_follows_a_live_run_then_serves_it_finished(tmp_path, output_dir):
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        run_dir, log = tmp_path / "run", tmp_path / "train.log"
        training = subprocess.Popen(
            [sys.executable, "-m", "ddq", "train", "--mode", "downpour", "--workers", "2", "--env", "ddq/Snake-v0",
             "--total-steps", "2000000", "--time-budget-s", "400", "--no-progress", "--redis-url", server.url,
             "--run-dir", str(run_dir)],
            stdout=subprocess.DEVNULL, stderr=log.open("w"), env=dict(os.environ, DDQ_EVAL_EVERY_S="3"))
        try:
            url = _wait_for_file(run_dir / "dashboard.url", training, log)
            assert url.startswith("http://127.0.0.1:")
            # the driver prints the address once its next poll sees the file: wait for the line, not a time
            _wait_until(lambda: f"dashboard at {url}" in log.read_text(), "the dashboard's address", training, log)
            with open_page(url) as page:
                page.wait_for_function(PAGE_FILLED, arg=2, timeout=240_000)
                page.screenshot(path=str(output_dir / "live.png"), full_page=True)
                assert page.problems == []
                assert page.locator("#run-state").inner_text() == "running"
            [run] = runs_in(client)
            client.set(RunKeys(run).control, "stop")
            assert training.wait(180) == 0, log.read_text()[-3000:]
        finally:
            if training.poll() is None:
                _stop(training)
        assert not (run_dir / "dashboard.url").exists()  # the driver stopped its dashboard

    # the run's Redis is gone: the finished run is served from the telemetry saved in its folder, by a private
    # Redis of the dashboard's own, made in a folder of this test's (tests on the other xdist worker make theirs)
    own_tmp = Path(tempfile.mkdtemp(prefix="ddq-t-"))  # short: a unix socket's path has a length limit
    dashboard, url = _serve_dashboard([str(run_dir)], tmp_path, own_tmp)
    try:
        assert list(own_tmp.glob("ddq-redis-*"))  # the dashboard's own Redis, while it serves
        with open_page(url) as page:
            page.wait_for_function(PAGE_FILLED, arg=2, timeout=60_000)
            assert page.locator("#run-state").inner_text() == "finished"
            page.screenshot(path=str(output_dir / "finished.png"), full_page=True)
            assert "greedy apples per episode" in page.locator("#chart-returns").inner_text()  # Snake
            # the replay's frame: apples so far and the snake's length
            assert re.fullmatch(r"apples \d+ · length \d+", page.locator("#replay-count").inner_text())
            assert page.problems == []
    finally:
        _stop(dashboard)
        left = list(own_tmp.glob("ddq-redis-*"))
        shutil.rmtree(own_tmp)
    assert left == []  # its Redis went with it


def test_page_stays_usable_with_16_workers_and_a_million_updates(tmp_path, output_dir):
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        run = write_synthetic_run(client)
        dashboard, url = _serve_dashboard(["--redis-url", server.url, "--run", run.run], tmp_path)
        try:
            # heartbeats refreshed until the checks are done, so a slow browser start cannot age them past silent
            with keep_workers_beating(client, run.run), open_page(url) as page:
                page.wait_for_function(PAGE_FILLED, arg=16, timeout=120_000)
                points = page.evaluate("Object.fromEntries(Object.entries(window.ddq.charts)"
                                       ".map(([name, chart]) => [name, chart.data[0].length]))")
                assert points["returns"] <= 500 + 300 and all(points[name] <= 500 for name in CHARTS[1:])
                assert page.locator("#workers td.state-silent").count() == 1  # worker 5 stopped beating
                assert page.locator("#layers td.warn").all_inner_texts() == ["0.500"]  # 6.bias: far from 1e-3
                page.screenshot(path=str(output_dir / "million-updates.png"), full_page=True)
                assert page.problems == []
        finally:
            _stop(dashboard)
