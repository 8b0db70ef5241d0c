"""Kafka's error names and codes, shared by every component.

Errors split by fault: a caller's mistake (bad input, nothing changed) versus the system's
(retriable: the client retries, usually after refreshing metadata). Stream errors use the
500 range, beside Kafka's own codes, as AutoMQ's stream extensions do.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class ErrorCode(Enum):
    """(code, retriable, http_status) for every error Ferry reports."""

    UNKNOWN_SERVER_ERROR = (-1, False, 500)
    NONE = (0, False, 200)
    OFFSET_OUT_OF_RANGE = (1, False, 416)
    CORRUPT_MESSAGE = (2, True, 400)
    UNKNOWN_TOPIC_OR_PARTITION = (3, True, 404)
    LEADER_NOT_AVAILABLE = (5, True, 503)
    NOT_LEADER_OR_FOLLOWER = (6, True, 421)
    REQUEST_TIMED_OUT = (7, True, 504)
    BROKER_NOT_AVAILABLE = (8, False, 503)
    REPLICA_NOT_AVAILABLE = (9, True, 503)
    MESSAGE_TOO_LARGE = (10, False, 413)
    OFFSET_METADATA_TOO_LARGE = (12, False, 413)
    COORDINATOR_LOAD_IN_PROGRESS = (14, True, 503)
    COORDINATOR_NOT_AVAILABLE = (15, True, 503)
    NOT_COORDINATOR = (16, True, 421)
    INVALID_TOPIC_EXCEPTION = (17, False, 400)
    RECORD_LIST_TOO_LARGE = (18, False, 413)
    NOT_ENOUGH_REPLICAS = (19, True, 503)
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = (20, True, 503)
    INVALID_REQUIRED_ACKS = (21, False, 400)
    ILLEGAL_GENERATION = (22, False, 409)
    INCONSISTENT_GROUP_PROTOCOL = (23, False, 400)
    INVALID_GROUP_ID = (24, False, 400)
    UNKNOWN_MEMBER_ID = (25, False, 404)
    INVALID_SESSION_TIMEOUT = (26, False, 400)
    REBALANCE_IN_PROGRESS = (27, False, 409)
    INVALID_COMMIT_OFFSET_SIZE = (28, False, 413)
    TOPIC_AUTHORIZATION_FAILED = (29, False, 403)
    GROUP_AUTHORIZATION_FAILED = (30, False, 403)
    CLUSTER_AUTHORIZATION_FAILED = (31, False, 403)
    INVALID_TIMESTAMP = (32, False, 400)
    UNSUPPORTED_SASL_MECHANISM = (33, False, 400)
    ILLEGAL_SASL_STATE = (34, False, 400)
    UNSUPPORTED_VERSION = (35, False, 400)
    TOPIC_ALREADY_EXISTS = (36, False, 409)
    INVALID_PARTITIONS = (37, False, 400)
    INVALID_REPLICATION_FACTOR = (38, False, 400)
    INVALID_REPLICA_ASSIGNMENT = (39, False, 400)
    INVALID_CONFIG = (40, False, 400)
    NOT_CONTROLLER = (41, True, 421)
    INVALID_REQUEST = (42, False, 400)
    UNSUPPORTED_FOR_MESSAGE_FORMAT = (43, False, 400)
    POLICY_VIOLATION = (44, False, 400)
    OUT_OF_ORDER_SEQUENCE_NUMBER = (45, False, 409)
    DUPLICATE_SEQUENCE_NUMBER = (46, False, 409)
    INVALID_PRODUCER_EPOCH = (47, False, 409)
    INVALID_TXN_STATE = (48, False, 409)
    INVALID_PRODUCER_ID_MAPPING = (49, False, 409)
    INVALID_TRANSACTION_TIMEOUT = (50, False, 400)
    CONCURRENT_TRANSACTIONS = (51, True, 409)
    TRANSACTION_COORDINATOR_FENCED = (52, False, 409)
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = (53, False, 403)
    SECURITY_DISABLED = (54, False, 400)
    OPERATION_NOT_ATTEMPTED = (55, False, 400)
    KAFKA_STORAGE_ERROR = (56, True, 507)
    LOG_DIR_NOT_FOUND = (57, False, 404)
    SASL_AUTHENTICATION_FAILED = (58, False, 401)
    UNKNOWN_PRODUCER_ID = (59, False, 404)
    NON_EMPTY_GROUP = (68, False, 409)
    GROUP_ID_NOT_FOUND = (69, False, 404)
    FETCH_SESSION_ID_NOT_FOUND = (70, True, 404)
    INVALID_FETCH_SESSION_EPOCH = (71, True, 409)
    FENCED_LEADER_EPOCH = (74, True, 409)
    UNKNOWN_LEADER_EPOCH = (75, True, 409)
    UNSUPPORTED_COMPRESSION_TYPE = (76, False, 400)
    STALE_BROKER_EPOCH = (77, False, 409)
    OFFSET_NOT_AVAILABLE = (78, True, 503)
    MEMBER_ID_REQUIRED = (79, False, 409)
    PREFERRED_LEADER_NOT_AVAILABLE = (80, True, 503)
    GROUP_MAX_SIZE_REACHED = (81, False, 409)
    FENCED_INSTANCE_ID = (82, False, 409)
    ELIGIBLE_LEADERS_NOT_AVAILABLE = (83, True, 503)
    ELECTION_NOT_NEEDED = (84, False, 400)
    NO_REASSIGNMENT_IN_PROGRESS = (85, False, 400)
    GROUP_SUBSCRIBED_TO_TOPIC = (86, False, 409)
    INVALID_RECORD = (87, False, 400)
    UNSTABLE_OFFSET_COMMIT = (88, True, 409)
    THROTTLING_QUOTA_EXCEEDED = (89, True, 429)
    PRODUCER_FENCED = (90, False, 409)
    RESOURCE_NOT_FOUND = (91, False, 404)
    DUPLICATE_RESOURCE = (92, False, 409)
    UNACCEPTABLE_CREDENTIAL = (93, False, 400)
    UNKNOWN_TOPIC_ID = (100, True, 404)
    DUPLICATE_BROKER_REGISTRATION = (101, False, 409)
    BROKER_ID_NOT_REGISTERED = (102, False, 404)
    INCONSISTENT_CLUSTER_ID = (104, False, 400)
    TRANSACTIONAL_ID_NOT_FOUND = (105, False, 404)
    FENCED_MEMBER_EPOCH = (110, False, 409)  # the consumer group protocol (KIP-848)
    UNRELEASED_INSTANCE_ID = (111, False, 409)
    UNSUPPORTED_ASSIGNOR = (112, False, 400)
    STALE_MEMBER_EPOCH = (113, False, 409)
    MISMATCHED_ENDPOINT_TYPE = (114, False, 400)
    UNSUPPORTED_ENDPOINT_TYPE = (115, False, 400)
    STREAM_EXIST = (501, False, 409)
    STREAM_NOT_EXIST = (502, False, 404)
    STREAM_NOT_OPENED = (503, False, 409)
    STREAM_NOT_CLOSED = (504, True, 409)
    STREAM_FENCED = (505, False, 409)
    OFFSET_NOT_MATCHED = (506, False, 409)
    OBJECT_NOT_EXIST = (507, False, 404)
    STREAM_INNER_ERROR = (599, True, 500)

    @property
    def code(self) -> int:
        return self.value[0]

    @property
    def retriable(self) -> bool:
        return self.value[1]

    @property
    def http_status(self) -> int:
        return self.value[2]

    @classmethod
    def from_name(cls, name: str) -> "ErrorCode":
        try:
            return cls[name]
        except KeyError:
            return cls.UNKNOWN_SERVER_ERROR

    @classmethod
    def from_code(cls, code: int) -> "ErrorCode":
        """The error with Kafka's code ``code`` (UNKNOWN_SERVER_ERROR for one this module lacks)."""
        return _BY_CODE.get(code, cls.UNKNOWN_SERVER_ERROR)


_BY_CODE: dict[int, ErrorCode] = {e.code: e for e in ErrorCode}


@dataclass
class FerryError(Exception):
    """An error with Kafka's name and code, a message a person understands, and optional details."""

    error: ErrorCode
    message: str = ""
    details: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        super().__init__(f"{self.error.name}: {self.message}")

    def __str__(self) -> str:
        return f"{self.error.name}: {self.message}"

    def __hash__(self) -> int:
        return id(self)

    @property
    def retriable(self) -> bool:
        return self.error.retriable

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.error.name, "code": self.error.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> "FerryError":
        return cls(ErrorCode.from_name(str(body.get("error", ""))), str(body.get("message", "")), body.get("details"))
