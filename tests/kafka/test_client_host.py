"""The client host JoinGroup records, as Kafka's broker reports it (what kafka-consumer-groups
--describe --members shows in its HOST column)."""
from __future__ import annotations

from kafka.protocol.metadata.metadata import MetadataRequest

from broker.kafka.listener import client_host
from broker.kafka.wire import KafkaConnection, Request


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
