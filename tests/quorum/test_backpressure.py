"""Backoff, the write batcher's retry decision, the controller shedding load, and the follower's
cheap apply: the pieces that keep the control plane standing when thousands of partitions move."""
from __future__ import annotations

import asyncio
import pickle
from typing import Any

import pytest

from metadata_quorum.kernel.backoff import Backoff, retry_after_ms_of
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.raft import Command, CommittedLog
from metadata_quorum.records import KVRecord
from metadata_quorum.write_batcher import Retry, Settle, WriteBatcher, plan_retry
from tests.quorum.test_server_pipeline import become_leader, make


def test_backoff_doubles_to_its_cap_with_bounded_jitter() -> None:
    b = Backoff(initial_ms=100, max_ms=1000, jitter=0.2)
    assert [b.delay_ms(a, 0.5) for a in range(6)] == [100, 200, 400, 800, 1000, 1000]
    assert b.delay_ms(0, 0.0) == pytest.approx(80) and b.delay_ms(0, 0.999999) == pytest.approx(120, rel=1e-3)
    assert b.delay_ms(10, 0.0) == pytest.approx(800)  # the cap is jittered too, never above 1.2 × cap
    assert b.delay_ms(0, 0.5, retry_after_ms=700) >= 700  # the server's hint is a floor
    with pytest.raises(ValueError):
        Backoff(initial_ms=0)


def test_retry_after_is_read_only_from_a_positive_integer() -> None:
    assert retry_after_ms_of({"retry_after_ms": 250}) == 250
    assert retry_after_ms_of({"retry_after_ms": "250"}) is None
    assert retry_after_ms_of({"retry_after_ms": True}) is None
    assert retry_after_ms_of(None) is None


def test_plan_retry_settles_replies_and_fatal_errors_and_retries_retriable_ones_in_time() -> None:
    b = Backoff(initial_ms=100, max_ms=1000)
    assert plan_retry({"reply": {"x": 1}, "offset": 3}, 0, 1000, b, 0.5) == Settle(reply={"x": 1})
    fenced = FerryError(ErrorCode.STREAM_FENCED, "no").to_json()
    decision = plan_retry(fenced, 0, 1000, b, 0.5)
    assert isinstance(decision, Settle) and decision.error is not None and decision.error.error is ErrorCode.STREAM_FENCED
    throttled = FerryError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, "busy", {"retry_after_ms": 300}).to_json()
    retry = plan_retry(throttled, 0, 10_000, b, 0.5)
    assert isinstance(retry, Retry) and retry.delay_ms >= 300
    late = plan_retry(throttled, 3, 200, b, 0.5)  # no time left for the next attempt: give up, say so
    assert isinstance(late, Settle) and late.error is not None and "gave up after 4 attempts" in late.error.message


async def test_batcher_sends_concurrent_writes_together_and_retries_only_the_refused_ones() -> None:
    requests: list[list[tuple[str, dict[str, Any]]]] = []
    refused_once: set[int] = set()

    async def write_many(ops: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        requests.append(ops)
        answers = []
        for _op, args in ops:
            n = args["n"]
            if n % 10 == 0 and n not in refused_once:
                refused_once.add(n)
                answers.append(FerryError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, "busy", {"retry_after_ms": 5}).to_json())
            elif n == 7:
                answers.append(FerryError(ErrorCode.STREAM_FENCED, "fenced").to_json())
            else:
                answers.append({"reply": {"n": n}, "offset": n})
        return answers

    batcher = WriteBatcher(write_many, timeout_ms=5000, linger_ms=20, max_batch_ops=400,
                           backoff=Backoff(initial_ms=1, max_ms=10))
    results = await asyncio.gather(*(batcher.write("open_stream", {"n": n}) for n in range(1000)),
                                   return_exceptions=True)
    assert all(r == {"n": n} for n, r in enumerate(results) if n != 7)
    assert isinstance(results[7], FerryError) and results[7].error is ErrorCode.STREAM_FENCED
    first_round = [op for req in requests[:3] for op in req]
    assert len(requests[0]) == 400 and len(first_round) == 1000  # 1,000 writes in 3 requests
    assert len(requests) <= 5 and batcher.retried_ops == 100  # then the 100 refused, together
    await batcher.close()


