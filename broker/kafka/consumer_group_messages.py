"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) as kafka-python generated messages.

The pinned kafka-python carries no JSON specs for these two KIP-848 APIs; its schema machinery
builds the classes from the specs in :mod:`broker.kafka.schemas` exactly as it builds its own (the
``load_json`` class keyword names the package holding them), so they encode and decode through the
same generated code as every other API.
"""
from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from broker.kafka import schemas


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=schemas):  # type: ignore[call-arg]
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=schemas):  # type: ignore[call-arg]
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json=schemas):  # type: ignore[call-arg]
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=schemas):  # type: ignore[call-arg]
    pass


REQUEST_CLASSES: tuple[type[ApiMessage], ...] = (ConsumerGroupHeartbeatRequest, ConsumerGroupDescribeRequest)
