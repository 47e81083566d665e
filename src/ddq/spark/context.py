"""Spark for the distributed modes, on the driver: its SparkConf, JVM and SparkContext, and the settings ddq
gives them (the job that runs the workers' tasks is `ddq.spark.job`'s)."""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddq.config.masters import is_local, is_standalone, with_task_retries
from ddq.spark.jvm_archive import java_options, jvm_options, note_class_path
from ddq.spark.jvm_boot import BootingJvm, end_unused_jvm, launch_jvm
from ddq.spark.operator_conf import operator_settings
from ddq.transport.credentials import PASSWORD_VARIABLE

TASK_RETRIES = 4
# How long a killed task's Python process has to end before Spark kills it (Spark's default: 2 s; Spark
# looks every 2 s, so the wait is up to 2 s longer). When a data-parallel worker dies, Spark kills the
# stage's other tasks, and worker 0 writes its final snapshot as it ends; the stage's next start waits
# for that process and begins from the snapshot. A CI run once began the next start from the run's first
# weights, 272 updates back: worker 0, likely slowed by a loaded 2-core machine, was killed first. A 5 s
# delay put into worker 0's end did the same with 2 s, and with 10 s the next start began from the
# snapshot. The longer wait costs only where a killed task does not end by itself: a rank or a --sync
# actor whose peer's host vanished delays the stage's next start by it. It applies to every mode.
TASK_KILL_TIMEOUT = "10s"
# A local master's JVM schedules a few tasks that last the run and answers py4j: its optimising compiler and
# parallel collector only take cores from the workers (a 2,000-step CartPole downpour run: 8.7 CPU-seconds
# of the JVM's, 3.9-4.8 with these). Spark's defaultJavaOptions, so that a user's extraJavaOptions still apply.
LOCAL_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# pyspark checks pandas' version as it starts a context, and warns of pandas 3: ddq runs no pandas code on Spark
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)


class SparkJobFailed(RuntimeError):
    pass


def launched_by_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit's PythonRunner hands its JVM over this way


def prepare_environment(master: str | None, driver_host: str | None, bind: str | None) -> None:
    """What the JVM and the Python workers read from this process's environment (set before any thread
    starts one)."""
    if is_local(master):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if driver_host is not None:
        os.environ.setdefault("SPARK_LOCAL_IP", bind or driver_host)


def spark_conf(master: str | None, app: str, driver_host: str | None, bind: str | None) -> Any:
    from pyspark import SparkConf

    conf = SparkConf() if master is None else SparkConf().setMaster(master)
    if is_local(master):
        # (a JVM spark-submit started already runs: no option reaches it, so no archive is looked for)
        sharing = "" if launched_by_spark_submit() else jvm_options()
        launch_defaults = {"spark.driver.defaultJavaOptions": f"{LOCAL_JVM_OPTIONS} {sharing}".rstrip(),
                           "spark.python.daemon.module": "ddq.spark.daemon"}
        operators = operator_settings()  # what spark-defaults.conf names: a --conf of ddq's would override it
        for key, value in launch_defaults.items():
            if key not in operators:
                conf = conf.setIfMissing(key, value)
    if driver_host is not None:
        conf = conf.set("spark.driver.host", driver_host).set("spark.driver.bindAddress", bind or driver_host)
    return (conf.setAppName(app).set("spark.ui.enabled", "false").set("spark.ui.showConsoleProgress", "false")
            .set("spark.task.maxFailures", str(TASK_RETRIES)).set("spark.python.worker.reuse", "true"))


def jvm_gateway(conf: Any, log_path: Path | None, booted: BootingJvm | None = None) -> Any:
    """The py4j gateway to the JVM a context for `conf` runs on: the one `booted` for it (`ddq.spark.jvm_boot`),
    spark-submit's, or one ddq starts now (its output into `log_path`, when given). SparkJobFailed, in the
    JVM's own words where its log has them, when it ends before it answers."""
    logged = log_path.stat().st_size if log_path is not None and log_path.exists() else 0  # a resumed run's
    try:
        if booted is not None:
            gateway = booted.gateway(log_path)
        elif log_path is None or launched_by_spark_submit():  # spark-submit's JVM exists already, with its stderr
            gateway = launch_jvm(conf)
        else:
            with open(log_path, "ab") as log:
                gateway = launch_jvm(conf, log)
    except Exception as error:  # pyspark's own words say only that the JVM exited
        raise SparkJobFailed(f"Spark's JVM ended as it started: {jvm_error(log_path, logged) or error}") from error
    if getattr(gateway, "proc", None) is not None:  # a JVM of ddq's: the class path an archive it writes needs
        note_class_path(java_options(conf), gateway.proc.pid)
    return gateway


