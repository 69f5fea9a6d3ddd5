"""The log's record framing, `[length u32][CRC32 u32][payload]`, and the scan that checks it.

Standard library only: the framing helper process (frame_helper.py) imports this file by path.
"""

from __future__ import annotations

import struct
import zlib
from typing import Iterator

HEADER = struct.Struct("<II")
HEADER_SIZE = HEADER.size
MAX_PAYLOAD = 1 << 20
"""A length above this is not a record but garbage (no command encodes to a megabyte)."""


def frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def good_records(data: bytes, offset: int, size: int = 4096) -> Iterator[tuple[int, list[memoryview]]]:
    """The whole records from `offset` whose length is sane and whose checksum holds, in lists of up
    to `size` consecutive payloads with the first one's offset. Stops before the first record that
    is short, has an absurd length or a bad checksum, or at the end of `data`."""
    view = memoryview(data)
    end_of_data = len(data)
    unpack = HEADER.unpack_from
    crc32 = zlib.crc32
    first = offset
    batch: list[memoryview] = []
    append = batch.append
    while offset + HEADER_SIZE <= end_of_data:
        length, crc = unpack(data, offset)
        end = offset + HEADER_SIZE + length
        if not (0 < length <= MAX_PAYLOAD and end <= end_of_data):
            break
        payload = view[offset + HEADER_SIZE : end]
        if crc32(payload) != crc:
            break
        append(payload)
        offset = end
        if len(batch) == size:
            yield first, batch
            first = offset
            batch = []
            append = batch.append
    if batch:
        yield first, batch


def batch_end(first: int, payloads: list[memoryview]) -> int:
    """Where the record after a batch from `good_records` begins."""
    return first + HEADER_SIZE * len(payloads) + sum(map(len, payloads))
