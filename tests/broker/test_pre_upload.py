"""Uploading ahead of a move (broker/pre_upload.py), driven with stand-ins: no sockets, no S3."""
from __future__ import annotations

from types import SimpleNamespace

from broker import partition as sm
from broker.pre_upload import pre_upload
from metadata_quorum.kernel.errors import ErrorCode, FerryError


class Uploads:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.calls: list[tuple[list[int], list[int], bool]] = []
        self.fail = fail

    async def upload(self, stream_ids, last_ids=(), close=False):
        self.calls.append((list(stream_ids), list(last_ids), close))
        if self.fail is not None:
            raise self.fail


def slot(state: sm.PartitionState, data: int, storage: object, closed: bool = False):
    replica = SimpleNamespace(data_stream_id=data, meta_stream_id=data + 1, storage=storage, closed=closed)
    return SimpleNamespace(status=sm.PartitionStatus(state=state), replica=replica)


async def test_uploads_served_partitions_in_one_object_per_storage_and_refuses_the_others():
    s3, other = object(), object()
    slots = {("t", 0): slot(sm.PartitionState.SERVING, 10, s3), ("t", 1): slot(sm.PartitionState.SERVING, 20, s3),
             ("t", 2): slot(sm.PartitionState.CLOSING, 30, s3), ("t", 3): slot(sm.PartitionState.SERVING, 40, other),
             ("t", 4): slot(sm.PartitionState.SERVING, 50, s3, closed=True)}
    uploads = {id(s3): Uploads(), id(other): Uploads()}
    named = [("t", 0), ("t", 1), ("t", 2), ("t", 3), ("t", 4), ("u", 0)]
    results = await pre_upload(7, named, lambda t, p: slots.get((t, p)), lambda st: uploads[id(st)])
    assert [r is None for r in results] == [True, True, False, True, False, False]
    assert all(r.error is ErrorCode.NOT_LEADER_OR_FOLLOWER for r in results if r is not None)
    # data streams first, the meta streams last; never a closing upload
    assert uploads[id(s3)].calls == [([10, 20], [11, 21], False)]
    assert uploads[id(other)].calls == [([40], [41], False)]


async def test_a_failed_upload_is_that_storages_partitions_error():
    s3 = object()
    slots = {("t", 0): slot(sm.PartitionState.SERVING, 10, s3)}
    fenced = FerryError(ErrorCode.STREAM_FENCED, "stream 10 is fenced")
    results = await pre_upload(7, [("t", 0)], lambda t, p: slots.get((t, p)), lambda st: Uploads(fenced))
    assert results == [fenced]
    results = await pre_upload(7, [("t", 0)], lambda t, p: slots.get((t, p)), lambda st: Uploads(OSError("down")))
    assert results[0] is not None and results[0].error is ErrorCode.KAFKA_STORAGE_ERROR
