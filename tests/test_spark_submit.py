"""spark-submit of a short downpour run to a real Spark standalone master and worker on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest

from conftest import run_ddq, summary_of
from ddq.processes import spawn, stop
from ddq.transport.redis_server import free_port

SPARK_HOME = Path(pyspark.__file__).parent


def spark_env() -> dict[str, str]:
    return {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}


@pytest.fixture
def standalone_cluster(tmp_path):
    """A master and a worker with 2 cores, stopped by PID afterwards."""
    port = free_port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    master = spawn([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                    str(port), "--webui-port", str(free_port())], tmp_path / "master.log", env=spark_env())
    worker = spawn([spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host",
                    "127.0.0.1", "--cores", "2", "--memory", "2g", "--webui-port", str(free_port()),
                    "--work-dir", str(tmp_path / "work")], tmp_path / "worker.log", env=spark_env())
    try:
        deadline = time.monotonic() + 60
        while "Successfully registered with master" not in (tmp_path / "worker.log").read_text(errors="replace"):
            assert time.monotonic() < deadline, "the Spark worker did not register"
            assert master.poll() is None and worker.poll() is None
            time.sleep(0.2)
        yield f"spark://127.0.0.1:{port}"
    finally:
        stop(worker)
        stop(master)
    assert master.poll() is not None and worker.poll() is not None


@pytest.mark.slow
def test_spark_submit_runs_downpour_on_a_standalone_cluster(tmp_path, standalone_cluster):
    dist, run_dir = tmp_path / "dist", tmp_path / "run"
    assert run_ddq("package", str(dist)).returncode == 0
    submit = subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", standalone_cluster, "--py-files", str(dist / "ddq.zip"),
         "--conf", f"spark.pyspark.python={sys.executable}", str(dist / "ddq_submit.py"),
         "--workers", "2", "--env", "CartPole-v1", "--total-steps", "3000", "--eval-every", "3000",
         "--eval-episodes", "2", "--no-progress", "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=400, env=dict(os.environ, **spark_env()))
    assert submit.returncode == 0, submit.stderr[-3000:]
    summary = summary_of(run_dir)
    assert summary["mode"] == "downpour" and summary["env_steps"] >= 3000
    assert summary["updates"] > 0  # the weights moved
    assert len(summary["workers"]) == 2
    app_logs = list((tmp_path / "work").rglob("stderr"))
    assert app_logs, "the executors ran on the standalone worker"
