"""Starting a run's Celery worker (with beat) as a background child process of the driver."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ddq.config import REDIS_URL_ENV
from ddq.processes import spawn

# A run's one worker has no other to gossip with, greet as it starts (mingle: a broadcast, then a wait for
# replies) or send heartbeats to: without them it needs no broadcast queues or event channels in the run's
# Redis, which an operator's ACL then need not open (docs/cluster.md's line)
ALONE = ("--without-gossip", "--without-mingle", "--without-heartbeat")


def start_celery_worker(redis_url: str, run: str, run_dir: Path, settings_file: Path) -> subprocess.Popen:
    """`celery -A ddq.services.tasks worker --beat` for this run: periodic greedy evaluation in its own
    process, configured by the run's settings file (`ddq.config.write_settings`)."""
    folder = run_dir.resolve()
    env = {REDIS_URL_ENV: redis_url, "DDQ_RUN": run, "DDQ_SETTINGS": str(settings_file.resolve()),
           "DDQ_RUN_DIR": str(folder)}
    return spawn([sys.executable, "-m", "celery", "-A", "ddq.services.tasks", "worker", "--beat", "--pool", "solo",
                  "--loglevel", "WARNING", *ALONE], folder / "celery.log", env=env, cwd=folder, background=True)
