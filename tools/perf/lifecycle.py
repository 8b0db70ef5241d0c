"""`ferry perf lifecycle [--json]`: an hour of steady produce, time compressed, and what S3 holds after it.

Issue #11's storage target: after an hour of produce at a steady rate, objects per partition stay
bounded, a full read of a partition makes at most 1 GET per 8 MiB, and the data costs at most 200
PUTs per GiB produced, at default settings.

An hour takes ``3600 / compress`` seconds here. Every *time* threshold of the stream storage is
divided by ``compress`` (the upload interval, the compaction min age, the compaction pass interval
and the delay before replaced objects are deleted); every *size* keeps its default (upload bytes,
compaction target, max small objects); and each compressed second carries ``compress`` seconds'
worth of bytes. So each upload, each compaction run and each object holds what it would hold at
the real rate: the counts are the hour's, only the clock runs faster.

``partitions`` streams of one broker (the in-process LocalController and StreamStorage of
``ferry perf streams``, against a real S3 endpoint over HTTP) are appended to open loop (an append
starts on time whether or not the one before it was acknowledged) at ``rate`` bytes per
real-time-equivalent second each. Compaction runs as the broker runs it: ``compaction_loop`` of
``broker/compaction.py`` with the broker's policy, a pass every (compressed) compaction interval.
Every compressed 5 minutes, the committed objects of each stream are counted beside the WAL
uploads that carried it so far (the count with no compaction). At the end of the hour, a cold
reader (another broker) reads every stream in full at once (four streams' readaheads share one
block cache: the harder case), then a fresh reader per stream reads each alone (a full read of a
partition, the target's own wording); again once the young objects settled (the min age and a
few passes). Every byte read is checked against what was appended.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import math
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Sequence

from broker.compaction import compaction_loop
from metadata_quorum.kernel.object_keys import object_created_ms
from stream_storage.batches import ATTRIBUTES_OFFSET, iter_batches
from stream_storage.compaction import CompactionPolicy, plan as plan_runs, stream_bytes
from stream_storage.config import MIB, StreamStorageConfig
from stream_storage.control import ObjectRef, OpenedStream, StreamControl, StreamDescription, parse_description
from stream_storage.object_format import StreamRange
from stream_storage.s3_cost import GIB, per_gib, request_cost_usd, requests_since
from stream_storage.s3_profile import parse_profile
from stream_storage.s3_server import S3Server
from stream_storage.storage import StreamStorage
from stream_storage.stream import StreamHandle
from tools.perf.streams import Bench, open_endpoint, random_batch

KIB = 1024
GETS_PER_8MIB_TARGET = 1.0
PUTS_PER_GIB_TARGET = 200.0
SAMPLE_EVERY_S = 300  # real-time-equivalent seconds between object counts (5 minutes)
HOUR_S = 3600
POOL_BATCHES = 8  # distinct batches appended in turn (each checked byte for byte when read back)
MAX_OUTSTANDING_APPENDS = 4096  # beyond this the machine is behind: the pacer waits (and says so)
MAX_SETTLE_S = 120.0  # at most this long (or the produce's length) for compaction to finish after the hour


# -- what is run (pure) -----------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """One run's shape, in real-time-equivalent terms and in wall-clock terms."""

    partitions: int
    rate_bytes_s: int  # per partition, real-time equivalent
    compress: float
    hours: float
    batch_bytes: int

    def __post_init__(self) -> None:
        if self.partitions < 1 or self.rate_bytes_s < 1 or self.compress < 1 or self.hours <= 0 \
                or self.batch_bytes < 1:
            raise ValueError(f"invalid lifecycle plan {self!r}")

    @property
    def wall_s(self) -> float:
        """Wall-clock seconds of produce."""
        return self.hours * HOUR_S / self.compress

    @property
    def wall_rate_bytes_s(self) -> float:
        """Bytes per wall-clock second, per partition."""
        return self.rate_bytes_s * self.compress

    @property
    def tick_s(self) -> float:
        """Wall-clock seconds between two appends to one partition."""
        return self.batch_bytes / self.wall_rate_bytes_s

    @property
    def ticks(self) -> int:
        return max(1, int(self.wall_s / self.tick_s))

    @property
    def sample_every_s(self) -> float:
        return SAMPLE_EVERY_S / self.compress


