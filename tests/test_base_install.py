"""A base install: `pip install ddq` with no extras, in a fresh venv, runs what the README shows for classic
control. CartPole draws with pygame, which only the box2d extra brings: the run must still exit 0, with
one line saying why there is no replay.gif."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddq.benchmarks.testhosts import link_distributions

REPOSITORY = Path(__file__).resolve().parents[1]
TORCH = "torch"  # installed first, as `make` does (there: torch==2.13.0, the CPU build these machines carry)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory) -> Path:
    """A fresh venv with torch first, as `make` installs it (this environment's torch and what it requires,
    hard-linked in: the same files as its wheel's, without a minute of unpacking 750 MB), then
    `pip install` of the repository with no extra, which resolves and installs everything else."""
    venv = tmp_path_factory.mktemp("base") / "venv"
    # without a pip of its own (ensurepip unpacks one: seconds); this environment's pip installs into it
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    link_distributions(next((venv / "lib").glob("python*/site-packages")), [TORCH], set())
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
           "--disable-pip-version-check"]
    installed = subprocess.run([*pip, str(REPOSITORY)], capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stderr[-3000:]
    return venv


def test_the_base_install_has_no_extra_and_names_the_one_an_atari_game_needs(base_venv, tmp_path):
    python = str(base_venv / "bin" / "python")
    assert subprocess.run([python, "-c", "import ddq, torch, pyspark, celery, flask"]).returncode == 0
    for extra in ("pygame", "ale_py", "Box2D", "stable_baselines3", "playwright"):
        assert subprocess.run([python, "-c", f"import {extra}"], capture_output=True).returncode != 0, extra
    atari = subprocess.run([str(base_venv / "bin" / "ddq"), "train", "--env", "ALE/Pong-v5", "--run-dir",
                            str(tmp_path / "pong")], capture_output=True, text=True, timeout=120)
    lines = atari.stderr.strip().splitlines()
    assert atari.returncode != 0 and len(lines) == 1 and "pip install 'ddq[atari]'" in lines[0], atari.stderr
    assert not (tmp_path / "pong").exists()  # said before anything started


@pytest.mark.parametrize("mode", ["serial", "downpour"])
def test_a_base_install_trains_cartpole_to_exit_0(base_venv, tmp_path, mode):
    run_dir = tmp_path / "run"
    result = subprocess.run([str(base_venv / "bin" / "ddq"), "train", "--mode", mode, "--env", "CartPole-v1",
                             "--total-steps", "2000", "--eval-every", "1000", "--eval-episodes", "2", "--no-progress",
                             "--run-dir", str(run_dir)], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                            env=dict(os.environ, XDG_CACHE_HOME="/proc/no-cache"))  # a cache folder it cannot
    # make: its local master's JVM starts without Spark's class archive (ddq.spark.jvm_archive), as promised
    assert result.returncode == 0, result.stderr[-3000:]
    assert (run_dir / "summary.json").is_file() and (run_dir / "checkpoint.pt").is_file()
    assert list(run_dir.glob("events.out.tfevents.*")) and (run_dir / "best.pt").is_file()  # tensorboard is a base dependency
    said = [line for line in result.stderr.splitlines() if line.startswith("ddq: no replay.gif")]
    assert len(said) == 1 and "pygame" in said[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
