"""The controller client (aiohttp) and the metadata-log follower that brokers and tools use.

``ControllerClient`` sends writes to the active controller: it starts from a bootstrap list, follows
``NOT_CONTROLLER`` answers to the leader they name, and retries retriable errors (and connection
failures) with exponential backoff until ``timeout_ms``. Bad input is never retried: its
``FerryError`` is raised at once. With ``unreachable_timeout_ms`` set (the command-line tools), a
client that has never reached a controller gives up after that long when every bootstrap address
refuses connections: a wrong address or a stopped quorum, not a leader change.

``MetadataLogFollower`` long-polls the committed metadata log from an offset and keeps a
``MetadataImage``, handing every batch of records, its ``MetadataDelta`` and the new image to a
callback — the way a KRaft broker follows the metadata log. When the controller has dropped the
offset asked for, it loads the snapshot it is given instead.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import random
import time
from typing import Any, Awaitable, Callable, Mapping, Sequence

import aiohttp

from metadata_quorum.kernel.auth_middleware import auth_headers
from metadata_quorum.kernel.backoff import CONTROLLER_BACKOFF, Backoff, retry_after_ms_of
from metadata_quorum.backpressure import TIMEOUT_HEADER
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.records import (
    ConfigRecord,
    KVRecord,
    Record,
    RemoveStreamObjectRecord,
    RemoveStreamRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    UnregisterBrokerRecord,
    decode_record,
)

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS = 15_000
DEFAULT_ATTEMPT_TIMEOUT_MS = 6_000  # above the controller's commit timeout (5 s)
FOLLOWER_BACKOFF = Backoff(initial_ms=20.0, max_ms=250.0)
#: the errors that say the quorum could not answer now (rather than an answer about the request)
QUORUM_UNAVAILABLE = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.REPLICA_NOT_AVAILABLE,
                                ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                ErrorCode.REQUEST_TIMED_OUT, ErrorCode.THROTTLING_QUOTA_EXCEEDED})
NO_LEADER_RETRY = 1  # while a leader is elected (a few hundred ms) keep retrying briskly


def _base_url(address: str) -> str:
    address = address.strip().rstrip("/")
    return address if address.startswith(("http://", "https://")) else f"http://{address}"


class ControllerClient:
    """Async client of the controller HTTP API (docs/controller-api.md)."""

    def __init__(self, bootstrap: list[str] | str, timeout_ms: int = DEFAULT_TIMEOUT_MS,
                 session: aiohttp.ClientSession | None = None,
                 attempt_timeout_ms: int = DEFAULT_ATTEMPT_TIMEOUT_MS,
                 unreachable_timeout_ms: int | None = None, token: str | None = None) -> None:
        if isinstance(bootstrap, str):
            bootstrap = [b for b in bootstrap.split(",") if b.strip()]
        if not bootstrap:
            raise FerryError(ErrorCode.INVALID_REQUEST, "the bootstrap controller list is empty")
        self.bootstrap = [_base_url(b) for b in bootstrap]
        self.timeout_ms = timeout_ms
        # One attempt's limit: a controller that accepts connections but does not answer (paused,
        # partitioned) costs at most this before the next one is tried.
        self.attempt_timeout_ms = attempt_timeout_ms
        # None: retry connection failures until timeout_ms. Otherwise: until this long, while no
        # controller ever answered this client and every bootstrap address refuses connections.
        self.unreachable_timeout_ms = unreachable_timeout_ms
        self._answered = False  # some controller answered an HTTP request of this client
        self._session = session
        self._own_session = session is None
        self._leader_url: str | None = None
        self._next = 0
        self.backoff = CONTROLLER_BACKOFF
        # Sent as a bearer token on every request (a secure cluster's admin or inter-node token).
        self._auth = auth_headers(token)

    async def __aenter__(self) -> "ControllerClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None and self._own_session:
            await self._session.close()
        self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=64, force_close=False)
            self._session = aiohttp.ClientSession(connector=connector)
            self._own_session = True
        return self._session

    @property
    def leader_url(self) -> str | None:
        return self._leader_url

    def _any_url(self) -> str:
        url = self.bootstrap[self._next % len(self.bootstrap)]
        self._next += 1
        return url

    # -- one request ------------------------------------------------------------------------------

    async def request(self, method: str, url: str, path: str, body: Any = None,
                      timeout_s: float = 10.0, params: dict[str, Any] | None = None) -> Any:
        """One HTTP call; raises FerryError (from the error body) or OSError-like aiohttp errors."""
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        # The controller answers before this attempt gives up (backpressure.py), so a retry never
        # meets its first copy still queued there.
        headers = {TIMEOUT_HEADER: str(max(1, int(timeout_s * 1000))), **self._auth}
        if data is not None:
            headers["Content-Type"] = "application/json"
        async with self.session.request(method, url + path, data=data, headers=headers, params=params,
                                        timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            self._answered = True
            raw = await resp.read()
            try:
                payload = json.loads(raw) if raw else {}
            except json.JSONDecodeError:
                raise FerryError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                 f"{url}{path} answered {resp.status} with a non-JSON body") from None
            if resp.status >= 400:
                if isinstance(payload, dict) and "error" in payload:
                    raise FerryError.from_json(payload)
                raise FerryError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{url}{path} answered HTTP {resp.status}")
            return payload

    async def _with_retries(self, path: str, body: Any, to_leader: bool, method: str = "POST",
                            timeout_ms: int | None = None, params: dict[str, Any] | None = None,
                            retry_answers: bool = True) -> Any:
        budget_ms = self.timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + budget_ms / 1000
        retry = 0  # the backoff's attempt number (a leader change restarts it: a new leader is ready)
        retry_after_ms: int | None = None
        last: BaseException | None = None
        attempts = 0
        redirected = False  # follow a leader hint at once, but not back and forth between stale hints
        started = time.monotonic()
        refused: dict[str, str] = {}  # bootstrap url -> why it could not be connected to
        while True:
            attempts += 1
            url = (self._leader_url or self._any_url()) if to_leader else self._any_url()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                attempt_s = min(remaining, self.attempt_timeout_ms / 1000)
                return await self.request(method, url, path, body, timeout_s=max(0.05, attempt_s), params=params)
            except FerryError as e:
                last = e
                retry_after_ms = retry_after_ms_of(e.details)
                if e.error is ErrorCode.NOT_CONTROLLER:
                    hint = (e.details or {}).get("leader_url")
                    if hint and _base_url(hint) != url:
                        self._leader_url = _base_url(hint)
                        if not redirected:
                            redirected = True
                            continue  # go straight to the named leader
                    else:
                        self._leader_url = None
                    retry = min(retry, NO_LEADER_RETRY)
                elif not e.retriable or (not retry_answers and e.error not in QUORUM_UNAVAILABLE):
                    raise
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                last = e
                if isinstance(e, aiohttp.ClientConnectorError):
                    refused[url] = ("connection refused" if isinstance(e.os_error, ConnectionRefusedError)
                                    else e.strerror or repr(e.os_error))
                    self._raise_if_unreachable(refused, started)
                if to_leader and self._leader_url == url:
                    self._leader_url = None
                    continue  # the leader is gone: ask the next controller at once
            sleep_ms = min(self.backoff.delay_ms(retry, random.random(), retry_after_ms),
                           max(0.0, (deadline - time.monotonic()) * 1000))
            await asyncio.sleep(sleep_ms / 1000)
            redirected = False
            retry += 1
            retry_after_ms = None
        if isinstance(last, FerryError):
            raise FerryError(last.error, f"{last.message} (gave up after {attempts} attempts in {budget_ms} ms)",
                             last.details)
        raise FerryError(ErrorCode.REQUEST_TIMED_OUT,
                         f"no controller answered {path} within {budget_ms} ms (last error: {last!r})")

    def _raise_if_unreachable(self, refused: dict[str, str], started: float) -> None:
        """Give up early when no bootstrap controller can be connected to and none ever answered."""
        if self.unreachable_timeout_ms is None or self._answered or not set(self.bootstrap) <= set(refused):
            return
        if (time.monotonic() - started) * 1000 < self.unreachable_timeout_ms:
            return
        reasons = ", ".join(f"{url.removeprefix('http://')} ({refused[url]})" for url in self.bootstrap)
        raise FerryError(ErrorCode.REQUEST_TIMED_OUT,
                         f"cannot connect to any bootstrap controller: {reasons}",
                         {"unreachable": [url.removeprefix("http://") for url in self.bootstrap]})

    # -- the API ------------------------------------------------------------------------------------

    async def write(self, op: str, args: Mapping[str, Any] | None = None,
                    timeout_ms: int | None = None) -> dict[str, Any]:
        """Run a write operation on the active controller; returns its reply."""
        body = await self.write_with_offset(op, args, timeout_ms)
        reply: dict[str, Any] = body["reply"]
        return reply

    async def write_with_offset(self, op: str, args: Mapping[str, Any] | None = None,
                                timeout_ms: int | None = None, retry_answers: bool = True) -> dict[str, Any]:
        """Like :meth:`write`, returning ``{"reply", "offset"}`` (the batch's last committed offset).
        ``retry_answers=False``: an error the operation itself answered (a missing topic, ...) is
        raised at once, even one a client would retry; only the quorum's unavailability is retried."""
        result: dict[str, Any] = await self._with_retries(f"/v1/write/{op}", args or {}, True, timeout_ms=timeout_ms,
                                                          retry_answers=retry_answers)
        return result

    async def write_many(self, ops: Sequence[tuple[str, Mapping[str, Any]]],
                         timeout_ms: int | None = None) -> list[dict[str, Any]]:
        """Several independent writes in one request; each answer is ``{"reply", "offset"}`` or an error body."""
        body = {"ops": [{"op": op, "args": args} for op, args in ops]}
        result = await self._with_retries("/v1/write", body, True, timeout_ms=timeout_ms)
        return list(result["results"])

    async def read(self, op: str, args: Mapping[str, Any] | None = None, timeout_ms: int | None = None,
                   leader: bool = True, retry_answers: bool = True) -> dict[str, Any]:
        """Run a read operation on the committed image: the active controller's (every acknowledged
        write is visible), or with ``leader=False`` any controller's (it may lag slightly).
        ``retry_answers`` as for :meth:`write_with_offset`."""
        params = {"consistency": "leader" if leader else "any"}
        result = await self._with_retries(f"/v1/read/{op}", args or {}, leader, timeout_ms=timeout_ms, params=params,
                                          retry_answers=retry_answers)
        return dict(result["reply"])

    async def fetch_log(self, offset: int, max_wait_ms: int = 0, max_records: int = 10_000,
                        url: str | None = None) -> dict[str, Any]:
        """One ``GET /v1/log`` (no retries): records from ``offset`` or a snapshot."""
        target = url or self._leader_url or self._any_url()
        params = {"offset": str(offset), "max_wait_ms": str(max_wait_ms), "max_records": str(max_records)}
        result: dict[str, Any] = await self.request("GET", target, "/v1/log", None,
                                                    timeout_s=max_wait_ms / 1000 + 3, params=params)
        return result

    async def snapshot(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._with_retries("/v1/snapshot", None, False, method="GET")
        return result

    async def quorum_status(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._with_retries("/v1/quorum/status", None, True, method="GET")
        return result

    async def quorum_replication(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._with_retries("/v1/quorum/replication", None, True, method="GET")
        return result

    async def health(self, url: str) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("GET", _base_url(url), "/v1/health", timeout_s=2.0)
        return result


BatchCallback = Callable[[list[tuple[int, Record]], Any, Any], Awaitable[None] | None]


class MetadataLogFollower:
    """Follows the committed metadata log and keeps the image it describes.

    ``callback(records, delta, new_image)`` is called once per batch, in order: ``records`` is a
    list of ``(offset, record)`` (empty after a snapshot), ``delta`` the ``MetadataDelta`` from the
    previous image. A batch never splits one controller operation's records: the controller may
    cut a large one across answers (``batch_end`` false), and its records wait here until the rest
    of it came.
    """

    def __init__(self, client: ControllerClient, callback: BatchCallback | None = None,
                 start_offset: int = 0, image: Any = None, max_wait_ms: int = 1000,
                 max_records: int = 2000) -> None:
        from metadata_quorum.image import EMPTY_IMAGE

        self.client = client
        self.callback = callback
        self.image = EMPTY_IMAGE if image is None else image
        self.next_offset = start_offset if image is None else image.offset + 1  # the image's next
        # where the next fetch starts: past ``next_offset`` while a batch cut short is unfinished
        self.fetch_offset = self.next_offset
        self._unfinished: tuple[list[tuple[int, Record]], Any] | None = None
        self.max_wait_ms = max_wait_ms
        self.max_records = max_records
        self.high_watermark = -1
        self.snapshots_loaded = 0
        self._stopped = asyncio.Event()
        self._caught_up = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._controllers = list(client.bootstrap)
        self._current = 0

    def start(self) -> "MetadataLogFollower":
        self._task = asyncio.get_running_loop().create_task(self.run())
        return self

    async def stop(self) -> None:
        self._stopped.set()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping: how the task ended no longer matters
                pass

    @property
    def offset(self) -> int:
        """The offset of the last record applied to :attr:`image` (-1 = none)."""
        return self.next_offset - 1

    async def wait_for_offset(self, offset: int, timeout_s: float = 10.0) -> None:
        """Wait until the image includes ``offset``."""
        deadline = time.monotonic() + timeout_s
        while self.offset < offset:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise FerryError(ErrorCode.REQUEST_TIMED_OUT, f"metadata offset {offset} not reached in {timeout_s} s "
                                                              f"(at {self.offset})")
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    async def wait_caught_up(self, timeout_s: float = 10.0) -> None:
        await asyncio.wait_for(self._caught_up.wait(), timeout_s)

    async def run(self) -> None:
        failures = 0
        while not self._stopped.is_set():
            url = self._controllers[self._current % len(self._controllers)]
            try:
                body = await self.client.fetch_log(self.fetch_offset, self.max_wait_ms, self.max_records, url=url)
                failures = 0
            except (FerryError, aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                log.debug("metadata log fetch from %s failed: %r", url, e)
                self._current += 1  # try the next controller
                await asyncio.sleep(FOLLOWER_BACKOFF.delay_s(failures))
                failures += 1
                continue
            try:
                await self.handle(body)
            except FerryError as e:  # a gap: ask another controller from where we are
                log.warning("metadata log from %s: %s", url, e)
                self._current += 1
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("metadata log callback failed at offset %d", self.offset)
                await asyncio.sleep(FOLLOWER_BACKOFF.delay_s(failures))
                failures += 1

    async def poll_once(self, max_wait_ms: int = 0) -> int:
        """Fetch and apply one response; returns how many records (or snapshot records) it carried."""
        body = await self.client.fetch_log(self.fetch_offset, max_wait_ms, self.max_records)
        return await self.handle(body)

    async def handle(self, body: dict[str, Any]) -> int:
        """Apply one ``/v1/log`` response to the image and call the callback."""
        from metadata_quorum.delta import MetadataDelta

        self.high_watermark = int(body.get("high_watermark", self.high_watermark))
        if "snapshot" in body:
            snap = body["snapshot"]
            snap_offset = int(snap["offset"])
            records = [decode_record(r) for r in snap["records"]]
            log.info("metadata log: loading the snapshot at offset %d (%d records); was at %d",
                     snap_offset, len(records), self.offset)
            self._unfinished = None
            delta, new_image = snapshot_delta(self.image, records, snap_offset)
            self.image = new_image
            self.next_offset = self.fetch_offset = snap_offset + 1
            self.snapshots_loaded += 1
            await self._emit([], delta, new_image)
            return len(records)
        entries = body.get("records", [])
        if not entries:
            self._mark_caught_up()
            return 0
        # records of a batch cut short by the controller wait here until the rest of it came
        # (``batch_end``): the image never shows part of one operation
        batch, delta = self._unfinished if self._unfinished is not None else ([], MetadataDelta(self.image))
        first_offset = self.fetch_offset
        for entry in entries:
            offset = int(entry["offset"])
            if offset < self.fetch_offset:
                continue  # already applied (a retried fetch)
            if offset != self.fetch_offset:
                raise FerryError(ErrorCode.CORRUPT_MESSAGE,
                                 f"metadata log gap: expected offset {self.fetch_offset}, got {offset}")
            record = decode_record(entry["record"])
            delta.replay(record, offset)
            batch.append((offset, record))
            self.fetch_offset = offset + 1
        if self.fetch_offset == first_offset:
            return 0
        if body.get("batch_end") is False:
            self._unfinished = (batch, delta)
            return self.fetch_offset - first_offset
        self._unfinished = None
        self.next_offset = self.fetch_offset
        new_image = delta.apply()
        self.image = new_image
        await self._emit(batch, delta, new_image)
        if self.next_offset >= self.high_watermark:
            self._mark_caught_up()
        return len(batch)

    def _mark_caught_up(self) -> None:
        self._caught_up.set()

    async def _emit(self, records: list[tuple[int, Record]], delta: Any, image: Any) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        if self.callback is None:
            return
        result = self.callback(records, delta, image)
        if asyncio.iscoroutine(result):
            await result


def snapshot_delta(old: Any, records: list[Record], snapshot_offset: int) -> tuple[Any, Any]:
    """A ``MetadataDelta`` from ``old`` to the image a snapshot describes, and that image.

    Entities of ``old`` missing from the snapshot are removed first, then the snapshot's records
    are replayed, so that ``delta.local_changes()`` tells a broker what it gained or lost.
    """
    from metadata_quorum.delta import MetadataDelta
    from metadata_quorum.image import EMPTY_IMAGE

    fresh = MetadataDelta(EMPTY_IMAGE).replay_all(records).apply()
    target = dataclasses.replace(fresh, offset=snapshot_offset, epoch=max(old.epoch, fresh.epoch))
    removals: list[Record] = []
    for topic_id in old.topics.by_id:
        if topic_id not in target.topics.by_id:
            removals.append(RemoveTopicRecord(topic_id=topic_id))
    for broker_id, reg in old.cluster.brokers.items():
        if broker_id not in target.cluster.brokers:
            removals.append(UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=reg.broker_epoch))
    for stream_id, stream in old.streams.streams.items():
        new_stream = target.streams.streams.get(stream_id)
        if new_stream is None:
            removals.append(RemoveStreamRecord(stream_id=stream_id))
            continue
        keep = {o.object_key for o in new_stream.objects}
        removals += [RemoveStreamObjectRecord(object_key=o.object_key, stream_id=stream_id)
                     for o in stream.objects if o.object_key not in keep]
    for key in old.kv:
        if key not in target.kv:
            removals.append(KVRecord(key=key, value=None))
    for (rtype, rname), values in old.configs.configs.items():
        new_values = target.configs.get(rtype, rname)
        removals += [ConfigRecord(resource_type=rtype, resource_name=rname, key=k, value=None)
                     for k in values if k not in new_values]
    removals += [RemoveAccessControlEntryRecord(acl_id=i) for i in old.acls.by_id if i not in target.acls.by_id]
    delta = MetadataDelta(old)
    try:
        for record in removals + list(records):
            delta.replay(record, snapshot_offset)
        image = dataclasses.replace(delta.apply(), offset=snapshot_offset, epoch=target.epoch)
        if image.same_content(target):
            return delta, image
    except Exception:  # a replay rule that does not compose with removals: use the snapshot as is
        log.debug("snapshot diff failed; replacing the image", exc_info=True)
    return MetadataDelta(target), target
