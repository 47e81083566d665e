"""A run's start: reading its settings loads no torch (`ddq train --help` and a refused setting take a
second, not four), a distributed run on a local master boots Spark's JVM before its checks import torch
(`ddq.spark.jvm_boot`), and it starts Spark before it imports its wiring, so that Spark's JVM and
executors start while the driver builds the rest (`ddq.modes.launch`). Each check runs in a fresh
interpreter, where nothing has imported torch yet."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_reading_the_settings_and_the_help_loads_no_torch():
    loaded = run_fresh("""
        import sys
        from ddq.cli import build_parser
        from ddq.core.settings import build_config
        lunar = build_config({"env": "LunarLander-v3", "mode": "data-parallel"})
        breakout = build_config({"env": "MinAtar/Breakout-v1", "replay_ratio": 0.5})
        build_parser(full_help=True).format_help()
        print(lunar.agent.algo, breakout.agent.algo, "torch" in sys.modules)
    """)
    assert loaded == "pqn dqn False"  # each env's measured algorithm, and still no torch


def test_a_distributed_run_starts_spark_before_it_imports_its_wiring(tmp_path):
    """Spark's start is stood in for (the order is what is checked): it says whether torch, which the wiring
    loads, was loaded."""
    seen = run_fresh(f"""
        import sys
        import ddq.modes.launch
        from ddq.core.settings import build_config
        from ddq.modes import run_training

        class Started(Exception):
            pass

        def spark_starting(*args, **kwargs):
            raise Started("torch loaded" if "torch" in sys.modules else "no torch yet")

        ddq.modes.launch.SparkStarting = spark_starting
        config = build_config({{"env": "CartPole-v1", "mode": "data-parallel", "workers": 1}})
        try:
            run_training(config, {str(tmp_path / "run")!r})
        except Started as started:
            print(started)
    """)
    assert seen == "no torch yet"


def test_a_local_distributed_run_boots_spark_s_jvm_before_its_checks_import_torch(tmp_path):
    """The JVM's launch is stood in for: it says whether torch, which the settings' checks load, was loaded."""
    seen = run_fresh(f"""
        import sys
        import ddq.modes.launch
        from ddq.api import prepare

        class Booted(Exception):
            pass

        def booting(conf):
            raise Booted("torch loaded" if "torch" in sys.modules else "no torch yet")

        ddq.modes.launch.BootingJvm = booting
        try:
            prepare({{"env": "CartPole-v1", "mode": "data-parallel", "workers": 1, "run_dir": {str(tmp_path / "run")!r}}})
        except Booted as booted:
            print(booted)
        prepare({{"env": "CartPole-v1", "mode": "serial", "run_dir": {str(tmp_path / "serial")!r}}})  # boots none
        print("torch" in sys.modules)
    """)
    assert seen == "no torch yet\nTrue"
