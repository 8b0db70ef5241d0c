"""The verdict of a chaos run, in the spirit of Jepsen: what the clients were promised, checked
against what the cluster holds afterwards (pure: plain data in, violations out).

- **records**: every acknowledged record is read back exactly once, at its acknowledged offset,
  and a producer's acknowledged records sit in the order it sent them;
- **metadata**: in the committed metadata log, a stream has one owner per epoch, its epoch never
  goes back, an object is committed only at the stream's current epoch and starts where the
  stream ends, and no two committed objects of a stream overlap in offsets;
- **availability** (network faults): after each cut heals, every partition acknowledges a
  record again within the session timeout + 2 s;
- **leases** (network faults): no broker cut off from every controller acknowledges a request
  sent after its lease could have run out (the session timeout after the cut) while the cut holds;
- **health**: at the end every process answers and is healthy (one active controller, every
  controller caught up, every broker running and unfenced).
"""
from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class Acked:
    """One acknowledged record: its producer's send order, the offset it was acknowledged at
    (None when the client was told of the delivery without an offset: then only "once" and
    "in order" can be checked)."""

    send_seq: int
    offset: int | None
    value: bytes


@dataclass(frozen=True)
class Violation:
    check: str  # "records", "metadata" or "health"
    message: str


@dataclass
class Verdict:
    violations: list[Violation] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def by_check(self) -> dict[str, int]:
        return dict(Counter(v.check for v in self.violations))


def check_records(acked: Mapping[str, Sequence[Acked]], read: Mapping[str, Sequence[tuple[int, bytes | None]]],
                  max_examples: int = 20) -> list[Violation]:
    """``acked[partition]`` against ``read[partition]`` (every (offset, value) from the log start)."""
    out: list[Violation] = []

    def add(message: str) -> None:
        if len(out) < max_examples:
            out.append(Violation("records", message))
        elif len(out) == max_examples:
            out.append(Violation("records", "… more record violations not listed"))

    for partition in sorted(acked):
        log = read.get(partition)
        if log is None:
            add(f"{partition}: could not be read back ({len(acked[partition])} acknowledged records)")
            continue
        offsets = [o for o, _v in log]
        if any(b <= a for a, b in pairwise(offsets)):
            add(f"{partition}: the log's offsets are not increasing")
        at_offset = {o: v for o, v in log}
        counts = Counter(v for _o, v in log if v is not None)
        offset_of = {v: o for o, v in log if v is not None}
        seq_of = {a.value: a.send_seq for a in acked[partition]}
        ordered = sorted(acked[partition], key=lambda a: a.send_seq)
        for a in ordered:
            n = counts.get(a.value, 0)
            if n == 0:
                add(f"{partition}: acknowledged record #{a.send_seq} at offset {a.offset} is missing")
            elif n > 1:
                add(f"{partition}: acknowledged record #{a.send_seq} is in the log {n} times: "
                    f"{_copies(log, a.value, seq_of)}; acknowledged at offset {a.offset}")
            elif a.offset is not None and at_offset.get(a.offset) != a.value:
                add(f"{partition}: acknowledged record #{a.send_seq} is not at its acknowledged offset {a.offset} "
                    f"(found at {offset_of[a.value]})")
        # In order: in the log, each acknowledged record sits after those its producer sent before it.
        placed = [(a, offset_of[a.value]) for a in ordered if counts.get(a.value) == 1]
        for (x, ox), (y, oy) in pairwise(placed):
            if oy <= ox:
                add(f"{partition}: record #{y.send_seq} is at offset {oy}, before #{x.send_seq} at {ox} "
                    f"(out of send order)")
                break
    return out


def _copies(log: Sequence[tuple[int, bytes | None]], value: bytes, seq_of: Mapping[bytes, int]) -> str:
    """Where each copy of a duplicated record sits and which acknowledged record precedes it
    (a resent batch shows as a copy after records sent later)."""
    out: list[str] = []
    for i, (offset, v) in enumerate(log):
        if v != value:
            continue
        before = log[i - 1][1] if i > 0 else None
        if i == 0:
            prev = "the log start"
        elif before is not None and before in seq_of:
            prev = f"#{seq_of[before]}"
        else:
            prev = f"an unacknowledged record at {log[i - 1][0]}"
        out.append(f"offset {offset} (after {prev})")
    return ", ".join(out)


