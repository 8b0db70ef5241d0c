"""The seam between the broker's request core and a partition it serves.

Two kinds of replica serve partitions: :class:`broker.replica.Replica` (``storage=s3``: the log is a
stream in object storage, durable once the WAL has it) and :class:`broker.local_replica.LocalReplica`
(``storage=local``: Kafka's classic replication, durable once the in-sync replicas have it). The
produce, fetch, list-offsets and delete-records paths see only this Protocol, so each kind keeps
its own durability rule behind ``append_acked`` and the core never branches on the kind.
"""
from __future__ import annotations

from typing import Protocol

from broker.load_sampler import LoadCounters
from broker.txn_state import AbortedTxn
from stream_storage.batches import BatchInfo


class ServedReplica(Protocol):
    leader_epoch: int
    high_watermark: int
    closed: bool  # no produce here any more (closing, moved away, stopped)
    fenced: bool  # a newer owner or epoch took the partition: nothing may be acknowledged
    counters: LoadCounters

    @property
    def log_start_offset(self) -> int: ...

    async def append_acked(self, body: bytearray, infos: list[BatchInfo], acks: int) -> tuple[int, int]:
        """Append one validated batch; (base, last offset) once it is as durable as ``acks`` asks."""
        ...

    async def fetch(self, offset: int, max_bytes: int, max_wait_ms: int, read_committed: bool = False) -> bytes:
        """Whole batches from ``offset``: below the high watermark, or below the last stable offset
        when ``read_committed``."""
        ...

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset of the oldest open transaction, else the high watermark."""
        ...

    def aborted_transactions(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of [fetch_offset, upper_offset) names."""
        ...

    async def append_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                            coordinator_epoch: int) -> int:
        """WriteTxnMarkers: append a transaction's commit or abort marker; its offset once durable."""
        ...

    async def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int]: ...

    async def max_timestamp_offset(self) -> tuple[int, int]:
        """ListOffsets -3: (offset, timestamp) of the first record with the largest timestamp, or (-1, -1)."""
        ...

    def latest_tiered_offset(self) -> int:
        """ListOffsets -5: the last offset already in object storage, or -1."""
        ...

    async def delete_records_before(self, offset: int) -> int: ...
