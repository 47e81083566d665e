"""Shared test helpers."""

import json
import os
import subprocess
import sys
from pathlib import Path


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


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


import pytest


@pytest.fixture
def output_dir(request) -> Path:
    """test-output/<test name>/ at the repository root: what a test leaves to be looked at (screenshots)."""
    folder = Path(__file__).resolve().parents[1] / "test-output" / request.node.name
    folder.mkdir(parents=True, exist_ok=True)
    return folder