def check_metadata(records: Sequence[tuple[int, Mapping[str, Any]]], max_examples: int = 20) -> list[Violation]:
    """The committed metadata log as ``(offset, {"type", "fields"})`` pairs, in offset order."""
    out: list[Violation] = []
    owners: dict[tuple[int, int], tuple[int, int]] = {}  # (stream, epoch) -> (owner, owner_epoch) that opened it
    epoch_of: dict[int, int] = {}
    live: dict[int, dict[str, tuple[int, int]]] = {}  # stream -> object key -> [start, end)
    end_of: dict[int, int] = {}  # stream -> its end offset (each committed object extends it)

    def add(message: str) -> None:
        if len(out) < max_examples:
            out.append(Violation("metadata", message))

    for offset, record in records:
        kind, f = record.get("type"), record.get("fields", {})
        if kind == "Stream":
            sid, epoch = int(f["stream_id"]), int(f["epoch"])
            previous = epoch_of.get(sid)
            if previous is not None and epoch < previous:
                add(f"offset {offset}: stream {sid} went back from epoch {previous} to {epoch}")
            epoch_of[sid] = epoch
            end_of[sid] = int(f.get("end_offset", 0))
            if f.get("state") == "OPENED":
                who = (int(f["owner"]), int(f.get("owner_epoch", -1)))
                first = owners.setdefault((sid, epoch), who)
                if first[0] != who[0]:
                    add(f"offset {offset}: stream {sid} epoch {epoch} opened by broker {who[0]} "
                        f"after broker {first[0]} (two owners in one epoch)")
        elif kind == "RemoveStream":
            sid = int(f["stream_id"])
            epoch_of.pop(sid, None)
            end_of.pop(sid, None)
            live.pop(sid, None)
        elif kind == "StreamObject":
            sid, start, end = int(f["stream_id"]), int(f["start_offset"]), int(f["end_offset"])
            epoch = int(f["epoch"])
            if sid in epoch_of and epoch != epoch_of[sid]:
                add(f"offset {offset}: object {f['object_key']} of stream {sid} committed at epoch {epoch} "
                    f"while the stream is at epoch {epoch_of[sid]}")
            if end < start:
                add(f"offset {offset}: object {f['object_key']} of stream {sid} ends before it starts")
            objects = live.setdefault(sid, {})
            overlapping = False
            for key, (s, e) in objects.items():
                if key != f["object_key"] and start < e and s < end:
                    overlapping = True
                    add(f"offset {offset}: stream {sid} objects {key} [{s}, {e}) and {f['object_key']} "
                        f"[{start}, {end}) overlap")
            # a compacted object fills exactly the range its removed predecessors held, below the end
            refills = not overlapping and end <= end_of.get(sid, end)
            if sid in end_of and start != end_of[sid] and not refills:
                add(f"offset {offset}: object {f['object_key']} of stream {sid} starts at {start}, "
                    f"not at the stream's end offset {end_of[sid]} (a gap or an overlap)")
            end_of[sid] = max(end, end_of.get(sid, end))
            objects[str(f["object_key"])] = (start, end)
        elif kind == "RemoveStreamObject":
            live.get(int(f["stream_id"]), {}).pop(str(f["object_key"]), None)
    return out


