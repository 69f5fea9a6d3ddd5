"""The sequencer's counters and histograms, which /metrics shows."""

from __future__ import annotations


class Stats:
    """Counters the server exposes as metrics."""

    BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    SYNC_BUCKETS_MS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 1000)

    def __init__(self) -> None:
        self.commands = 0
        self.batches = 0
        self.largest_batch = 0
        self.batch_sizes = [0] * (len(self.BATCH_BUCKETS) + 1)
        self.syncs = 0
        self.sync_seconds = 0.0
        self.sync_hist = [0] * (len(self.SYNC_BUCKETS_MS) + 1)

    def batch(self, size: int) -> None:
        self.commands += size
        self.batches += 1
        if size > self.largest_batch:
            self.largest_batch = size
        self.batch_sizes[_bucket(self.BATCH_BUCKETS, size)] += 1

    def sync(self, seconds: float) -> None:
        self.syncs += 1
        self.sync_seconds += seconds
        self.sync_hist[_bucket(self.SYNC_BUCKETS_MS, seconds * 1000)] += 1


def _bucket(bounds: tuple[float, ...], value: float) -> int:
    for i, bound in enumerate(bounds):
        if value <= bound:
            return i
    return len(bounds)
