"""The dashboard's JSON API on a real Redis holding a long run (16 workers, a million updates)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import redis

from ddq.dashboard.app import create_app
from ddq.dashboard.series import bucket_starts
from ddq.transport.redis_server import EmbeddedRedis
from synthetic_run import beat_workers, write_synthetic_run

READ_COMMANDS = {"get", "mget", "getrange", "lrange", "llen", "hget", "hvals", "scan", "info", "ping", "hello", "client",
                 "command", "select"}


@pytest.fixture(scope="module")
def big_run():
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        yield client, write_synthetic_run(client)


@pytest.fixture(scope="module")
def api(big_run):
    client, run = big_run
    app = create_app(client, run.run)
    app.testing = True
    return app.test_client()


def command_calls(client: redis.Redis) -> dict[str, int]:
    return {name.removeprefix("cmdstat_"): stats["calls"] for name, stats in client.info("commandstats").items()}


def test_long_series_are_downsampled_to_bucket_means_and_ranges(api, big_run):
    _, run = big_run
    response = api.get("/api/returns?points=300")
    assert response.status_code == 200 and len(response.data) < 100_000  # not 200,000 episodes
    episodes = response.get_json()["episodes"]
    assert episodes["count"] == len(run.episode_returns)  # the two malformed entries are skipped
    starts = bucket_starts(len(run.episode_returns), 300)
    assert len(episodes["episode_return"]) == len(starts) <= 300
    for bucket in (0, 137, len(starts) - 1):
        end = starts[bucket + 1] if bucket + 1 < len(starts) else len(run.episode_returns)
        chunk = run.episode_returns[starts[bucket]:end]
        assert episodes["episode_return"][bucket] == pytest.approx(chunk.mean())
        assert episodes["episode_return_min"][bucket] == chunk.min()
        assert episodes["episode_return_max"][bucket] == chunk.max()
        assert episodes["env_steps"][bucket] == pytest.approx(run.episode_steps[starts[bucket]:end].mean())
    evaluations = response.get_json()["evaluations"]
    assert evaluations["count"] == 300 and len(evaluations["mean_return"]) == 300  # short: sent whole

    live = api.get("/api/live?points=300").get_json()  # what the page polls: the same answers in one
    assert live["returns"] == response.get_json() and live["run"]["episodes"] == run.malformed + episodes["count"]

    progress = api.get("/api/progress?points=200").get_json()
    assert progress["count"] == 20_000 and len(progress["loss"]) == 200
    assert set(progress["layer_ratios"]) == {"2.weight", "2.bias", "4.weight", "4.bias", "6.weight", "6.bias"}
    assert progress["layer_ratios"]["4.weight"][0] == pytest.approx(3e-3)
    assert progress["wall_time_s"][-1] > progress["wall_time_s"][0]


def test_latest_state_panels(api, big_run):
    _, run = big_run
    overview = api.get("/api/run").get_json()
    assert overview["run"] == run.run and overview["workers"] == 16 and overview["shards"] == 2
    assert overview["updates"] == run.updates - 1  # the slower shard's version

    server = api.get("/api/server").get_json()
    assert server["rejected"] == {"layout": 3, "non_finite": 4} and server["rejected_total"] == 7
    assert server["staleness"] == {"0": 20, "1": 61, "15": 2}
    layer = server["layers"][0]  # 2.weight straddles both shards: norms add in squares
    assert layer["weight_norm"] == pytest.approx(np.sqrt(18)) and layer["update_norm"] == pytest.approx(5e-3)
    assert layer["update_ratio"] == pytest.approx(5e-3 / np.sqrt(18))

    beat_workers(big_run[0], run.run)
    workers = api.get("/api/workers").get_json()
    assert [w["worker"] for w in workers] == list(range(16))
    assert workers[5]["state"] == "silent" and workers[5]["heartbeat_age_s"] > 30
    assert workers[3]["restarts"] == 1 and workers[0]["state"] == "running"


def test_first_layer_images_are_the_published_weights(api, big_run):
    _, run = big_run
    layer = api.get("/api/first-layer").get_json()
    assert layer["available"] and layer["layer"] == "fc1.weight"  # torch's "2.weight", named for a person
    assert (layer["filters"], layer["channels"], layer["height"], layer["width"]) == (64, 1, 12, 12)
    pixels = np.frombuffer(base64.b64decode(layer["pixels"]), np.uint8).reshape(64, 144)
    weights = run.weights[:64 * 144].reshape(64, 144)  # the MLP's first 64 units over the 12x12 board
    scale = np.abs(weights).max(axis=1, keepdims=True)
    assert np.abs(pixels - (127.5 + 127.5 * weights / scale)).max() <= 0.5 + 1e-4  # each unit scaled alone
    assert ((pixels.max(axis=1) == 255) | (pixels.min(axis=1) == 0)).all()  # its largest |w| at an end

    replay = api.get("/api/replay").get_json()
    assert replay["side"] == 14 and replay["count"] == 3
    assert len(base64.b64decode(replay["frames"])) == 3 * 14 * 14


def test_bad_requests_get_clear_errors_and_nothing_is_written(api, big_run):
    client, _ = big_run
    before = command_calls(client)
    for path in ("/api/returns?points=1", "/api/returns?points=abc", "/api/progress?points=99999"):
        response = api.get(path)
        assert response.status_code == 400 and "points must be" in response.get_json()["error"]
    assert api.get("/api/nothing").status_code == 404
    for method in (api.post, api.put, api.delete):
        response = method("/api/run")
        assert response.status_code == 405 and "error" in response.get_json()
    for path in ("/", "/api", "/api/run", "/api/returns", "/api/progress", "/api/server", "/api/workers",
                 "/api/first-layer", "/api/replay", "/api/live", "/static/vendor/uPlot.iife.min.js"):
        assert api.get(path).status_code == 200, path
    used = {name for name, calls in command_calls(client).items() if calls > before.get(name, 0)}
    assert used <= READ_COMMANDS, f"the dashboard sent {used - READ_COMMANDS}"


def test_unknown_run_is_a_404_naming_the_runs_there(big_run):
    client, run = big_run
    app = create_app(client, "no-such-run")
    response = app.test_client().get("/api/run")
    assert response.status_code == 404 and run.run in response.get_json()["error"]


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_dashboard_process_keeps_serving_when_redis_goes_away(tmp_path):
    server = EmbeddedRedis()
    try:
        client = redis.Redis.from_url(server.url)
        write_synthetic_run(client, "small-1", updates=1000, workers=2, episodes=100, progress_points=50,
                            evaluations=3)
        url_file = tmp_path / "url"
        process = subprocess.Popen([sys.executable, "-m", "ddq", "dashboard", "--redis-url", server.url,
                                    "--url-file", str(url_file)], stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while not url_file.exists():
                assert process.poll() is None, process.stderr.read()
                assert time.monotonic() < deadline
                time.sleep(0.05)
            url = url_file.read_text()
            status, overview = _get(url + "api/run")
            assert status == 200 and overview["run"] == "small-1"  # the only run there, picked without --run
            server.stop()
            status, body = _get(url + "api/workers")
            assert status == 503 and "Redis is unreachable" in body["error"]
            assert process.poll() is None
        finally:
            process.terminate()
            process.wait(10)
    finally:
        server.stop()
