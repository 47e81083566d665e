"""The dashboard's JSON API on a real Redis holding a long run (16 workers, a million updates)."""

from __future__ import annotations

import base64
import functools
import hashlib
import http.client
import json
import os
import pty
import select
import socket
import ssl
import subprocess
import sys
import time
import types
import urllib.error
import urllib.request

import numpy as np
import pytest
import redis

import ddq.services.telemetry as telemetry
from conftest import command_lines_holding
from ddq.config import settings_document
from ddq.core.settings import build_config
from ddq.dashboard.app import create_app, pick_run
from ddq.dashboard.launch import Dashboard
from ddq.dashboard.series import bucket_starts
from ddq.dashboard.serving import MAX_CONNECTIONS, MAX_PER_CLIENT
from ddq.services.telemetry import RunReporter
from ddq.transport.keys import RunKeys
from ddq.transport.redis_server import EmbeddedRedis
from ddq.transport.run_store import RunStore
from ddq.transport.shard_stores import registered_url
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


def test_a_run_without_a_parameter_server_counts_its_workers_updates(big_run):
    """Data-parallel's workers apply every update themselves and no shard reports: the header's updates are
    the workers' newest weights version (it said 0), and it has no shards (it said 1). Each worker's row says
    its share of time in the all-reduces (the straggler has the least); the header, how far behind the
    driver's evaluations came, as the driver records it (a change under a tenth of a second is not written)."""
    client, _ = big_run
    run, config = "data-parallel-1", build_config({"env": "CartPole-v1", "mode": "data-parallel", "workers": 2})
    reporter = RunReporter(RunStore(client, run), {"run": run, "settings": settings_document(config)}, shards=0)
    for worker, version, collective_s in ((0, 40, 3.0), (1, 41, 0.5)):
        client.hset(RunKeys(run).workers, str(worker), json.dumps({
            "worker": worker, "attempt": 0, "env_steps": 1000, "pushes": version, "state": "running",
            "heartbeat": time.time(), "weights_version": version, "pushes_per_s": 8.0, "wall_time_s": 12.0,
            "collective_s": collective_s}))
    app = create_app(client, run)
    app.testing = True
    overview = app.test_client().get("/api/run").get_json()
    assert (overview["mode"], overview["updates"], overview["shards"]) == ("data-parallel", 41, 0)
    assert overview["evaluation_lag_s"] == 0.0
    reporter.record_evaluation_lag(12.34)
    reporter.record_evaluation_lag(12.38)  # not written: within a tenth of the last
    assert app.test_client().get("/api/run").get_json()["evaluation_lag_s"] == 12.3
    workers = app.test_client().get("/api/workers").get_json()
    assert [w["collective_share"] for w in workers] == [3.0 / 12.0, 0.5 / 12.0]


def test_a_closing_point_rates_the_runs_last_second_not_the_moment_before_it(big_run, monkeypatch):
    """A run's closing point comes just after its last regular one, when no worker runs to give its rate: the
    driver's own count over the last second or more gives it (it said 0; over the last 0.1 s, a spike)."""
    client, _ = big_run
    clock = [100.0]
    monkeypatch.setattr(telemetry, "time", types.SimpleNamespace(time=lambda: clock[0]))
    reporter = RunReporter(RunStore(client, "closing-1"), {"run": "closing-1"}, shards=0, every_s=1.0)
    rates = []
    for now, env_steps in ((100.0, 0), (101.0, 1_000), (101.5, 1_200), (101.8, 1_500), (101.9, 1_700)):
        clock[0] = now  # a log mark's point at 101.5 s, a regular one at 101.8 s, the closing one: each since 100 s
        rates.append(reporter.record_progress(env_steps, 0.5, force=True)["env_steps_per_s"])
    assert rates[0] is None and rates[1] == pytest.approx(1_000)
    assert rates[2:] == [pytest.approx(1_200 / 1.5), pytest.approx(1_500 / 1.8), pytest.approx(1_700 / 1.9)]


