"""A run's folder on disk: its metrics log (metrics.jsonl), its summary.json, and files written whole or not at all."""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO


def write_whole(path: str | Path, data: bytes | Callable[[BinaryIO], object]) -> Path:
    """Writes `data` (bytes, or a function that writes to the open binary file it is given) to `path`
    whole or not at all: into a temporary file beside it, flushed to disk, then renamed over `path` (a
    rename is atomic within a file system), and the folder's entry flushed too. A crash, a kill or a full
    disk leaves the previous file as it was, and no temporary file behind."""
    path = Path(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(handle, 0o666 & ~_UMASK)  # mkstemp's file is its owner's alone: give it open()'s mode
        with os.fdopen(handle, "wb") as file:
            if isinstance(data, bytes):
                file.write(data)
            else:
                data(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # some network and FUSE file systems refuse to sync a folder
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once: umask can only be read by setting it


def plain(value: Any) -> Any:
    """`value`, or None for a float JSON cannot hold (NaN, infinities)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunLog:
    """Appends metric points to `run_dir/metrics.jsonl`; flushed so a dashboard can tail it."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._file = open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8")

    def write(self, kind: str, **values: Any) -> None:
        point = {"kind": kind, **{k: plain(v) for k, v in values.items()}}
        self._file.write(json.dumps(point) + "\n")
        self._file.flush()

    def write_summary(self, summary: dict[str, Any]) -> Path:
        return write_summary(self.run_dir, summary)

    def close(self) -> None:
        self._file.close()


def write_summary(run_dir: str | Path, summary: dict[str, Any]) -> Path:
    """`run_dir/summary.json`, written whole."""
    text = json.dumps({k: plain(v) for k, v in summary.items()}, indent=2) + "\n"
    return write_whole(Path(run_dir) / "summary.json", text.encode())


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every point of `run_dir/metrics.jsonl`, in order."""
    with open(Path(run_dir) / "metrics.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
