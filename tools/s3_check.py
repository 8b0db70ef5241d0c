"""`ferry s3 check --endpoint URL [--bucket B]`: does an S3 implementation do what Ferry needs?

The object-store checks (stream_storage/s3_check.py) exercise each behaviour the object-store seam
relies on; the last check runs stream storage end to end on the endpoint, with an in-process
controller, which is why the command lives here, above both the quorum and the storage layer.
Used to qualify an S3 endpoint (MinIO, LocalStack, a vendor's) before pointing brokers at it;
docs/s3.md keeps the results for the implementations tried.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid

from metadata_quorum.kernel.messages import BROKER_HEARTBEAT, REGISTER_BROKER
from metadata_quorum.kernel.messages.cluster import BrokerHeartbeatRequest, RegisterBrokerRequest
from metadata_quorum.local_controller import LocalController
from stream_storage.batches import build_batch, read_records
from stream_storage.config import S3Config, StreamStorageConfig
from stream_storage.control import LocalStreamControl
from stream_storage.s3_check import CheckResult, run_checks
from stream_storage.s3_store import S3ObjectStore, open_s3_store
from stream_storage.storage import StreamStorage


async def streams_roundtrip(config: S3Config, work_dir: str) -> CheckResult:
    """Stream storage end to end on the endpoint: appends, uploads, a cold read elsewhere."""
    controller = LocalController(lambda: int(time.time() * 1000))

    def broker(bid: int) -> StreamStorage:
        registration: RegisterBrokerRequest = {"broker_id": bid, "incarnation_id": f"check-{bid}",
                                               "endpoints": [], "rack": None, "log_dirs": []}
        epoch = int(controller.call(REGISTER_BROKER, registration)["broker_epoch"])
        heartbeat: BrokerHeartbeatRequest = {"broker_id": bid, "broker_epoch": epoch,
                                             "metadata_offset": controller.next_offset - 1, "want_shutdown": False,
                                             "saturated_log_dirs": [], "offline_log_dirs": []}
        controller.call(BROKER_HEARTBEAT, heartbeat)
        cfg = StreamStorageConfig(wal_dir=os.path.join(work_dir, f"wal-{bid}"), upload_bytes=64 * 1024,
                                  object_key_prefix=f"ferry-check-{uuid.uuid4().hex[:8]}")
        return StreamStorage(cfg, open_s3_store(config), LocalStreamControl(controller), bid, epoch)

    try:
        writer, reader = broker(1), broker(2)
        await writer.start()
        await reader.start()
        sid = await writer.create_stream()
        await writer.open_stream(sid, 0)
        values = [os.urandom(100) for _ in range(500)]
        for i in range(0, 500, 10):
            await writer.append(sid, build_batch([(None, v) for v in values[i:i + 10]]))
        await writer.close_stream(sid)
        got, offset = [], 0
        while True:
            res = await reader.fetch(sid, offset, 16 * 1024)
            if not res.data:
                break
            got += [r.value for r in read_records(res.data) if r.offset >= offset]
            offset = res.next_offset
        await writer.close()
        await reader.close()
        if got != values:
            return CheckResult("stream storage: append, upload, cold read elsewhere", False,
                               f"read back {len(got)} of {len(values)} records")
        return CheckResult("stream storage: append, upload, cold read elsewhere", True)
    except Exception as exc:  # noqa: BLE001
        return CheckResult("stream storage: append, upload, cold read elsewhere", False, f"{type(exc).__name__}: {exc}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ferry s3 check", description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", required=True, help="the S3 endpoint URL")
    parser.add_argument("--bucket", default="ferry-check", help="bucket to use (created when absent)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    config = S3Config(endpoint_url=args.endpoint, bucket=args.bucket)
    store = S3ObjectStore(config)
    store.ensure_bucket_sync()

    async def run() -> list[CheckResult]:
        results = await run_checks(store, f"ferry-check/{uuid.uuid4().hex[:8]}")
        with tempfile.TemporaryDirectory() as work:
            results.append(await streams_roundtrip(config, work))
        await store.close()
        return results

    results = asyncio.run(run())
    failed_required = [r for r in results if not r.ok and r.required]
    if args.json:
        print(json.dumps({"endpoint": args.endpoint, "checks": [r.__dict__ for r in results],
                          "usable": not failed_required}))
    else:
        for r in results:
            mark = "ok  " if r.ok else ("FAIL" if r.required else "diff")
            print(f"{mark}  {r.name}" + (f": {r.detail}" if r.detail else ""))
        print("usable by Ferry" if not failed_required else "NOT usable by Ferry")
    return 0 if not failed_required else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
