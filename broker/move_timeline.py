"""The six-step timeline of a partition move, merged from both owners' events (pure).

A move is identified by the partition and ``move_id`` = the ``change_started_ms`` of the
controller's PartitionChange (t0). The old owner records t1..t5 as it closes; the new owner
records when it saw the election (a stand-in for t5 when the old owner was dead and the
controller's deadline elected) and t6 when it serves. Each side publishes its half in the
metadata log's KV (``move/<topic_id>/<partition>/<role>/<broker_id>``), so any broker can show the whole.

    t0 controller accepted the change      t4 streams force-uploaded and closed
    t1 old owner applied the change        t5 new leader elected
    t2 old owner stopped produce           t6 new owner serving
    t3 partition meta persisted
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

STEP_TIMES = ("t0", "t1", "t2", "t3", "t4", "t5", "t6")
SOURCE_TIMES = ("t1", "t2", "t3", "t4", "t5")
TARGET_TIMES = ("t5_seen", "t6")
ROLE_SOURCE = "source"
ROLE_TARGET = "target"


KV_HALVES_KEPT = 16  # per partition and role: the latest moves, so that any broker can merge them


def move_kv_key(topic_id: str, partition: int, role: str, broker_id: int) -> str:
    """One key per partition, role and broker: only that broker writes it (no lost updates)."""
    return f"move/{topic_id}/{partition}/{role}/{broker_id}"


def encode_halves(previous: str | None, half: "MoveHalf") -> str:
    """The KV value after adding ``half``: a JSON list of the latest halves, oldest first."""
    halves = [h for h in decode_halves(previous) if h.move_id != half.move_id]
    halves.append(half)
    return json.dumps([h.to_json() for h in halves[-KV_HALVES_KEPT:]], separators=(",", ":"), sort_keys=True)


def decode_halves(raw: str | None) -> list["MoveHalf"]:
    """The halves of a KV value (a list, or one half); garbage decodes to nothing."""
    if not raw:
        return []
    try:
        data = json.loads(raw)
    except ValueError:
        return []
    items = data if isinstance(data, list) else [data]
    out = []
    for item in items:
        try:
            out.append(MoveHalf.from_json(item))
        except (ValueError, KeyError, TypeError):
            continue
    return out


@dataclass
class MoveHalf:
    """One owner's view of a move: its role and the times it recorded (wall clock, ms)."""

    role: str
    topic: str
    partition: int
    move_id: int
    broker_id: int
    leader_epoch: int = -1
    clean: bool | None = None
    times_ms: dict[str, int] = field(default_factory=dict)
    recovered_records: int = 0  # offsets the new owner re-appended from the old owner's WAL
    wal_unreachable: bool = False  # the old owner's WAL was gone: what it had not uploaded is lost

    def mark(self, name: str, now_ms: int) -> None:
        """Record a time once; a retried step keeps its first time."""
        self.times_ms.setdefault(name, now_ms)

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "topic": self.topic, "partition": self.partition, "move_id": self.move_id,
                "broker_id": self.broker_id, "leader_epoch": self.leader_epoch, "clean": self.clean,
                "times_ms": dict(self.times_ms), "recovered_records": self.recovered_records,
                "wal_unreachable": self.wal_unreachable}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "MoveHalf":
        return cls(role=str(data["role"]), topic=str(data["topic"]), partition=int(data["partition"]),
                   move_id=int(data["move_id"]), broker_id=int(data["broker_id"]),
                   leader_epoch=int(data.get("leader_epoch", -1)), clean=data.get("clean"),
                   times_ms={str(k): int(v) for k, v in dict(data.get("times_ms", {})).items()},
                   recovered_records=int(data.get("recovered_records", 0)),
                   wal_unreachable=bool(data.get("wal_unreachable", False)))

    def encode(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def decode(cls, raw: str) -> "MoveHalf | None":
        try:
            return cls.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class MoveTimeline:
    """A merged move: t0..t6 (None where unknown), step durations and the total."""

    topic: str
    partition: int
    move_id: int
    from_broker: int | None
    to_broker: int | None
    leader_epoch: int
    clean: bool | None
    t_ms: dict[str, int | None]
    recovered_records: int = 0
    wal_unreachable: bool = False

    @property
    def complete(self) -> bool:
        return self.t_ms.get("t6") is not None

    @property
    def steps_ms(self) -> dict[str, int | None]:
        return step_durations_ms(self.t_ms)

    @property
    def total_ms(self) -> int | None:
        t0, t6 = self.t_ms.get("t0"), self.t_ms.get("t6")
        return None if t0 is None or t6 is None else t6 - t0

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "move_id": self.move_id,
                "from_broker": self.from_broker, "to_broker": self.to_broker, "leader_epoch": self.leader_epoch,
                "complete": self.complete, "clean": self.clean, "recovered_records": self.recovered_records,
                "wal_unreachable": self.wal_unreachable, "t_ms": dict(self.t_ms),
                "steps_ms": self.steps_ms, "total_ms": self.total_ms}


