"""What a fetch answer may hold: sound batches only, and a corrupt one named, never passed on.

Every produce path validates its batches, so a stored batch that does not decode means storage
damage. Handing its bytes to a consumer makes every client of the partition fail at the same
offset with its own parser's error (or worse, decode garbage); Kafka's consumers instead report
CORRUPT_MESSAGE for that batch's offsets and leave the choice to seek past them to the user. A
fetch therefore answers the sound batches before the first corrupt one; a fetch that starts at a
corrupt batch gets CORRUPT_MESSAGE with ``base_offset`` and ``next_offset`` (where to resume).
Pure: bytes in, bytes or the error out (:func:`stream_storage.batch_scan.scan_batches` does the
walking).
"""
from __future__ import annotations

from metadata_quorum.kernel.errors import FerryError
from stream_storage.batch_scan import CorruptBatch, scan_batches


def sound_batches(data: bytes, fetch_offset: int) -> bytes:
    """The leading run of sound batches of ``data``; CORRUPT_MESSAGE if ``data`` starts with a bad one."""
    for item in scan_batches(data, decode_records=False):
        if not isinstance(item, CorruptBatch):
            continue
        if item.position > 0:
            return data[:item.position]
        base = item.base_offset if item.base_offset >= 0 else fetch_offset
        resume = max(item.next_offset, fetch_offset + 1)
        err = CorruptBatch(base, resume, item.reason, item.position, item.size_bytes).error()
        raise FerryError(err.error, f"{err.message}; seek to offset {resume} to skip it", err.details)
    return data
