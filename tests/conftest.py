"""Shared test helpers."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

# The files that take a third of the suite's time between them (the cross-host one, 7 tests, about 7 minutes of
# one xdist worker's). They start first, so that neither is what one worker still runs while the other idles.
LONGEST_FIRST = ("test_across_hosts.py", "test_failures.py", "test_shard_hosts.py")


# A suite started by `nohup`, or with `&` from a script (no job control), inherits SIGHUP or SIGINT ignored, and
# so would every ddq it starts: ddq keeps a signal it was started to ignore, and the tests of Ctrl-C and hangups
# would fail on how the suite was launched. Each is given back its default, for this process and its children.
for _number, _handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGHUP, signal.SIG_DFL)):
    if signal.getsignal(_number) == signal.SIG_IGN:
        signal.signal(_number, _handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The order the workers take files in: LONGEST_FIRST, then files with more tests before those with fewer
    (as xdist orders them by itself)."""
    tests_in = Counter(item.path.name for item in items)

    def rank(item: pytest.Item) -> tuple[int, int, str]:
        name = item.path.name
        return (LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST), -tests_in[name], name)

    items.sort(key=rank)  # stable: a file's tests keep their order


def run_ddq(*args: str, timeout: float = 600, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the real `ddq` command in a child process (`env`: variables added to this one's)."""
    return subprocess.run([sys.executable, "-m", "ddq", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})), cwd=cwd)


def command_lines_holding(secret: str) -> list[bytes]:
    """The command lines of every process on this machine that hold `secret` (there should be none)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if secret.encode() in line:
            found.append(line)
    return found


def left_running(run_dir: Path, *logs: str, timeout: float = 20) -> list[int]:
    """What still runs of the runs into `run_dir` after up to `timeout` s: the processes that name the folder
    (shards, Redis, Celery, the dashboard) or a run id that `logs` (the commands' stderr) printed: the shards'
    and Celery's, and the Spark JVM's, whose application name holds it (it exits a second or two after the
    driver's context stops)."""
    from ddq.benchmarks.procfs import processes_mentioning
    from ddq.transport.keys import run_ids

    runs = [run for log in logs for run in run_ids(log)]
    assert runs or not logs, "no run id in the logs given: a JVM of theirs would go unseen"
    marks = [str(run_dir), *runs]
    deadline = time.monotonic() + timeout
    while (left := sorted({pid for mark in marks for pid in processes_mentioning(mark)})) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def wait_for_progress(run_dir: Path, process: subprocess.Popen, log: Path, env_steps: int,
                      timeout: float = 300) -> None:
    """Until the driver logged an episode that ended past `env_steps` (a condition, not a time)."""
    deadline = time.monotonic() + timeout
    metrics = run_dir / "metrics.jsonl"
    while True:
        assert process.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no episode past {env_steps} env steps in {timeout} s"
        if metrics.exists() and any(json.loads(line).get("env_steps", 0) > env_steps
                                    for line in metrics.read_text().splitlines()[-50:] if line.strip()):
            return
        time.sleep(0.2)


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def event_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the run folder's TensorBoard event files (each session's), by tag, as (step, value) in
    the order written, read by TensorBoard's own reader keeping every point."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    assert list(run_dir.glob("events.out.tfevents.*")), f"no event file in {run_dir}"
    events = EventAccumulator(str(run_dir), size_guidance={SCALARS: 0})
    events.Reload()
    return {tag: [(event.step, event.value) for event in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def assert_events_match_metrics(run_dir: Path, tags: set[str], score: str | None = None) -> None:
    """The event files hold `tags` (at least), and every tag one point per metrics.jsonl point that has its value,
    at its env steps, with its value (as float32: TensorBoard keeps that)."""
    import numpy as np

    from ddq.run_folder import read_metrics, scalars

    expected: dict[str, list[tuple[int, float]]] = {}
    for point in read_metrics(run_dir):
        for tag, value in scalars(point, score).items():
            expected.setdefault(tag, []).append((point["env_steps"], float(np.float32(value))))
    read = event_scalars(run_dir)
    assert tags <= set(read), f"missing {tags - set(read)}; the event files hold {sorted(read)}"
    assert read == expected


def assert_best_is_the_best_evaluation(run_dir: Path) -> None:
    """best.pt holds the weights of the run's first evaluation with the highest mean return: `ddq.load` takes
    it, and its network plays that evaluation's episodes (same seeds) to the same mean return."""
    import torch

    import ddq
    from ddq.bookkeeping import play_evaluation
    from ddq.run_folder import read_metrics

    points = [point for point in read_metrics(run_dir) if point["kind"] == "eval"]
    evaluations = [point["mean_return"] for point in points]
    best = evaluations.index(max(evaluations))
    saved = torch.load(run_dir / "best.pt")
    assert saved["counters"]["evaluations"] == best + 1 and saved["counters"]["best_eval_return"] == max(evaluations)
    agent = ddq.load(run_dir / "best.pt")
    seed = points[best]["seed"]  # its episodes'
    assert play_evaluation(agent.network, agent.config, seed, torch.device("cpu")).mean_return == max(evaluations)



@pytest.fixture
def output_dir(request) -> Path:
    """test-output/<test name>/ at the repository root: what a test leaves to be looked at (screenshots)."""
    folder = Path(__file__).resolve().parents[1] / "test-output" / request.node.name
    folder.mkdir(parents=True, exist_ok=True)
    return folder