def jvm_error(log_path: Path | None, start: int) -> str | None:
    """The error the JVM ended with, from what it printed into `log_path` from byte `start` on: an uncaught
    exception's line without its thread ("org.apache.spark.SparkException: ..."), or spark-submit's "Error:
    ...", the last of them; else the last exception line it logged (a warning's, perhaps)."""
    if log_path is None:
        return None
    try:
        with open(log_path, "rb") as log:
            log.seek(start)
            text = log.read().decode(errors="replace")
    except OSError:
        return None
    ended = re.findall(r'^(?:Exception in thread "[^"]*" (.*)|(Error: .*))$', text, re.MULTILINE)
    if ended:
        return "".join(ended[-1])
    logged = re.findall(r"^((?:\w+\.)+\w+(?:Exception|Error)\b.*)$", text, re.MULTILINE)
    return logged[-1] if logged else None


def start_context(conf: Any, gateway: Any, made: Callable[[Any], None], password: str | None = None,
                  workers: int = 1) -> Any:
    """The context for `conf` on `gateway`'s JVM (`jvm_gateway`), once a cluster's executors offer a task slot
    for each of the run's `workers` (`executor_wait`); `made(context)` is told of it before anything else
    reaches its JVM. The run's Redis `password` reaches the executors in their launch environment, when
    `password_route` allows: set after the JVM started, as what the JVM starts with is on its command line.
    A JVM of ddq's is ended when no context is made on it (one of spark-submit's is spark-submit's)."""
    from pyspark import SparkContext

    settings = gateway.jvm.org.apache.spark.SparkConf(True)  # conf, spark-submit's and spark-defaults.conf's
    master = settings.get("spark.master", "local[*]")
    if password is not None:
        refused = password_route(master, settings.get("spark.authenticate", "false") == "true",
                                 settings.get("spark.network.crypto.enabled", "false") == "true")
        if refused is None:
            conf.set(f"spark.executorEnv.{PASSWORD_VARIABLE}", password)
        else:
            print(f"ddq: {refused}", file=sys.stderr, flush=True)
    for key, value in ddq_spark_defaults(master, workers, int(settings.get("spark.task.cpus", "1"))).items():
        if not settings.contains(key):  # an operator's spark-defaults.conf, PYSPARK_SUBMIT_ARGS or spark-submit's wins
            conf.set(key, value)
    python = None if is_local(master) else executors_python(settings)  # a local master's: this one's
    try:
        context = SparkContext(conf=conf, gateway=gateway)
        context.pythonExec = python or context.pythonExec
    except BaseException as error:
        refused = java_refusal(error)  # read while its JVM is there to say it (never raises)
        if getattr(gateway, "proc", None) is not None:  # a JVM of ddq's, which no context will stop
            end_unused_jvm(gateway.proc, conf)
        forget_gateway(gateway)
        if refused is not None:
            raise SparkJobFailed(f"Spark could not make its context: {refused}") from error
        raise
    made(context)
    if not is_local(master):  # executors have it from their launch; each task's function need not
        context.environment.pop(PASSWORD_VARIABLE, None)
    context.setLogLevel("ERROR")
    return context


def executors_python(settings: Any) -> str | None:
    """The Python the JVM's `settings` name for the executors (spark.pyspark.python), if any. Spark's rule puts
    it above $PYSPARK_PYTHON, but pyspark reads only the variable, which spark-submit sets from the setting: a
    driver started as `ddq train --spark-master` with it in spark-defaults.conf shipped the archive it names
    and ran the executors' `python3` (without ddq's dependencies)."""
    python = settings.get("spark.pyspark.python", "")
    return str(python) if python else None


def java_refusal(error: BaseException) -> str | None:
    """An exception the JVM threw, as one line: the first line of its own words and of its first cause's (a
    Kubernetes client's "An error has occurred." says why only there); None for an error of another kind."""
    from py4j.protocol import Py4JJavaError

    if not isinstance(error, Py4JJavaError):
        return None
    try:
        thrown = error.java_exception
        cause = thrown.getCause()
        words = str(thrown.toString()).splitlines()[0]
        return words + ("" if cause is None else f" (caused by {str(cause.toString()).splitlines()[0]})")
    except Exception:  # its JVM gone meanwhile (py4j's own text would ask it for the stack trace)
        return str(error.errmsg)


