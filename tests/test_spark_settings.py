"""The Spark settings ddq chooses are defaults: a real JVM's context has ddq's where the operator set none,
and the operator's where they did (PYSPARK_SUBMIT_ARGS here; spark-defaults.conf and spark-submit's
--conf reach the JVM's configuration the same way). Those a local JVM needs as it starts go on its command
line, where spark-defaults.conf could not override them: one it names is left to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddq.spark.context import TASK_KILL_TIMEOUT, ddq_spark_defaults, local_master
from ddq.spark.start import SparkStarting

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


def test_an_operators_spark_defaults_conf_keeps_the_settings_ddq_would_give_the_jvm_as_it_starts(tmp_path,
                                                                                                 monkeypatch):
    """ddq's launch settings of a local JVM (its JIT options, the Python daemon) go on spark-submit's command
    line, which would override spark-defaults.conf: one it names is left to it, one it does not is ddq's."""
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("# the operator's\n\nspark.driver.defaultJavaOptions  -Dddq.operator=kept\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    starting = SparkStarting(local_master(1), "operators-defaults", tmp_path / "spark.log", "127.0.0.1", None, 1,
                             lambda context: None)
    try:
        settings = starting.result().getConf()
        assert settings.get("spark.driver.defaultJavaOptions") == "-Dddq.operator=kept"
        assert settings.get("spark.python.daemon.module") == "ddq.spark.daemon"
        jvm = starting.context._gateway.proc.pid
        assert b"-Dddq.operator=kept" in Path(f"/proc/{jvm}/cmdline").read_bytes().split(b"\0")
    finally:
        starting.stop()


def test_settings_the_jvm_refuses_as_it_starts_end_the_start_in_its_own_words(tmp_path, monkeypatch):
    """An operator's PYSPARK_SUBMIT_ARGS that spark-submit refuses: pyspark says only that the JVM exited
    before it sent its port; the JVM's own line, from what it printed this time (a resumed run's log holds
    earlier sessions'), is the one that says why."""
    from ddq.spark.context import SparkJobFailed

    log = tmp_path / "spark.log"
    log.write_text("Error: an earlier session's line\n")
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--no-such-option pyspark-shell")
    starting = SparkStarting(local_master(1), "refused", log, "127.0.0.1", None, 1, lambda context: None)
    try:
        with pytest.raises(SparkJobFailed) as failed:
            starting.result()
    finally:
        starting.stop()
    assert str(failed.value) == "Spark's JVM ended as it started: Error: Unrecognized option: --no-such-option"
