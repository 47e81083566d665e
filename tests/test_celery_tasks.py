"""Celery's background jobs with a real worker process (and beat) on a real Redis."""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import redis

from conftest import run_ddq
from ddq.config import write_settings
from ddq.core.agent import model_parameters
from ddq.core.settings import build_config
from ddq.param_server.client import ParameterClient
from ddq.param_server.launch import start_shards, stop_servers, wait_until_serving
from ddq.processes import stop
from ddq.services.tasks import celery_url
from ddq.transport.keys import RunKeys
from ddq.transport.redis_server import EmbeddedRedis


@pytest.mark.slow
def test_worker_evaluates_snapshots_periodically_and_archives_on_request(tmp_path):
    with EmbeddedRedis() as server:
        admin = redis.Redis.from_url(server.url)
        config = build_config({"env": "ddq/Snake-v0", "snake_size": 6, "model": "mlp", "hidden": [32],
                               "eval_episodes": 2, "run_dir": str(tmp_path / "run"),
                               "server": {"snapshot_every": 1}})
        shards = start_shards(config, server.url, "bg", tmp_path)
        wait_until_serving(admin, "bg", 1, shards)
        client = ParameterClient(server.url, "bg", model_parameters(config.agent))
        client.pull()
        for _ in range(3):
            client.push(np.full(client.flat.size, 1e-3, np.float32))
        # the run folder's config.json, its run_dir as `ddq train` was given it (relative to where that ran),
        # for a worker started by hand from another folder: its schedule and archive go beside the file
        written = copy.deepcopy(config)
        written.run.run_dir = "run"
        env = dict(os.environ, DDQ_REDIS_URL=server.url, DDQ_RUN="bg", DDQ_EVAL_EVERY_S="1",
                   DDQ_SETTINGS=str(write_settings(written, tmp_path / "run" / "config.json")))
        (elsewhere := tmp_path / "elsewhere").mkdir()
        worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "ddq.services.tasks", "worker", "--beat",
                                   "--pool", "solo", "--loglevel", "WARNING"], env=env, cwd=elsewhere,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)  # a group of its own: its beat goes with it (`stop`)
        try:
            key = RunKeys("bg").evaluations
            deadline = time.monotonic() + 90
            while admin.llen(key) < 2:
                assert worker.poll() is None, worker.stderr.read()
                assert time.monotonic() < deadline, "no periodic evaluation"
                time.sleep(0.2)
            record = json.loads(admin.lindex(key, -1))
            assert record["version"] == 3 and len(record["returns"]) == 2 and record["time"] > 0
            assert record["source"] == "celery" and record["env_steps"] == 0
            episode = json.loads(admin.hget(RunKeys("bg").replay, "episode"))
            assert int(admin.hget(RunKeys("bg").replay, "version")) == 3
            frames = np.frombuffer(base64.b64decode(episode["frames"]), np.uint8)
            assert episode["side"] == 8 and frames.size == episode["count"] * 64 and episode["count"] >= 2
            assert episode["version"] == 3 and set(np.unique(frames).astype(str)) <= set(episode["palette"])
            # frame by frame, the apples eaten so far and the snake's length (3 at the start, one more an apple)
            assert len(episode["scores"]) == len(episode["lengths"]) == episode["count"]
            assert [3 + apples for apples in episode["scores"]] == episode["lengths"]

            from celery import Celery
            caller = Celery(broker=celery_url(server.url), backend=celery_url(server.url))
            caller.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"])
            path = caller.send_task("ddq.tasks.archive_snapshot").get(timeout=60)
            assert path == str(tmp_path / "run" / "archive" / "snapshot-v3.pt")
            # a message through the run's Redis (which every executor may write to) chooses no folder
            chosen = tmp_path / "chosen-by-a-peer"
            with pytest.raises(TypeError):
                caller.send_task("ddq.tasks.archive_snapshot", args=[str(chosen)]).get(timeout=60)
            assert not chosen.exists() and os.listdir(elsewhere) == []
            evaluated = run_ddq("evaluate", path, "--episodes", "1")
            assert evaluated.returncode == 0, evaluated.stderr
        finally:
            stop(worker, timeout=30)  # SIGTERM (Celery's warm shutdown), SIGKILL after 30 s
            client.close()
            assert stop_servers(admin, "bg", shards) == [0]


@pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v redis-server"], capture_output=True).returncode,
                    reason="no redis-server with TLS on PATH")
def test_celery_reaches_a_tls_redis_through_the_url_ddq_gives_it(tmp_path):
    """A rediss:// URL (one's own Redis, `--redis-url`, with its CA in the URL or in a file): Celery's broker
    and result backend log in and verify the server. Without `ssl_cert_reqs` Celery refused the URL, and the
    run went on without its worker."""
    from urllib.parse import quote

    from celery import Celery
    from kombu import Connection

    with EmbeddedRedis(listen="127.0.0.2", run="celery-tls") as server:
        with_file = server.remote_url.split("?")[0] + f"?ssl_ca_certs={quote(str(server.folder / 'tls' / 'ca.crt'))}"
        for url in (server.remote_url, with_file):
            with Connection(celery_url(url)) as broker:
                assert broker.default_channel.client.ping()
            assert Celery(broker="memory://", backend=celery_url(url)).backend.client.ping()


def test_the_worker_knows_ddqs_tasks_alone_and_takes_no_broadcast_commands():
    """Any process that can write to the run's Redis can send the worker a message: Celery's canvas tasks
    (starmap, chunks, ...) would let one run ddq's evaluation any number of times, and its broadcast commands
    would let one shut the worker down. The worker the suite starts above runs with these settings."""
    code = ("import json; from ddq.services.tasks import app; app.finalize(); "
            "print(json.dumps([sorted(app.tasks), app.conf.worker_enable_remote_control]))")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, DDQ_REDIS_URL="redis://127.0.0.1:1/0"))
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert json.loads(shown.stdout) == [["celery.backend_cleanup", "ddq.tasks.archive_snapshot",
                                         "ddq.tasks.evaluate_snapshot"], False]
