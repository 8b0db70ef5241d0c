"""Consumer groups' lag for the console, through Kafka's own APIs (kafka-python's admin client:
ListGroups, OffsetFetch, ListOffsets), as Kafka's consumer-groups tool reads it.

The client is synchronous: the live source calls :meth:`GroupLagReader.read` in a thread, at most
every few seconds, and keeps showing the last answer meanwhile.
"""
from __future__ import annotations

from typing import Any

from tools.console.model import group_lag


class GroupLagReader:
    def __init__(self, bootstrap: str, timeout_ms: int = 3000) -> None:
        self.bootstrap = bootstrap
        self.timeout_ms = timeout_ms
        self._admin: Any = None

    def read(self) -> dict[str, dict[str, int]]:
        """topic -> group -> lag (records)."""
        from kafka import KafkaAdminClient
        from kafka.admin import OffsetSpec

        if self._admin is None:
            self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="ferry-console",
                                           request_timeout_ms=self.timeout_ms)
        groups = [str(g.get("group_id")) for g in self._admin.list_groups() if g.get("group_id")]
        if not groups:
            return {}
        fetched = self._admin.list_group_offsets({g: None for g in groups})
        committed = {g: {(tp.topic, tp.partition): int(om.offset) for tp, om in offsets.items()}
                     for g, offsets in fetched.items()}
        tps = {tp for offsets in fetched.values() for tp in offsets}
        ends = self._admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps}, timeout_ms=self.timeout_ms)
        return group_lag(committed, {(tp.topic, tp.partition): int(o.offset) for tp, o in ends.items()})

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
