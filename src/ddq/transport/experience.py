"""The wire format of experience (actor-learner mode): vector steps of transitions, each frame sent once.

An actor steps `streams` envs in lockstep; a message carries `rows` of its
consecutive vector steps exactly as its replay memory would record them
(`ReplayMemory.add`): the frames each step returned, and the action, reward
and termination that led to them where the stream continued (elsewhere the
frame starts an episode). So a state and its successor share their frames,
stacking happens at sampling time on the learner, and frames keep their own
dtype (uint8 images stay uint8). A 64-byte typed header names the run, the
actor, a number it drew when it started and the message's sequence number (a gap tells the
learner that messages were lost); the body is raw little-endian arrays.
No object is deserialized and nothing is evaluated; every size is checked before it is read.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import numpy as np

MAGIC = b"DDQE"
FORMAT = 1
# magic, format, dtype code, frame ndim, has td errors, run hash, actor, sender, sequence, rows, streams,
# frame shape (4 dims, unused ones 0), weights version, epsilon
HEADER = struct.Struct("<4sBBBB8sIIQII4IQf")
DTYPES: dict[int, np.dtype] = {1: np.dtype("|u1"), 2: np.dtype("<f4"), 3: np.dtype("<f8"), 4: np.dtype("<i8"),
                               5: np.dtype("?")}  # 5: MinAtar's boolean frames
CODES = {dtype: code for code, dtype in DTYPES.items()}
MAX_MESSAGE_BYTES = 256 * 2**20


@dataclass
class Experience:
    """Consecutive vector steps of one actor, as its replay memory would record them (`ReplayMemory.add`);
    arrays are [rows, streams, ...]. `td_errors` (initial priorities, negative where unknown) only when the
    actor computed them. What actor-learner's actors send and its learner ingests (`ddq.core.experience`
    says what the learner reads of it)."""

    actor: int
    sender: int  # a number the actor drew when it started: a retried task is a new sender
    sequence: int
    frames: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    continues: np.ndarray
    td_errors: np.ndarray | None = None
    weights_version: int = 0
    epsilon: float = 0.0  # the actor's, for telemetry

    @property
    def env_steps(self) -> int:
        """Transitions in the message (a row where a stream started an episode is none)."""
        return int(self.continues.sum())


class ExperienceError(ValueError):
    """A message that is not experience of this run and env; `reason` is a short key for counting."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def run_hash(run: str) -> bytes:
    """8 bytes that tell one run's messages from another's (runs can share a Redis)."""
    return hashlib.blake2b(run.encode(), digest_size=8).digest()


def encode(run: str, experience: Experience) -> bytes:
    """One message; the frames keep their dtype (it must be one of DTYPES)."""
    frames = experience.frames
    rows, streams = frames.shape[:2]
    shape = frames.shape[2:]
    if len(shape) > 4:
        raise ExperienceError("shape", f"frames of {len(shape)} dimensions; at most 4 are sent")
    code = CODES.get(frames.dtype.newbyteorder("<") if frames.dtype.byteorder == ">" else frames.dtype)
    if code is None:
        raise ExperienceError("dtype", f"frames of dtype {frames.dtype}; sent are {', '.join(map(str, CODES))}")
    header = HEADER.pack(MAGIC, FORMAT, code, len(shape), experience.td_errors is not None, run_hash(run),
                         experience.actor, experience.sender, experience.sequence, rows, streams,
                         *shape, *[0] * (4 - len(shape)), experience.weights_version, experience.epsilon)
    parts = [header, np.ascontiguousarray(frames, DTYPES[code]).tobytes(),
             np.ascontiguousarray(experience.actions, "<i4").tobytes(),
             np.ascontiguousarray(experience.rewards, "<f4").tobytes(),
             np.ascontiguousarray(experience.terminated, "|u1").tobytes(),
             np.ascontiguousarray(experience.continues, "|u1").tobytes()]
    if experience.td_errors is not None:
        parts.append(np.ascontiguousarray(experience.td_errors, "<f4").tobytes())
    return b"".join(parts)


