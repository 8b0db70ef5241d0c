"""Bounded decoding of the compression codecs a Kafka v2 record batch may use.

A produce request's payload is hostile until decoded: a few kilobytes of gzip or zstd can expand
to gigabytes, and a truncated stream can decode "successfully" to a prefix. Every decoder here
stops at ``max_bytes`` of output (MESSAGE_TOO_LARGE, on which Kafka's Java producer splits the
batch and retries), insists on a complete stream with nothing after it (CORRUPT_MESSAGE), and
accepts only the framings Kafka's Java clients read, so that every consumer can read what Ferry
stores:

* gzip — complete gzip members, up to :data:`MAX_MEMBERS` (zlib checks each one's CRC-32 and
  length);
* snappy — xerial's block framing (what snappy-java writes, 32 KiB blocks), up to
  :data:`MAX_XERIAL_BLOCKS` blocks, or a raw snappy block (what librdkafka writes; snappy-java
  falls back to it), told apart as kafka-python tells them apart;
* lz4 — one LZ4 frame, version 1, independent blocks, no dictionary id (KafkaLZ4BlockInputStream
  refuses the rest);
* zstd — complete zstd frames, up to :data:`MAX_MEMBERS`.

Pure: bytes in, bytes out, no I/O.
"""
from __future__ import annotations

import struct
import zlib
from enum import IntEnum

import lz4.frame
import snappy
import zstandard

from metadata_quorum.kernel.errors import ErrorCode, FerryError


