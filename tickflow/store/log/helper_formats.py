"""What the log's helper processes and the server say to each other over their pipes.

Standard library only: frame_helper.py and sync_helper.py import this file by path.
"""

import struct

BATCH = struct.Struct("<qII")
"""From the framing helper, before each batch of payloads: the first record's offset, the number of
records, their bytes. A batch of 0 records ends the stream; its offset is where the helper stopped."""

SYNC_REQUEST = struct.Struct("<q")
"""To the sync helper: the log's size when asked (the helper reads the size itself; this wakes it)."""

SYNC_REPLY = struct.Struct("<qid?")
"""From the sync helper: bytes synced, errno (0: synced), seconds, syncing again already."""
