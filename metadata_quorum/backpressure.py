"""What the active controller admits, and how long a request may wait: pure decisions.

A move of thousands of partitions makes every broker send thousands of stream operations at
once. Admitted without limit they queue for longer than the broker waits for its answer; the
broker then sends them again while the controller still holds (and later runs) the first copies,
and every round of retries doubles the work. Two rules keep the work bounded:

- **Deadlines travel with the request.** The client states how long it waits for this attempt
  (``Ferry-Timeout-Ms``); the controller answers before then — the operations it has not run yet
  are dropped from its queue and answered ``REQUEST_TIMED_OUT`` (retriable) — so a retry never
  meets its own first copy still queued.
- **Admission by expected wait, not by count.** An operation is admitted only if the queue ahead
  of it is expected to run within the time its request has left; otherwise it is refused at once
  with ``THROTTLING_QUOTA_EXCEEDED`` and a ``retry_after_ms`` of about when there will be room.
  The expected wait is the queue length times the measured cost of one operation.

Heartbeats and registrations are never refused (``quorum_controller.PRIORITY_OPERATIONS``): a
broker fenced for the controller's load would move its partitions, which is more load.
"""
from __future__ import annotations

from dataclasses import dataclass

from metadata_quorum.kernel.errors import ErrorCode, FerryError

TIMEOUT_HEADER = "Ferry-Timeout-Ms"
MAX_HEADER_DIGITS = 9
# The controller answers this much before the client's own deadline, so the answer arrives in time.
ANSWER_MARGIN_MIN_MS = 50
ANSWER_MARGIN_FRACTION = 0.1
RETRY_AFTER_MIN_MS = 50
RETRY_AFTER_MAX_MS = 5000
# Of a request's remaining time, the share the queue ahead may take: the rest is for the commit.
QUEUE_SHARE = 0.5


def parse_timeout_header(value: str | None) -> int | None:
    """The client's ``Ferry-Timeout-Ms``: None if absent; a positive ASCII-decimal integer, or refused."""
    if value is None:
        return None
    if not value.isascii() or not value.isdigit() or len(value) > MAX_HEADER_DIGITS or int(value) <= 0:
        raise FerryError(ErrorCode.INVALID_REQUEST,
                         f"{TIMEOUT_HEADER} must be a positive integer of at most {MAX_HEADER_DIGITS} digits")
    return int(value)


def answer_within_ms(server_timeout_ms: int, client_timeout_ms: int | None) -> int:
    """How long the controller may hold a request: its own limit, or less than the client waits."""
    if client_timeout_ms is None:
        return server_timeout_ms
    margin = max(ANSWER_MARGIN_MIN_MS, int(client_timeout_ms * ANSWER_MARGIN_FRACTION))
    return max(1, min(server_timeout_ms, client_timeout_ms - margin))


@dataclass(frozen=True)
class Admission:
    """``admitted`` operations of a request go to the queue; the rest are refused with ``retry_after_ms``."""

    admitted: int
    retry_after_ms: int


def admit(queued_ops: int, op_cost_ms: float, wanted: int, budget_ms: int, max_queued_ops: int) -> Admission:
    """How many of ``wanted`` operations to queue behind ``queued_ops`` others.

    Each is admitted if the queue ahead of it (those before it included) is expected to run within
    ``QUEUE_SHARE`` of ``budget_ms`` and the queue stays under ``max_queued_ops``. The refused get a
    retry-after of the expected time for the queue to drain to where they would have fitted.
    """
    if wanted <= 0:
        return Admission(0, 0)
    cost = max(op_cost_ms, 1e-3)
    by_time = int(budget_ms * QUEUE_SHARE / cost) - queued_ops
    by_count = max_queued_ops - queued_ops
    admitted = max(0, min(wanted, by_time, by_count))
    if admitted == wanted:
        return Admission(admitted, 0)
    return Admission(admitted, retry_after_ms(queued_ops + admitted, op_cost_ms))


def retry_after_ms(queued_ops: int, op_cost_ms: float) -> int:
    """About the time the queue ahead takes to run (bounded)."""
    estimate = int(queued_ops * op_cost_ms)
    return max(RETRY_AFTER_MIN_MS, min(RETRY_AFTER_MAX_MS, estimate))


def throttled(name: str, queued: int, retry_after: int) -> FerryError:
    return FerryError(ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                      f"the active controller has {queued} operations queued; {name} was not admitted, "
                      f"retry after {retry_after} ms", {"retry_after_ms": retry_after})