@dataclass(frozen=True)
class ExpectExperience:
    """What a learner accepts: this run's messages, of its env's frame layout and action count, from one of
    its `actors`, each row a vector step of an actor's `streams` envs."""

    run: str
    frame_shape: tuple[int, ...]
    frame_dtype: np.dtype
    num_actions: int
    actors: int
    streams: int
    max_bytes: int = MAX_MESSAGE_BYTES


def decode(message: bytes | memoryview, expect: ExpectExperience) -> Experience:
    """The Experience of a message meeting `expect` (arrays are read-only views of it); ExperienceError
    for anything else: a foreign run, another env's frames, no rows, rows of another width, an actor the run
    does not have, a wrong size, an action out of range, non-finite rewards."""
    if len(message) > expect.max_bytes:
        raise ExperienceError("oversized", f"{len(message)} bytes is over the {expect.max_bytes}-byte limit")
    if len(message) < HEADER.size:
        raise ExperienceError("truncated", f"{len(message)} bytes is shorter than the {HEADER.size}-byte header")
    (magic, version, code, ndim, has_td, run, actor, sender, sequence, rows, streams, *rest) = \
        HEADER.unpack_from(message, 0)
    shape, weights_version, epsilon = tuple(rest[:ndim]), rest[4], rest[5]
    if magic != MAGIC or version != FORMAT:
        raise ExperienceError("bad_header", f"magic {magic!r} format {version} is not {MAGIC!r} format {FORMAT}")
    if run != run_hash(expect.run):
        raise ExperienceError("run", "the message belongs to another run")
    if DTYPES.get(code) != expect.frame_dtype.newbyteorder("<") and DTYPES.get(code) != expect.frame_dtype:
        raise ExperienceError("dtype", f"frame dtype code {code} is not this env's {expect.frame_dtype}")
    if shape != tuple(expect.frame_shape):
        raise ExperienceError("shape", f"frames of shape {shape} are not this env's {tuple(expect.frame_shape)}")
    if rows < 1 or streams != expect.streams or not 0 <= actor < expect.actors:
        raise ExperienceError("rows", f"{rows} rows of {streams} streams from actor {actor}: an actor of "
                                       f"{expect.actors} sends rows of {expect.streams} streams")
    steps, frame_bytes = rows * streams, int(np.prod(shape, dtype=np.int64)) * DTYPES[code].itemsize
    sizes = [steps * frame_bytes, 4 * steps, 4 * steps, steps, steps] + ([4 * steps] if has_td else [])
    if len(message) != HEADER.size + sum(sizes):
        raise ExperienceError("size", f"{rows} rows of {streams} streams need {HEADER.size + sum(sizes)} bytes, "
                                      f"the message has {len(message)}")
    arrays, offset = [], HEADER.size
    kinds: list[np.dtype] = [DTYPES[code], *map(np.dtype, ("<i4", "<f4", "|u1", "|u1", "<f4"))]
    for dtype, size, tail in zip(kinds, sizes, (shape, (), (), (), (), ())):
        arrays.append(np.frombuffer(message, dtype=dtype, count=size // dtype.itemsize,
                                    offset=offset).reshape(rows, streams, *tail))
        offset += size
    frames, actions, rewards, terminated, continues, *td = arrays
    if actions.size and (actions.min() < 0 or actions.max() >= expect.num_actions):
        raise ExperienceError("action", f"actions outside [0, {expect.num_actions})")
    if not np.isfinite(rewards).all() or (td and not np.isfinite(td[0]).all()):
        raise ExperienceError("non_finite", "rewards or TD errors contain NaN or Inf")
    return Experience(actor, sender, sequence, frames, actions, rewards, terminated.view(bool),
                      continues.view(bool), td[0] if td else None, weights_version, epsilon)