def compressed_ms(real_ms: int, compress: float) -> int:
    """A time threshold on the compressed clock (at least 1 ms: 0 means "never" to some settings)."""
    return max(1, round(real_ms / compress))


def compressed_overrides(defaults: StreamStorageConfig, compress: float) -> dict[str, int]:
    """The storage settings that are times, divided by ``compress``; sizes are left alone."""
    return {name: compressed_ms(getattr(defaults, name), compress) for name in
            ("upload_interval_ms", "compaction_min_age_ms", "compaction_interval_ms", "compaction_delete_delay_ms")}


def broker_policy(cfg: StreamStorageConfig) -> CompactionPolicy:
    """The policy a broker builds from its config (broker/server.py)."""
    return CompactionPolicy(cfg.compaction_target_bytes, cfg.compaction_min_age_ms,
                            max_small_objects=cfg.compaction_max_small_objects)


def objects_bound(bytes_per_stream: int, cfg: StreamStorageConfig, upload_every_ms: float) -> int:
    """What compaction promises a stream is held in (compaction.py): about 2·B/target large
    objects, fewer than ``max_small_objects`` small settled ones, and the young ones: the uploads
    of the last min age and up to two pass intervals (a pass may just have run; every upload
    carries every stream written to in its interval), one every ``upload_every_ms``."""
    large = math.ceil(2 * bytes_per_stream / cfg.compaction_target_bytes)
    young = math.ceil((cfg.compaction_min_age_ms + 2 * cfg.compaction_interval_ms) / upload_every_ms)
    return large + cfg.compaction_max_small_objects + young


def classify(objects: Sequence[ObjectRef], now_ms: int, cfg: StreamStorageConfig) -> dict[str, int]:
    """A stream's objects by what compaction makes of them: ``large`` (never rewritten again),
    ``small`` (settled, waiting for a run long enough) and ``young`` (not settled yet)."""
    out = {"large": 0, "small": 0, "young": 0}
    for obj in objects:
        created = object_created_ms(obj.object_key)
        if created is not None and now_ms - created < cfg.compaction_min_age_ms:
            out["young"] += 1
        elif stream_bytes(obj) >= cfg.compaction_target_bytes // 2:
            out["large"] += 1
        else:
            out["small"] += 1
    return out


