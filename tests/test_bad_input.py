"""Bad input: one line that names the setting, where it came from and what is allowed; exit 2; nothing left.

Each case runs `ddq.cli.main` in this process, from an empty working folder that must stay empty. Every
check happens before any folder would exist, and before any process but the JVM a distributed run on a
local master boots meanwhile, which a failed check kills: this process has no child left.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ddq
from ddq.benchmarks.procfs import parent_and_command
from ddq.cli import main

TOML_CASES = {
    "lr.toml": ('seed = 1\n[optim]\nlr = "fast"\n', "lr = 'fast' in lr.toml, line 3: expected a number"),
    "steps.toml": ('total_steps = "lots"\n', "total_steps = 'lots' in steps.toml, line 1: expected a whole number"),
    "syntax.toml": ("total_steps = \n", "--config syntax.toml is not valid TOML: Invalid value (at line 1"),
    "unknown.toml": ("learning_rate = 0.1\n", "unknown setting 'learning_rate' in unknown.toml, line 1"),
    # a URL from a file is named as the file's (and draws no warning of a password on the command line)
    "redis.toml": ('redis_url = "redis://:pw@127.0.0.1:1"\n',
                   "redis_url in redis.toml redis://***@127.0.0.1:1: no Redis answers there"),
}

CASES = [
    (["train", "--workers", "0"], "workers must be positive, got 0 (given as --workers)"),
    (["train", "--lr", "-1"], "lr must be positive, got -1.0 (given as --lr)"),  # it named lr_stepsize too
    (["train", "--lr", "nan"], "lr must be positive, got nan (given as --lr)"),  # a float flag takes nan and inf
    (["train", "--target-return", "nan"], "target_return must be a finite number (or none), got nan (given as "
                                          "--target-return)"),
    (["train", "--total-episodes", "0"], "total_episodes must be positive (or none), got 0 (given as --total-episodes)"),
    (["train", "--mode", "serial", "--gamma", "1.5"], "gamma must be between 0 and 1, got 1.5 (given as --gamma)"),
    # a schedule that rose was taken: exploration grew as the agent learned
    (["train", "--epsilon-end", "0.2", "--epsilon-start", "0.1"], "epsilon_end 0.2 is above epsilon_start 0.1: "
                                                                   "exploration falls from epsilon_start to epsilon_end"),
    (["train", "--env", "Foo-v9"], "--env 'Foo-v9': Environment `Foo` doesn't exist"),
    (["train", "--env", "CartPole-v9"], "did you mean CartPole-v1"),
    # one suggestion, ddq's (with versions), not Gymnasium's before it
    (["train", "--env", "CartPol-v1"], "Environment `CartPol` doesn't exist; did you mean CartPole-v1 or"),
    (["train", "--env", "CartPole-v1", "--model", "deepq"], "--model 'deepq': model 'deepq' needs image states"),
    # data-parallel's ranks would skip an empty minibatch apart, and make different numbers of all-reduces
    (["train", "--algo", "pqn", "--num-envs", "2", "--rollout-steps", "5", "--minibatches", "5"],
     "minibatches 5 would leave some empty: a rollout of 5 steps of 2 envs holds at least 4 transitions; give at "
     "most that (given as --minibatches)"),
    (["train", "--env", "CartPole-v1", "--board-symmetries"], "--board-symmetries: CartPole-v1 declares no board"),
    (["train", "--model", "nope"], "--model 'nope': unknown model 'nope'; choose one of auto, mlp"),
    (["train", "--device", "gpu"], "--device: device 'gpu' is not one torch names; use cpu, cuda, cuda:N or auto"),
    # a setting the named algorithm would ignore (DQN's replay, with PQN's rollouts)
    (["train", "--algo", "pqn", "--n-step", "3"], "n_step is a setting of algo dqn, which algo pqn would ignore "
                                                  "(given as --n-step)"),
    # a distributed run on a local master boots Spark's JVM while it checks (`ddq.spark.jvm_boot`): killed
    (["train", "--mode", "data-parallel", "--model", "nope"], "--model 'nope': unknown model 'nope'"),
    (["train", "--redis-url", "redis://127.0.0.1:1"], "--redis-url redis://127.0.0.1:1: no Redis answers there"),
    # a URL no client can use is said to be one, not a Redis that does not answer
    (["train", "--redis-url", "redis//127.0.0.1:6379"], "--redis-url redis//127.0.0.1:6379: not a Redis URL ddq can "
                                                        "use (Redis URL must specify one of the following schemes"),
    (["train", "--redis-url", "redis://127.0.0.1:port"], "--redis-url redis://127.0.0.1:port: not a Redis URL ddq "
                                                         "can use (Port could not be cast to integer value"),
    # secrets that Spark's tasks would carry as written (the password alone travels as a placeholder)
    (["train", "--redis-url", "rediss://:pw@127.0.0.1:1/0?ssl_ca_data=-----BEGIN%20CERTIFICATE-----%0AMIIB&"
      "ssl_certfile=c&ssl_keyfile=k&ssl_password=keypass"],  # (a CA in the URL: hundreds of characters, cut)
     "/0?ssl_ca_data=...&ssl_certfile=c&ssl_keyfile=k&ssl_password=***: ssl_password, the client key's passphrase, "
     "would travel in Spark's tasks as written"),
    (["train", "--redis-url", "redis://:pw@127.0.0.1:1/0?password=other"],
     "--redis-url redis://***@127.0.0.1:1/0?password=***: a password in its user part and another in its query"),
    (["train", "--spark-master", "localhost"], "--spark-master 'localhost' is not a Spark master URL"),
    # Spark would try a barrier stage short of task slots for 10 minutes, then fail it (and Ctrl-C waited too)
    (["train", "--mode", "data-parallel", "--spark-master", "local[1]", "--workers", "2"],
     "--spark-master local[1] offers 1 task slot, and the 2 workers of data-parallel mode start together"),
    (["train", "--mode", "downpour", "--spark-master", "local[0]"], "--spark-master local[0]: a local master of no "
                                                                    "thread runs no task"),
    (["train", "--spark-master", "spark://127.0.0.1:1"], "--spark-master spark://127.0.0.1:1: no Spark master accepts"),
    (["train", "--spark-master", "k8s://https://h:port"], "--spark-master 'k8s://https://h:port' names no Kubernetes "
                                                          "API server"),
    (["train", "--spark-master", "k8s://127.0.0.1:1"], "--spark-master k8s://127.0.0.1:1: no Kubernetes API server "
                                                       "accepts connections there"),
    # shards started by hand reach the run's Redis from their hosts, and give their own stores its password
    (["train", "--shard-hosts", "by-hand"], "--shard-hosts by-hand: the shards' hosts reach the run's Redis only "
                                            "when it serves other hosts: give --listen ADDR"),
    (["train", "--shard-hosts", "by-hand", "--listen", "127.0.0.1"],
     "--shard-hosts by-hand: set DDQ_REDIS_PASSWORD (or DDQ_REDIS_PASSWORD_FILE) for ddq train and on the shards' "
     "hosts"),
    (["train", "--shard-hosts", "anywhere"], "shard_hosts is 'anywhere'; choose one of driver, by-hand (given as "
                                             "--shard-hosts)"),
    (["train", "--mode", "data-parallel", "--shard-hosts", "by-hand"], "shards started by hand are downpour's"),
    (["param-server", "--run", "r", "--listen", "127.0.0.1"], "param-server --listen needs the run's Redis URL"),
    # a process started by hand failed later, in redis-py's words alone ("[Errno 111] Connection refused")
    (["param-server", "--run", "r", "--redis-url", "redis://127.0.0.1:1/0"],
     "--redis-url redis://127.0.0.1:1/0: no Redis answers there"),
    (["barista", "serve", "--redis-url", "redis://127.0.0.1:1/0"], "--redis-url redis://127.0.0.1:1/0: no Redis answers"),
    (["param-server", "--run", "r", "--config", "redis.toml"],
     "redis_url in redis.toml redis://***@127.0.0.1:1: no Redis answers there"),
    (["train", "--config", "missing.toml"], "--config missing.toml: No such file or directory"),
    (["train", "--run-dir", "text.pt"], "--run-dir text.pt is a file, not a folder: give a folder for the run"),
    (["train", "--solver", "missing.prototxt"], "--solver missing.prototxt: No such file or directory"),
    (["evaluate", "text.pt"], "text.pt is not a ddq checkpoint (torch cannot read it"),
    (["evaluate", "."], "no checkpoint at checkpoint.pt"),
    (["evaluate", "text.pt", "--device", "gpu"], "--device: device 'gpu' is not one torch names"),
    # checked before the episodes are played (they were, and then a temporary file's name came)
    (["evaluate", "text.pt", "--render", "gone/one.gif"], "--render gone/one.gif: no folder gone to write it in"),
    (["evaluate", "text.pt", "--render", "one.png"], "--render one.png: the animation is a GIF; give a FILE ending"),
    (["dashboard", "--redis-url", "unix:///nonexistent.sock"],
     "--redis-url unix:///nonexistent.sock: no Redis answers there"),
    (["dashboard", "."], "holds no saved telemetry (telemetry.rdb)"),
    (["dashboard", "runs/gone"], "runs/gone is not a folder: give a finished run's folder (its --run-dir)"),
    (["plot", "runs/gone"], "runs/gone holds no run's metrics.jsonl: give a run's folder (its --run-dir)"),
    (["bench", "train", "--set", "bogus=1"], "unknown setting 'bogus' in --set;"),
    (["bench", "train", "--set", "gamma=1.5"], "gamma must be between 0 and 1, got 1.5 (in --set)"),
    (["bench", "chaos", "--minutes", "0"], "--minutes and --fault-every must be positive, got 0 and 30"),
    # the serial run once failed first, its taskset naming no core, the line blaming `ddq train`
    (["bench", "scaling", "--workers", "0"], "--workers 0: each distributed run needs at least 1 worker"),
    (["bench", "scaling", "--target", "CartPole-v1=nan"], "--target CartPole-v1=nan: a return no run reaches"),
    (["bench", "scaling", "--target", "CartPole-v1"], "--target CartPole-v1: give ENV=RETURN"),
    (["bench", "scaling", "--target", "CartPole-v1=400"], "--target CartPole-v1=400: CartPole-v1 is not one of the "
                                                          "tasks this bench runs (--envs LunarLander-v3 MinAtar"),
] + [(["train", "--config", name], message) for name, (_, message) in TOML_CASES.items()]


@pytest.mark.parametrize("argv, message", CASES, ids=[" ".join(argv) for argv, _ in CASES])
def test_bad_input_is_one_line_and_exit_2_before_anything_starts(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for variable in ("DDQ_REDIS_URL", "DDQ_REDIS_PASSWORD", "DDQ_REDIS_PASSWORD_FILE"):
        monkeypatch.delenv(variable, raising=False)
    for name, (text, _) in TOML_CASES.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "text.pt").write_text("not a checkpoint\n")
    before, children = sorted(os.listdir(tmp_path)), children_of(os.getpid())

    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.startswith("ddq: error: ") and len(err.splitlines()) == 1, err
    assert message in err and "Traceback" not in err and out == ""
    assert sorted(os.listdir(tmp_path)) == before  # no run folder, nothing written
    assert children_of(os.getpid()) - children == set()  # no JVM left (nor a zombie of one)


def children_of(parent: int) -> set[int]:
    return {pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if parent_and_command(pid)[0] == parent}


FLAG_CASES = [
    (["train", "--workrs", "2"], "ddq train: error: unrecognized arguments: --workrs 2; --workrs is not a flag of "
                                 "this command; did you mean --workers? (`ddq train --help-all` lists every flag)"),
    (["bench", "scaling", "--sedes", "1"], "ddq bench scaling: error: unrecognized arguments: --sedes 1; --sedes is "
                                           "not a flag of this command; did you mean --seeds?"),
    (["evaluate", "run", "--episodes", "0"], "ddq evaluate: error: argument --episodes: must be at least 1, got 0"),
    (["evaluate", "run", "--epsilon", "2"], "ddq evaluate: error: argument --epsilon: must be from 0.0 to 1.0, got 2"),
    (["dashboard", "--port", "70000"], "ddq dashboard: error: argument --port: must be from 0 to 65535, got 70000"),
]


@pytest.mark.parametrize("argv, message", FLAG_CASES, ids=[" ".join(argv) for argv, _ in FLAG_CASES])
def test_a_mistyped_flag_or_value_gets_the_commands_usage_and_one_line(argv, message, tmp_path, capsys, monkeypatch):
    """argparse's mistakes (exit 2): the command's own usage, then one line naming the flag and what is
    allowed, or the flag the command has nearest to an unknown one."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and out == "" and os.listdir(tmp_path) == []
    assert err.startswith(f"usage: ddq {argv[0]}") and err.splitlines()[-1] == message, err