def master_and_wait(gateway: Any) -> tuple[str, float]:
    """The master `gateway`'s JVM was given (by ddq, spark-submit or spark-defaults.conf), and how long making a
    context there may wait for a cluster's executors to register (its
    spark.scheduler.maxRegisteredResourcesWaitingTime; none on a local master), in seconds."""
    settings = gateway.jvm.org.apache.spark.SparkConf(True)
    master = str(settings.get("spark.master", "local[*]"))
    if is_local(master):
        return master, 0.0
    wait = settings.get("spark.scheduler.maxRegisteredResourcesWaitingTime", "30s")
    return master, float(gateway.jvm.org.apache.spark.network.util.JavaUtils.timeStringAsMs(wait)) / 1000


def forget_gateway(gateway: Any) -> None:
    """pyspark keeps a process's first gateway for every later context, even one made on a gateway of its own:
    forgotten once its context stops, or once none could be made on it, a later run in this process
    (`ddq.train` called again) starts on its own JVM, not on one that ended."""
    from pyspark import SparkContext

    with SparkContext._lock:
        if SparkContext._gateway is gateway:
            SparkContext._gateway = None
            SparkContext._jvm = None


def ddq_spark_defaults(master: str, workers: int, task_cpus: int) -> dict[str, str]:
    """The Spark settings ddq chooses where the operator's configuration says nothing: the kill timeout
    (TASK_KILL_TIMEOUT) and, on a cluster, `executor_wait`'s. (A SparkConf made before its JVM is empty, so
    it cannot tell whether an operator set one: `start_context` asks the JVM's.)"""
    return {"spark.python.task.killTimeout": TASK_KILL_TIMEOUT, **executor_wait(master, workers, task_cpus)}


def executor_wait(master: str, workers: int, task_cpus: int) -> dict[str, str]:
    """What makes Spark hold a cluster's tasks until its executors offer a slot for every worker (at most
    spark.scheduler.maxRegisteredResourcesWaitingTime, 30 s by default). Without it Spark starts the tasks
    on the first executor to register, and those beyond its cores wait for one to end: a downpour worker
    that starts after the budget is spent plays nothing. A standalone master counts the cores it was asked
    for (spark.cores.max, else none: no wait); YARN and Kubernetes the executors asked for. A local master's
    cores are there from the start."""
    if is_local(master):
        return {}
    wait = {"spark.scheduler.minRegisteredResourcesRatio": "1.0"}
    if is_standalone(master):
        wait["spark.cores.max"] = str(workers * task_cpus)  # and no more: ddq runs one task per worker
    return wait


def task_slots(context: Any) -> int:
    """How many tasks the context's executors can run at once now (Spark's own count, as its barrier stages
    check theirs)."""
    spark = context._jsc.sc()
    return spark.maxNumConcurrentTasks(spark.resourceProfileManager().defaultResourceProfile())


def password_route(master: str, authenticated: bool, encrypted: bool) -> str | None:
    """None when Spark may carry the run's Redis password to its executors (a local master's never leave
    this host; a cluster's go in their launch environment, over channels Spark authenticates and encrypts);
    otherwise the line that says why it does not, and what the executors' hosts need instead."""
    if is_local(master) or authenticated and encrypted:
        return None
    return (f"Spark's channel to its executors is not authenticated and encrypted (spark.authenticate, "
            f"spark.network.crypto.enabled): anything that reaches this driver's ports may join the job as an "
            f"executor, and the Redis password is not sent to them: each executor's host needs "
            f"{PASSWORD_VARIABLE} or {PASSWORD_VARIABLE}_FILE (docs/cluster.md, \"Before the first run\")")


def quiet_py4j() -> None:
    """Keeps py4j's tracebacks off the console. It logs a call that fails (its JVM gone as the run ends, a job
    cut off) with a traceback besides raising it, and ddq reports what it raises in one line (the full-disk
    test once caught the log's). Most go to its own logger; a call whose answer is cut off mid-read (a JVM
    exiting as the run ends) goes to the root logger through `logging.exception`, which a filter on the
    root logger alone reaches (CI once caught one on a downpour run's stderr)."""
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    logging.getLogger().addFilter(_not_from_py4j)  # the same function: added once however often this runs


def _not_from_py4j(record: logging.LogRecord) -> bool:
    return f"{os.sep}py4j{os.sep}" not in record.pathname


def local_master(workers: int) -> str:
    """This host's master for `workers` workers, trying a failed task as a cluster's would (`with_task_retries`:
    local mode retries only when told)."""
    return with_task_retries(f"local[{workers}]", TASK_RETRIES)
