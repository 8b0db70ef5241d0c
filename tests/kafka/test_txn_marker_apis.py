"""WriteTxnMarkers' handler (broker/kafka/txn_marker_apis.py) over a recording core: per-partition
errors, the ClusterAction check, and the group coordinator's hook on __consumer_offsets."""
from __future__ import annotations

from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

from broker.kafka.authorization import Authorization
from broker.kafka.txn_marker_apis import TxnMarkerApis
from broker.kafka.wire import Request
from metadata_quorum.authorizer import AuthorizerSettings
from metadata_quorum.kernel.errors import ErrorCode, FerryError


class Core:
    def __init__(self) -> None:
        self.written: list[tuple[str, int, int, int, bool, int]] = []

    async def write_txn_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                               commit: bool, coordinator_epoch: int) -> int:
        if partition == 9:
            raise FerryError(ErrorCode.TRANSACTION_COORDINATOR_FENCED, "older coordinator")
        if topic == "gone":
            raise FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such topic")
        self.written.append((topic, partition, producer_id, producer_epoch, commit, coordinator_epoch))
        return len(self.written)


def request(principal: str = "User:ANONYMOUS") -> Request:
    M = WriteTxnMarkersRequest.WritableTxnMarker
    T = M.WritableTxnMarkerTopic
    body = WriteTxnMarkersRequest[1](markers=[
        M(producer_id=5, producer_epoch=2, transaction_result=False, coordinator_epoch=3,
          topics=[T(name="t", partition_indexes=[0, 9]), T(name="__consumer_offsets", partition_indexes=[4]),
                  T(name="gone", partition_indexes=[1])]),
        M(producer_id=6, producer_epoch=0, transaction_result=True, coordinator_epoch=3,
          topics=[T(name="__consumer_offsets", partition_indexes=[4])])])
    return Request(27, 1, 1, "c", body, 0, principal=principal)


def codes(answer: object) -> list[tuple[int, str, int, int]]:
    return [(m.producer_id, t.name, p.partition_index, p.error_code)
            for m in answer.markers for t in m.topics for p in t.partitions]  # type: ignore[attr-defined]


async def test_each_partition_answers_its_own_error_and_offsets_markers_reach_the_hook() -> None:
    core, told = Core(), []

    async def hook(partition: int, producer_id: int, commit: bool) -> None:
        told.append((partition, producer_id, commit))

    answer = await TxnMarkerApis(core, on_txn_marker=hook).write_txn_markers(request())
    assert codes(answer) == [(5, "t", 0, 0), (5, "t", 9, ErrorCode.TRANSACTION_COORDINATOR_FENCED.code),
                             (5, "__consumer_offsets", 4, 0),
                             (5, "gone", 1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.code),
                             (6, "__consumer_offsets", 4, 0)]
    assert core.written == [("t", 0, 5, 2, False, 3), ("__consumer_offsets", 4, 5, 2, False, 3),
                            ("__consumer_offsets", 4, 6, 0, True, 3)]
    assert told == [(4, 5, False), (4, 6, True)]  # after each marker is written, in order


async def test_without_cluster_action_nothing_is_written() -> None:
    core = Core()
    auth = Authorization(AuthorizerSettings(True, frozenset({"User:broker"})))
    apis = TxnMarkerApis(core, auth)
    denied = await apis.write_txn_markers(request("User:alice"))
    assert {c for *_, c in codes(denied)} == {ErrorCode.CLUSTER_AUTHORIZATION_FAILED.code}
    assert len(codes(denied)) == 5 and core.written == []
    allowed = await apis.write_txn_markers(request("User:broker"))
    assert len(core.written) == 3 and codes(allowed)[0] == (5, "t", 0, 0)
