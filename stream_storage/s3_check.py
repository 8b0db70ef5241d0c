"""`ferry s3 check --endpoint URL [--bucket B]`: does an S3 implementation do what Ferry needs?

Each check exercises one behaviour the object store seam relies on, through the same
:class:`~stream_storage.s3_store.S3ObjectStore` brokers use, and reports ok or what differed.
Used to qualify an S3 endpoint (MinIO, LocalStack, a vendor's) before pointing brokers at it;
docs/s3.md keeps the results for the implementations tried.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Awaitable, Callable

from stream_storage.config import S3Config
from stream_storage.object_store import ObjectNotFound, ObjectStoreError, PreconditionFailed
from stream_storage.s3_store import S3ObjectStore


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str = ""
    required: bool = True  # False: Ferry works without it (it never relies on it alone)


async def run_checks(store: S3ObjectStore, prefix: str) -> list[CheckResult]:
    results: list[CheckResult] = []

    async def check(name: str, fn: Callable[[], Awaitable[str | None]], required: bool = True) -> None:
        try:
            problem = await fn()
        except Exception as exc:  # noqa: BLE001 - a check reports whatever went wrong
            problem = f"{type(exc).__name__}: {exc}"
        results.append(CheckResult(name, problem is None, problem or "", required))

    body = os.urandom(3 * 1024 * 1024 + 17)
    key = f"{prefix}/object"

    async def put_get() -> str | None:
        etag = await store.put(key, body)
        got = await store.get(key)
        if got != body:
            return f"GET returned {len(got)} bytes, not the {len(body)} PUT"
        return None if etag else "PUT answered no ETag"

    async def ranges() -> str | None:
        for start, end in ((0, 1), (5, 70_000), (len(body) - 65_536, len(body)), (len(body) - 10, None),
                           (1024 * 1024, 2 * 1024 * 1024)):
            got = await store.get(key, start, end)
            want = body[start:end]
            if got != want:
                return f"range [{start}, {end}) returned {len(got)} bytes, expected {len(want)}"
        return None

    async def missing() -> str | None:
        try:
            await store.get(f"{prefix}/missing")
        except ObjectNotFound:
            return None
        return "GET of a missing key did not answer NoSuchKey (404)"

    async def listing() -> str | None:
        keys = [f"{prefix}/list/{i:04d}" for i in range(1005)]  # more than one page of 1000
        sem = asyncio.Semaphore(16)

        async def put_one(k: str) -> None:
            async with sem:
                await store.put(k, b"x")

        await asyncio.gather(*(put_one(k) for k in keys))
        found = sorted(o.key for o in await store.list(f"{prefix}/list/"))
        if found != keys:
            return f"LIST with a prefix over two pages found {len(found)} keys of {len(keys)}"
        others = await store.list(f"{prefix}/lis/")
        if others:
            return "LIST returned keys outside its prefix"
        return None

    async def delete_many() -> str | None:
        keys = [o.key for o in await store.list(f"{prefix}/list/")]
        await store.delete(keys + [f"{prefix}/never-existed"])
        left = await store.list(f"{prefix}/list/")
        return None if not left else f"DeleteObjects left {len(left)} of {len(keys)} keys"

    async def if_none_match() -> str | None:
        k = f"{prefix}/conditional"
        await store.put(k, b"first", if_none_match=True)
        try:
            await store.put(k, b"second", if_none_match=True)
        except PreconditionFailed:
            return None if await store.get(k) == b"first" else "the refused PUT changed the object"
        return "PUT with If-None-Match: * over an existing key was not refused (412)"

    async def if_match() -> str | None:
        k = f"{prefix}/conditional-match"
        etag = await store.put(k, b"one")
        try:
            await store.put(k, b"two", if_match='"not-the-etag"')
        except PreconditionFailed:
            pass
        else:
            return "PUT with a wrong If-Match was not refused (412)"
        await store.put(k, b"three", if_match=etag)
        return None if await store.get(k) == b"three" else "PUT with the right If-Match did not write"

    async def empty_object() -> str | None:
        k = f"{prefix}/empty"
        await store.put(k, b"")
        got = await store.get(k)
        return None if got == b"" else f"an empty object read back as {len(got)} bytes"

    await check("PUT then GET of 3 MiB returns the same bytes and an ETag", put_get)
    await check("ranged GETs (first byte, middle, last 64 KiB, open-ended, 1 MiB)", ranges)
    await check("GET of a missing key is NoSuchKey", missing)
    await check("LIST by prefix over 1,005 keys (pagination)", listing)
    await check("DeleteObjects of many keys (and a missing one)", delete_many)
    await check("empty object", empty_object)
    await check("conditional PUT If-None-Match: *", if_none_match, required=False)
    await check("conditional PUT If-Match", if_match, required=False)
    try:
        await store.delete([o.key for o in await store.list(prefix + "/")])
    except ObjectStoreError:
        pass
    return results


async def streams_roundtrip(config: S3Config, work_dir: str) -> CheckResult:
    """Stream storage end to end on the endpoint: appends, uploads, a cold read elsewhere."""
    from metadata_quorum.local_controller import LocalController
    from stream_storage.batches import build_batch, read_records
    from stream_storage.config import StreamStorageConfig
    from stream_storage.control import LocalStreamControl
    from stream_storage.s3_store import open_s3_store
    from stream_storage.storage import StreamStorage

    controller = LocalController(lambda: int(time.time() * 1000))

    def broker(bid: int) -> StreamStorage:
        epoch = int(controller.write("register_broker", {"broker_id": bid, "incarnation_id": f"check-{bid}",
                                                         "endpoints": [], "rack": None, "log_dirs": []})["broker_epoch"])
        controller.write("broker_heartbeat", {"broker_id": bid, "broker_epoch": epoch,
                                              "metadata_offset": controller.next_offset - 1, "want_shutdown": False,
                                              "saturated_log_dirs": [], "offline_log_dirs": []})
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
    import tempfile

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