async def test_a_write_given_its_own_timeout_stops_retrying_at_it() -> None:
    """``write(op, args, timeout_ms)`` (the typed facade passes a caller's budget) bounds that
    write's retries; writes without one keep the batcher's."""
    async def write_many(ops: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        return [FerryError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, "busy", {"retry_after_ms": 20}).to_json()
                for _ in ops]

    batcher = WriteBatcher(write_many, timeout_ms=60_000, linger_ms=1, backoff=Backoff(initial_ms=1, max_ms=20))
    short = asyncio.ensure_future(batcher.write("put_kv", {"key": "k", "value": "v"}, timeout_ms=200))
    long = asyncio.ensure_future(batcher.write("put_kv", {"key": "k", "value": "v"}))
    with pytest.raises(FerryError) as err:
        await asyncio.wait_for(short, 5)
    assert err.value.error is ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert not long.done()  # still retrying within its 60 s
    await batcher.close()
    long.cancel()


async def test_an_overloaded_controller_sheds_writes_with_retry_after_but_never_heartbeats() -> None:
    from metadata_quorum.operations import WRITE_OPERATIONS

    loop = asyncio.get_running_loop()
    controller, node, _state = make(loop, max_queued_ops=50, max_inflight_commands=1)
    controller.operations = dict(WRITE_OPERATIONS)
    await become_leader(controller, node)
    reply, offset = await controller.write("register_broker", {
        "broker_id": 1, "incarnation_id": "i1", "endpoints": ["http://127.0.0.1:1"],
        "log_dirs": [{"dir_id": "d", "path": "/tmp/ferry-d"}]}, 2.0)
    epoch = reply["broker_epoch"]
    hb, _ = await controller.write("broker_heartbeat", {"broker_id": 1, "broker_epoch": epoch,
                                                        "metadata_offset": offset}, 2.0)
    assert hb["is_fenced"] is False
    node.hold = True  # Raft stops committing: the one command in flight blocks the rest
    admitted = [controller.submit("put_kv", {"key": f"k{i}", "value": "v"}) for i in range(50)]
    with pytest.raises(FerryError) as err:
        controller.submit("put_kv", {"key": "one-too-many", "value": "v"})
    assert err.value.error is ErrorCode.THROTTLING_QUOTA_EXCEEDED and err.value.retriable
    assert 50 <= err.value.details["retry_after_ms"] <= 5000 and controller.shed_ops == 1
    # A heartbeat is not shed: it jumps the queue of admitted writes. It is answered only once a
    # command of this term sent after it commits: a leader that cannot commit may have been cut off,
    # and its "not fenced" would renew a lease the new leader does not count.
    beat_fut = asyncio.ensure_future(controller.write("broker_heartbeat", {
        "broker_id": 1, "broker_epoch": epoch, "metadata_offset": offset}, 5.0))
    await asyncio.sleep(0.2)
    assert not beat_fut.done() and not any(f.done() for f in admitted)
    assert controller.queue_depth >= 50 and controller.shed_ops == 1
    node.hold = False
    node.release()
    beat = await asyncio.wait_for(beat_fut, 5.0)
    assert beat[0]["is_fenced"] is False
    await asyncio.wait_for(asyncio.gather(*admitted), 5.0)  # then everything admitted commits
    await controller.stop()


def test_a_follower_applies_a_large_command_without_replaying_it_and_replays_on_demand() -> None:
    records = tuple(KVRecord(f"key-{i}", "v" * 20) for i in range(20_000))
    command = Command.of("a", "", 1, (records,))
    raw = pickle.dumps(command)
    assert len(raw) < 2_000_000 and pickle.loads(raw) == command  # bytes: unpickles in microseconds
    follower = CommittedLog(1_000_000)
    follower.apply_committed(command)
    assert follower.high_watermark == 20_000 and follower.pending_records == 20_000
    assert follower.read(19_999, 1).records[-1][1]["fields"]["key"] == "key-19999"  # the log is readable at once
    image = follower.materialize()
    assert follower.pending_records == 0 and image.offset == 19_999 and image.kv["key-123"] == "v" * 20


