"""Starting the learner of actor-learner training as a child process of the driver (or of a test)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ddq.config import REDIS_URL_ENV
from ddq.processes import spawn


def start_learner(settings: Path, redis_url: str, run: str, folder: Path) -> subprocess.Popen:
    """One `ddq learner` process reading the run's settings file, logging to folder/learner.log. A learner
    started again resumes from its newest snapshot."""
    return spawn([sys.executable, "-m", "ddq", "learner", "--settings", str(settings), "--run", run],
                 folder / "learner.log", env={REDIS_URL_ENV: redis_url})
