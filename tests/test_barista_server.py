"""A long-lived Barista driven by the dummy client, against a real Redis and parameter server."""

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import redis

from conftest import run_ddq
from ddq.core.settings import build_config
from ddq.param_server.launch import start_shards, stop_servers, wait_until_serving
from ddq.transport.keys import RunKeys
from ddq.transport.redis_server import EmbeddedRedis

FLAGS = ["--env", "CartPole-v1", "--hidden", "32", "32", "--learning-starts", "500"]


@pytest.mark.slow
def test_dummy_client_drives_a_barista(tmp_path):
    with EmbeddedRedis() as server:
        admin = redis.Redis.from_url(server.url)
        config = build_config({"env": "CartPole-v1", "hidden": [32, 32], "learning_starts": 500})
        shards = start_shards(config, server.url, "hand", tmp_path)
        wait_until_serving(admin, "hand", 1, shards)
        url_file = tmp_path / "barista.url"
        barista = subprocess.Popen([sys.executable, "-m", "ddq", "barista", "serve", "--redis-url", server.url,
                                    "--run", "hand", "--worker", "3", "--url-file", str(url_file), *FLAGS],
                                   stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while not url_file.exists():
                assert barista.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
            url = url_file.read_text()
            assert url.startswith("http://127.0.0.1:")
            status = run_ddq("dummy-client", url, "status")
            assert status.returncode == 0 and json.loads(status.stdout)["worker"] == 3
            step = run_ddq("dummy-client", url, "step", "--steps", "1200")
            assert step.returncode == 0, step.stderr
            stats = json.loads(step.stdout)
            assert stats["env_steps"] >= 1200 and stats["pushes"] > 0 and stats["state"] == "idle"
            again = json.loads(run_ddq("dummy-client", url, "step", "--steps", "200").stdout)
            assert again["env_steps"] >= stats["env_steps"] + 200  # same worker, same replay memory
            assert int(admin.get(RunKeys("hand").env_steps)) == again["env_steps"]
            bad = urllib.request.Request(f"{url}/step", data=b'{"steps": "many"}', method="POST")
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(bad, timeout=10)
            assert refused.value.code == 400 and "steps must be an integer" in refused.value.read().decode()
            assert run_ddq("dummy-client", url, "status").returncode == 0  # still serving
            assert run_ddq("dummy-client", url, "shutdown").returncode == 0
            code = barista.wait(30)
            assert code == 0, barista.stderr.read()[-3000:]
            missing = run_ddq("dummy-client", url, "status")
            assert missing.returncode == 2 and "no Barista at" in missing.stderr
        finally:
            if barista.poll() is None:
                barista.kill()
            assert stop_servers(admin, "hand", shards) == [0]


def test_the_heartbeat_window_means_the_mean_max_q_the_learner_measured():
    """The learner reads the mean max-Q on 1 gradient in 8: the window averages the readings it got, every
    gradient's loss, and keeps the last reading through a window that got none."""
    from ddq.workers.barista import StatsWindow, WorkerStats

    stats, window = WorkerStats(worker=0, attempt=0), StatsWindow()
    for loss, max_q in ((1.0, 5.0), (2.0, None), (3.0, None), (6.0, 7.0)):
        window.add_gradient(loss, max_q)
    window = window.close(stats)
    assert stats.loss == 3.0 and stats.mean_max_q == 6.0
    window.add_gradient(4.0, None)
    window.close(stats)
    assert stats.loss == 4.0 and stats.mean_max_q == 6.0
