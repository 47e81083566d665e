"""`ddq bench scaling --hosts`: serial on one core against a distributed run on a Spark cluster of one-core
test hosts beside a services host, as the scaling bars set them (a small task here; the bars' in
docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddq.benchmarks.procfs import parent_and_command, processes_mentioning
from ddq.benchmarks.scaling import TASKS, outcome, run_bench, table, task_with_target, train_command, waits
from ddq.benchmarks.testhosts import BASE, PREFIX, _ip
from ddq.cli import build_parser
from hosts import skip_unless_root


def test_each_run_says_what_it_waited_on_from_its_summary():
    """The share of each data-parallel worker's time in the all-reduces, the driver's slowest evaluation
    behind its weights and the points it skipped; nothing for serial or downpour, which evaluate in line or
    the weights of the moment."""
    two = [{"collective_s": 2.37, "wall_time_s": 17.8}, {"collective_s": 2.58, "wall_time_s": 17.8}]
    assert waits({"mode": "data-parallel", "evaluation_lag_s": 22.34, "workers": two}) == (
        "workers 13-14% in all-reduces; evaluations up to 22.3 s behind")
    assert waits({"mode": "actor-learner", "evaluation_lag_s": 2.0, "evaluation_points_skipped": 1, "workers": two}) == (
        "evaluations up to 2.0 s behind; 1 evaluation point skipped")
    assert waits({"mode": "downpour", "evaluation_lag_s": 0.0, "workers": [{"wall_time_s": 9.0}]}) == ""
    assert waits({"mode": "serial", "workers": []}) == ""
    assert waits({"mode": "data-parallel", "workers": two[:1]}) == ""  # one worker alone all-reduces nothing


def test_target_sets_a_tasks_return_for_the_bench_and_refuses_a_task_without_one():
    assert TASKS["MinAtar/Breakout-v1"].target == 20.0  # serial's few minutes
    retargeted = task_with_target("MinAtar/Breakout-v1=7")
    assert retargeted.env == "MinAtar/Breakout-v1" and TASKS["MinAtar/Breakout-v1"].target == 20.0  # a copy
    breakout = train_command(retargeted, "serial", 1, 0, "/r")
    assert breakout[breakout.index("--target-return") + 1] == "7.0" and breakout[-4:-2] == ["--algo", "pqn"]
    with pytest.raises(ValueError, match=r"^--target ddq/Snake-v0=30: give ENV=RETURN for a task with a target"):
        task_with_target("ddq/Snake-v0=30")
    with pytest.raises(ValueError, match=r"^--target LunarLander-v3=high: 'high' is not a return"):
        task_with_target("LunarLander-v3=high")
    given = build_parser().parse_args(["bench", "scaling", "--target", "A=1", "B=2", "--target", "C=3"]).target
    assert given == ["A=1", "B=2", "C=3"]  # a second --target adds to the first


def test_snake_trains_as_make_run_does_for_a_fixed_time_and_is_scored_by_its_greedy_apples(tmp_path):
    """A task without a target: each run stops at the wall time (from the command's start) and its closing
    evaluation's apples are its score; the table sets each row's median apples and env steps against
    serial's."""
    snake = train_command(TASKS["ddq/Snake-v0"], "data-parallel", 2, 3, "/r", wall_time_s=120.0)
    assert snake[snake.index("--time-budget-s") + 1] == "120.0" and "--target-return" not in snake
    config = Path(snake[snake.index("--config") + 1])
    assert config.is_absolute() and config.parts[-2:] == ("configs", "smart-snake.toml")  # found from the checkout
    assert snake[-4:] == ["--mode", "data-parallel", "--workers", "2"]
    lunar = train_command(TASKS["LunarLander-v3"], "serial", 2, 0, "/r")
    assert lunar[lunar.index("--target-return") + 1] == "200.0" and "--time-budget-s" not in lunar
    on_a_host = train_command(TASKS["ddq/Snake-v0"], "serial", 1, 0, "/r", config_at="/tmp/smart-snake.toml")
    assert on_a_host[on_a_host.index("--config") + 1] == "/tmp/smart-snake.toml"  # h0's own /tmp (HostsRunner)
    with pytest.raises(ValueError, match="--wall-time-s 0: ddq/Snake-v0 trains for a fixed time"):
        TASKS["ddq/Snake-v0"].check(0.0)

    runs = []
    for configuration, apples, steps in [("serial, 1 core", 40.0, 1_000_000), ("data-parallel", 50.0, 2_500_000),
                                         ("downpour", None, 2_000_000)]:
        folder = tmp_path / configuration
        folder.mkdir()
        (folder / "summary.json").write_text(json.dumps({
            "final_eval_mean_apples": apples, "final_eval_return": -1.0, "env_steps": steps,
            "time_to_target_s": None, "steps_to_target": None, "mode": configuration, "workers": []}))
        runs.append(outcome(configuration, 1, 0, folder, TASKS["ddq/Snake-v0"]))
    assert [(o.score, o.env_steps, o.seconds) for o in runs] == [
        (40.0, 1_000_000, None), (50.0, 2_500_000, None), (None, 2_000_000, None)]
    shown = table(TASKS["ddq/Snake-v0"], runs, wall_time_s=120)
    assert shown.startswith("ddq/Snake-v0: greedy apples per episode after 120 s from the command's start")
    assert "| data-parallel | 50.00 (2,500,000) | 50.00 | 1.25x | 2,500,000 | 2.50x |" in shown
    assert "| downpour | not scored (2,000,000) | — | — | 2,000,000 | 2.00x |" in shown  # no closing evaluation


@skip_unless_root
@pytest.mark.slow  # each test below starts a Spark cluster on test hosts
def test_a_data_parallel_run_on_a_worker_host_reaches_the_target_beside_serial_and_leaves_nothing_behind():
    outcomes = run_bench(TASKS["CartPole-v1"], ["data-parallel"], workers=1, seeds=[0], on_hosts=True)
    assert [(o.configuration, o.cores) for o in outcomes] == [
        ("serial, 1 core", 1), ("data-parallel, 1 one-core worker host + a services host", 1)]
    assert all(o.seconds is not None and o.env_steps for o in outcomes), outcomes  # both reached 475
    # what the distributed run waited on, from its summary (one worker: no all-reduce to wait in)
    assert outcomes[0].where_time_went == "", outcomes
    assert outcomes[1].where_time_went.startswith("evaluations up to "), outcomes
    assert "| data-parallel, 1 one-core worker host + a services host |" in table(TASKS["CartPole-v1"], outcomes)
    ours = f"{PREFIX}-{os.getpid()}-"  # what this process's hosts were named (other tests may run hosts now)
    assert not [name for name in _ip("netns", "list").stdout.split() if name.startswith(ours)]
    assert processes_mentioning(f"{BASE}/{ours}") == []  # the master, worker daemons and runs are gone


@skip_unless_root
@pytest.mark.slow
def test_a_bench_stopped_by_sigterm_removes_its_hosts(tmp_path):
    """SIGTERM, as a scheduler or `kill` sends it, ends the bench the way Ctrl-C does: its cluster's processes,
    namespaces and folders go with it, though a second SIGTERM comes as it cleans up (as `timeout` passes on
    the one it got to a bench a `pkill` had sent one too: that left its hosts running)."""
    log = tmp_path / "bench.log"
    with log.open("w") as output:
        bench = subprocess.Popen([sys.executable, "-m", "ddq", "bench", "scaling", "--envs", "CartPole-v1",
                                  "--workers", "1", "--seeds", "0", "--hosts"], stdout=output, stderr=output)
    theirs = f"{BASE}/{PREFIX}-{bench.pid}-"
    try:
        deadline = time.monotonic() + 120
        while not any(parent_and_command(pid)[1].split(b"\0")[0].endswith(b"java")
                      for pid in processes_mentioning(theirs)):  # its hosts' Spark cluster is starting
            assert bench.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        started = len(processes_mentioning(theirs))
        bench.send_signal(signal.SIGTERM)
        while bench.poll() is None and len(processes_mentioning(theirs)) >= started:  # until its cleanup is under way
            time.sleep(0.01)
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(120) == 143, log.read_text()[-3000:]
    finally:
        if bench.poll() is None:
            bench.kill()
    assert processes_mentioning(theirs) == []
    assert not [name for name in _ip("netns", "list").stdout.split() if name.startswith(f"{PREFIX}-{bench.pid}-")]
    assert not list(BASE.glob(f"{PREFIX}-{bench.pid}-*"))
