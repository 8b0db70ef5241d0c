"""Stream storage with real controller processes (3-node quorum over HTTP) and a real moto server."""
from __future__ import annotations

import asyncio
from typing import Any, Iterator

import pytest

from metadata_quorum.client import ControllerClient
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.config import S3Config, StreamStorageConfig
from stream_storage.control import HttpStreamControl
from stream_storage.s3_server import S3Server
from stream_storage.s3_store import open_s3_store
from stream_storage.storage import StreamStorage
from tests.streams.conftest import FAST_RETRY, batch_of, read_all
from tools.proc import Quorum, start_quorum

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: Any) -> Iterator[Quorum]:
    q = start_quorum(str(tmp_path_factory.mktemp("streams-quorum")))
    try:
        yield q
    finally:
        q.stop_all()


async def register(client: ControllerClient, broker_id: int) -> int:
    """Register and heartbeat (as caught up) until unfenced; returns the broker epoch."""
    body = await client.write_with_offset("register_broker", {
        "broker_id": broker_id, "incarnation_id": f"streams-{broker_id}", "endpoints": [], "rack": None,
        "log_dirs": []})
    epoch, offset = int(body["reply"]["broker_epoch"]), int(body["offset"])
    for _ in range(50):
        hb = await client.write_with_offset("broker_heartbeat", {
            "broker_id": broker_id, "broker_epoch": epoch, "metadata_offset": offset, "want_shutdown": False,
            "saturated_log_dirs": [], "offline_log_dirs": []})
        if not hb["reply"]["is_fenced"]:
            return epoch
        offset = int(hb["offset"])
        await asyncio.sleep(0.05)
    raise AssertionError(f"broker {broker_id} stayed fenced")


async def test_streams_through_controller_processes(quorum: Quorum, s3_server: S3Server, tmp_path) -> None:
    async with ControllerClient(quorum.bootstrap) as client:
        storages = []
        for broker_id in (1, 2):
            epoch = await register(client, broker_id)
            cfg = StreamStorageConfig(wal_dir=str(tmp_path / f"wal-{broker_id}"), controller_retry=FAST_RETRY)
            store = open_s3_store(S3Config(endpoint_url=s3_server.endpoint_url, bucket=s3_server.bucket))
            storages.append(StreamStorage(cfg, store, HttpStreamControl(client), broker_id, epoch))
        a, b = storages
        await a.start()
        await b.start()
        sid = await a.create_stream()
        # a race to open at the same epoch: exactly one wins, the other is fenced
        results = await asyncio.gather(a.open_stream(sid, 1), b.open_stream(sid, 1), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        assert len(errors) == 1 and isinstance(errors[0], FerryError)
        assert errors[0].error == ErrorCode.STREAM_FENCED
        winner, other = (a, b) if not isinstance(results[0], BaseException) else (b, a)
        tags = [f"h{i}" for i in range(12)]
        for i, tag in enumerate(tags):
            await winner.append(sid, batch_of(tag))
            if i == 5:
                await winner.force_upload(sid)
        with pytest.raises(FerryError):
            await other.append(sid, batch_of("never"))
        await winner.close_stream(sid)
        # the other broker takes over with a higher epoch and reads every record back
        info = await other.open_stream(sid, 2)
        assert info.end_offset == 36
        got = await read_all(other, sid)
        assert [r.key for r in got] == [f"{t}-{i}".encode() for t in tags for i in range(3)]
        assert await other.append(sid, batch_of("next")) == 36
        await other.close_stream(sid)
        for _ in range(100):  # reads go to any controller; a follower applies the close a moment later
            desc = await client.read("describe_stream", {"stream_id": sid})
            if desc["state"] == "CLOSED":
                break
            await asyncio.sleep(0.02)
        assert desc["end_offset"] == 39 and desc["state"] == "CLOSED" and desc["epoch"] == 2
        await a.close()
        await b.close()
