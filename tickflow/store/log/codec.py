"""The log's payload encoding: one msgpack array per record, `[seq, ts, [kind, ...fields]]`."""

from __future__ import annotations

import struct

import msgspec

from tickflow.core.types import Record

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Record)

encode_record = _encoder.encode
"""Record -> bytes."""

decode_record = _decoder.decode
"""bytes or memoryview -> Record; raises msgspec.ValidationError or DecodeError if it is not one.

The decoder's own method, with no Python frame around it: replay calls it once per record."""

_many = msgspec.msgpack.Decoder(list[Record])
_array32 = struct.Struct(">BI")


def decode_records(payloads: list[memoryview] | list[bytes]) -> list[Record]:
    """Many payloads -> their Records, in one decoder call (replay's fast path).

    Each payload was written as exactly one record (the sequencer checks that it decodes alone), so
    decoding them as one msgpack array gives what decoding each would; on an error, decode each
    to find the one at fault.
    """
    return _many.decode(_array32.pack(0xDD, len(payloads)) + b"".join(payloads))


def decode_joined(count: int, joined: bytes | bytearray) -> list[Record]:
    """`count` payloads joined back to back -> their Records (replay's batches: see decode_records)."""
    return _many.decode(_array32.pack(0xDD, count) + joined)


DecodeErrors = (msgspec.DecodeError, msgspec.ValidationError)
