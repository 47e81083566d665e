"""A finished run's telemetry kept in its folder as a Redis RDB file, and served again from it.

At the end of a downpour run the driver copies the run's keys (episodes,
evaluations, progress, workers, the shards' metrics and weights; not the
gradient queues or the shards' snapshots, which are in the folder already)
into a scratch redis-server with Redis's own DUMP/RESTORE and has it SAVE:
the file is Redis's own snapshot format, whatever Redis the run used.
`ddq dashboard RUN_DIR` starts a private redis-server on a copy of that file.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import redis

from ddq.transport.keys import RunKeys
from ddq.transport.redis_server import EmbeddedRedis

TELEMETRY_NAME = "telemetry.rdb"
_NOT_TELEMETRY = (":grads", ":target", ":snapshot")  # bulky, and kept in the run folder already


def save_telemetry(client: redis.Redis, keys: RunKeys, run_dir: Path) -> Path | None:
    """Writes run_dir/telemetry.rdb with the run's telemetry keys; None when there was nothing to save."""
    names = [name for name in client.scan_iter(f"{keys.prefix}:*", count=1000)
             if not name.decode().endswith(_NOT_TELEMETRY)]
    if not names:
        return None
    with EmbeddedRedis() as scratch:
        target = scratch.client()
        for name in names:
            payload = client.dump(name)
            if payload is None:  # expired or deleted meanwhile
                continue
            try:
                target.restore(name, 0, payload, replace=True)
            except redis.ResponseError as error:  # a newer server's format: keep what the scratch one reads
                print(f"ddq: warning: {name.decode()} not saved with the telemetry: {error}", file=sys.stderr)
        target.save()
        path = Path(run_dir) / TELEMETRY_NAME
        shutil.copyfile(scratch.folder / "dump.rdb", path)
        target.close()
    return path


def serve_saved_telemetry(run_dir: Path) -> EmbeddedRedis:
    """A private redis-server holding what `save_telemetry` wrote into `run_dir` (the file is not changed)."""
    path = Path(run_dir) / TELEMETRY_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} holds no saved telemetry ({TELEMETRY_NAME}): only downpour runs "
                                "write one, at their end")
    return EmbeddedRedis(rdb=path)
