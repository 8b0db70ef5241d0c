"""The stream-object key contract shared by the uploader that names objects and the controller that
collects them: ``<prefix>/<broker>/<created_ms>-<unique>``.

The controller's garbage collector compares each key's creation time with its horizon
(``commit_object`` refuses keys created at or before it), so both sides must read the time the
same way; that is why the format lives here and not in either layer.
"""
from __future__ import annotations


def object_key(prefix: str, broker_id: int, created_ms: int, unique: str) -> str:
    """A new stream object's key; ``created_ms`` zero-padded to 13 digits so keys sort by time."""
    return f"{prefix}/{broker_id}/{created_ms:013d}-{unique}"


def object_created_ms(object_key: str) -> int | None:
    """The creation time an object key carries (``.../<created_ms>-<unique>``), None if it has none."""
    head, sep, _rest = object_key.rpartition("/")[2].partition("-")
    return int(head) if sep and head.isdigit() else None
