"""The controller's stream operations, as stream storage needs them.

:class:`StreamControl` is the seam; :class:`OpStreamControl` implements it over the typed
controller facade (``metadata_quorum/kernel/controller_api.py``), whatever transport carries its
calls (the broker's write batcher, for one). Two ready-made forms: :class:`HttpStreamControl` (``metadata_quorum.client.ControllerClient``, real processes) and
:class:`LocalStreamControl` (``metadata_quorum.local_controller.LocalController``, in-process, for
fast tests).
"""
from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from metadata_quorum.kernel.controller_api import ControllerApi, ControllerTransport
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.streams import CommitObjectRequest, DescribeStreamReply
from stream_storage.object_format import StreamRange


@dataclass(frozen=True)
class OpenedStream:
    stream_id: int
    epoch: int
    start_offset: int
    end_offset: int
    # (broker_id, stream epoch) of earlier owners whose WALs may hold an acknowledged tail past
    # end_offset: the opener recovers from all of them, then calls stream_recovered
    wal_owners: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class ObjectRef:
    """``[start_offset, end_offset)`` of one stream lives in ``object_key`` (``size`` bytes in all)."""

    object_key: str
    start_offset: int
    end_offset: int
    size: int
    epoch: int = 0
    range_bytes: int = 0  # this stream's bytes in the object (0: not recorded, older commits)


@dataclass(frozen=True)
class StreamDescription:
    stream_id: int
    epoch: int
    state: str
    owner: int
    start_offset: int
    end_offset: int
    objects: tuple[ObjectRef, ...]


class StreamControl(Protocol):
    async def create_stream(self) -> int: ...

    async def open_stream(self, stream_id: int, epoch: int, broker_id: int, broker_epoch: int) -> OpenedStream: ...

    async def close_stream(self, stream_id: int, epoch: int, broker_id: int, broker_epoch: int) -> None: ...

    async def stream_recovered(self, stream_id: int, epoch: int, broker_id: int, broker_epoch: int) -> None:
        """The tails of the open's ``wal_owners`` are recovered and committed: clear the list."""
        ...

    async def commit_object(self, object_key: str, size: int, broker_id: int, broker_epoch: int,
                            ranges: Sequence[tuple[StreamRange, int]], close_stream_ids: Sequence[int] = ()) -> None:
        """Commit all ``(range, epoch)`` pairs atomically; the same key again is an idempotent retry.
        ``close_stream_ids`` are closed by the same write."""
        ...

    async def trim_stream(self, stream_id: int, epoch: int, broker_id: int, broker_epoch: int,
                          new_start_offset: int) -> list[str]: ...

    async def compact_objects(self, stream_id: int, epoch: int, broker_id: int, broker_epoch: int,
                              new: ObjectRef, replaces: Sequence[str]) -> list[str]:
        """Replace ``replaces`` by ``new`` (same offsets); returns the keys no stream names any more."""
        ...

    async def describe_stream(self, stream_id: int) -> StreamDescription: ...


def parse_wal_owners(raw: Any) -> tuple[tuple[int, int], ...]:
    """``[[broker_id, epoch], ...]`` of an open's reply, strictly (absent: none)."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(
            isinstance(o, list) and len(o) == 2 and all(type(v) is int for v in o) for o in raw):
        raise FerryError(ErrorCode.INVALID_REQUEST, f"wal_owners must be [[broker_id, epoch], ...], got {raw!r}"[:200])
    return tuple((int(b), int(e)) for b, e in raw)


def parse_description(reply: DescribeStreamReply) -> StreamDescription:
    objects = tuple(sorted(
        (ObjectRef(str(o["object_key"]), int(o["start_offset"]), int(o["end_offset"]), int(o.get("size", 0)),
                   int(o.get("epoch", 0)), int(o.get("range_bytes", 0))) for o in reply.get("objects", [])),
        key=lambda o: o.start_offset))
    return StreamDescription(int(reply["stream_id"]), int(reply["epoch"]), str(reply["state"]), int(reply["owner"]),
                             int(reply["start_offset"]), int(reply["end_offset"]), objects)


def description_from_image(image: Any, stream_id: int) -> StreamDescription | None:
    """A stream as a broker's own metadata image has it (no round trip); None if unknown."""
    stream = image.streams.streams.get(stream_id)
    return None if stream is None else parse_description(stream.describe())