def step_durations_ms(t_ms: Mapping[str, int | None]) -> dict[str, int | None]:
    """``steps[k] = t_k - t_(k-1)``; a step whose ends are unknown is None.

    When the old owner died, t1..t4 are unknown: step 5 then spans from t0 to the election
    (the controller's deadline) so that the steps still add up to the total.
    """
    steps: dict[str, int | None] = {}
    last_known: int | None = t_ms.get("t0")
    for k in range(1, 7):
        cur = t_ms.get(f"t{k}")
        prev = t_ms.get(f"t{k-1}")
        if cur is not None and prev is not None:
            steps[str(k)] = cur - prev
        elif cur is not None and prev is None and last_known is not None and k == 5:
            steps[str(k)] = cur - last_known
        else:
            steps[str(k)] = None
        if cur is not None:
            last_known = cur
    return steps


def merge(source: MoveHalf | None, target: MoveHalf | None) -> MoveTimeline:
    """One timeline from the old owner's and the new owner's halves (either may be missing)."""
    half = source or target
    if half is None:
        raise ValueError("merge needs at least one half")
    t: dict[str, int | None] = {name: None for name in STEP_TIMES}
    t["t0"] = half.move_id if half.move_id > 0 else None
    if source is not None:
        for name in SOURCE_TIMES:
            t[name] = source.times_ms.get(name)
    if target is not None:
        if t["t5"] is None:
            t["t5"] = target.times_ms.get("t5_seen")
        t["t6"] = target.times_ms.get("t6")
    t6 = t["t6"]
    if t6 is not None:
        # the old owner learns its close and election are done from the controller's reply, the
        # new owner from the metadata log; a busy old owner may handle that reply after the new
        # owner served: what it saw then was done by t6
        for name in SOURCE_TIMES:
            seen = t[name]
            if seen is not None and seen > t6:
                t[name] = t6
    clean: bool | None
    if target is not None and target.clean is not None:
        clean = target.clean
    elif source is not None:
        clean = source.times_ms.get("t4") is not None
    else:
        clean = None
    epoch = target.leader_epoch if target is not None else half.leader_epoch
    return MoveTimeline(topic=half.topic, partition=half.partition, move_id=half.move_id,
                        from_broker=source.broker_id if source is not None else None,
                        to_broker=target.broker_id if target is not None else None,
                        leader_epoch=epoch, clean=clean, t_ms=t,
                        recovered_records=target.recovered_records if target is not None else 0,
                        wal_unreachable=target.wal_unreachable if target is not None else False)


def merge_all(halves: list[MoveHalf]) -> list[MoveTimeline]:
    """Pair halves by (topic, partition, move_id); newest first."""
    by_key: dict[tuple[str, int, int], dict[str, MoveHalf]] = {}
    for h in halves:
        slot = by_key.setdefault((h.topic, h.partition, h.move_id), {})
        prev = slot.get(h.role)
        if prev is None or len(h.times_ms) >= len(prev.times_ms):
            slot[h.role] = h
    out = [merge(slot.get(ROLE_SOURCE), slot.get(ROLE_TARGET)) for slot in by_key.values()]
    out.sort(key=lambda m: (m.move_id, m.topic, m.partition), reverse=True)
    return out