def assert_first_layer_shows(layer: dict, weights: np.ndarray) -> None:
    """The first-layer images are the MLP's first 64 units of `weights`, over the 12x12 board."""
    assert layer["available"] and layer["layer"] == "fc1.weight"  # torch's "2.weight", named for a person
    assert (layer["filters"], layer["channels"], layer["height"], layer["width"]) == (64, 1, 12, 12)
    pixels = np.frombuffer(base64.b64decode(layer["pixels"]), np.uint8).reshape(64, 144)
    units = weights[:64 * 144].reshape(64, 144)
    scale = np.abs(units).max(axis=1, keepdims=True)
    assert np.abs(pixels - (127.5 + 127.5 * units / scale)).max() <= 0.5 + 1e-4  # each unit scaled alone
    assert ((pixels.max(axis=1) == 255) | (pixels.min(axis=1) == 0)).all()  # its largest |w| at an end


def test_first_layer_images_are_the_published_weights(api, big_run):
    _, run = big_run
    assert_first_layer_shows(api.get("/api/first-layer").get_json(), run.weights)

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


def test_a_redis_holding_only_a_run_started_by_hand_says_the_dashboard_shows_ddq_trains_runs():
    """A parameter server and Baristas started by hand write their keys, but no run info: the lines say so,
    where they had said "0 runs (none)" beside the run's keys."""
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        client.set(RunKeys("demo").control, "run")  # as a by-hand run's keys look to the dashboard: not its info
        with pytest.raises(ValueError, match=r"^this Redis holds no run that ddq train started \(a parameter server"):
            pick_run(client, None)
        error = create_app(client, "demo").test_client().get("/api/run").get_json()["error"]
        assert "no run 'demo' that ddq train started" in error and "started by hand record none" in error


def test_a_dashboard_that_cannot_start_says_why_in_the_drivers_warning(tmp_path):
    """A --dashboard-port in use: the warning gives the dashboard's own reason, not only where its log is."""
    with EmbeddedRedis() as server, socket.socket() as taken:
        client = redis.Redis.from_url(server.url)
        run = write_synthetic_run(client, "busy-port", updates=10, workers=1, episodes=2, progress_points=2,
                                  evaluations=1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        dashboard = Dashboard(server.url, run.run, tmp_path, port=taken.getsockname()[1])
        try:
            deadline = time.monotonic() + 60
            while (line := dashboard.announce()) is None:
                assert time.monotonic() < deadline, (tmp_path / "dashboard.log").read_text()
                time.sleep(0.1)
        finally:
            dashboard.stop()
    assert line.startswith("ddq: warning: the dashboard did not start (") and "is in use" in line, line


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


# ------------------------------------------------------------------ who may read it (issue 40, defect 9)
def _request(port: int, path: str, headers: dict[str, str], tls: bool = False,
             source: str = "127.0.0.1") -> tuple[int, dict, str]:
    """A GET with exactly these headers (Host included), from the loopback address `source`; the status, the
    JSON answer and any Set-Cookie. With `tls`, over TLS to a server whose certificate the caller checks
    itself (its fingerprint)."""
    connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=_unverified(),
                                             source_address=(source, 0)) if tls \
        else http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, json.loads(body) if path.startswith("/api") else {}, response.getheader("Set-Cookie", "")


def _unverified() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


def _start_dashboard(url_file, redis_url: str, *flags: str, stderr=subprocess.PIPE) -> subprocess.Popen:
    # its own session: no controlling terminal, so only a stderr that is one can show a token
    return subprocess.Popen([sys.executable, "-m", "ddq", "dashboard", "--redis-url", redis_url, "--url-file",
                             str(url_file), *flags], stderr=stderr, start_new_session=True)


