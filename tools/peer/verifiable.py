"""What Kafka's verifiable producer and consumer print, and the read-back check over it.

``kafka-verifiable-producer`` sends increasing integers ("0", "1", …) and prints one JSON
event per acknowledged record (``producer_send_success``: partition, offset, value) or failed
send (``producer_send_error``); ``kafka-verifiable-consumer --verbose`` prints one
``record_data`` event per record it consumed, and its group's ``partitions_assigned`` /
``partitions_revoked`` / ``offsets_committed`` events. The check is the user's promise: every
acknowledged record is read back, once, at the offset it was acknowledged with, and each
partition reads in order. Everything here is pure: lines in, figures out.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Iterable


@dataclass(frozen=True)
class Ack:
    partition: int
    offset: int
    value: str
    timestamp_ms: int


@dataclass(frozen=True)
class Consumed:
    partition: int
    offset: int
    value: str
    timestamp_ms: int = 0  # when the consumer printed it (orders the reads of several consumers)


@dataclass
class ProducerEvents:
    """The events of one verifiable producer, for one topic."""

    acks: list[Ack] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    sent: int | None = None  # from the final ``tool_data`` event
    finished: bool = False

    def add(self, event: dict[str, Any]) -> None:
        name = event.get("name")
        if name == "producer_send_success":
            self.acks.append(Ack(int(event["partition"]), int(event["offset"]), str(event["value"]),
                                 int(event["timestamp"])))
        elif name == "producer_send_error":
            self.errors.append(f"{event.get('exception')}: {event.get('message')} (value {event.get('value')})")
        elif name == "tool_data":
            self.sent = int(event["sent"])
        elif name == "shutdown_complete":
            self.finished = True


@dataclass
class ConsumerEvents:
    """The events of one verifiable consumer (``--verbose``)."""

    records: list[Consumed] = field(default_factory=list)
    assignments: int = 0
    revocations: int = 0
    failed_commits: list[str] = field(default_factory=list)
    finished: bool = False

    def add(self, event: dict[str, Any]) -> None:
        name = event.get("name")
        if name == "record_data":
            self.records.append(Consumed(int(event["partition"]), int(event["offset"]), str(event["value"]),
                                         int(event.get("timestamp", 0))))
        elif name == "partitions_assigned":
            self.assignments += 1
        elif name == "partitions_revoked":
            self.revocations += 1
        elif name == "offsets_committed" and not event.get("success", True):
            self.failed_commits.append(str(event.get("error")))
        elif name == "shutdown_complete":
            self.finished = True


def parse_line(line: str) -> dict[str, Any] | None:
    """One printed line as an event; None for a line that is not a JSON object (a tool's own notice)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None


def producer_events(lines: Iterable[str]) -> ProducerEvents:
    out = ProducerEvents()
    for line in lines:
        event = parse_line(line)
        if event is not None:
            out.add(event)
    return out


def consumer_events(lines: Iterable[str]) -> ConsumerEvents:
    out = ConsumerEvents()
    for line in lines:
        event = parse_line(line)
        if event is not None:
            out.add(event)
    return out


@dataclass(frozen=True)
class ReadBack:
    """Acknowledged records against what consumers read.

    ``lost``: acknowledged, never read at its offset. ``mismatched``: read at an acknowledged
    offset with another value. ``redelivered``: reads of a (partition, offset) already read (a
    group's at-least-once redelivery). ``written_twice``: a value found at two offsets (a retried
    send the broker did not deduplicate). ``out_of_order``: places where a partition's first
    reads go back in offset, or its values do not grow with the offset."""

    acked: int
    read_back: int
    lost: int
    mismatched: int
    redelivered: int
    written_twice: int
    out_of_order: int
    examples: tuple[str, ...] = ()

    @property
    def exactly_once(self) -> bool:
        return not (self.lost or self.mismatched or self.redelivered or self.written_twice or self.out_of_order)

    def summary(self) -> str:
        return (f"acked {self.acked}, read back {self.read_back}, lost {self.lost}, mismatched {self.mismatched}, "
                f"redelivered {self.redelivered}, written twice {self.written_twice}, "
                f"out of order {self.out_of_order}")


def check_read_back(acks: Iterable[Ack], reads: Iterable[Consumed], max_examples: int = 5) -> ReadBack:
    """Compare every acknowledgement with the reads, in the order the consumers printed them
    (reads of several consumers may be concatenated: a partition is read by one member at a time,
    and a member's reads of a partition stay in order)."""
    examples: list[str] = []

    def note(text: str) -> None:
        if len(examples) < max_examples:
            examples.append(text)

    acked = {(a.partition, a.offset): a.value for a in acks}
    first: dict[tuple[int, int], str] = {}
    order: dict[int, list[int]] = {}
    redelivered = 0
    for r in reads:
        key = (r.partition, r.offset)
        if key in first:
            redelivered += 1
            note(f"partition {r.partition} offset {r.offset} read again")
            continue
        first[key] = r.value
        order.setdefault(r.partition, []).append(r.offset)
    lost = mismatched = read_back = 0
    for key, value in sorted(acked.items()):
        got = first.get(key)
        if got is None:
            lost += 1
            note(f"partition {key[0]} offset {key[1]} (value {value}) acknowledged, not read")
        elif got != value:
            mismatched += 1
            note(f"partition {key[0]} offset {key[1]}: acknowledged {value}, read {got}")
        else:
            read_back += 1
    out_of_order = 0
    for partition, offsets in order.items():
        for before, after in pairwise(offsets):
            if after <= before:
                out_of_order += 1
                note(f"partition {partition}: offset {after} read after {before}")
        values = [_as_int(first[(partition, o)]) for o in sorted(offsets)]
        for before_v, after_v in pairwise(values):
            if before_v is not None and after_v is not None and after_v <= before_v:
                out_of_order += 1
                note(f"partition {partition}: value {after_v} at a higher offset than {before_v}")
    offsets_of: dict[str, int] = {}
    for value in first.values():
        offsets_of[value] = offsets_of.get(value, 0) + 1
    written_twice = sum(1 for n in offsets_of.values() if n > 1)
    if written_twice:
        note(f"{written_twice} values at more than one offset")
    return ReadBack(len(acked), read_back, lost, mismatched, redelivered, written_twice, out_of_order,
                    tuple(examples))


def merged_reads(consumers: Iterable[ConsumerEvents]) -> list[Consumed]:
    """The reads of a group's members as one sequence in the order they happened (a partition
    passes from member to member at rebalances; each member prints its reads in order)."""
    return sorted((r for c in consumers for r in c.records), key=lambda r: r.timestamp_ms)


def max_ack_gap_ms(acks: Iterable[Ack], partition: int | None = None) -> int:
    """The longest time between two consecutive acknowledgements (of one partition, or of any),
    a bound on how long the producer saw no progress."""
    times = sorted(a.timestamp_ms for a in acks if partition is None or a.partition == partition)
    return max((b - a for a, b in pairwise(times)), default=0)


def _as_int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None