@pytest.mark.parametrize("seconds", ["abc", "-5", "nan"])
def test_the_celery_workers_spacing_from_the_environment_is_checked_first(seconds, tmp_path, capsys, monkeypatch):
    """$DDQ_EVAL_EVERY_S, which the run's Celery worker inherits: "abc" had crashed the worker once the run had
    started, and "-5" had been taken."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DDQ_EVAL_EVERY_S", seconds)
    assert main(["train", "--mode", "downpour", "--spark-master", "local[1]"]) == 2
    assert capsys.readouterr().err == (f"ddq: error: $DDQ_EVAL_EVERY_S {seconds!r} (the environment's): give the "
                                       "seconds between the Celery worker's evaluations, a positive number\n")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(("variable", "value", "line"), [
    ("DDQ_EVAL_EVERY_S", "abc", "$DDQ_EVAL_EVERY_S 'abc' (the environment's): give the seconds between the Celery "
                                "worker's evaluations, a positive number"),
    ("DDQ_SETTINGS", "runs/demo/config.json", "$DDQ_SETTINGS runs/demo/config.json: [Errno 2] No such file or "
                                              "directory: 'runs/demo/config.json' (it is the config.json a "
                                              "distributed run writes into its folder)"),
])
def test_a_celery_worker_started_by_hand_with_a_wrong_setting_says_so_in_one_line(variable, value, line, tmp_path):
    """The guide's `DDQ_EVAL_EVERY_S=30 DDQ_SETTINGS=... celery -A ddq.services.tasks worker`, with a wrong
    number or a missing file: no run checked them first, and the worker had ended in tracebacks."""
    celery = Path(sys.executable).with_name("celery")
    ended = subprocess.run([str(celery), "-A", "ddq.services.tasks", "worker", "--pool", "solo"], cwd=tmp_path,
                           env=dict(os.environ, **{variable: value}), capture_output=True, text=True, timeout=120)
    assert (ended.returncode, ended.stdout, ended.stderr) == (2, "", f"ddq: error: {line}\n")
    assert os.listdir(tmp_path) == []


def test_a_password_for_a_redis_that_has_none_is_refused_before_anything_starts(tmp_path, capsys, monkeypatch):
    """redis-py's check let it pass, and the run's shards, whose connection sends AUTH, exited once it started."""
    from ddq.transport.redis_server import EmbeddedRedis

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DDQ_REDIS_URL", raising=False)
    with EmbeddedRedis() as server:
        assert main(["train", "--mode", "downpour", "--spark-master", "local[1]", "--redis-url",
                     f"{server.url}&password=guess"]) == 2
    err = capsys.readouterr().err
    assert "Redis refused the user name or password (ERR AUTH" in err and len(err.splitlines()) == 1, err
    assert "guess" not in err and os.listdir(tmp_path) == []


def test_a_private_redis_that_cannot_start_is_refused_before_anything_starts(tmp_path, capsys, monkeypatch):
    """A named --redis-port that is taken, or a $DDQ_REDIS_SERVER that is not there: the run's Redis had failed
    as the run started, past the checks, in lines that named no setting to fix."""
    import socket

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DDQ_REDIS_URL", raising=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["train", "--mode", "downpour", "--spark-master", "local[1]", "--listen", "127.0.0.1",
                     "--redis-port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ddq: error: --redis-port {port}: taken on 127.0.0.1 (Address already in use)"), err
    monkeypatch.setenv("DDQ_REDIS_SERVER", str(tmp_path / "redis-server"))  # a program that is not there
    assert main(["train", "--mode", "downpour", "--spark-master", "local[1]"]) == 2
    err = capsys.readouterr().err
    assert err == f"ddq: error: $DDQ_REDIS_SERVER {tmp_path}/redis-server: no program there; name a " \
                  "redis-server, or unset it for the one on PATH\n", err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("where, code", [("prepare", 2), ("execute", 1)])
def test_a_run_that_fails_once_started_exits_1_and_a_refused_one_2(where, code, capsys, monkeypatch):
    """The same one line either way; the code tells a script settings to fix (2) from a run that failed (1)."""
    import ddq.api

    def fails(*args, **kwargs):
        raise OSError("cannot write runs/x/checkpoint.pt: No space left on device")

    monkeypatch.setattr(ddq.api, "prepare", fails if where == "prepare" else lambda *a, **k: (None, None, None))
    monkeypatch.setattr(ddq.api, "execute", fails)
    assert main(["train"]) == code
    assert capsys.readouterr().err == "ddq: error: cannot write runs/x/checkpoint.pt: No space left on device\n"


def test_debug_shows_the_traceback(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="workers must be positive"):
        main(["train", "--workers", "0", "--debug"])


def test_package_says_how_to_make_an_environment_it_can_pack(tmp_path, capsys):
    """The checkout's own venv holds ddq installed with -e, which venv-pack refuses: the one line says how to make
    one it packs, from this checkout (ddq is on no package index), and nothing is written."""
    checkout = Path(ddq.__file__).resolve().parents[2]
    assert main(["package", str(tmp_path / "out"), "--env", sys.prefix]) == 2
    err = capsys.readouterr().err
    assert f"(python -m venv ENV && ENV/bin/pip install {checkout})" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_a_folder_whose_run_ended_before_its_first_checkpoint_says_what_to_do(tmp_path, capsys, monkeypatch):
    """A run killed before it saved a checkpoint leaves points and no checkpoint: its folder took no new run
    ("continue it with --resume") and no resume ("no checkpoint at ..."), each line sending the user to the
    other. Both now say why, and nothing in the folder changes."""
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "killed"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"kind": "train", "env_steps": 1000}\n')
    (run_dir / "best.pt").write_bytes(b"")  # the best evaluation's weights: not a run's state
    assert main(["train", "--env", "CartPole-v1", "--run-dir", str(run_dir)]) == 2
    assert capsys.readouterr().err == (f"ddq: error: {run_dir} already holds a run: it ended before it saved a "
                                       f"checkpoint, so it cannot be resumed: empty {run_dir} to start there again, "
                                       "or choose another --run-dir\n")
    assert main(["train", "--resume", str(run_dir)]) == 2
    assert capsys.readouterr().err == (f"ddq: error: no checkpoint at {run_dir / 'checkpoint.pt'}: the run there "
                                       "ended before it saved one\n")
    assert main(["evaluate", str(run_dir / "other.pt")]) == 2  # another file: only its absence to tell
    assert capsys.readouterr().err == f"ddq: error: no checkpoint at {run_dir / 'other.pt'}\n"
    assert sorted(os.listdir(run_dir)) == ["best.pt", "metrics.jsonl"] and os.listdir(tmp_path) == ["killed"]


def test_the_jvm_booted_during_the_checks_leaves_no_folder_when_a_check_fails(tmp_path):
    """A distributed run on a local master boots Spark's JVM while its settings are checked, and ends it when
    one fails. Killed, it had left an empty spark-* folder in the temporary folder at every mistake; ended with
    SIGTERM, its shutdown hook removes it, and the class-data archive it then writes is dropped."""
    jvm_tmp, cache = tmp_path / "jvm-tmp", tmp_path / "cache"
    jvm_tmp.mkdir()
    ended = subprocess.run([sys.executable, "-m", "ddq", "train", "--mode", "data-parallel", "--model", "nope"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, JAVA_TOOL_OPTIONS=f"-Djava.io.tmpdir={jvm_tmp}",
                                    XDG_CACHE_HOME=str(cache)))
    assert ended.returncode == 2 and ended.stderr.startswith("ddq: error: --model 'nope': unknown model"), ended.stderr
    assert os.listdir(jvm_tmp) == [] and sorted(os.listdir(tmp_path)) == ["cache", "jvm-tmp"]
    assert [path.name for path in cache.rglob("*") if path.is_file()] == []  # no half archive of a JVM ended early