class OpStreamControl:
    """StreamControl over the typed controller facade (any transport: HTTP, batcher, in-process)."""

    def __init__(self, api: ControllerApi) -> None:
        self.api = api

    async def create_stream(self) -> int:
        return int((await self.api.create_stream({}))["stream_id"])

    async def open_stream(self, stream_id: int, epoch: int, broker_id: int, broker_epoch: int) -> OpenedStream:
        reply = await self.api.open_stream({"stream_id": stream_id, "epoch": epoch, "broker_id": broker_id,
                                            "broker_epoch": broker_epoch})
        return OpenedStream(int(reply["stream_id"]), int(reply["epoch"]), int(reply["start_offset"]),
                            int(reply["end_offset"]), parse_wal_owners(reply.get("wal_owners")))

    async def stream_recovered(self, stream_id: int, epoch: int, broker_id: int, broker_epoch: int) -> None:
        await self.api.stream_recovered({"stream_id": stream_id, "epoch": epoch, "broker_id": broker_id,
                                         "broker_epoch": broker_epoch})

    async def close_stream(self, stream_id: int, epoch: int, broker_id: int, broker_epoch: int) -> None:
        await self.api.close_stream({"stream_id": stream_id, "epoch": epoch, "broker_id": broker_id,
                                     "broker_epoch": broker_epoch})

    async def commit_object(self, object_key: str, size: int, broker_id: int, broker_epoch: int,
                            ranges: Sequence[tuple[StreamRange, int]], close_stream_ids: Sequence[int] = ()) -> None:
        request: CommitObjectRequest = {
            "object_key": object_key, "size": size, "broker_id": broker_id, "broker_epoch": broker_epoch,
            "ranges": [{"stream_id": r.stream_id, "epoch": epoch, "start_offset": r.start_offset,
                        "end_offset": r.end_offset, "size_bytes": r.size_bytes} for r, epoch in ranges]}
        if close_stream_ids:
            request["close_stream_ids"] = list(close_stream_ids)
        await self.api.commit_object(request)

    async def trim_stream(self, stream_id: int, epoch: int, broker_id: int, broker_epoch: int,
                          new_start_offset: int) -> list[str]:
        reply = await self.api.trim_stream({"stream_id": stream_id, "epoch": epoch, "broker_id": broker_id,
                                            "broker_epoch": broker_epoch, "new_start_offset": new_start_offset})
        return [str(k) for k in reply.get("removed_objects", [])]

    async def compact_objects(self, stream_id: int, epoch: int, broker_id: int, broker_epoch: int,
                              new: ObjectRef, replaces: Sequence[str]) -> list[str]:
        reply = await self.api.compact_objects({
            "stream_id": stream_id, "epoch": epoch, "broker_id": broker_id, "broker_epoch": broker_epoch,
            "object_key": new.object_key, "size": new.size, "range_bytes": new.range_bytes,
            "start_offset": new.start_offset, "end_offset": new.end_offset, "replaces": list(replaces)})
        return [str(k) for k in reply.get("removed_objects", [])]

    async def describe_stream(self, stream_id: int) -> StreamDescription:
        return parse_description(await self.api.describe_stream({"stream_id": stream_id}))


def _reply_of(result: Any) -> dict[str, Any]:
    """Accept a bare reply, a ``ControllerResult``-like object, or ``{"reply": ..}``."""
    if hasattr(result, "reply"):
        return dict(result.reply)
    if isinstance(result, dict) and "reply" in result and isinstance(result["reply"], dict):
        return dict(result["reply"])
    return dict(result or {})


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class HttpStreamControl(OpStreamControl):
    """Over ``metadata_quorum.client.ControllerClient`` (follows NOT_CONTROLLER, retries retriable errors)."""

    def __init__(self, client: ControllerTransport) -> None:
        super().__init__(ControllerApi(client))
        self.client = client


class _InProcessTransport:
    """An in-process controller's ``write``/``read`` (sync or async, answering a bare reply or a
    result carrying one) as a facade transport, ``delay_ms`` later."""

    def __init__(self, controller: Any, delay_ms: float) -> None:
        self.controller = controller
        self.delay_ms = delay_ms

    async def write(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Mapping[str, Any]:
        if self.delay_ms:
            await asyncio.sleep(self.delay_ms / 1000)
        return _reply_of(await _maybe_await(self.controller.write(op, dict(args))))

    async def read(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Mapping[str, Any]:
        if self.delay_ms:
            await asyncio.sleep(self.delay_ms / 1000)
        return _reply_of(await _maybe_await(self.controller.read(op, dict(args))))


class LocalStreamControl(OpStreamControl):
    """Over an in-process ``LocalController`` (its ``write``/``read`` may be sync or async).

    ``delay_ms`` adds a round trip's worth of latency to every call, so that fast tests can still
    interleave concurrent callers the way a network would.
    """

    def __init__(self, controller: Any, delay_ms: float = 0.0) -> None:
        super().__init__(ControllerApi(_InProcessTransport(controller, delay_ms)))
        self.controller = controller


def is_fenced(exc: BaseException) -> bool:
    return isinstance(exc, FerryError) and exc.error in (ErrorCode.STREAM_FENCED, ErrorCode.STALE_BROKER_EPOCH)
