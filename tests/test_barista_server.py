"""A long-lived Barista driven by the dummy client, against a real Redis and parameter server."""

import json
import os
import re
import socket
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
        url_file, shards = tmp_path / "barista.url", []
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
            # before the run's parameter server serves its weights: a 503 with the reason, and it keeps serving
            early = run_ddq("dummy-client", url, "step", "--steps", "10")
            assert early.returncode == 2 and "the worker could not step: no weights in Redis" in early.stderr, early.stderr
            shards = start_shards(config, server.url, "hand", tmp_path)
            wait_until_serving(admin, "hand", 1, shards)
            step = run_ddq("dummy-client", url, "step", "--steps", "1200")
            assert step.returncode == 0, step.stderr
            stats = json.loads(step.stdout)
            assert stats["env_steps"] >= 1200 and stats["pushes"] > 0 and stats["state"] == "idle"
            again = json.loads(run_ddq("dummy-client", url, "step", "--steps", "200").stdout)
            assert again["env_steps"] >= stats["env_steps"] + 200  # same worker, same replay memory
            assert int(admin.get(RunKeys("hand").env_steps)) == again["env_steps"]
            bad = urllib.request.Request(f"{url}/step", data=b'{"steps": "many"}', method="POST",
                                         headers={"Content-Type": "application/json"})
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
                barista.wait()
            assert not shards or stop_servers(admin, "hand", shards) == [0]


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


def test_a_finished_worker_reports_its_whole_attempts_rates_not_its_last_windows():
    """A last heartbeat can come milliseconds after the one before, one rollout later: its window's rate is
    noise, so a finished row divides the attempt's totals by its wall time."""
    from ddq.workers.barista import StatsWindow, WorkerStats

    stats = WorkerStats(worker=0, attempt=0, env_steps=200_000, pushes=3_200, wall_time_s=12.5)
    window = StatsWindow()
    window.env_steps, window.pushes = 196_000, 3_136  # one rollout's steps and updates in the last window
    window.started -= 1.0  # that window began a second ago
    stats.state = "running"
    window.close(stats)
    assert 3_000 < stats.env_steps_per_s <= 4_000 and 48 < stats.pushes_per_s <= 64  # the window's: 4,000 in 1 s
    stats.state = "finished"
    window.close(stats)
    assert (stats.env_steps_per_s, stats.pushes_per_s) == (16_000.0, 256.0)


def _exchange(port: int, request: bytes, wait_s: float = 3.0) -> tuple[int, str, socket.socket]:
    """Sends raw request bytes and reads the answer without closing our side (a stalled client's socket stays
    open); returns the status, the body and the socket."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=wait_s)
    sock.sendall(request)
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except TimeoutError:
        pass
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/") else 0  # 0: no answer within wait_s
    return status, body.decode(errors="replace"), sock


def _post(port: int, path: str, headers: dict[str, str], body: bytes = b"{}") -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}"] + [f"{k}: {v}" for k, v in headers.items()]
    if "Content-Length" not in headers:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_a_web_page_cannot_drive_the_barista_and_bad_lengths_are_refused_at_once(tmp_path):
    """Issue 40's defect 9: any page the user opens can POST to 127.0.0.1 (a no-cors fetch sends text/plain
    with its own Origin); a negative Content-Length used to hold a handler thread, and the shutdown after it."""
    with EmbeddedRedis() as server:
        url_file = tmp_path / "barista.url"
        barista = subprocess.Popen([sys.executable, "-m", "ddq", "barista", "serve",  # its Redis from the environment
                                    "--run", "web", "--worker", "0", "--url-file", str(url_file), *FLAGS],
                                   stderr=subprocess.PIPE, text=True, env=dict(os.environ, DDQ_REDIS_URL=server.url))
        held = []
        try:
            deadline = time.monotonic() + 60
            while not url_file.exists():
                assert barista.poll() is None, barista.stderr.read()  # (read only once it has exited)
                assert time.monotonic() < deadline, "the Barista wrote no URL within 60 s"
                time.sleep(0.1)
            port = int(url_file.read_text().rsplit(":", 1)[1])
            json_type = {"Content-Type": "application/json"}
            refusals = [  # (request, status, words in the answer)
                (_post(port, "/shutdown", {"Content-Type": "text/plain;charset=UTF-8",
                                           "Origin": "https://evil.example"}), 403, "origin 'https://evil.example'"),
                (_post(port, "/shutdown", {"Content-Type": "text/plain;charset=UTF-8"}), 415, "application/json only"),
                (_post(port, "/step", {**json_type, "Origin": "null"}, b'{"steps": 5}'), 403, "origin 'null'"),
                (_post(port, "/shutdown", json_type).replace(b"127.0.0.1:", b"rebound.example:"), 403,
                 "does not name this server"),
                (b"GET /status HTTP/1.1\r\nHost: rebound.example\r\n\r\n", 403, "does not name this server"),
                (_post(port, "/step", {**json_type, "Content-Length": "-1"}), 400, "Content-Length '-1'"),
                (_post(port, "/step", {**json_type, "Content-Length": str(10**12)}, b""), 413, "at most 4096"),
                (_post(port, "/step", json_type, b"[" * 4000), 400, "nests too deep"),
            ]
            for request, status, words in refusals:
                answer, body, sock = _exchange(port, request)
                held.append(sock)  # left open, as a stalled client leaves it
                assert (answer, words in body) == (status, True), (request[:120], body)
            ok, body, sock = _exchange(port, _post(port, "/step", {**json_type, "Origin": f"http://127.0.0.1:{port}"},
                                                   b'{"steps": "many"}'))
            assert ok == 400 and "steps must be an integer" in body  # its own origin passes the checks
            stalled = socket.create_connection(("127.0.0.1", port))  # promises 100 bytes, sends 2
            stalled.sendall(_post(port, "/step", {**json_type, "Content-Length": "100"}, b"{}"))
            held += [sock, stalled]
            assert barista.poll() is None  # nothing above stopped it
            answer, body, _ = _exchange(port, _post(port, "/shutdown", json_type))
            assert answer == 200
            assert barista.wait(20) == 0  # promptly, though sockets are still held open
        finally:
            for sock in held:
                sock.close()
            if barista.poll() is None:
                barista.kill()
                barista.wait()


def test_the_help_of_a_hand_started_process_shows_what_it_reads():
    """A Barista or a shard started by hand never reads the driver's evaluations and services, nor actor-learner's
    wiring: its help leaves them out, and its --redis-url says where else the URL may come from."""
    for command in (["barista", "serve"], ["param-server"]):
        shown = " ".join(run_ddq(*command, "--help").stdout.split())
        assert "--env ENV" in shown and "--push-every PUSH_EVERY" in shown and "default $DDQ_REDIS_URL" in shown
        assert re.search(r"--(celery|dashboard|eval-every|send-every|sync)\b", shown) is None, (command, shown)
