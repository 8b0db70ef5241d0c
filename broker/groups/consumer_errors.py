"""Kafka's error codes of the consumer group protocol (KIP-848) that the shared error table does
not list yet. They carry ``code`` and ``name`` as :class:`~metadata_quorum.kernel.errors.ErrorCode`
members do, so a response field takes either."""
from __future__ import annotations

from enum import Enum
from typing import Union

from metadata_quorum.kernel.errors import ErrorCode


class ConsumerGroupError(Enum):
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113

    @property
    def code(self) -> int:
        return int(self.value)


GroupError = Union[ErrorCode, ConsumerGroupError]
"""An error a group response may carry."""
