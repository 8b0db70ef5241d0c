"""ListGroups' filters (v4 states, v5 types) as Kafka's coordinator applies them, and the client
host JoinGroup records (what kafka-consumer-groups --describe --members shows)."""
from __future__ import annotations

from kafka.protocol.metadata.metadata import MetadataRequest

from broker.groups import GroupState
from broker.kafka.group_apis import listed_states
from broker.kafka.listener import client_host
from broker.kafka.wire import KafkaConnection, Request


def test_no_filter_lists_every_state() -> None:
    assert listed_states([], []) is None


def test_states_match_case_insensitively_and_unknown_ones_match_nothing() -> None:
    assert listed_states(["stable", " Empty "], []) == {GroupState.STABLE, GroupState.EMPTY}
    assert listed_states(["Rebalancing"], []) == frozenset()  # no such state: nothing listed, no error


def test_every_group_is_classic_for_a_types_filter() -> None:
    assert listed_states([], ["Classic"]) is None
    assert listed_states([], ["consumer", "classic"]) is None  # kafka-consumer-groups --list asks for both
    assert listed_states([], ["consumer"]) == frozenset()
    assert listed_states(["Stable"], ["share"]) == frozenset()


def test_requests_carry_the_peer_address_as_kafka_reports_it() -> None:
    assert client_host(("127.0.0.1", 5000)) == "/127.0.0.1"
    assert client_host(("::1", 5000, 0, 0)) == "/::1"
    assert client_host(None) == ""
    conn = KafkaConnection(client_host="/127.0.0.1")
    msg = MetadataRequest[9](topics=None)
    msg.with_header(correlation_id=1, client_id="c")
    conn.receive_data(bytes(msg.encode(header=True, framed=True)))
    event = conn.next_event()
    assert isinstance(event, Request) and event.client_host == "/127.0.0.1"
