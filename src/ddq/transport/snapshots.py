"""Shard snapshots: weights, target, optimizer state and version, in Redis and in a checkpoint file.

No object serialization: in Redis a snapshot is a hash of wire-format messages
and JSON; on disk it is a torch file of tensors and numbers that
`torch.load(..., weights_only=True)` reads. A restarted shard resumes from
whichever of the two is newer.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ddq.run_folder import write_whole
from ddq.transport.keys import RunKeys
from ddq.transport.redis_client import Connection
from ddq.transport.wire import WEIGHTS, Header, WireError, decode, encode, weights_expectation


@dataclass
class ShardState:
    version: int
    target_version: int
    weights: torch.Tensor
    target: torch.Tensor
    optimizer: dict  # FlatOptimizer.state_dict()
    senders: list[list[int]] = dataclasses.field(default_factory=list)  # SenderLedger.state(): what it holds
    repeats: int = 0


def _message(layout: bytes, bounds: tuple[int, int], version: int, values: torch.Tensor) -> bytes:
    start, end = bounds
    return encode(Header(WEIGHTS, layout, version, end - start, offset=start), values.cpu().numpy())


def save(client: Connection, key: str, path: Path | None, state: ShardState, layout: bytes,
         bounds: tuple[int, int]) -> None:
    pipe = client.pipeline(transaction=True)  # never half a snapshot
    replace(pipe, key, state, layout, bounds)
    pipe.execute()
    if path is not None:
        save_file(path, state, layout, bounds)


def replace(pipe: Any, key: str, state: ShardState, layout: bytes, bounds: tuple[int, int]) -> None:
    """Queues on the transaction `pipe` the commands that replace the snapshot under `key` with `state`."""
    optimizer = state.optimizer
    fields: dict = {"version": state.version, "target_version": state.target_version,
                    "optimizer": json.dumps({"config": optimizer["config"], "steps": optimizer["steps"],
                                             "state": sorted(optimizer["state"])}),
                    "weights": _message(layout, bounds, state.version, state.weights),
                    "target": _message(layout, bounds, state.target_version, state.target),
                    "senders": json.dumps(state.senders), "repeats": state.repeats}
    for name, tensor in optimizer["state"].items():
        fields[f"state:{name}"] = _message(layout, bounds, state.version, tensor)
    pipe.delete(key)
    pipe.hset(key, mapping=fields)


def save_file(path: Path, state: ShardState, layout: bytes, bounds: tuple[int, int]) -> None:
    """The snapshot file `load_newest` reads, written whole or not at all."""
    payload = {"format": "ddq-shard-1", "layout": layout.hex(), "bounds": list(bounds), **dataclasses.asdict(state)}
    write_whole(path, lambda file: torch.save(payload, file))


def version_in_redis(client: Connection, key: str) -> int | None:
    """The version of the snapshot stored under `key` (one field, not the snapshot), or None when there is none."""
    version = client.hget(key, "version")
    return None if version is None else int(version)  # bytes, which int() reads


def from_redis(client: Connection, key: str, layout: bytes, bounds: tuple[int, int],
               optimizer: bool = True) -> ShardState | None:
    """The snapshot stored under `key` for the slice `bounds`, or None when there is none; without its
    optimizer state (an empty dict) when `optimizer` is False, as a reader of the weights wants."""
    names = None if optimizer else [b"version", b"target_version", b"weights", b"target"]
    if names is None:
        fields: dict[bytes, bytes] = client.hgetall(key)  # type: ignore[assignment]  # bytes: no decode_responses
    else:
        values = client.hmget(key, names)
        fields = {} if None in values else dict(zip(names, values))  # type: ignore[arg-type]
    if not fields:
        return None
    expect = weights_expectation(layout, bounds)
    tensor = lambda name: torch.from_numpy(np.array(decode(fields[name.encode()], expect)[1]))  # noqa: E731
    state: dict = {}
    if optimizer:
        meta = json.loads(fields[b"optimizer"])
        state = {"config": meta["config"], "steps": int(meta["steps"]),
                 "state": {name: tensor(f"state:{name}") for name in meta["state"]}}
    senders = json.loads(fields[b"senders"]) if optimizer and b"senders" in fields else []
    repeats = int(fields[b"repeats"]) if optimizer and b"repeats" in fields else 0
    return ShardState(int(fields[b"version"]), int(fields[b"target_version"]), tensor("weights"),
                      tensor("target"), state, _ledger_rows(senders), repeats)


def _ledger_rows(rows: object) -> list[list[int]]:
    """A snapshot's sender ledger, checked: [sender, attempt, number] rows of integers, each with its
    account (taken, dropped, refused) since the account was kept."""
    if not isinstance(rows, list) or not all(isinstance(row, list) and len(row) in (3, 6) and
                                             all(isinstance(n, int) for n in row) for row in rows):
        raise ValueError("a snapshot's sender ledger is not [sender, attempt, number(, taken, dropped, refused)] "
                         "rows")
    return rows


def shard_weights(client: Connection, run: str, shard: int, layout: bytes,
                  bounds: tuple[int, int]) -> ShardState | None:
    """Shard `shard`'s newest snapshot in Redis without its optimizer state (what a reader of the weights
    wants), or None before its first."""
    return from_redis(client, RunKeys(run).shard(shard).snapshot, layout, bounds, optimizer=False)


def _from_file(path: Path | None, layout: bytes, bounds: tuple[int, int]) -> ShardState | None:
    if path is None or not path.exists():
        return None
    saved = torch.load(path, map_location="cpu", weights_only=True)
    if saved.get("format") != "ddq-shard-1" or saved["layout"] != layout.hex() or tuple(saved["bounds"]) != bounds:
        raise ValueError(f"{path} is a snapshot of another model or shard layout")
    return ShardState(saved["version"], saved["target_version"], saved["weights"], saved["target"],
                      saved["optimizer"], _ledger_rows(saved.get("senders", [])), int(saved.get("repeats", 0)))


def load_newest(client: Connection, key: str, path: Path | None, layout: bytes,
                bounds: tuple[int, int]) -> ShardState | None:
    """The newer of the Redis snapshot and the file, or None when neither exists."""
    try:
        in_redis = from_redis(client, key, layout, bounds)
    except (WireError, KeyError, ValueError) as error:
        raise ValueError(f"the snapshot in Redis ({key}) does not fit this model: {error}") from error
    on_disk = _from_file(path, layout, bounds)
    candidates = [s for s in (in_redis, on_disk) if s is not None]
    return max(candidates, key=lambda s: s.version) if candidates else None