def test_admission_counts_the_expected_wait_against_the_requests_time() -> None:
    from metadata_quorum.backpressure import QUEUE_SHARE, admit

    # 1 ms an operation, 6 s to answer: the queue may hold 3,000 operations ahead (half the budget)
    assert admit(0, 1.0, 1000, 6000, 20_000).admitted == 1000
    partial = admit(2500, 1.0, 1000, 6000, 20_000)
    assert partial.admitted == int(6000 * QUEUE_SHARE) - 2500 == 500
    assert partial.retry_after_ms == 3000  # about the time until the queue has room again
    assert admit(4000, 1.0, 10, 6000, 20_000).admitted == 0
    assert admit(0, 0.01, 1000, 6000, 100).admitted == 100  # and never past max_queued_ops
    assert admit(0, 1.0, 0, 6000, 100).admitted == 0


def test_the_controller_answers_before_the_client_gives_up_and_reads_its_deadline_strictly() -> None:
    from metadata_quorum.backpressure import answer_within_ms, parse_timeout_header

    assert answer_within_ms(10_000, None) == 10_000
    assert answer_within_ms(10_000, 6000) == 5400  # 10 % earlier than the client's attempt ends
    assert answer_within_ms(10_000, 200) == 150 and answer_within_ms(3000, 60_000) == 3000
    assert parse_timeout_header(None) is None and parse_timeout_header("6000") == 6000
    for bad in ("", "-1", "0", "6e3", " 6000", "１２", "1234567890"):
        with pytest.raises(FerryError) as err:
            parse_timeout_header(bad)
        assert err.value.error is ErrorCode.INVALID_REQUEST


async def test_a_batch_past_the_expected_wait_is_refused_in_part_and_a_heartbeat_counts_on_arrival() -> None:
    from metadata_quorum.operations import WRITE_OPERATIONS

    loop = asyncio.get_running_loop()
    controller, node, _state = make(loop, max_inflight_commands=1)
    controller.operations = dict(WRITE_OPERATIONS)
    await become_leader(controller, node)
    reply, offset = await controller.write("register_broker", {
        "broker_id": 1, "incarnation_id": "i1", "endpoints": ["http://127.0.0.1:1"],
        "log_dirs": [{"dir_id": "d", "path": "/tmp/ferry-d"}]}, 2.0)
    epoch = reply["broker_epoch"]
    node.hold = True  # Raft stops committing
    controller.core.op_cost_ms = 1.0  # measured cost of one operation
    futures = controller.submit_many([("put_kv", {"key": f"k{i}", "value": "v"}) for i in range(600)], 1000)
    refused = [f for f in futures if f.done() and f.exception() is not None]
    assert len(refused) == 100 and controller.shed_ops == 100  # 500 fit in half of 1,000 ms
    err = refused[0].exception()
    assert isinstance(err, FerryError) and err.error is ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert err.details["retry_after_ms"] >= 500
    # The broker's heartbeat renews its session when it arrives, before it can run.
    controller.last_heartbeat_ms[1] = 0
    beat = controller.submit("broker_heartbeat", {"broker_id": 1, "broker_epoch": epoch, "metadata_offset": offset})
    assert controller.last_heartbeat_ms[1] > 0
    stale = controller.submit("broker_heartbeat", {"broker_id": 1, "broker_epoch": epoch + 7, "metadata_offset": 0})
    controller.last_heartbeat_ms[1] = 5
    controller.submit("broker_heartbeat", {"broker_id": 1, "broker_epoch": epoch + 7, "metadata_offset": 0})
    assert controller.last_heartbeat_ms[1] == 5  # another incarnation's heartbeat renews nothing
    node.hold = False
    node.release()
    await asyncio.wait_for(beat, 5.0)
    with pytest.raises(FerryError):
        await asyncio.wait_for(stale, 5.0)
    await asyncio.wait_for(asyncio.gather(*(f for f in futures if f not in refused)), 5.0)
    await controller.stop()