def real_wal_object_bytes(plan: Plan, cfg: StreamStorageConfig) -> int:
    """A WAL upload's size at the real rate: what every partition appends in one upload
    interval, up to ``upload_bytes`` (one upload carries every partition of the broker)."""
    return max(1, min(cfg.upload_bytes, plan.partitions * plan.rate_bytes_s * cfg.upload_interval_ms // 1000))


def real_upload_every_ms(plan: Plan, cfg: StreamStorageConfig) -> float:
    """How often the broker uploads at the real rate: every upload interval, or sooner when
    ``upload_bytes`` gather first."""
    return min(float(cfg.upload_interval_ms), cfg.upload_bytes * 1000 / (plan.partitions * plan.rate_bytes_s))


def broker_rate_for_wal_put_target(cfg: StreamStorageConfig) -> float | None:
    """The produce rate of a broker (MiB/s, all its partitions together) from which its WAL
    uploads alone (one per upload interval, holding what was appended meanwhile, up to
    ``upload_bytes``) stay within the PUTs-per-GiB target; None if no rate does. Compaction's
    PUTs come on top."""
    mib_per_upload = GIB / MIB / PUTS_PER_GIB_TARGET
    if mib_per_upload * MIB > cfg.upload_bytes:
        return None
    return round(mib_per_upload * 1000 / cfg.upload_interval_ms, 1)


def verdicts(out: dict[str, Any]) -> list[dict[str, Any]]:
    """(figure, value, target, verdict) rows; "not met" where the figure misses its target."""
    rows = [
        {"figure": "max objects per stream (whole hour)", "value": out["max_objects_per_stream"],
         "target": f"≤ {out['objects_bound']} (compaction's bound)",
         "ok": out["max_objects_per_stream"] <= out["objects_bound"]},
        {"figure": "GETs per 8 MiB, full read at the hour's end", "value": out["gets_per_8mib_read"],
         "target": f"≤ {GETS_PER_8MIB_TARGET:g}", "ok": out["gets_per_8mib_read"] <= GETS_PER_8MIB_TARGET},
        {"figure": "GETs per 8 MiB, full read once settled", "value": out["gets_per_8mib_read_settled"],
         "target": f"≤ {GETS_PER_8MIB_TARGET:g}", "ok": out["gets_per_8mib_read_settled"] <= GETS_PER_8MIB_TARGET},
        {"figure": "GETs per 8 MiB, one partition alone, hour's end", "value": out["gets_per_8mib_alone"],
         "target": f"≤ {GETS_PER_8MIB_TARGET:g} (worst partition)",
         "ok": out["gets_per_8mib_alone"] <= GETS_PER_8MIB_TARGET},
        {"figure": "GETs per 8 MiB, one partition alone, settled", "value": out["gets_per_8mib_alone_settled"],
         "target": f"≤ {GETS_PER_8MIB_TARGET:g} (worst partition)",
         "ok": out["gets_per_8mib_alone_settled"] <= GETS_PER_8MIB_TARGET},
        {"figure": "PUTs per GiB produced (WAL + compaction)", "value": out["puts_per_gib"],
         "target": f"≤ {PUTS_PER_GIB_TARGET:g}", "ok": out["puts_per_gib"] <= PUTS_PER_GIB_TARGET},
        {"figure": "achieved / asked produce rate", "value": out["achieved_over_asked"], "target": "≥ 0.95",
         "ok": out["achieved_over_asked"] >= 0.95},
        {"figure": "WAL object size / its size at the real rate", "value": out["wal_object_over_real"],
         "target": "≤ 1.25 (compression faithful)", "ok": out["wal_object_over_real"] <= 1.25},
    ]
    for row in rows:
        row["verdict"] = "ok" if row["ok"] else "not met"
    return rows


class ReadCheck:
    """Every batch read back must be the one appended at its offset, byte for byte from its
    attributes on (the offset and leader epoch in front are stamped by the storage)."""

    def __init__(self, pool: Sequence[bytes]) -> None:
        self.pool = [bytes(b[ATTRIBUTES_OFFSET:]) for b in pool]
        self.expected: dict[int, dict[int, int]] = {}  # stream -> base offset -> pool index
        self.errors: list[str] = []

    def appended(self, stream_id: int, base_offset: int, pool_index: int) -> None:
        self.expected.setdefault(stream_id, {})[base_offset] = pool_index

    def expected_bytes(self, stream_id: int) -> int:
        return sum(len(self.pool[i]) + ATTRIBUTES_OFFSET for i in self.expected.get(stream_id, {}).values())

    def check(self, stream_id: int, data: bytes, next_base: int) -> int:
        """Checks the batches of ``data`` (the next one expected at ``next_base``); returns the
        offset after them."""
        view = memoryview(data)
        wanted = self.expected.get(stream_id, {})
        for info in iter_batches(data):
            if info.base_offset != next_base:
                self.error(f"stream {stream_id}: batch at offset {info.base_offset}, expected {next_base}")
            index = wanted.get(info.base_offset)
            body = view[info.position + ATTRIBUTES_OFFSET:info.position + info.size_bytes]
            if index is None:
                self.error(f"stream {stream_id}: offset {info.base_offset} was never acknowledged")
            elif body != self.pool[index]:
                self.error(f"stream {stream_id}: batch at offset {info.base_offset} differs from the one appended")
            next_base = info.next_offset
        return next_base

    def error(self, message: str) -> None:
        if len(self.errors) < 20:
            self.errors.append(message)


# -- the seam that counts uploads ---------------------------------------------------------------

class CountingControl:
    """The storage's controller seam, counting the objects committed for each stream: WAL
    uploads (``commit_object``) and compaction rewrites (``compact_objects``)."""

    def __init__(self, inner: StreamControl) -> None:
        self.inner = inner
        self.wal_uploads: dict[int, int] = {}
        self.rewrites: dict[int, int] = {}

    async def create_stream(self) -> int:
        return await self.inner.create_stream()

    async def open_stream(self, stream_id: int, epoch: int, broker_id: int, broker_epoch: int) -> OpenedStream:
        return await self.inner.open_stream(stream_id, epoch, broker_id, broker_epoch)

    async def close_stream(self, stream_id: int, epoch: int, broker_id: int, broker_epoch: int) -> None:
        await self.inner.close_stream(stream_id, epoch, broker_id, broker_epoch)

    async def stream_recovered(self, stream_id: int, epoch: int, broker_id: int, broker_epoch: int) -> None:
        await self.inner.stream_recovered(stream_id, epoch, broker_id, broker_epoch)

    async def commit_object(self, object_key: str, size: int, broker_id: int, broker_epoch: int,
                            ranges: Sequence[tuple[StreamRange, int]], close_stream_ids: Sequence[int] = ()) -> None:
        await self.inner.commit_object(object_key, size, broker_id, broker_epoch, ranges, close_stream_ids)
        for r, _epoch in ranges:
            self.wal_uploads[r.stream_id] = self.wal_uploads.get(r.stream_id, 0) + 1

    async def trim_stream(self, stream_id: int, epoch: int, broker_id: int, broker_epoch: int,
                          new_start_offset: int) -> list[str]:
        return await self.inner.trim_stream(stream_id, epoch, broker_id, broker_epoch, new_start_offset)

    async def compact_objects(self, stream_id: int, epoch: int, broker_id: int, broker_epoch: int,
                              new: ObjectRef, replaces: Sequence[str]) -> list[str]:
        removed = await self.inner.compact_objects(stream_id, epoch, broker_id, broker_epoch, new, replaces)
        self.rewrites[stream_id] = self.rewrites.get(stream_id, 0) + 1
        return removed

    async def describe_stream(self, stream_id: int) -> StreamDescription:
        return await self.inner.describe_stream(stream_id)


class TimedCompaction:
    """The storage as ``compaction_loop`` sees it, timing its compaction passes: with the clock
    compressed, compaction must do an hour's rewriting in ``3600 / compress`` seconds too, and
    its busy share says whether it could."""

    def __init__(self, storage: StreamStorage) -> None:
        self.storage = storage
        self.busy_s = 0.0

    def stream(self, stream_id: int) -> StreamHandle | None:
        return self.storage.stream(stream_id)

    async def compact_stream(self, stream_id: int, policy: CompactionPolicy) -> int:
        t0 = time.perf_counter()
        try:
            return await self.storage.compact_stream(stream_id, policy)
        finally:
            self.busy_s += time.perf_counter() - t0


@dataclass
class OwnedPartition:
    """What ``compaction_loop`` needs of a partition the broker leads (no key compaction here:
    ``configs_of`` is not given, so ``clean_keys`` is never called)."""

    topic: str
    storage: TimedCompaction
    data_stream_id: int
    closed: bool = False
    fenced: bool = False


class _CountErrors(logging.Handler):
    """Counts the compaction loop's failures (it logs them and goes on, as on a broker)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


# -- the run ------------------------------------------------------------------------------------

@dataclass
class Lifecycle:
    plan: Plan
    bench: Bench

    def describe(self, stream_id: int) -> tuple[ObjectRef, ...]:
        """The stream's committed objects, as the controller has them now."""
        return parse_description(self.bench.described(stream_id)).objects

    async def run(self) -> dict[str, Any]:
        pool = [random_batch(self.plan.batch_bytes) for _ in range(POOL_BATCHES)]
        # paced by the batches' real length (whole records: a little under the size asked)
        plan = self.plan = dataclasses.replace(self.plan, batch_bytes=len(pool[0]))
        defaults = StreamStorageConfig(wal_dir="-")
        overrides = compressed_overrides(defaults, plan.compress)
        counting: list[CountingControl] = []

        def wrap(inner: StreamControl) -> StreamControl:
            counting.append(CountingControl(inner))
            return counting[-1]

        st = self.bench.storage_with(wrap, **overrides)
        control = counting[0]
        cfg = st.config
        policy = broker_policy(cfg)
        await st.start()
        sids = []
        for _ in range(plan.partitions):
            sid = await st.create_stream()
            await st.open_stream(sid, 0)
            sids.append(sid)
        timed = TimedCompaction(st)
        parts = [OwnedPartition(f"lifecycle-{i}", timed, sid) for i, sid in enumerate(sids)]
        errors = _CountErrors()
        logging.getLogger("ferry.broker.compaction").addHandler(errors)
        check = ReadCheck(pool)

        def start_compaction() -> asyncio.Task[None]:
            return asyncio.ensure_future(compaction_loop(cfg.compaction_interval_ms, lambda: parts, policy))

        compactor = start_compaction()
        series: list[dict[str, Any]] = []
        tally = self.bench.tally
        before = tally.snapshot()
        started = time.perf_counter()

        def sample(minute: int) -> None:
            counts = [len(self.describe(sid)) for sid in sids]
            series.append({"minute": minute, "objects_per_stream": counts, "max_objects": max(counts),
                           "wal_uploads_per_stream": [control.wal_uploads.get(sid, 0) for sid in sids],
                           "wall_s": round(time.perf_counter() - started, 2)})

        async def sampler() -> None:
            samples = int(plan.hours * HOUR_S // SAMPLE_EVERY_S)
            for i in range(1, samples + 1):
                await asyncio.sleep(max(0.0, started + i * plan.sample_every_s - time.perf_counter()))
                sample(i * SAMPLE_EVERY_S // 60)

        sampling = asyncio.ensure_future(sampler())
        acked_bytes = 0
        failed: list[str] = []
        outstanding: set[asyncio.Task[None]] = set()
        waited_s = 0.0
        late_ticks = 0

        async def one(sid: int, index: int) -> None:
            nonlocal acked_bytes
            try:
                base = await st.append(sid, pool[index])
            except Exception as exc:  # noqa: BLE001 - a failed append is reported (and fails the run)
                if len(failed) < 20:
                    failed.append(f"stream {sid}: {exc}")
                return
            check.appended(sid, base, index)
            acked_bytes += len(pool[index])

        for i in range(plan.ticks):
            for sid in sids:
                task = asyncio.ensure_future(one(sid, (i + sid) % len(pool)))
                outstanding.add(task)
                task.add_done_callback(outstanding.discard)
            if len(outstanding) > MAX_OUTSTANDING_APPENDS:
                t0 = time.perf_counter()
                while len(outstanding) > MAX_OUTSTANDING_APPENDS // 2:
                    await asyncio.wait(set(outstanding), return_when=asyncio.FIRST_COMPLETED)
                waited_s += time.perf_counter() - t0
            delay = started + (i + 1) * plan.tick_s - time.perf_counter()
            if delay < -plan.tick_s:
                late_ticks += 1
            await asyncio.sleep(max(0.0, delay))
        if outstanding:
            await asyncio.gather(*outstanding)
        produce_wall_s = time.perf_counter() - started
        produce_busy_s = timed.busy_s
        await sampling
        if not series or series[-1]["minute"] * 60 < plan.hours * HOUR_S:
            sample(round(plan.hours * 60))
        for sid in sids:  # what the last interval buffered, as its next upload would
            await st.force_upload(sid)
        produce_requests = requests_since(before, tally.snapshot())
        end_layout = {str(sid): classify(self.describe(sid), int(time.time() * 1000), cfg) for sid in sids}

        # (a) at the hour's end: compaction paused so the reader sees one layout
        compactor.cancel()
        await asyncio.gather(compactor, return_exceptions=True)
        read_end = await self.cold_read(sids, check)
        read_end_alone = await self.cold_read_alone(sids, check)

        # (b) once the young objects settled: every object past the min age and nothing left
        # that the broker's policy would rewrite
        settle_t0 = time.perf_counter()
        settle_before = tally.snapshot()
        compactor = start_compaction()
        settled = False
        while not settled and time.perf_counter() - settle_t0 < max(MAX_SETTLE_S, plan.wall_s):
            await asyncio.sleep(cfg.compaction_interval_ms / 1000)
            now_ms = int(time.time() * 1000)
            settled = all(not plan_runs(objs, now_ms, policy) and classify(objs, now_ms, cfg)["young"] == 0
                          for objs in (self.describe(sid) for sid in sids))
        compactor.cancel()
        await asyncio.gather(compactor, return_exceptions=True)
        settle_requests = requests_since(settle_before, tally.snapshot())
        settle_s = time.perf_counter() - settle_t0
        settled_layout = {str(sid): classify(self.describe(sid), int(time.time() * 1000), cfg) for sid in sids}
        read_settled = await self.cold_read(sids, check)
        read_settled_alone = await self.cold_read_alone(sids, check)
        logging.getLogger("ferry.broker.compaction").removeHandler(errors)
        stats = st.stats()
        await st.close()

        produced = acked_bytes
        write_requests = {k: produce_requests.get(k, 0) + settle_requests.get(k, 0)
                          for k in set(produce_requests) | set(settle_requests)}
        asked = plan.partitions * plan.wall_rate_bytes_s
        achieved = produced / produce_wall_s
        wal_uploads = [control.wal_uploads.get(sid, 0) for sid in sids]
        wal_objects = int(stats["uploaded_objects_total"])
        max_objects = max(s["max_objects"] for s in series)
        mean_wal_object = int(stats["uploaded_bytes_total"] / max(1, wal_objects))
        expected_wal_object = real_wal_object_bytes(plan, defaults)
        rewrites = sum(control.rewrites.values())
        out = {
            "compress": plan.compress, "hours_equivalent": plan.hours, "partitions": plan.partitions,
            "rate_per_partition_kib_s": round(plan.rate_bytes_s / KIB, 1), "batch_bytes": len(pool[0]),
            "thresholds_ms": overrides, "produce_wall_s": round(produce_wall_s, 1), "settle_wall_s": round(settle_s, 1),
            "asked_mb_s": round(asked / 1e6, 2), "achieved_mb_s": round(achieved / 1e6, 2),
            "achieved_over_asked": round(achieved / asked, 3), "late_ticks": late_ticks,
            "pacer_waited_s": round(waited_s, 2), "append_errors": failed,
            "produced_bytes": produced, "produced_gib": round(produced / GIB, 3),
            "objects_per_stream_series": series, "max_objects_per_stream": max_objects,
            "objects_bound": objects_bound(produced // plan.partitions, defaults, real_upload_every_ms(plan, defaults)),
            "wal_uploads_per_stream": wal_uploads, "wal_objects": wal_objects,
            "wal_object_mean_bytes": mean_wal_object, "wal_object_expected_bytes": expected_wal_object,
            "wal_object_over_real": round(mean_wal_object / expected_wal_object, 2),
            "wal_puts_per_gib_at_real_rate": round(GIB / expected_wal_object, 1),
            "compaction_rewrites_per_stream": [control.rewrites.get(sid, 0) for sid in sids],
            "compaction_puts_per_gib": round(rewrites * GIB / max(1, produced), 1),
            "compaction_written_over_produced": round(stats["compaction_bytes_total"] / max(1, produced), 2),
            "broker_mib_s_for_wal_put_target": broker_rate_for_wal_put_target(defaults),
            "compaction_errors": errors.messages[:10],
            "compaction_busy_share": round(produce_busy_s / produce_wall_s, 3), "settled": settled,
            "objects_at_end": end_layout, "objects_settled": settled_layout,
            "read_at_end": read_end, "read_settled": read_settled,
            "gets_per_8mib_read": read_end["gets_per_8mib"], "gets_per_8mib_read_settled": read_settled["gets_per_8mib"],
            "read_alone_at_end": read_end_alone, "read_alone_settled": read_settled_alone,
            "gets_per_8mib_alone": max(r["gets_per_8mib"] for r in read_end_alone),
            "gets_per_8mib_alone_settled": max(r["gets_per_8mib"] for r in read_settled_alone),
            "requests_produce": write_requests,
            "requests_per_gib_produced": per_gib(write_requests, produced),
            "puts_per_gib": round(write_requests.get("PUT", 0) * GIB / max(1, produced), 1),
            "request_usd_per_gib_produced": round(request_cost_usd(write_requests) / (produced / GIB), 6)
            if produced else None,
            "read_errors": check.errors,
        }
        out["rows"] = verdicts(out)
        alone_bytes = [sum(r["bytes"] for r in reads) for reads in (read_end_alone, read_settled_alone)]
        out["ok"] = not failed and not check.errors and read_end["bytes"] == produced == read_settled["bytes"] \
            and alone_bytes == [produced, produced]
        return out

    async def cold_read_alone(self, sids: list[int], check: ReadCheck) -> list[dict[str, Any]]:
        """Each stream read alone from its start by a broker of its own (a partition's full read,
        as a consumer catching up on one partition makes it: no other stream's read shares the
        block cache or the GETs of objects several streams hold)."""
        return [await self.cold_read([sid], check) for sid in sids]

    async def cold_read(self, sids: list[int], check: ReadCheck) -> dict[str, Any]:
        """Another broker reads every stream from its start, all streams at once, 1 MiB per fetch."""
        reader = self.bench.storage()
        await reader.start()
        before = self.bench.tally.snapshot()
        t0 = time.perf_counter()
        consumed = 0

        async def read_one(sid: int) -> None:
            nonlocal consumed
            offset = got = 0
            while True:
                res = await reader.fetch(sid, offset, 1 * MIB)
                if not res.data:
                    break
                after = check.check(sid, res.data, offset)
                if after != res.next_offset:
                    check.error(f"stream {sid}: a fetch's batches end at {after}, its next offset is {res.next_offset}")
                got += len(res.data)
                offset = res.next_offset
            consumed += got
            if got != check.expected_bytes(sid):
                check.error(f"stream {sid}: read {got} bytes, {check.expected_bytes(sid)} were acknowledged")

        await asyncio.gather(*(read_one(sid) for sid in sids))
        seconds = time.perf_counter() - t0
        requests = requests_since(before, self.bench.tally.snapshot())
        await reader.close()
        gets = requests.get("GET", 0)
        return {"bytes": consumed, "gets": gets, "seconds": round(seconds, 2),
                "gets_per_8mib": round(gets * 8 * MIB / max(1, consumed), 2),
                "mb_s": round(consumed / seconds / 1e6, 1) if seconds else None,
                "request_usd_per_gib": round(request_cost_usd(requests) / (consumed / GIB), 6) if consumed else None}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    plan = Plan(args.partitions, int(args.rate_kib * KIB), args.compress, args.hours, int(args.batch_kib * KIB))
    server: S3Server | None = None
    work_dir = tempfile.mkdtemp(prefix="ferry-perf-lifecycle-", dir=args.dir)
    try:
        server, endpoint, bucket = open_endpoint(args.endpoint, args.bucket, args.s3_profile)
        bench = Bench(endpoint, bucket, work_dir, 0)
        out = await Lifecycle(plan, bench).run()
        out["s3_profile"] = args.s3_profile
        out["endpoint"] = endpoint
        return out
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work_dir, ignore_errors=True)


def print_table(out: dict[str, Any]) -> None:
    t = out["thresholds_ms"]
    print(f"storage lifecycle: {out['hours_equivalent']:g} hour-equivalent of produce, {out['partitions']} partitions "
          f"at {out['rate_per_partition_kib_s']:g} KiB/s each, time compressed {out['compress']:g}x "
          f"({out['produce_wall_s']} s of produce; S3 profile {out['s3_profile']})")
    print(f"  compressed thresholds: upload interval {t['upload_interval_ms']} ms, compaction min age "
          f"{t['compaction_min_age_ms']} ms, pass every {t['compaction_interval_ms']} ms, delete delay "
          f"{t['compaction_delete_delay_ms']} ms; sizes at their defaults")
    rate_note = "" if out["achieved_over_asked"] >= 0.95 else "  (the machine did not keep up: figures are for a slower rate)"
    print(f"  produce: asked {out['asked_mb_s']} MB/s, achieved {out['achieved_mb_s']} MB/s "
          f"({out['produced_gib']} GiB){rate_note}")
    print(f"  WAL objects: {out['wal_objects']}, mean {out['wal_object_mean_bytes'] / KIB:.0f} KiB "
          f"(at the real rate: {out['wal_object_expected_bytes'] / KIB:.0f} KiB)")
    print(f"  {'minute':>6} {'objects per stream':>30} {'WAL uploads per stream':>34}")
    for s in out["objects_per_stream_series"]:
        print(f"  {s['minute']:>6} {str(s['objects_per_stream']):>30} {str(s['wal_uploads_per_stream']):>34}")
    for name, key in (("at the hour's end", "objects_at_end"), ("settled", "objects_settled")):
        print(f"  objects {name}: " + ", ".join(f"stream {sid}: {v['large']} large, {v['small']} small, "
                                                 f"{v['young']} young" for sid, v in out[key].items()))
    for name, key in (("at the hour's end", "read_at_end"), ("once settled", "read_settled")):
        r = out[key]
        print(f"  full read {name}, every stream at once: {r['bytes'] / MIB:.0f} MiB, {r['gets']} GETs, "
              f"{r['mb_s']} MB/s")
    for name, key in (("at the hour's end", "read_alone_at_end"), ("once settled", "read_alone_settled")):
        print(f"  full read {name}, one stream at a time: GETs per 8 MiB "
              + ", ".join(str(r["gets_per_8mib"]) for r in out[key]))
    if out["wal_object_over_real"] > 1.25:
        print(f"  the machine could not upload as often as the compressed interval asks: WAL objects were "
              f"{out['wal_object_over_real']}x their real-rate size, so the PUT and object counts are LOWER than "
              f"at the real rate (at the real rate WAL uploads alone make {out['wal_puts_per_gib_at_real_rate']} "
              f"PUTs per GiB)")
    print(f"  compaction wrote {out['compaction_written_over_produced']}x the bytes produced "
          f"({sum(out['compaction_rewrites_per_stream'])} objects; busy {out['compaction_busy_share']:.0%} of the "
          f"produce time)")
    print(f"  PUTs per GiB: {out['puts_per_gib']}, of which compaction {out['compaction_puts_per_gib']}; a broker's "
          f"WAL uploads alone stay within {PUTS_PER_GIB_TARGET:g} from about "
          f"{out['broker_mib_s_for_wal_put_target']} MiB/s of produce (all its partitions)")
    print(f"  requests per GiB produced (WAL, compaction, deletes): {out['requests_per_gib_produced']} = "
          f"${out['request_usd_per_gib_produced']:.5f} at list prices")
    print(f"  {'figure':46} {'value':>9}  {'target':28} verdict")
    for row in out["rows"]:
        print(f"  {row['figure']:46} {row['value']:>9}  {row['target']:28} {row['verdict']}")
    problems = out["append_errors"] + out["read_errors"] + out["compaction_errors"]
    print("every acknowledged byte read back, four times, in order" if out["ok"] else "ERRORS: " + "; ".join(problems))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ferry perf lifecycle", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--partitions", type=int, default=4, help="streams appended to at once (1..64)")
    parser.add_argument("--rate-kib", type=float, default=256.0,
                        help="KiB per real-time-equivalent second per partition")
    parser.add_argument("--compress", type=float, default=10.0,
                        help="time compression: the hour takes 3600/COMPRESS s (1..3600)")
    parser.add_argument("--hours", type=float, default=1.0, help="hours of produce, real-time equivalent")
    parser.add_argument("--batch-kib", type=float, default=64.0, help="KiB per append (one producer batch)")
    parser.add_argument("--endpoint", default=None, help="S3 endpoint URL (default: start a moto server)")
    parser.add_argument("--bucket", default="ferry-perf")
    parser.add_argument("--dir", default=None, help="directory for the WAL")
    parser.add_argument("--s3-profile", default="local",
                        help="latency added in front of S3: local, aws-standard, fixed:MS, latency:P50,P99[,RATE]")
    args = parser.parse_args(argv)
    try:
        parse_profile(args.s3_profile)
        if not 1 <= args.partitions <= 64:
            raise ValueError(f"--partitions must be within 1..64, got {args.partitions}")
        if not 1 <= args.compress <= 3600:
            raise ValueError(f"--compress must be within 1..3600, got {args.compress}")
        if not 0 < args.hours <= 24:
            raise ValueError(f"--hours must be within (0, 24], got {args.hours}")
        if not 1 <= args.rate_kib <= 64 * 1024:
            raise ValueError(f"--rate-kib must be within 1..65536, got {args.rate_kib}")
        if not 1 <= args.batch_kib <= 1024:
            raise ValueError(f"--batch-kib must be within 1..1024, got {args.batch_kib}")
    except ValueError as exc:
        print(f"Error: {exc} (INVALID_REQUEST)", file=sys.stderr)
        return 2
    out = asyncio.run(run(args))
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        print_table(out)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
