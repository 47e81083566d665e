"""The Spark settings ddq chooses are defaults: a real JVM's context has ddq's where the operator set none,
and the operator's where they did (PYSPARK_SUBMIT_ARGS here; spark-defaults.conf and spark-submit's
--conf reach the JVM's configuration the same way)."""

from __future__ import annotations

import pytest

from ddq.modes.spark import TASK_KILL_TIMEOUT, SparkStarting, ddq_spark_defaults, local_master

pytestmark = pytest.mark.slow  # each test starts a JVM

KILL_TIMEOUT = "spark.python.task.killTimeout"


def kill_timeout_of_a_real_context(tmp_path, name: str) -> str:
    """The kill timeout of a local context started and stopped as a run's is."""
    starting = SparkStarting(local_master(1), name, tmp_path / f"{name}.log", "127.0.0.1", None, 1,
                             lambda context: None)
    try:
        return str(starting.result().getConf().get(KILL_TIMEOUT))
    finally:
        starting.stop()


def test_ddqs_kill_timeout_holds_where_the_operator_set_none_and_theirs_wins(tmp_path, monkeypatch):
    assert ddq_spark_defaults("local[2]", 2, 1) == {KILL_TIMEOUT: TASK_KILL_TIMEOUT}
    assert TASK_KILL_TIMEOUT != "2s"  # Spark's own, too short for worker 0's final snapshot on a loaded machine
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    assert kill_timeout_of_a_real_context(tmp_path, "ddq-defaults") == TASK_KILL_TIMEOUT
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", f"--conf {KILL_TIMEOUT}=3s pyspark-shell")
    assert kill_timeout_of_a_real_context(tmp_path, "operators-setting") == "3s"
