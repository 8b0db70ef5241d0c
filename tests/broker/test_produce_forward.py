"""The old owner's decision to forward a produce it can no longer take (broker/produce_forward.py),
and what the Kafka front end answers with a forward's outcome (broker/kafka/produce_forwarding.py),
driven without sockets."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from broker.admission import LeaderView, ServingState
from broker.kafka.produce_forwarder import ForwardFailed, ForwardTarget
from broker.kafka.produce_forwarding import Forwarded, ProduceForwarding
from broker.kafka.wire import Request
from broker.produce_forward import (AWAIT, HERE, ClientsSentTo, ProduceAsk, Route, RouteKind, forwarded_client_id,
                                    is_forwarded, produce_route)
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.records import NO_LEADER

ME, OWNER = 1, 2
WINDOW_MS = 5000
# the client was named OWNER as a leader a minute ago (so it is connected to it)
ASK = ProduceAsk(api_version=11, forwarded=False, transactional=False, has_records=True,
                 named_ms_ago={OWNER: 60_000.0})
CLOSED = ServingState(accepts_requests=False, state_name="CLOSED", replica_closed=True, replica_leader_epoch=-1)
CLOSING = ServingState(accepts_requests=False, state_name="CLOSING", replica_closed=False, replica_leader_epoch=4)
SERVING = ServingState(accepts_requests=True, state_name="SERVING", replica_closed=False, replica_leader_epoch=4)
ELECTED = LeaderView(OWNER, 5)  # the election behind this broker's closing commit made OWNER leader
BETWEEN = LeaderView(NO_LEADER, 4, next_leader=OWNER, next_leader_epoch=5)  # the move is under way


def route(view: LeaderView | None = ELECTED, state: ServingState | None = CLOSED, since_ms: float | None = 30.0,
          ask: ProduceAsk = ASK, listening: frozenset[int] = frozenset({1, 2, 3}), window_ms: int = WINDOW_MS) -> Route:
    return produce_route(ME, view, state, since_ms, window_ms, listening, ask)


def test_the_old_owner_forwards_to_the_elected_owner_at_its_epoch() -> None:
    assert route() == Route(RouteKind.FORWARD, OWNER, 5)
    assert route(since_ms=WINDOW_MS) == Route(RouteKind.FORWARD, OWNER, 5)  # the window's last moment


def test_between_owners_the_old_owner_holds_until_the_election() -> None:
    assert route(BETWEEN, CLOSING) is AWAIT
    assert route(BETWEEN, CLOSED) is AWAIT
    # no owner-to-be named yet: the election behind the close names one
    assert route(LeaderView(NO_LEADER, 4), CLOSING) is AWAIT


def test_a_partition_served_here_is_appended_here() -> None:
    assert route(LeaderView(ME, 4), SERVING, since_ms=None) is HERE
    assert route(LeaderView(ME, 4), SERVING, since_ms=10.0) is HERE  # given up, then taken back


def test_coming_back_here_is_the_owner_to_be_s_hold_not_a_forward() -> None:
    opening = ServingState(accepts_requests=False, state_name="OPENING", replica_closed=True, replica_leader_epoch=-1)
    assert route(LeaderView(ME, 6), opening) is HERE
    assert route(LeaderView(NO_LEADER, 5, next_leader=ME, next_leader_epoch=6), CLOSED) is HERE


def test_only_the_broker_that_gave_it_up_forwards_and_only_within_the_window() -> None:
    assert route(since_ms=None) is HERE  # never owned here: refused as before
    assert route(state=None) is HERE
    assert route(since_ms=WINDOW_MS + 1) is HERE
    assert route(since_ms=-1.0) is HERE
    assert route(window_ms=0) is HERE  # forwarding off
    assert route(view=None) is HERE  # an unknown partition: the core's UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("ask", [
    ProduceAsk(11, forwarded=True, transactional=False, has_records=True),  # never forwarded twice
    ProduceAsk(9, forwarded=False, transactional=False, has_records=True),  # the answer cannot name the owner
    ProduceAsk(11, forwarded=False, transactional=True, has_records=True),  # the client retries at the owner
    ProduceAsk(11, forwarded=False, transactional=False, has_records=False),  # INVALID_RECORD here
])
def test_requests_that_are_never_forwarded(ask: ProduceAsk) -> None:
    assert route(ask=ask) is HERE


def test_an_owner_without_a_kafka_listener_is_not_forwarded_to() -> None:
    assert route(listening=frozenset({1, 3})) is HERE


def test_a_client_never_sent_to_the_owner_is_refused_naming_it() -> None:
    """librdkafka would migrate to a broker it is not connected to and wait up to 1 s to connect."""
    new_client = ProduceAsk(11, forwarded=False, transactional=False, has_records=True, named_ms_ago={3: 60_000.0})
    assert route(ask=new_client) is HERE
    assert route(BETWEEN, CLOSING, ask=new_client) is HERE  # not held: refused at once, naming OWNER
    assert route(LeaderView(NO_LEADER, 4), CLOSING, ask=new_client) is AWAIT  # no owner named yet


def test_a_client_refused_in_this_hand_over_is_refused_throughout_it() -> None:
    """Named OWNER 10 ms ago by this hand-over's first refusal: its next batch is refused too, or
    the owner would get it with a gap in its sequence numbers (OUT_OF_ORDER_SEQUENCE_NUMBER)."""
    refused_now = ProduceAsk(11, forwarded=False, transactional=False, has_records=True, named_ms_ago={OWNER: 10.0})
    assert route(since_ms=30.0, ask=refused_now) is HERE
    assert route(BETWEEN, CLOSED, since_ms=30.0, ask=refused_now) is HERE
    assert route(since_ms=5.0, ask=refused_now) == Route(RouteKind.FORWARD, OWNER, 5)  # named before this one


def test_the_clients_sent_to_memory_is_per_client_and_bounded() -> None:
    sent = ClientsSentTo(max_clients=2)
    sent.record(("/10.0.0.1", "rdkafka"), [2], now_mono_s=100.0)
    sent.record(("/10.0.0.1", "rdkafka"), [2, 3], now_mono_s=101.0)  # 2 keeps when it was first named
    assert sent.named_ms_ago(("/10.0.0.1", "rdkafka"), 102.0) == {2: 2000.0, 3: 1000.0}
    assert sent.named_ms_ago(("/10.0.0.2", "rdkafka"), 102.0) == {}
    sent.record(("/10.0.0.2", "rdkafka"), [2], now_mono_s=102.0)
    sent.record(("/10.0.0.3", "rdkafka"), [2], now_mono_s=103.0)  # the least recently named client is forgotten
    assert sent.named_ms_ago(("/10.0.0.1", "rdkafka"), 104.0) == {}
    assert sent.named_ms_ago(("/10.0.0.3", "rdkafka"), 104.0) == {2: 1000.0}


def test_the_forwarded_client_id_marks_a_forwarded_request() -> None:
    assert is_forwarded(forwarded_client_id(3))
    assert not is_forwarded("rdkafka") and not is_forwarded(None)


# ---------------------------------------------------------------------- the front end's shell
class FakeRoutes:
    def __init__(self, settled: Route) -> None:
        self.settled = settled

    def route(self, topic: str, partition: int, ask: ProduceAsk) -> Route:
        return self.settled

    async def settle(self, topic: str, partition: int, ask: ProduceAsk, limit_ms: int) -> Route:
        return self.settled


class FakeSender:
    def __init__(self, answer: Any = None, fail: bool = False, silent: bool = False) -> None:
        self.answer, self.fail, self.silent = answer, fail, silent
        self.sent: list[tuple[ForwardTarget, str, int, bytes, int]] = []

    def send(self, target: ForwardTarget, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int,
             api_version: int) -> asyncio.Future[Any] | None:
        self.sent.append((target, topic, partition, records, acks))
        if acks == 0:
            return None
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.fail:
            future.set_exception(ForwardFailed("connection refused"))
        elif not self.silent:
            future.set_result(self.answer)
        return future


def request(acks: int = -1, timeout_ms: int = 30000) -> Request:
    body = ProduceRequest[11](transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[])
    return Request(0, 11, 7, "rdkafka", body, 100)


def forwarding(sender: FakeSender, settled: Route = Route(RouteKind.FORWARD, OWNER, 5)) -> tuple[ProduceForwarding, list[str]]:
    counted: list[str] = []
    return ProduceForwarding(ME, FakeRoutes(settled), sender, lambda b: ForwardTarget(b, "127.0.0.1", 9092 + b),
                             counted.append), counted


async def test_the_owner_s_answer_is_passed_on_with_the_owner_named() -> None:
    PP = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    owner_answer = PP(index=0, error_code=0, base_offset=41, log_append_time_ms=-1, log_start_offset=0,
                      record_errors=[], error_message=None)
    sender = FakeSender(owner_answer)
    fwd, counted = forwarding(sender)
    got = await fwd.forward(request(), "t", 0, b"batch", -1, 30000)
    assert got == Forwarded(owner_answer, OWNER, 5)
    assert sender.sent == [(ForwardTarget(OWNER, "127.0.0.1", 9094), "t", 0, b"batch", -1)]  # unchanged
    assert counted == ["answered"]


async def test_no_answer_from_the_owner_is_today_s_refusal_naming_it() -> None:
    for sender in (FakeSender(fail=True), FakeSender(silent=True)):
        fwd, counted = forwarding(sender)
        with pytest.raises(FerryError) as refused:
            await fwd.forward(request(timeout_ms=50), "t", 0, b"batch", -1, 50)
        assert refused.value.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert refused.value.details is not None
        assert (refused.value.details["leader_id"], refused.value.details["leader_epoch"]) == (OWNER, 5)
        assert counted == ["failed"]


async def test_acks_0_is_forwarded_and_not_answered() -> None:
    sender = FakeSender()
    fwd, counted = forwarding(sender)
    got = await fwd.forward(request(acks=0), "t", 0, b"batch", 0, 30000)
    assert got == Forwarded(None, OWNER, 5) and len(sender.sent) == 1 and counted == ["sent"]


async def test_a_hold_that_ends_undecided_leaves_the_request_to_the_core() -> None:
    sender = FakeSender()
    fwd, counted = forwarding(sender, HERE)
    assert await fwd.forward(request(), "t", 0, b"batch", -1, 30000) is None
    assert sender.sent == [] and counted == []
