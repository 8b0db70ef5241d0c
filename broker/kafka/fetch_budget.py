"""How much of each partition's read goes into a Fetch response: Kafka's byte limits (KIP-74).

A Fetch names a response-wide ``max_bytes`` (the consumer's ``fetch.max.bytes``) and a
``partition_max_bytes`` per partition (``max.partition.fetch.bytes``). Kafka's
ReplicaManager.readFromLog walks the partitions in request order with what is left of the
response's budget: each partition gets whole batches up to the smaller of its own limit and that
remainder, except that the first partition returning any data gets at least its first batch
whole, however large, so a consumer always progresses past a batch larger than its limits. Once
the budget is spent the remaining partitions answer with no records, and the client asks again
from the same offsets. Pure: the decisions over the batches' length fields, no I/O.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from stream_storage.batches import LOG_OVERHEAD

_LENGTH = struct.Struct(">i")
_LENGTH_AT = 8  # a v2 batch: base offset int64, then batch length int32 (bytes after the field)


def whole_batches_within(data: bytes, limit_bytes: int, at_least_one: bool) -> bytes:
    """The longest prefix of ``data`` (whole batches) that fits ``limit_bytes``; with
    ``at_least_one`` the first batch even when it alone is larger."""
    if len(data) <= limit_bytes:
        return data
    end = 0
    total = len(data)
    while end + LOG_OVERHEAD <= total:
        size = _LENGTH.unpack_from(data, end + _LENGTH_AT)[0] + LOG_OVERHEAD
        if end + size > limit_bytes and not (end == 0 and at_least_one):
            break
        end = min(end + size, total)
        if end >= limit_bytes:
            break
    return data[:end]


@dataclass
class FetchBudget:
    """What is left of one response's ``max_bytes`` as its partitions are filled in request order."""

    remaining_bytes: int
    #: no partition has returned data yet: the next one with data gets at least one batch
    first_data: bool = True

    def take(self, data: bytes, partition_max_bytes: int) -> bytes:
        """The part of one partition's read (whole batches from its fetch offset) that goes in."""
        if not data:
            return data
        limit = min(partition_max_bytes, self.remaining_bytes)
        out = whole_batches_within(data, max(0, limit), at_least_one=self.first_data)
        if out:
            self.first_data = False
            self.remaining_bytes = max(0, self.remaining_bytes - len(out))
        return out

