"""The log's payload encoding: one msgpack array per record, `[seq, ts, [kind, ...fields]]`."""

from __future__ import annotations

import msgspec

from tickflow.core.types import Record

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Record)

encode_record = _encoder.encode
"""Record -> bytes."""


def decode_record(payload: bytes | memoryview) -> Record:
    """bytes -> Record; raises msgspec.ValidationError or DecodeError if it is not one."""
    return _decoder.decode(payload)
