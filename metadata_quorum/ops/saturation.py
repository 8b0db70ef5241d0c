"""KIP-928 for ``storage=local`` partitions: what the controller does when a broker reports a log
dir newly saturated (full).

A replica in a full dir can take no appends, so, as KRaft does for a replica whose dir went offline,
it leaves the ISR at once; when it led, the first active in-sync replica elsewhere becomes leader
(when there is none it stays, refusing writes with ``KAFKA_STORAGE_ERROR`` but serving reads).
Once the dir has room again the broker reports it online, the replica catches up and its leader
adds it back to the ISR as usual. ``storage=s3`` replicas keep only metadata in their dirs and are
left alone: their broker uploads what its WAL buffers instead.
"""
from __future__ import annotations

from typing import Iterable

from metadata_quorum.ops.placement import RecordBuilder, remove_from_isr
from metadata_quorum.records import STORAGE_S3


def hand_off_saturated(builder: RecordBuilder, broker_id: int, before: Iterable[str], after: Iterable[str]) -> None:
    """``broker_id``'s local replicas in dirs saturated since ``before`` leave the ISR (and leadership)."""
    newly = set(after) - set(before)
    if not newly:
        return
    for _topic, part in builder.image.topics.all_partitions():
        current = builder.view.partition(part.topic_id, part.partition)
        if current is None or current.storage == STORAGE_S3 or broker_id not in current.replicas:
            continue
        idx = current.replicas.index(broker_id)
        if idx >= len(current.directories) or current.directories[idx] not in newly:
            continue
        others = [r for r in current.isr if r != broker_id and builder.is_active(r)]
        if others:  # the last in-sync replica keeps leading: reads go on, writes are refused
            remove_from_isr(builder, current, {broker_id})
