"""Which brokers a closing owner hands its last object's tail to, and which bytes (pure).

Step 6 of a move used to wait for one S3 GET after step 4's commit: the new owner read the
index tail of the old owner's last object, where the partition meta snapshot sits, and that GET
was the longest thing left on the critical path (the election and the open finished first). The
old owner built those bytes and has just stored them, so once its PUT succeeds it hands the same
span the new owner's index GET would read (``reader.index_tail_start``) to the broker the
controller will elect, over the brokers' HTTP API (``tail_handoff_http.py``). The new owner keeps
them in its caches (``ObjectReader.accept_tail``, which checks the index and block CRCs) and reads
the object only once the metadata names it committed, as before: nothing changes about when it
may open or serve. If the hand-off is lost or late, the new owner GETs the object as before.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from metadata_quorum.image import MetadataImage
from metadata_quorum.records import NO_LEADER, STORAGE_S3
from stream_storage.reader import index_tail_start


@dataclass(frozen=True)
class TailHandoff:
    """Send bytes ``[tail_start, size)`` of ``object_key`` to ``broker_id``."""

    broker_id: int
    object_key: str
    size: int
    tail_start: int


def next_leader(image: MetadataImage, topic_id: str, partition: int, me: int) -> int | None:
    """The broker the controller will elect for a partition this broker is giving up, as its
    ``election_candidate`` picks for s3 storage (the first active replica), or None when no
    election is pending (the partition has a leader, is not s3, or the candidate is this broker)."""
    reg = image.topics.partition(topic_id, partition)
    if reg is None or reg.storage != STORAGE_S3 or reg.leader != NO_LEADER:
        return None
    replica = reg.first_active_replica(image.cluster.is_active)
    return None if replica in (me, NO_LEADER) else replica


def plan_handoffs(image: MetadataImage, me: int, partitions: Iterable[tuple[str, int]], object_key: str,
                  size: int) -> list[TailHandoff]:
    """One hand-off per broker that will lead one of ``partitions`` (closed by the commit of
    ``object_key``, ``size`` bytes), in broker order; the tail is the same for all of them."""
    targets = sorted({b for topic_id, p in partitions if (b := next_leader(image, topic_id, p, me)) is not None})
    if size <= 0:
        return []
    start = index_tail_start(size)
    return [TailHandoff(b, object_key, size, start) for b in targets]


def broker_url(image: MetadataImage, broker_id: int) -> str | None:
    """The broker's HTTP endpoint, as it registered it (its first endpoint)."""
    reg = image.cluster.brokers.get(broker_id)
    if reg is None or not reg.endpoints or not reg.endpoints[0].startswith("http"):
        return None
    return reg.endpoints[0]
