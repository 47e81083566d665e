"""The wire format: round trips, zero-copy decoding, and every kind of bad message refused by reason."""

import numpy as np
import pytest

from ddq.transport.wire import (
    GRADIENT,
    HEADER,
    WEIGHTS,
    Expect,
    Header,
    MessageBuffer,
    WireError,
    decode,
    encode,
    layout_bytes,
    read_header,
)

LAYOUT = layout_bytes("0123456789abcdef")


def gradient(values, **fields):
    return encode(Header(GRADIENT, LAYOUT, fields.pop("version", 7), len(values), **fields), values)


def test_round_trip_keeps_every_field_and_value():
    values = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    message = gradient(values, worker=3, samples=32, loss=0.25, offset=10, shard=1, sender=9, sequence=7)
    header, decoded = decode(message, Expect(GRADIENT, LAYOUT, offset=10, count=1000))
    assert (header.version, header.worker, header.samples, header.loss, header.offset, header.shard, header.sender,
            header.sequence) == \
        (7, 3, 32, 0.25, 10, 1, 9, 7)
    assert np.array_equal(decoded, values)
    assert len(message) == HEADER.size + 4000


def test_decoding_is_a_view_and_packing_reuses_its_buffer():
    buffer = MessageBuffer(100)
    first = buffer.pack(Header(WEIGHTS, LAYOUT, 1, 100), np.ones(100, np.float32))
    address = np.frombuffer(first, np.uint8).ctypes.data
    second = buffer.pack(Header(WEIGHTS, LAYOUT, 2, 50), np.zeros(50, np.float32))
    assert np.frombuffer(second, np.uint8).ctypes.data == address and len(second) == HEADER.size + 200
    message = bytes(second)
    _, values = decode(message, Expect(WEIGHTS))
    assert not values.flags.owndata and not values.flags.writeable


def corrupt(message: bytes, offset: int, data: bytes) -> bytes:
    return message[:offset] + data + message[offset + len(data):]


@pytest.mark.parametrize("make, reason", [
    (lambda m: m[:20], "truncated"),
    (lambda m: b"", "truncated"),
    (lambda m: corrupt(m, 0, b"PKL\x02"), "bad_header"),
    (lambda m: corrupt(m, 4, b"\x09"), "bad_header"),
    (lambda m: corrupt(m, 5, b"\x02"), "dtype"),
    (lambda m: m[:-4], "size"),
    (lambda m: m + b"\0\0\0\0", "size"),
    (lambda m: corrupt(m, 8, b"XXXXXXXX"), "layout"),
    (lambda m: corrupt(m, HEADER.size, np.float32(np.nan).tobytes()), "non_finite"),
    (lambda m: corrupt(m, HEADER.size + 8, np.float32(-np.inf).tobytes()), "non_finite"),
    (lambda m: encode(Header(WEIGHTS, LAYOUT, 1, 16), np.zeros(16, np.float32)), "kind"),
    (lambda m: encode(Header(GRADIENT, LAYOUT, 1, 8), np.zeros(8, np.float32)), "size"),
])
def test_bad_messages_are_refused_with_a_reason(make, reason):
    good = gradient(np.arange(16, dtype=np.float32))
    decode(good, Expect(GRADIENT, LAYOUT, 0, 16))
    with pytest.raises(WireError) as error:
        decode(make(good), Expect(GRADIENT, LAYOUT, 0, 16))
    assert error.value.reason == reason


def test_oversized_messages_are_refused_before_reading_them():
    message = gradient(np.zeros(1000, np.float32))
    with pytest.raises(WireError, match="oversized"):
        decode(message, Expect(GRADIENT, max_bytes=1000))
    assert read_header(message).count == 1000
