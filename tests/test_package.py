"""`ddq package` writes its environment archive whole or not at all, and leaves no temporary file behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ddq.benchmarks.testhosts import executor_environment

pytestmark = pytest.mark.slow  # it packs most of a gigabyte for a few seconds


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_packing_stopped_midway_leaves_no_archive_and_no_temporary_file(tmp_path, stop):
    """venv-pack writes the archive to a temporary file, then moves it under its name. Stopped meanwhile, the
    temporary file (up to a gigabyte) stayed in the temporary folder, and a move across file systems could
    leave the archive half written under its own name. Now nothing is left but the two small files written
    before it."""
    environment, out, scratch = executor_environment(tmp_path), tmp_path / "out", tmp_path / "tmp"
    scratch.mkdir()
    process = subprocess.Popen([sys.executable, "-m", "ddq", "package", str(out), "--env", str(environment),
                                "--compress-level", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=dict(os.environ, TMPDIR=str(scratch)))
    try:
        deadline = time.monotonic() + 120
        while not any(written.stat().st_size > 10_000_000 for folder in (out, scratch) if folder.exists()
                      for written in folder.rglob("*") if written.is_file() and written.suffix != ".zip"):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1]
            time.sleep(0.05)
        process.send_signal(stop)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == (130 if stop == signal.SIGINT else 143), err
    assert sorted(path.name for path in out.iterdir()) == ["ddq.zip", "ddq_submit.py"], err
    assert list(scratch.iterdir()) == [], err
