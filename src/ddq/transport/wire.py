"""The wire format of weights and gradients: a fixed little-endian header, then raw float32 values.

Nothing here deserializes objects or evaluates anything: a message is 64 bytes of typed
header fields and a body of `count` little-endian float32s, checked field by
field. Decoding is zero-copy (a NumPy view of the received bytes); encoding
writes into a preallocated buffer, so the hot path allocates nothing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

MAGIC = b"DDQ2"  # DDQ1 lacked the sender and its sequence
GRADIENT, WEIGHTS = 1, 2
FLOAT32 = 1
# magic, kind, dtype, shard, layout hash, sender, version, worker, samples, loss, offset, count, sequence
HEADER = struct.Struct("<4sBBH8sIQIIfQQQ")
BODY_DTYPE = np.dtype("<f4")
MAX_MESSAGE_BYTES = 512 * 2**20  # Redis's own bulk-string limit is 512 MB


class WireError(ValueError):
    """A message that is not what the receiver expects; `reason` is a short key for counting."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class Header:
    kind: int
    layout: bytes  # 8 bytes identifying the parameter layout (FlatParameters.layout_hash)
    version: int  # weights: their version; gradient: the version it was computed from
    count: int  # float32 values in the body
    offset: int = 0  # index of the body's first value in the flat vector (shards hold slices)
    shard: int = 0
    sender: int = 0  # gradient: a number its client drew at random, so no two clients share a sequence
    worker: int = 0
    samples: int = 0
    loss: float = 0.0
    sequence: int = 0  # gradient: the sender's push number, from 1 (0: unnumbered)


def layout_bytes(layout_hash: str) -> bytes:
    """The 8-byte header form of FlatParameters.layout_hash()'s 16 hex digits."""
    return bytes.fromhex(layout_hash)[:8].ljust(8, b"\0")


class MessageBuffer:
    """A reusable buffer that encodes messages of up to `count` values without allocating."""

    def __init__(self, count: int):
        self.buffer = bytearray(HEADER.size + count * BODY_DTYPE.itemsize)
        self.body = np.frombuffer(self.buffer, dtype=BODY_DTYPE, offset=HEADER.size)

    def pack(self, header: Header, values: np.ndarray) -> memoryview:
        """Header and `values` (float32) as one message, valid until the next pack."""
        n = header.count
        if values.shape != (n,):
            raise ValueError(f"header says {n} values, got an array of shape {values.shape}")
        self.buffer[:HEADER.size] = pack_header(header)
        np.copyto(self.body[:n], values, casting="same_kind")
        return memoryview(self.buffer)[:HEADER.size + 4 * n]


def pack_header(header: Header) -> bytes:
    """The header alone: sent before the values themselves, it spares copying them into a message."""
    return HEADER.pack(MAGIC, header.kind, FLOAT32, header.shard, header.layout, header.sender, header.version,
                       header.worker, header.samples, header.loss, header.offset, header.count, header.sequence)


def encode(header: Header, values: np.ndarray) -> bytes:
    """A one-off message (tests, tools); hot paths reuse a MessageBuffer."""
    buffer = MessageBuffer(header.count)
    return bytes(buffer.pack(header, values))


@dataclass(frozen=True)
class Expect:
    """What a receiver accepts; None fields are not checked."""

    kind: int
    layout: bytes | None = None
    offset: int | None = None
    count: int | None = None
    max_bytes: int = MAX_MESSAGE_BYTES
    check_finite: bool = True  # gradients: always; weights from ddq's own server: the size checks suffice


def read_header(message: bytes | memoryview, whole: bool = True) -> Header:
    """The header of `message`, with only its own consistency checked; `whole=False` accepts the
    header alone (as GETRANGE reads it) and skips the body-length check."""
    if len(message) < HEADER.size:
        raise WireError("truncated", f"{len(message)} bytes is shorter than the {HEADER.size}-byte header")
    (magic, kind, dtype, shard, layout, sender, version, worker, samples, loss,
     offset, count, sequence) = HEADER.unpack_from(message, 0)
    if magic != MAGIC:
        raise WireError("bad_header", f"magic {magic!r} is not {MAGIC!r}")
    if kind not in (GRADIENT, WEIGHTS):
        raise WireError("bad_header", f"unknown message kind {kind}")
    if dtype != FLOAT32:
        raise WireError("dtype", f"dtype code {dtype}; only float32 ({FLOAT32}) is accepted")
    if whole and len(message) != HEADER.size + 4 * count:
        raise WireError("size", f"header announces {count} values but the body has {len(message) - HEADER.size} bytes")
    return Header(kind, layout, version, count, offset, shard, sender, worker, samples, loss, sequence)


def check(header: Header, expect: Expect) -> None:
    """Raises WireError unless `header` is what `expect` accepts."""
    if header.kind != expect.kind:
        raise WireError("kind", f"expected message kind {expect.kind}, got {header.kind}")
    if expect.layout is not None and header.layout != expect.layout:
        raise WireError("layout", f"layout hash {header.layout.hex()} is not this model's {expect.layout.hex()}")
    if (expect.offset is not None and header.offset != expect.offset) or \
            (expect.count is not None and header.count != expect.count):
        raise WireError("size", f"values [{header.offset}, +{header.count}) are not this receiver's "
                                f"[{expect.offset}, +{expect.count})")


def decode(message: bytes | memoryview, expect: Expect) -> tuple[Header, np.ndarray]:
    """(header, values) of a message meeting `expect`; `values` is a read-only view of `message`.

    Raises WireError for anything else, including non-finite values.
    """
    if len(message) > expect.max_bytes:
        raise WireError("oversized", f"{len(message)} bytes is over the {expect.max_bytes}-byte limit")
    header = read_header(message)
    check(header, expect)
    values = np.frombuffer(message, dtype=BODY_DTYPE, count=header.count, offset=HEADER.size)
    if expect.check_finite and not np.isfinite(np.dot(values, values)):  # one BLAS pass catches any NaN or Inf
        raise WireError("non_finite", "values contain NaN or Inf (or magnitudes beyond 1e19)")
    return header, values


def weights_expectation(layout: bytes, bounds: tuple[int, int]) -> Expect:
    """What a weights message of the shard slice `bounds` = [start, end) must be."""
    start, end = bounds
    return Expect(WEIGHTS, layout, start, end - start, check_finite=False)


def gradient_expectation(layout: bytes, bounds: tuple[int, int], max_bytes: int) -> Expect:
    """What a gradient message for the shard slice `bounds` = [start, end) must be."""
    start, end = bounds
    return Expect(GRADIENT, layout, start, end - start, max_bytes=max_bytes)


def read_weights_header(head: bytes | memoryview, layout: bytes, bounds: tuple[int, int]) -> Header:
    """The header of a stored weights message (read alone, as GETRANGE gives it), checked against
    the slice `bounds` of the model whose layout hash is `layout`; WireError otherwise."""
    header = read_header(head, whole=False)
    check(header, weights_expectation(layout, bounds))
    return header
