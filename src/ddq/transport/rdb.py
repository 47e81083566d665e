"""Keys of a Redis copied into an RDB file (Redis's own snapshot format) with DUMP/RESTORE into a scratch
redis-server that then SAVEs: the file reads back whatever Redis the keys came from."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from ddq.run_folder import write_whole
from ddq.transport.keys import RunKeys
from ddq.transport.redis_client import Connection, StoreRefused
from ddq.transport.redis_server import EmbeddedRedis


def save_run_keys(client: Connection, run: str, skip_suffixes: tuple[str, ...], path: Path) -> bool:
    """Writes the run's keys (but those ending in one of `skip_suffixes`) into the RDB file `path`;
    False when there was none."""
    names = [name for name in client.scan_iter(f"{RunKeys(run).prefix}:*", count=1000)
             if not name.decode().endswith(skip_suffixes)]
    if not names:
        return False
    with EmbeddedRedis() as scratch:
        target = scratch.client()
        for name in names:
            payload = client.dump(name)
            if payload is None:  # expired or deleted meanwhile
                continue
            try:
                target.restore(name, 0, payload, replace=True)
            except StoreRefused as error:  # a newer server's format: keep what the scratch one reads
                print(f"ddq: warning: {name.decode()} not saved: {error}", file=sys.stderr)
        target.save()
        with open(scratch.folder / "dump.rdb", "rb") as dump:  # whole: `ddq dashboard RUN_DIR` reads it
            write_whole(path, lambda file: shutil.copyfileobj(dump, file))
        target.close()
    return True
