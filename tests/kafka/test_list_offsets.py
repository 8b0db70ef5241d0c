"""ListOffsets' special timestamps reach the broker core as offset specs, each only from the
version that has it (-3 v7, -4 v8, -5 v9); other negative timestamps are refused."""
from __future__ import annotations

from kafka.protocol.consumer.offsets import ListOffsetsRequest

from broker.producer_ids import CountingProducerIds
from broker.kafka.data_apis import DataApis
from broker.kafka.wire import Request
from metadata_quorum.kernel.errors import ErrorCode


class SpecCore:
    broker_id = 1
    cluster_id = "c"
    image = None

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    async def offset_at(self, topic: str, partition: int, spec: str, timestamp_ms: int = -1,
                        client_leader_epoch: int | None = None) -> tuple[int, int, int]:
        self.asked.append((spec, timestamp_ms))
        return 7, (timestamp_ms if spec == "timestamp" else -1), 3


def list_offsets(version: int, timestamps: list[int], isolation_level: int = 0) -> Request:
    T = ListOffsetsRequest.ListOffsetsTopic
    body = ListOffsetsRequest[version](replica_id=-1, isolation_level=isolation_level, topics=[T(name="t", partitions=[
        T.ListOffsetsPartition(partition_index=i, current_leader_epoch=-1, timestamp=ts)
        for i, ts in enumerate(timestamps)])])
    return Request(2, version, 1, "c", body, 0)


async def test_special_timestamps_map_to_specs_from_their_version_on() -> None:
    core = SpecCore()
    apis = DataApis(core, CountingProducerIds())
    out = await apis.list_offsets(list_offsets(9, [-1, -2, -3, -4, -5, 1234, -6]))
    assert core.asked == [("latest", -1), ("earliest", -2), ("max_timestamp", -3), ("earliest_local", -4),
                          ("latest_tiered", -5), ("timestamp", 1234)]
    codes = [p.error_code for p in out.topics[0].partitions]  # type: ignore[attr-defined]
    assert codes == [0] * 6 + [ErrorCode.INVALID_REQUEST.code]
    core.asked.clear()
    # read_committed: latest is the last stable offset; the other specs are the same
    await apis.list_offsets(list_offsets(9, [-1, -2], isolation_level=1))
    assert core.asked == [("latest_stable", -1), ("earliest", -2)]
    core.asked.clear()
    out = await apis.list_offsets(list_offsets(7, [-3, -4, -5]))
    assert core.asked == [("max_timestamp", -3)]
    codes = [p.error_code for p in out.topics[0].partitions]  # type: ignore[attr-defined]
    assert codes == [0, ErrorCode.UNSUPPORTED_VERSION.code, ErrorCode.UNSUPPORTED_VERSION.code]
    core.asked.clear()
    out = await apis.list_offsets(list_offsets(6, [-3]))
    assert core.asked == [] and out.topics[0].partitions[0].error_code == ErrorCode.UNSUPPORTED_VERSION.code  # type: ignore[attr-defined]
