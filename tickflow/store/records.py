"""The log's payload encoding: one msgpack array per record, `[seq, ts, [kind, ...fields]]`."""

from __future__ import annotations

import msgspec

from tickflow.core.types import Record

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Record)

encode_record = _encoder.encode
"""Record -> bytes."""

decode_record = _decoder.decode
"""bytes or memoryview -> Record; raises msgspec.ValidationError or DecodeError if it is not one.

The decoder's own method, with no Python frame around it: replay calls it once per record."""

DecodeErrors = (msgspec.DecodeError, msgspec.ValidationError)
