"""A finished run's telemetry kept in its folder as a Redis RDB file, and served again from it.

At the end of a downpour run the driver copies the run's keys (episodes,
evaluations, progress, workers, the shards' metrics and weights; not the
gradient queues or the shards' snapshots, which are in the folder already)
into a scratch redis-server with Redis's own DUMP/RESTORE and has it SAVE:
the file is Redis's own snapshot format, whatever Redis the run used.
`ddq dashboard RUN_DIR` starts a private redis-server on a copy of that file.
"""

from __future__ import annotations

from pathlib import Path

from ddq.transport.rdb import save_run_keys
from ddq.transport.redis_client import Connection
from ddq.transport.redis_server import EmbeddedRedis

TELEMETRY_NAME = "telemetry.rdb"
_NOT_TELEMETRY = (":grads", ":target", ":snapshot")  # bulky, and kept in the run folder already


def save_telemetry(client: Connection, run: str, run_dir: Path) -> Path | None:
    """Writes run_dir/telemetry.rdb with the run's telemetry keys; None when there was nothing to save."""
    path = Path(run_dir) / TELEMETRY_NAME
    return path if save_run_keys(client, run, _NOT_TELEMETRY, path) else None


def serve_saved_telemetry(run_dir: Path) -> EmbeddedRedis:
    """A private redis-server holding what `save_telemetry` wrote into `run_dir` (the file is not changed)."""
    path = Path(run_dir) / TELEMETRY_NAME
    if not Path(run_dir).is_dir():
        raise FileNotFoundError(f"{run_dir} is not a folder: give a finished run's folder (its --run-dir)")
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} holds no saved telemetry ({TELEMETRY_NAME}): only distributed "
                                "runs (downpour, actor-learner, data-parallel) write one, at their end")
    return EmbeddedRedis(rdb=path)