def check_health(controllers: Mapping[int, Mapping[str, Any] | None], brokers: Mapping[int, Mapping[str, Any] | None],
                 extra_down: Sequence[str] = ()) -> list[Violation]:
    """The last health answers of every process (None: it did not answer)."""
    out = [Violation("health", f"{name} is not running") for name in extra_down]
    active = [nid for nid, h in controllers.items() if h and h.get("active")]
    for nid, h in sorted(controllers.items()):
        if h is None:
            out.append(Violation("health", f"controller {nid} does not answer"))
        elif not h.get("ready"):
            out.append(Violation("health", f"controller {nid} is not ready"))
    if len(active) != 1:
        out.append(Violation("health", f"{len(active)} active controllers at the end (want 1)"))
    marks = [int(h["high_watermark"]) for h in controllers.values() if h and "high_watermark" in h]
    if marks and max(marks) - min(marks) > 0:
        out.append(Violation("health", f"controllers' committed logs differ at the end: high watermarks {sorted(marks)}"))
    for bid, h in sorted(brokers.items()):
        if h is None:
            out.append(Violation("health", f"broker {bid} does not answer"))
        elif h.get("state") != "RUNNING" or h.get("fenced"):
            out.append(Violation("health", f"broker {bid} is {h.get('state')}{' and fenced' if h.get('fenced') else ''}"))
    return out


def serve_again_s(healed_at_s: float, acks_s: Mapping[str, Sequence[float]]) -> float | None:
    """How long after ``healed_at_s`` every partition had acknowledged a record again (the
    acknowledgement times of each, sorted); None when one never did."""
    waits = []
    for times in acks_s.values():
        i = bisect_left(times, healed_at_s)
        if i == len(times):
            return None
        waits.append(times[i] - healed_at_s)
    return max(waits, default=0.0)


def check_serve_again(heals: Sequence[tuple[str, float, float]], acks_s: Mapping[str, Sequence[float]],
                      limit_s: float) -> tuple[list[Violation], list[float], int]:
    """Each (fault, heal time, next fault's start): a violation when a partition did not serve
    again within ``limit_s`` while no other fault began; also every wait measured and how many
    heals another fault interrupted before every partition served (not judged)."""
    out: list[Violation] = []
    waits: list[float] = []
    interrupted = 0
    for what, at_s, next_fault_s in heals:
        wait = serve_again_s(at_s, acks_s)
        if wait is not None and wait <= limit_s:
            waits.append(round(wait, 3))
        elif at_s + limit_s > next_fault_s:
            interrupted += 1
        else:
            said = "never" if wait is None else f"only {wait:.1f} s"
            out.append(Violation("availability", f"after '{what}' healed at {at_s:.1f} s, every partition "
                                                 f"served again {said} later (limit {limit_s:g} s)"))
    return out, waits, interrupted


@dataclass(frozen=True)
class LeaseCut:
    """Broker ``broker_id`` could not renew its lease from ``start_s`` to ``end_s`` (monotonic s)."""

    broker_id: int
    start_s: float
    end_s: float
    what: str


@dataclass(frozen=True)
class AckTiming:
    """One acknowledgement: who gave it, when its request was sent and when the answer came (monotonic s)."""

    partition: str
    broker_id: int
    sent_s: float
    ack_s: float


def check_leases(cuts: Sequence[LeaseCut], acks: Sequence[AckTiming], session_s: float,
                 slack_s: float = 0.1) -> list[Violation]:
    """A broker's lease runs at most ``session_s`` from the last heartbeat it sent, which was before
    the cut: a request it received after ``start_s + session_s`` (sent after it, then) and
    answered before the cut healed was acknowledged without a lease."""
    out: list[Violation] = []
    for cut in cuts:
        bad = [a for a in acks if a.broker_id == cut.broker_id and a.sent_s > cut.start_s + session_s + slack_s
               and a.ack_s < cut.end_s]
        if bad:
            first = min(bad, key=lambda a: a.sent_s)
            out.append(Violation("leases", f"broker {cut.broker_id} acknowledged {len(bad)} record(s) during "
                                           f"'{cut.what}' after its lease ran out, the first on {first.partition} "
                                           f"sent {first.sent_s - cut.start_s:.1f} s into the cut"))
    return out


def verdict(record_violations: list[Violation], metadata_violations: list[Violation],
            health_violations: list[Violation], stats: dict[str, Any]) -> Verdict:
    return Verdict(record_violations + metadata_violations + health_violations, dict(stats))
