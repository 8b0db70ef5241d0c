"""Forwarding Kafka admin requests to the controller quorum (KRaft's forwarding).

A Kafka client sends CreateTopics, DeleteTopics, IncrementalAlterConfigs, … to whichever broker
it calls the controller; that broker turns the request into a controller operation and sends it
to the active controller. :class:`ControllerCalls` is the seam: :class:`QuorumForwarder` is the
real one (the broker's ``ControllerClient``), tests pass a fake. A successful write is answered
once this broker's metadata image holds it, so the client's next Metadata request to the same
broker sees what it just changed.

When the quorum cannot answer, the client gets the Kafka error it knows how to retry:
``NOT_CONTROLLER`` (no active controller, or one still loading), ``REQUEST_TIMED_OUT``
(unreachable within the request's timeout) or ``THROTTLING_QUOTA_EXCEEDED`` with
``throttle_time_ms`` from the controller's ``retry_after_ms`` (KIP-599) — the last only on
request versions that define it; older ones get ``REQUEST_TIMED_OUT`` with the same throttle time.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, Protocol

from metadata_quorum.kernel.backoff import retry_after_ms_of
from metadata_quorum.kernel.errors import ErrorCode, FerryError

Json = dict[str, Any]

# Used when a request carries no timeout of its own (or a non-positive one).
DEFAULT_FORWARD_TIMEOUT_MS = 30_000
MIN_FORWARD_TIMEOUT_MS = 1_000  # a tiny client timeout must still leave room for one round trip
# How long a committed write waits for this broker's image: a lagging follower must not hold the
# answer for a whole admin timeout (the change is committed either way).
METADATA_WAIT_MAX_MS = 5_000

#: the quorum-side failures a client retries against another (or the same) broker
_UNAVAILABLE = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.REPLICA_NOT_AVAILABLE,
                          ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})


class ControllerCalls(Protocol):
    """What the admin handlers need of the controller quorum: a transport of the typed facade
    (``metadata_quorum/kernel/controller_api.py``). ``timeout_ms`` None: the default budget."""

    async def write(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Mapping[str, Any]:
        """Run a write operation on the active controller; its reply once this broker has it."""
        ...

    async def read(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Mapping[str, Any]:
        """Run a read operation on the active controller's committed image."""
        ...


class OffsetClient(Protocol):
    async def write_with_offset(self, op: str, args: Mapping[str, Any] | None = None,
                                timeout_ms: int | None = None, retry_answers: bool = True) -> Json: ...

    async def read(self, op: str, args: Mapping[str, Any] | None = None, timeout_ms: int | None = None,
                   leader: bool = True, retry_answers: bool = True) -> Json: ...


WaitForOffset = Callable[[int, float], Awaitable[None]]


class QuorumForwarder:
    """:class:`ControllerCalls` over the broker's controller client."""

    def __init__(self, client: OffsetClient, wait_for_offset: WaitForOffset) -> None:
        self.client = client
        self.wait_for_offset = wait_for_offset

    async def write(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Json:
        timeout_ms = DEFAULT_FORWARD_TIMEOUT_MS if timeout_ms is None else timeout_ms
        started = time.monotonic()
        # the operation's own answer (e.g. UNKNOWN_TOPIC_OR_PARTITION for a missing topic) goes back
        # to the client at once: only the quorum's unavailability is worth retrying here
        body = await self.client.write_with_offset(op, args, timeout_ms, retry_answers=False)
        left_s = min(timeout_ms / 1000 - (time.monotonic() - started), METADATA_WAIT_MAX_MS / 1000)
        offset = body.get("offset")
        if isinstance(offset, int) and left_s > 0:
            try:
                await self.wait_for_offset(offset, left_s)
            except FerryError:
                pass  # committed; only this broker's view lags, which a client's retry of Metadata covers
        reply: Json = body["reply"]
        return reply

    async def read(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Json:
        timeout_ms = DEFAULT_FORWARD_TIMEOUT_MS if timeout_ms is None else timeout_ms
        return await self.client.read(op, args, timeout_ms, retry_answers=False)


def forward_timeout_ms(request_timeout_ms: int | None) -> int:
    """The budget for one forwarded call: the request's own timeout when it has one."""
    if request_timeout_ms is None or request_timeout_ms <= 0:
        return DEFAULT_FORWARD_TIMEOUT_MS
    return max(MIN_FORWARD_TIMEOUT_MS, request_timeout_ms)


@dataclass(frozen=True)
class ForwardingFailure:
    """The Kafka error for a whole forwarded request that the quorum did not answer."""

    error: ErrorCode
    message: str
    throttle_time_ms: int


def forwarding_failure(exc: BaseException, quota_error_supported: bool = True) -> ForwardingFailure | None:
    """The Kafka error a quorum-side failure maps to; None for an answer about the request
    itself (bad input), which the handler reports item by item."""
    if isinstance(exc, FerryError):
        if exc.error is ErrorCode.THROTTLING_QUOTA_EXCEEDED:
            throttle = retry_after_ms_of(exc.details) or 0
            code = ErrorCode.THROTTLING_QUOTA_EXCEEDED if quota_error_supported else ErrorCode.REQUEST_TIMED_OUT
            return ForwardingFailure(code, exc.message, throttle)
        if exc.error in _UNAVAILABLE:
            return ForwardingFailure(ErrorCode.NOT_CONTROLLER, exc.message, 0)
        if exc.error is ErrorCode.REQUEST_TIMED_OUT:
            return ForwardingFailure(ErrorCode.REQUEST_TIMED_OUT, exc.message, 0)
        if exc.error.code >= 500 or exc.error is ErrorCode.UNKNOWN_SERVER_ERROR:
            return ForwardingFailure(ErrorCode.UNKNOWN_SERVER_ERROR, exc.message, 0)
        return None
    if isinstance(exc, TimeoutError):
        return ForwardingFailure(ErrorCode.REQUEST_TIMED_OUT, "the controller quorum did not answer in time", 0)
    if isinstance(exc, (OSError, ConnectionError)):
        return ForwardingFailure(ErrorCode.NOT_CONTROLLER, f"the controller quorum is unreachable: {exc}", 0)
    return None
