"""The object-store checks behind `ferry s3 check` (tools/s3_check.py): does an S3 implementation do what Ferry needs?

Each check exercises one behaviour the object store seam relies on, through the same
:class:`~stream_storage.s3_store.S3ObjectStore` brokers use, and reports ok or what differed.
Used to qualify an S3 endpoint (MinIO, LocalStack, a vendor's) before pointing brokers at it;
docs/s3.md keeps the results for the implementations tried.
"""
from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Awaitable, Callable

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
