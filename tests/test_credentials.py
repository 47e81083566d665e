"""The Redis password on its way to Spark's executors (issue 40's defect 1): a task carries a placeholder, never
the password, and an executor fills it in from its own environment, or says in one line what its host lacks.
Pure logic, and one job on a local master's real Python workers; the runs across test hosts
(test_across_hosts.py, on a cluster whose Spark authenticates and encrypts) are where Spark carries it."""

from __future__ import annotations

import sys
from urllib.parse import quote

import pytest
from pyspark.serializers import CloudPickleSerializer

from ddq.spark.context import password_route
from ddq.spark.job import stage_function
from ddq.transport.credentials import (
    PASSWORD_FILE_VARIABLE,
    PASSWORD_VARIABLE,
    PLACEHOLDER,
    MissingPasswordError,
    executor_url,
    run_password,
    split_password,
)

SECRET = "s3cr/et+pw=="  # characters a URL must quote
QUOTED = quote(SECRET, safe="")


def test_a_urls_password_is_split_off_in_the_user_part_or_the_query():
    url, password = split_password(f"rediss://ddq:{QUOTED}@10.0.0.1:6390/0?ssl_ca_data=x")
    assert url == f"rediss://ddq:{PLACEHOLDER}@10.0.0.1:6390/0?ssl_ca_data=x" and password == SECRET
    url, password = split_password(f"unix:///tmp/r.sock?db=0&username=ddq&password={QUOTED}")
    assert PLACEHOLDER in url and SECRET not in url and password == SECRET
    assert split_password("unix:///tmp/r.sock?db=0") == ("unix:///tmp/r.sock?db=0", None)
    assert split_password("redis://127.0.0.1:6379/0") == ("redis://127.0.0.1:6379/0", None)


@pytest.mark.parametrize("url", [f"rediss://ddq:{QUOTED}@h0:6390/0", f"unix:///tmp/r.sock?password={QUOTED}&db=0"])
def test_an_executor_puts_back_its_hosts_password_from_the_environment_or_a_file(url, monkeypatch, tmp_path):
    import redis

    template, password = split_password(url)
    monkeypatch.delenv(PASSWORD_VARIABLE, raising=False)
    monkeypatch.delenv(PASSWORD_FILE_VARIABLE, raising=False)
    with pytest.raises(MissingPasswordError, match=f"{PASSWORD_VARIABLE} or {PASSWORD_FILE_VARIABLE}"):
        executor_url(template)
    secret_file = tmp_path / "password"
    secret_file.write_text(f"{SECRET}\n")
    monkeypatch.setenv(PASSWORD_FILE_VARIABLE, str(secret_file))
    from_file = executor_url(template)
    monkeypatch.setenv(PASSWORD_VARIABLE, SECRET)
    from_variable = executor_url(template)
    for filled in (from_file, from_variable):  # what redis-py reads back is the password itself
        assert redis.connection.parse_url(filled)["password"] == SECRET
    monkeypatch.delenv(PASSWORD_VARIABLE)
    monkeypatch.setenv(PASSWORD_FILE_VARIABLE, str(tmp_path / "missing"))
    with pytest.raises(MissingPasswordError, match="cannot read a password from"):
        executor_url(template)
    assert executor_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"  # none wanted, none read


def test_the_function_spark_pickles_into_each_task_holds_no_password():
    template, password = split_password(f"rediss://ddq:{QUOTED}@h0:6390/0")
    pickled = CloudPickleSerializer().dumps(stage_function(lambda *args: iter(()), "{}", template, "run-1"))
    assert SECRET.encode() not in pickled and QUOTED.encode() not in pickled and PLACEHOLDER.encode() in pickled


def test_spark_carries_the_password_only_on_a_local_master_or_authenticated_and_encrypted_channels():
    assert password_route("local[2,4]", False, False) is None
    assert password_route("spark://h0:7077", True, True) is None
    for authenticated, encrypted in ((False, False), (True, False), (False, True)):
        line = password_route("spark://h0:7077", authenticated, encrypted)
        assert line is not None and "spark.authenticate" in line and PASSWORD_VARIABLE in line and "\n" not in line


def test_a_runs_password_is_the_given_urls_or_the_hosts_or_made_for_a_redis_serving_other_hosts(monkeypatch):
    monkeypatch.delenv(PASSWORD_VARIABLE, raising=False)
    monkeypatch.delenv(PASSWORD_FILE_VARIABLE, raising=False)
    assert run_password(f"redis://:{QUOTED}@h0:6379/0", None) == SECRET
    assert run_password(None, None) is None  # a private socket only this user opens
    made = run_password(None, "10.0.0.1")
    assert made and len(made) >= 32 and made != run_password(None, "10.0.0.1")
    monkeypatch.setenv(PASSWORD_VARIABLE, SECRET)  # the operator's, provisioned on the executors' hosts too
    assert run_password(None, "10.0.0.1") == SECRET


def test_a_real_spark_task_without_its_hosts_password_fails_the_job_with_that_one_line(tmp_path, monkeypatch):
    """On a local master's real Python workers, which ddq was not asked to give the password: the job's error
    is the executor's line, not Py4J's."""
    from ddq.spark.context import local_master
    from ddq.spark.job import SparkJob
    from ddq.spark.start import SparkStarting
    from ddq.spark.tasks import barista_task

    monkeypatch.delenv(PASSWORD_VARIABLE, raising=False)
    monkeypatch.delenv(PASSWORD_FILE_VARIABLE, raising=False)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # as a run sets it for a local master
    template, _ = split_password(f"rediss://ddq:{QUOTED}@127.0.0.1:1/0")
    # started and stopped as a run does (its JVM ends, and no later context in this process uses its gateway)
    starting = SparkStarting(local_master(1), "ddq-test-credentials", tmp_path / "spark.log", "127.0.0.1", None, 1,
                             lambda context: None)
    context = starting.result()
    try:
        job = SparkJob(context, barista_task, 1, False, "{}", template, "run-1")
        job.start()
        job.join(120)
        assert not job.is_alive() and job.error is not None
        assert "MissingPasswordError: the run's Redis wants a password" in str(job.error), job.error
    finally:
        starting.stop()
