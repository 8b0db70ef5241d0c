"""Shapes every area's messages share: the per-item error of a batch reply, a topic partition.

Kafka answers batches item by item: an item that failed carries ``error`` (the ErrorCode's name),
``code`` and ``message`` beside the fields that name it, and none of the fields of a success.
"""
# No ``from __future__ import annotations`` here: the TypedDicts must see ``NotRequired`` at class
# creation, or their __required_keys__ / __optional_keys__ are wrong at run time.

from typing import TypedDict


class ItemError(TypedDict):
    """The error fields of one failed item (``kernel.validation.item_error``)."""

    error: str
    code: int
    message: str


class ItemErrorFields(TypedDict, total=False):
    """The same fields on an item type whose items may have succeeded."""

    error: str
    code: int
    message: str


class TopicPartitionRef(TypedDict):
    topic: str
    partition: int


class Empty(TypedDict):
    """A request with no fields, or a reply that says only that the operation succeeded."""
