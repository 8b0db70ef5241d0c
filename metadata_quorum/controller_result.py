"""The shape of a controller operation: a pure function from (image, request) to records and a reply.

An operation changes nothing. The records it returns are appended through Raft as one atomic
batch and then replayed, on every controller, by the one replay path (Kafka's ControllerResult).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from metadata_quorum.records import Record

if TYPE_CHECKING:  # the image module imports records only; this keeps the import graph acyclic
    from metadata_quorum.image import MetadataImage


@dataclass(frozen=True)
class OpContext:
    """What an operation may know besides the image: the clock and the leader's volatile state.

    ``next_offset`` is the log offset the first returned record will get (a broker epoch is the
    offset of its registration record). ``last_heartbeat_ms`` is kept in memory by the active
    controller only, as in KRaft: heartbeats are not records. ``active_since_ms`` is when this
    controller became active: a broker it has not heard from yet counts as last heard then, so
    brokers that died during a controller failover are still fenced one session timeout later
    (None: such brokers are never fenced by ``tick``). ``queued_ms`` is when the operation was
    queued: sessions are judged then and not when it ran (``heartbeat_expired``), because an
    operation queued before the controller's loop was held up runs right after the hold, before
    the driver has read the heartbeats that waited and credited the hold to every session; judged
    at its run time it fenced live brokers. Judging earlier only ever fences later.

    ``now_ms`` (and every time above) is the session clock, monotonic in a real controller: a
    step of the wall clock neither fences nor revives a broker. ``wall_ms`` is the wall clock, for
    times written into records (``committed_ms``, ``change_started_ms``, deadlines another
    controller may judge after a failover); None (in-process drivers, tests) means ``now_ms``.
    """

    now_ms: int
    next_offset: int
    controller_id: int = 0
    last_heartbeat_ms: Mapping[int, int] = field(default_factory=dict)
    session_timeout_ms: int = 9000
    reelection_timeout_ms: int = 2000
    active_since_ms: int | None = None
    queued_ms: int | None = None
    wall_ms: int | None = None

    @property
    def wall_now_ms(self) -> int:
        return self.now_ms if self.wall_ms is None else self.wall_ms


@dataclass(frozen=True)
class ControllerResult:
    """``reply`` is the operation's reply type (``metadata_quorum/kernel/messages/``): an op builds
    it as that ``TypedDict``, so mypy checks every key it writes."""

    records: tuple[Record, ...] = ()
    reply: Mapping[str, Any] = field(default_factory=dict)


WriteOperation = Callable[["MetadataImage", dict[str, Any], OpContext], ControllerResult]
ReadOperation = Callable[["MetadataImage", dict[str, Any]], Mapping[str, Any]]
