"""The README as a newcomer uses it: short, its links lead somewhere, its TOML parses, and every command
block that finishes within a minute runs as written, pasted into one shell in a fresh copy of the
repository. Blocks marked `sh long` (make run, make test) are run by hand."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddq.core.settings import build_config

REPOSITORY = Path(__file__).resolve().parents[1]
README = (REPOSITORY / "README.md").read_text()
BLOCKS = re.findall(r"^```(\w+)([^\n]*)\n(.*?)^```", README, re.MULTILINE | re.DOTALL)


def blocks(language: str, long: bool = False) -> list[str]:
    return [body for lang, info, body in BLOCKS if lang == language and ("long" in info.split()) == long]


def test_the_readme_is_short_and_its_links_lead_somewhere():
    assert len(README.splitlines()) <= 250
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert links and [link for link in links if not link.startswith("http") and not (REPOSITORY / link).exists()] == []
    assert blocks("sh") and blocks("python") and blocks("sh", long=True)


def test_the_readme_toml_is_a_valid_config(tmp_path):
    assert blocks("toml")
    for number, body in enumerate(blocks("toml")):
        path = tmp_path / f"readme-{number}.toml"
        path.write_text(body)
        build_config({}, str(path))


@pytest.fixture
def fresh_copy(tmp_path: Path) -> Path:
    """The repository's files as a clone has them (tracked, and new files not ignored), with this
    environment's .venv, as `make` would have made it."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPOSITORY,
                            capture_output=True, text=True, check=True).stdout.split("\n")
    copy = tmp_path / "ddq"
    for name in filter(None, listed):
        if (REPOSITORY / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPOSITORY / name, copy / name)
    (copy / ".venv").symlink_to(Path(sys.prefix))
    return copy


@pytest.mark.slow
def test_the_readme_commands_run_as_written(fresh_copy):
    script = "set -euo pipefail\n" + "\n".join(blocks("sh"))
    result = subprocess.run(["bash", "-c", script], cwd=fresh_copy, capture_output=True, text=True, timeout=600,
                            env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert (fresh_copy / "runs/cartpole/summary.json").is_file()
    assert '"reached_target": true' in (fresh_copy / "runs/cartpole/summary.json").read_text()
    # each distributed example whose workers outran its evaluator says so, once (the downpour one mostly does)
    skipping = [run.parent.name for run in (fresh_copy / "runs").glob("*/summary.json")
                if json.loads(run.read_text()).get("evaluation_points_skipped")]
    assert result.stderr.count("of the evaluation points (every ") == len(skipping), skipping


@pytest.mark.slow
def test_the_readme_python_runs_as_written(fresh_copy):
    for number, body in enumerate(blocks("python")):
        path = fresh_copy / f"readme-{number}.py"
        path.write_text(body)
        result = subprocess.run([str(fresh_copy / ".venv/bin/python"), path.name], cwd=fresh_copy,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "target return reached" in result.stdout