class Codec(IntEnum):
    """The compression codec in bits 0-2 of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER_BYTES = 16
LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
#: a zstd block header (3 bytes) and an RLE byte can stand for 128 KiB: the worst expansion per input byte
ZSTD_WORST_EXPANSION = 32 * 1024
ZSTD_MAX_FEED_BYTES = 64 * 1024
GZIP_FEED_BYTES = 16 * 1024
#: gzip members or zstd frames in one payload: clients write one; a stream of thousands of empty
#: ones would cost a decoder setup each
MAX_MEMBERS = 64
#: snappy-java's 32 KiB blocks: 4096 of them hold 128 MiB; a stream of tiny blocks costs a call each
MAX_XERIAL_BLOCKS = 4096
_BLOCK_LENGTH = struct.Struct(">i")


def _corrupt(codec: Codec, why: str) -> FerryError:
    return FerryError(ErrorCode.CORRUPT_MESSAGE, f"the {codec.name.lower()} payload of the record batch "
                      f"does not decode: {why}")


def _too_large(codec: Codec, max_bytes: int) -> FerryError:
    return FerryError(ErrorCode.MESSAGE_TOO_LARGE, f"the {codec.name.lower()} payload of the record "
                      f"batch decompresses to more than {max_bytes} bytes; send smaller batches")


def decompress(codec: Codec, payload: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    """The records ``payload`` encodes with ``codec``; raises CORRUPT_MESSAGE when it does not decode
    completely and MESSAGE_TOO_LARGE past ``max_bytes`` of output (checked as it decodes)."""
    data = bytes(payload)
    if codec is Codec.NONE:
        return data
    if not data:
        raise _corrupt(codec, "it is empty")
    if codec is Codec.GZIP:
        return _gunzip(data, max_bytes)
    if codec is Codec.SNAPPY:
        return _unsnappy(data, max_bytes)
    if codec is Codec.LZ4:
        return _unlz4(data, max_bytes)
    return _unzstd(data, max_bytes)


def _gunzip(data: bytes, max_bytes: int) -> bytes:
    view = memoryview(data)
    out: list[bytes] = []
    total = position = members = 0
    while position < len(data):
        members = _next_member(Codec.GZIP, members, position)
        member_start = position
        member = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        while not member.eof:
            if position >= len(data):
                raise _corrupt(Codec.GZIP, f"gzip member at byte {member_start} is truncated")
            piece = view[position:position + GZIP_FEED_BYTES]
            try:
                chunk = member.decompress(piece, max_bytes - total + 1)
            except zlib.error as exc:
                raise _corrupt(Codec.GZIP, f"gzip member at byte {member_start}: {exc}") from None
            total += len(chunk)
            if total > max_bytes:
                raise _too_large(Codec.GZIP, max_bytes)
            out.append(chunk)
            position += len(piece)
        position -= len(member.unused_data)
    return b"".join(out)


def _next_member(codec: Codec, members: int, position: int) -> int:
    """Count one more gzip member / zstd frame, refusing more than any client writes (one)."""
    if members >= MAX_MEMBERS:
        raise _corrupt(codec, f"more than {MAX_MEMBERS} concatenated {'members' if codec is Codec.GZIP else 'frames'} "
                       f"(at byte {position}); Kafka clients write one")
    return members + 1


def _snappy_length(block: bytes, codec_position: int) -> int:
    """The uncompressed length a raw snappy block declares (its leading unsigned varint)."""
    value = shift = 0
    for i in range(min(5, len(block))):
        byte = block[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if value >= 1 << 32:
                break
            return value
        shift += 7
    raise _corrupt(Codec.SNAPPY, f"snappy block at byte {codec_position} has no valid length preamble")


def _snappy_block(block: bytes, codec_position: int, budget: int, max_bytes: int) -> bytes:
    if _snappy_length(block, codec_position) > budget:
        raise _too_large(Codec.SNAPPY, max_bytes)
    try:
        return bytes(snappy.decompress(block))
    except snappy.UncompressError as exc:
        raise _corrupt(Codec.SNAPPY, f"snappy block at byte {codec_position}: {exc or 'invalid'}") from None


def _unsnappy(data: bytes, max_bytes: int) -> bytes:
    if not (len(data) > XERIAL_HEADER_BYTES and data.startswith(XERIAL_MAGIC)):
        return _snappy_block(data, 0, max_bytes, max_bytes)
    out: list[bytes] = []
    total, position, blocks = 0, XERIAL_HEADER_BYTES, 0
    while position < len(data):
        blocks += 1
        if blocks > MAX_XERIAL_BLOCKS:
            raise _corrupt(Codec.SNAPPY, f"more than {MAX_XERIAL_BLOCKS} xerial blocks (at byte {position})")
        if len(data) - position < _BLOCK_LENGTH.size:
            raise _corrupt(Codec.SNAPPY, f"xerial block length at byte {position} is truncated")
        (length,) = _BLOCK_LENGTH.unpack_from(data, position)
        start = position + _BLOCK_LENGTH.size
        if length <= 0 or start + length > len(data):
            raise _corrupt(Codec.SNAPPY, f"xerial block at byte {position} claims {length} bytes, "
                           f"{len(data) - start} follow")
        chunk = _snappy_block(data[start:start + length], start, max_bytes - total, max_bytes)
        total += len(chunk)
        out.append(chunk)
        position = start + length
    return b"".join(out)


def _unlz4(data: bytes, max_bytes: int) -> bytes:
    if len(data) < 7 or not data.startswith(LZ4_FRAME_MAGIC):
        raise _corrupt(Codec.LZ4, "it does not start with an LZ4 frame header")
    flags, block_descriptor = data[4], data[5]
    if flags >> 6 != 1:
        raise _corrupt(Codec.LZ4, f"LZ4 frame version {flags >> 6} (only version 1 is read by Kafka)")
    if not flags & 0x20:
        raise _corrupt(Codec.LZ4, "the LZ4 frame uses dependent blocks, which Kafka's clients cannot read")
    if flags & 0x03:
        raise _corrupt(Codec.LZ4, "the LZ4 frame sets a dictionary id or reserved flag, which Kafka refuses")
    if block_descriptor & 0x8F or (block_descriptor >> 4) & 0x07 < 4:
        raise _corrupt(Codec.LZ4, f"the LZ4 frame's block descriptor {block_descriptor:#04x} is invalid")
    decompressor = lz4.frame.LZ4FrameDecompressor()
    try:
        out = decompressor.decompress(data, max_length=max_bytes + 1)
    except RuntimeError as exc:
        raise _corrupt(Codec.LZ4, str(exc)) from None
    if len(out) > max_bytes:
        raise _too_large(Codec.LZ4, max_bytes)
    if not decompressor.eof:
        raise _corrupt(Codec.LZ4, "the LZ4 frame is truncated")
    if decompressor.unused_data:
        raise _corrupt(Codec.LZ4, f"{len(decompressor.unused_data)} bytes follow the LZ4 frame")
    return bytes(out)


def _unzstd(data: bytes, max_bytes: int) -> bytes:
    """Frame by frame, fed a slice at a time so that no single call can expand past the budget by
    more than the budget (the library's one-shot calls have no output limit)."""
    decompressor = zstandard.ZstdDecompressor()
    out: list[bytes] = []
    total = position = 0
    members = 0
    while position < len(data):
        members = _next_member(Codec.ZSTD, members, position)
        frame_start = position
        frame = decompressor.decompressobj()
        while not frame.eof:
            if position >= len(data):
                raise _corrupt(Codec.ZSTD, f"zstd frame at byte {frame_start} is truncated")
            feed = max(16, min(ZSTD_MAX_FEED_BYTES, (max_bytes - total) // ZSTD_WORST_EXPANSION))
            piece = data[position:position + feed]
            try:
                chunk = frame.decompress(piece)
            except zstandard.ZstdError as exc:
                raise _corrupt(Codec.ZSTD, f"zstd frame at byte {frame_start}: {exc}") from None
            total += len(chunk)
            if total > max_bytes:
                raise _too_large(Codec.ZSTD, max_bytes)
            out.append(chunk)
            position += len(piece)
        position -= len(frame.unused_data)
    return b"".join(out)