def _wait_for(url_file, process: subprocess.Popen) -> int:
    deadline = time.monotonic() + 60
    while not url_file.exists():
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    return int(url_file.read_text().rstrip("/").rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def small_redis():
    with EmbeddedRedis() as server:
        write_synthetic_run(redis.Redis.from_url(server.url), "small-2", updates=100, workers=1, episodes=10,
                            progress_points=5, evaluations=1)
        yield server.url


def test_a_loopback_dashboard_answers_only_requests_that_name_it(small_redis, tmp_path):
    """DNS rebinding: a page at rebound.example whose name comes to resolve to 127.0.0.1 can send requests and
    read the answers; the browser still names rebound.example in the Host header."""
    url_file = tmp_path / "url"
    process = _start_dashboard(url_file, small_redis)
    try:
        port = _wait_for(url_file, process)
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            status, overview, _ = _request(port, "/api/run", {"Host": host})
            assert status == 200 and overview["run"] == "small-2", host  # no token on loopback, as before
        for host in (f"rebound.example:{port}", "rebound.example", f"10.1.2.3:{port}", ""):
            status, answer, _ = _request(port, "/api/run", {"Host": host})
            assert status == 403 and "is not a name of this dashboard" in answer["error"], host
    finally:
        process.terminate()
        process.wait(10)


def test_at_most_max_connections_are_served_at_once_and_a_freed_one_serves_again(small_redis, tmp_path):
    """Each connection has a thread, made before its request's token is checked: past MAX_CONNECTIONS a new
    one is closed as it comes, so a crowd of silent clients cannot make threads by the thousand. (They come
    from several loopback addresses: one address holds at most MAX_PER_CLIENT.)"""
    url_file = tmp_path / "url"
    process = _start_dashboard(url_file, small_redis)
    silent: list[socket.socket] = []
    try:
        port = _wait_for(url_file, process)
        host = {"Host": f"127.0.0.1:{port}"}
        silent = [socket.create_connection(("127.0.0.1", port), source_address=(f"127.0.0.{2 + i // MAX_PER_CLIENT}", 0))
                  for i in range(MAX_CONNECTIONS)]
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            _request(port, "/api/run", host)  # from an address that holds none
        for sock in silent:
            sock.close()
        deadline = time.monotonic() + 30  # each thread sees its client gone, and gives its slot back
        while True:
            try:
                assert _request(port, "/api/run", host)[0] == 200
                break
            except (http.client.HTTPException, ConnectionError):
                assert time.monotonic() < deadline, "no slot came free"
                time.sleep(0.1)
    finally:
        for sock in silent:
            sock.close()
        process.terminate()
        process.wait(10)


def test_beyond_loopback_every_request_needs_the_token_shown_once_on_the_terminal(small_redis, tmp_path):
    controller, terminal = pty.openpty()
    url_file = tmp_path / "url"
    process = _start_dashboard(url_file, small_redis, "--host", "0.0.0.0", stderr=terminal)
    os.close(terminal)
    try:
        port = _wait_for(url_file, process)
        shown, deadline = b"", time.monotonic() + 10
        while (b"token=" not in shown or not shown.endswith(b"\n")) and time.monotonic() < deadline:
            if select.select([controller], [], [], 0.1)[0]:
                shown += os.read(controller, 4096)
        lines = shown.decode().splitlines()
        token = next(line for line in lines if "?token=" in line).split("?token=")[1].split(" ")[0]
        assert len(token) >= 40 and shown.decode().count(token) == 1
        name = socket.gethostname()  # the URL shown, as a browser elsewhere opens it: not 0.0.0.0, and over TLS
        assert url_file.read_text() == f"https://{name}:{port}/" and f"https://{name}:{port}/?token=" in shown.decode()
        # the certificate served is the one whose fingerprint the terminal showed (what a browser's warning shows)
        served = ssl.get_server_certificate(("127.0.0.1", port))
        digest = hashlib.sha256(ssl.PEM_cert_to_DER_cert(served)).hexdigest().upper()
        assert f"fingerprint is {':'.join(digest[i:i + 2] for i in range(0, 64, 2))};" in shown.decode()
        assert not _answers_plain_http(port)
        silent = socket.create_connection(("127.0.0.1", port))  # a client that never speaks holds no other
        request = functools.partial(_request, tls=True)
        assert request(port, "/api/run", {"Host": f"{name}:{port}", "X-DDQ-Token": token})[0] == 200
        silent.close()
        host = {"Host": f"127.0.0.1:{port}"}
        for headers, path in (({}, "/api/run"), ({}, "/"), ({"X-DDQ-Token": "guess"}, "/api/run"),
                              ({}, "/api/run?token=guess"), ({"Cookie": "ddq_token=guess"}, "/api/workers")):
            status, answer, cookie = request(port, path, {**host, **headers})
            assert status == 401 and cookie == "", (headers, path)
            if path.startswith("/api"):
                assert "needs the token" in answer["error"] and len(answer["error"].splitlines()) == 1
        status, overview, cookie = request(port, f"/api/run?token={token}", host)
        assert status == 200 and overview["run"] == "small-2"
        assert cookie.startswith(f"ddq_token={token}") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert "Secure" in cookie
        assert request(port, "/", {**host, "Cookie": f"ddq_token={token}"})[0] == 200  # the page's own requests
        assert request(port, "/api/workers", {**host, "X-DDQ-Token": token})[0] == 200
        assert request(port, "/api/run", {"Host": f"192.0.2.7:{port}", "X-DDQ-Token": token})[0] == 200
        assert request(port, "/api/run", {"Host": f"rebound.example:{port}", "X-DDQ-Token": token})[0] == 403
        assert command_lines_holding(token) == []
        assert not any(token.encode() in path.read_bytes() for path in tmp_path.rglob("*") if path.is_file())
    finally:
        process.terminate()
        process.wait(10)
        os.close(controller)


def _answers_plain_http(port: int) -> bool:
    try:
        return _request(port, "/api/run", {"Host": f"127.0.0.1:{port}"})[0] > 0
    except (http.client.HTTPException, OSError):
        return False


def test_beyond_loopback_without_a_terminal_for_the_token_is_one_line(small_redis, tmp_path):
    url_file = tmp_path / "url"
    process = _start_dashboard(url_file, small_redis, "--host", "0.0.0.0")
    try:
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()  # one that served instead of refusing
    assert process.returncode == 2 and not url_file.exists()
    assert err.decode().startswith("ddq: error: --host 0.0.0.0 reaches beyond this host") and err.count(b"\n") == 1


def test_the_drivers_dashboard_is_announced_once_it_serves_and_nobody_waits_for_it(small_redis, tmp_path):
    """The driver starts its dashboard once the workers train, and its loop asks each time round whether it
    serves: a short run had ended while the driver waited for the dashboard's address, before its loop's
    first look, and logged no training point."""
    from ddq.dashboard.launch import Dashboard

    dashboard = Dashboard(small_redis, "small-2", tmp_path)
    try:
        assert not dashboard.url_file.exists()  # back at once: the process has not written its address yet
        said = [dashboard.announce()]
        deadline = time.monotonic() + 60
        while not dashboard.settled:
            assert time.monotonic() < deadline, (tmp_path / "dashboard.log").read_text()
            time.sleep(0.05)
            said.append(dashboard.announce())
        said.append(dashboard.announce())
        assert [line for line in said if line is not None] == [f"ddq: dashboard at {dashboard.url}"]  # once
        port = int(str(dashboard.url).rstrip("/").rsplit(":", 1)[1])
        status, overview, _ = _request(port, "/api/run", {"Host": f"127.0.0.1:{port}"})
        assert status == 200 and overview["run"] == "small-2"
    finally:
        dashboard.stop()
    assert dashboard.process.poll() is not None and not dashboard.url_file.exists()


def test_first_layer_images_come_from_the_store_of_a_shard_started_by_hand(big_run):
    """Shard 0 serves from a Redis of its own (`ddq param-server --listen`): its weights are there, and the run's
    Redis holds only where it is (with the password's placeholder, which the dashboard fills from its URL)."""
    client, run = big_run
    password = "dashboard-" + "x" * 12
    key, registration = f"ddq:{run.run}:ps:0:weights", f"ddq:{run.run}:ps:0:store"
    with EmbeddedRedis(listen="127.0.0.1", password=password) as own:
        own.client().set(key, client.get(key))
        kept = client.get(key)
        client.delete(key)
        client.set(registration, registered_url(own.remote_url))
        try:
            # the run's URL as the dashboard is given it: its password is the stores' (the run's own)
            app = create_app(client, run.run, redis_url=f"unix:///run.sock?db=0&username=ddq&password={password}")
            app.testing = True
            assert_first_layer_shows(app.test_client().get("/api/first-layer").get_json(), run.weights)
            with EmbeddedRedis(listen="127.0.0.1", password=password) as moved:  # the shard started again there
                moved.client().set(key, kept)
                client.set(registration, registered_url(moved.remote_url))
                assert_first_layer_shows(app.test_client().get("/api/first-layer").get_json(), run.weights)
                assert own.client().info("clients")["connected_clients"] == 1  # this one: the dashboard's closed
                client.set(key, kept)  # the shard stopped: it handed its weights back to the run's Redis
                client.delete(registration)
                assert_first_layer_shows(app.test_client().get("/api/first-layer").get_json(), run.weights)
                assert moved.client().info("clients")["connected_clients"] == 1
                client.delete(key)  # as it was: the weights in shard 0's own store alone
                client.set(registration, registered_url(own.remote_url))
            blind = create_app(client, run.run)  # no URL, so no password for the store: the run's Redis only
            blind.testing = True
            assert not blind.test_client().get("/api/first-layer").get_json()["available"]
        finally:
            client.set(key, kept)
            client.delete(registration)
