"""The image-freshness half of the write lease (a fake controller client, no processes)."""
from __future__ import annotations

from typing import Any

from broker.freshness import FreshnessTrackingFollower
from metadata_quorum.records import KVRecord, encode_record


class FakeLogClient:
    bootstrap = ["http://c1"]

    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.bodies = bodies

    async def fetch_log(self, offset: int, max_wait_ms: int = 0, max_records: int = 10_000,
                        url: str | None = None) -> dict[str, Any]:
        return self.bodies.pop(0)


async def test_fresh_only_after_a_fetch_that_left_it_caught_up() -> None:
    rec = {"offset": 0, "record": encode_record(KVRecord(key="k", value="v"))}
    rec2 = {"offset": 1, "record": encode_record(KVRecord(key="k", value="w"))}
    seen: list[int] = []
    f = FreshnessTrackingFollower(FakeLogClient([
        {"records": [rec], "high_watermark": 2},  # behind: one more record exists
        {"records": [rec2], "high_watermark": 2},  # caught up
    ]), lambda records, delta, image: seen.append(image.offset))
    assert not f.fresh(0.0, 10.0)
    await f.poll_once()
    assert f.caught_up_sent_mono_s < 0 and not f.fresh(1e9, 10.0)
    await f.poll_once()
    sent = f.caught_up_sent_mono_s
    assert sent > 0 and f.fresh(sent + 9.9, 10.0) and not f.fresh(sent + 10.0, 10.0)
    assert seen == [0, 1] and f.image.kv["k"] == "w"
