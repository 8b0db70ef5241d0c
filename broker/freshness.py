"""How fresh this broker's metadata image is, for the write lease.

A broker that was paused (SIGSTOP, a stall) may wake up believing it still leads partitions the
controller has given away. Its heartbeat alone cannot stop it from acknowledging writes: the
controller may unfence it at once. So a write is acknowledged only if the broker's image was
caught up with the committed metadata log recently: ``now < sent + session_timeout``, where
``sent`` is when the broker *sent* the last metadata fetch whose answer left it caught up (any
change committed before that moment is applied, so a partition it lost is already closing).
Long-polls therefore wait at most a quarter of the session timeout (server.py), so that an idle
metadata log still refreshes the image often enough.
"""
from __future__ import annotations

import time
from typing import Any

from metadata_quorum.client import MetadataLogFollower


class TimedLogClient:
    """Wraps the controller client for the follower: remembers when each log fetch was sent."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.bootstrap = client.bootstrap
        self.last_sent_mono_s = -1.0

    async def fetch_log(self, offset: int, max_wait_ms: int = 0, max_records: int = 10_000,
                        url: str | None = None) -> dict[str, Any]:
        self.last_sent_mono_s = time.monotonic()
        result: dict[str, Any] = await self._client.fetch_log(offset, max_wait_ms, max_records, url=url)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class FreshnessTrackingFollower(MetadataLogFollower):
    """A MetadataLogFollower that records when its image was last known to be caught up."""

    def __init__(self, client: Any, *args: Any, **kwargs: Any) -> None:
        self.timed_client = TimedLogClient(client)
        super().__init__(self.timed_client, *args, **kwargs)  # type: ignore[arg-type]
        self.caught_up_sent_mono_s = -1.0

    async def handle(self, body: dict[str, Any]) -> int:
        sent = self.timed_client.last_sent_mono_s
        applied = await super().handle(body)  # records (and the broker's reaction) applied first
        if "snapshot" not in body and self.next_offset >= self.high_watermark:
            self.caught_up_sent_mono_s = max(self.caught_up_sent_mono_s, sent)
        return applied

    def fresh(self, now_mono_s: float, session_timeout_s: float) -> bool:
        return self.caught_up_sent_mono_s >= 0 and now_mono_s < self.caught_up_sent_mono_s + session_timeout_s
