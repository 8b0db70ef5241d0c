"""Admin helpers over the controller API (writes and reads) and the brokers' admin endpoints.

The tools reach the controllers either directly (`--bootstrap-controller`) or through a broker
(`--bootstrap-server`), whose `/v1/metadata` names the controllers. Replies of the controller's read
operations are normalised here into small dataclasses, so that the tools do not depend on their
exact JSON layout.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

import aiohttp

from metadata_quorum.kernel.auth_middleware import auth_headers
from metadata_quorum.kernel.controller_api import ControllerApi
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.replication import ElectLeadersRequest, ListPartitionReassignmentsRequest, Reassignment
from metadata_quorum.kernel.messages.topics import DescribeTopicsRequest, NewTopic, TopicDescription
from tools.credentials import resolve_token
from tools.client import (
    RETRIABLE_CONNECTION_ERRORS,
    ClusterMetadata,
    TopicPartition,
    normalize_url,
    parse_bootstrap,
    raise_for_error,
)

# A controller list of which no address accepts connections (a typo, a stopped quorum) fails after
# this long instead of after the whole timeout; once one answered, outages are retried as usual.
UNREACHABLE_CONTROLLERS_TIMEOUT_MS = 1_000
DESCRIBE_PAGE_PARTITIONS = 2_000  # partitions per describe_topics answer (Kafka's default page, KIP-966)
REASSIGN_REQUEST_PARTITIONS = 2_000  # partitions per alter_partition_reassignments request


class ControllerConnection(Protocol):
    """What Admin needs of a controller connection (``ControllerClient``, or a test's own)."""

    async def write(self, op: str, args: dict[str, Any]) -> Any: ...
    async def read(self, op: str, args: dict[str, Any], *, leader: bool = True) -> Any: ...


class _AnyControllerReads:
    """Admin's reads from any controller (``leader=False``): the facade's transport for pollers."""

    def __init__(self, admin: "Admin") -> None:
        self.admin = admin

    async def write(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Mapping[str, Any]:
        reply: Mapping[str, Any] = await self.admin.write(op, args, timeout_ms)
        return reply

    async def read(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Mapping[str, Any]:
        reply: Mapping[str, Any] = await self.admin.read(op, args, leader=False)
        return reply


@dataclass
class BrokerInfo:
    broker_id: int
    endpoints: list[str]
    log_dirs: dict[str, str]  # path -> dir id
    fenced: bool = False
    rack: str | None = None

    @property
    def url(self) -> str:
        return normalize_url(self.endpoints[0]) if self.endpoints else ""


@dataclass
class PartitionState:
    topic: str
    partition: int
    replicas: list[int]
    isr: list[int] = field(default_factory=list)
    leader: int = -1
    leader_epoch: int = 0
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def _reply(answer: Any) -> Any:
    """Controller answers are `{"reply": ..., "offset": ...}`; clients may already unwrap them."""
    if isinstance(answer, dict) and "reply" in answer and set(answer) <= {"reply", "offset"}:
        return answer["reply"]
    return answer


def parse_brokers(reply: Any) -> dict[int, BrokerInfo]:
    brokers = reply.get("brokers", []) if isinstance(reply, dict) else reply
    if isinstance(brokers, dict):
        brokers = [dict(v, broker_id=int(k)) for k, v in brokers.items()]
    out: dict[int, BrokerInfo] = {}
    for b in brokers:
        bid = int(b.get("broker_id", b.get("id", -1)))
        dirs: dict[str, str] = {}
        for d in b.get("log_dirs", []):
            if isinstance(d, dict):
                dirs[str(d.get("path"))] = str(d.get("dir_id", ""))
            else:
                dirs[str(d)] = ""
        out[bid] = BrokerInfo(bid, [str(e) for e in b.get("endpoints", [])], dirs,
                              bool(b.get("fenced", False)), b.get("rack"))
    return out


def parse_topics(reply: Any) -> dict[str, list[PartitionState] | FerryError]:
    """`describe_topics` reply -> topic name -> its partitions (sorted) or the error for that topic."""
    topics = reply.get("topics", []) if isinstance(reply, dict) else reply
    if isinstance(topics, dict):
        topics = [dict(v, name=k) for k, v in topics.items()]
    out: dict[str, list[PartitionState] | FerryError] = {}
    for t in topics:
        name = str(t.get("name"))
        if t.get("error") and t.get("error") != "NONE":
            out[name] = FerryError(ErrorCode.from_name(str(t["error"])), str(t.get("message", "")))
            continue
        parts = t.get("partitions", [])
        if isinstance(parts, dict):
            parts = [dict(v, partition=int(k)) for k, v in parts.items()]
        states = [
            PartitionState(
                name, int(p.get("partition", p.get("partition_index", -1))), list(p.get("replicas", [])),
                list(p.get("isr", [])), int(p.get("leader", -1)), int(p.get("leader_epoch", 0)),
                list(p.get("adding_replicas", []) or []), list(p.get("removing_replicas", []) or []),
                list(p.get("directories", []) or []),
            )
            for p in parts
        ]
        earlier = out.get(name)  # a paged description names a topic cut between pages in both
        if isinstance(earlier, list):
            states = earlier + states
        out[name] = sorted(states, key=lambda s: s.partition)
    return out


class Admin:
    """Admin operations for the tools, the tests, the demo and the benchmarks."""

    def __init__(
        self,
        bootstrap_servers: str | list[str] | None = None,
        bootstrap_controllers: str | list[str] | None = None,
        timeout_ms: int = 30_000,
        controller: ControllerConnection | None = None,
        token: str | None = None,
    ) -> None:
        self._token = resolve_token(token)  # a secure cluster's admin token (tools/credentials.py)
        self.bootstrap_servers = parse_bootstrap(bootstrap_servers) if bootstrap_servers else []
        self.bootstrap_controllers = parse_bootstrap(bootstrap_controllers) if bootstrap_controllers else []
        self.timeout_ms = timeout_ms
        self._controller = controller
        self._session: aiohttp.ClientSession | None = None
        #: the controller operations, typed, over :meth:`write` and :meth:`read`
        self.api = ControllerApi(self)
        #: the same, reading from any controller (it may lag slightly, and takes nothing from the leader)
        self.any_controller_api = ControllerApi(_AnyControllerReads(self))

    async def start(self) -> "Admin":
        self._session = aiohttp.ClientSession(headers=auth_headers(self._token))
        if self._controller is None:
            try:
                controllers = self.bootstrap_controllers or await self.controllers_from_brokers()
            except BaseException:  # no broker reachable: do not leave the session open
                await self._session.close()
                self._session = None
                raise
            from metadata_quorum.client import ControllerClient

            self.bootstrap_controllers = list(controllers)  # the ones in use, also when brokers named them
            self._controller = ControllerClient(controllers, timeout_ms=min(self.timeout_ms, 15_000),
                                                unreachable_timeout_ms=UNREACHABLE_CONTROLLERS_TIMEOUT_MS,
                                                token=self._token)
        return self

    async def __aenter__(self) -> "Admin":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        closer = getattr(self._controller, "close", None)
        if closer is not None:
            result = closer()
            if asyncio.iscoroutine(result):
                await result
        if self._session is not None:
            await self._session.close()

    async def controllers_from_brokers(self) -> list[str]:
        """The controllers a broker names in its `/v1/metadata` (Kafka's tools need only brokers)."""
        meta = await self.broker_metadata()
        if not meta.controllers:
            raise FerryError(ErrorCode.INVALID_REQUEST,
                             "the brokers did not name the controllers; use --bootstrap-controller HOST:PORT")
        return meta.controllers

    # -- raw access
    async def write(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Any:
        """One write operation by name (the transport of :attr:`api`; ``timeout_ms`` is the
        connection's own)."""
        assert self._controller is not None, "Admin not started"
        return _reply(await self._controller.write(op, dict(args)))

    async def read(self, op: str, args: Mapping[str, Any] | None = None, timeout_ms: int | None = None,
                   leader: bool = True) -> Any:
        assert self._controller is not None, "Admin not started"
        return _reply(await self._controller.read(op, dict(args or {}), leader=leader))

    async def broker_metadata(self, urls: list[str] | None = None) -> ClusterMetadata:
        last: BaseException | None = None
        for url in urls or self.bootstrap_servers or list((await self.brokers()).values()):
            try:
                return ClusterMetadata.from_json(await self.http_get(f"{normalize_url(str(url))}/v1/metadata"))
            except (FerryError, *RETRIABLE_CONNECTION_ERRORS) as exc:
                last = exc
        tried = ", ".join(str(u) for u in (urls or self.bootstrap_servers))
        raise FerryError(ErrorCode.LEADER_NOT_AVAILABLE, f"no broker answered at {tried}: {last}")

    async def http_get(self, url: str, params: dict[str, str] | None = None, timeout_ms: int | None = None) -> Any:
        assert self._session is not None, "Admin not started"
        total_s = (timeout_ms if timeout_ms is not None else self.timeout_ms) / 1000
        async with self._session.get(url, params=params, timeout=aiohttp.ClientTimeout(total=total_s)) as r:
            await raise_for_error(r)
            return await r.json()

    async def http_get_text(self, url: str, timeout_ms: int | None = None) -> str:
        """A text endpoint (Prometheus' `/metrics`), with the admin token when there is one."""
        assert self._session is not None, "Admin not started"
        total_s = (timeout_ms if timeout_ms is not None else self.timeout_ms) / 1000
        async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=total_s)) as r:
            await raise_for_error(r)
            return await r.text()

    async def http_post(self, url: str, body: Any) -> Any:
        assert self._session is not None, "Admin not started"
        async with self._session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=self.timeout_ms / 1000)) as r:
            await raise_for_error(r)
            return await r.json()

    # -- cluster and topics
    async def describe_cluster(self) -> dict[int, BrokerInfo]:
        return parse_brokers(await self.api.describe_cluster({}))

    async def brokers(self) -> dict[int, str]:
        return {bid: b.url for bid, b in (await self.describe_cluster()).items()}

    async def describe_topics(self, names: list[str] | None = None,
                              leader: bool = True) -> dict[str, list[PartitionState] | FerryError]:
        """Topics as the active controller has them, or (``leader=False``) any controller, which
        may lag slightly but takes nothing from the leader (pollers of large topics use it).

        Asked in pages of `DESCRIBE_PAGE_PARTITIONS` partitions: a controller then never builds
        nor sends one answer of 100,000 partitions, and no single request outlasts the timeout.
        Pages may come from images a few records apart; each partition is as one of them had it."""
        api = self.api if leader else self.any_controller_api
        args: DescribeTopicsRequest = {"names": names} if names is not None else {}
        args["partition_limit"] = DESCRIBE_PAGE_PARTITIONS
        described: list[TopicDescription] = []
        while True:
            reply = await api.describe_topics(args)
            described.extend(reply["topics"])
            cursor = reply.get("next_cursor")
            if cursor is None:
                break
            args = {**args, "cursor": cursor}
        result = parse_topics({"topics": described})
        for name in names or []:
            result.setdefault(name, FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} not found."))
        return result

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int = 1,
                           assignments: dict[int, list[int]] | None = None, storage: str = "s3",
                           configs: dict[str, str] | None = None) -> str:
        topic: NewTopic = {"name": name, "num_partitions": num_partitions,
                           "replication_factor": replication_factor, "storage": storage,
                           "configs": configs or {}}
        if assignments is not None:
            topic["assignments"] = {str(p): list(r) for p, r in assignments.items()}
        reply = await self.api.create_topics({"topics": [topic], "validate_only": False})
        (result,) = reply["topics"]
        if result.get("error") and result["error"] != "NONE":
            raise FerryError(ErrorCode.from_name(result["error"]), str(result.get("message", "")))
        return str(result.get("topic_id", ""))

    async def alter_partition_reassignments(self, reassignments: list[Reassignment]) -> dict[TopicPartition, FerryError | None]:
        """Kafka's AlterPartitionReassignments, sent `REASSIGN_REQUEST_PARTITIONS` at a time: each
        partition is answered on its own, so pieces lose nothing, and a request of 30,000 on a busy
        controller would outlast the client's timeout (then be sent again whole)."""
        out: dict[TopicPartition, FerryError | None] = {}
        for start in range(0, len(reassignments), REASSIGN_REQUEST_PARTITIONS):
            piece = reassignments[start:start + REASSIGN_REQUEST_PARTITIONS]
            reply = await self.api.alter_partition_reassignments({"reassignments": piece})
            for r in reply.get("responses", []):
                tp = TopicPartition(str(r["topic"]), int(r["partition"]))
                err = r.get("error")
                out[tp] = FerryError(ErrorCode.from_name(err), str(r.get("message", ""))) if err and err != "NONE" \
                    else None
        return out

    async def list_partition_reassignments(self, partitions: list[TopicPartition] | None = None) -> dict[TopicPartition, PartitionState]:
        args: ListPartitionReassignmentsRequest = {}
        if partitions is not None:
            args["partitions"] = [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]
        reply = await self.api.list_partition_reassignments(args)
        items = reply.get("reassignments", reply.get("partitions", [])) if isinstance(reply, dict) else reply
        out: dict[TopicPartition, PartitionState] = {}
        for r in items or []:
            st = PartitionState(str(r["topic"]), int(r["partition"]), list(r.get("replicas", [])),
                                adding_replicas=list(r.get("adding_replicas", []) or []),
                                removing_replicas=list(r.get("removing_replicas", []) or []))
            out[st.tp] = st
        return out

    async def elect_leaders(self, election_type: str, partitions: list[TopicPartition] | None) -> dict[TopicPartition, FerryError | None]:
        args: ElectLeadersRequest = {"election_type": election_type, "partitions": None if partitions is None else
                                     [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]}
        reply = await self.api.elect_leaders(args)
        out: dict[TopicPartition, FerryError | None] = {}
        for r in reply.get("results", []):
            tp = TopicPartition(str(r["topic"]), int(r["partition"]))
            err = r.get("error")
            out[tp] = FerryError(ErrorCode.from_name(err), str(r.get("message", ""))) if err and err != "NONE" else None
        return out

    async def move_partition(self, tp: TopicPartition, replicas: list[int]) -> None:
        """Start one reassignment; raises the partition's error, if any."""
        result = await self.alter_partition_reassignments(
            [{"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas)}])
        err = result.get(tp)
        if err is not None:
            raise err

    async def wait_for_leader(self, tp: TopicPartition, leader: int | None = None, timeout_s: float = 30.0) -> PartitionState:
        """Poll the controller until `tp` has a leader (the given one, when set)."""
        deadline = time.monotonic() + timeout_s
        while True:
            topics = await self.describe_topics([tp.topic])
            parts = topics.get(tp.topic)
            if isinstance(parts, list):
                for p in parts:
                    if p.partition == tp.partition and p.leader >= 0 and (leader is None or p.leader == leader):
                        return p
            if time.monotonic() > deadline:
                raise FerryError(ErrorCode.REQUEST_TIMED_OUT, f"{tp} has no leader{'' if leader is None else f' {leader}'} after {timeout_s}s")
            await asyncio.sleep(0.05)

    # -- brokers' own endpoints
    async def describe_log_dirs(self, broker_ids: list[int] | None = None,
                                topics: list[str] | None = None) -> dict[int, Any]:
        urls = await self.brokers()
        out: dict[int, Any] = {}
        for bid in sorted(broker_ids if broker_ids is not None else urls):
            if bid not in urls:
                raise FerryError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"Unknown broker id {bid}")
            params = {"topics": ",".join(topics)} if topics else None
            out[bid] = await self.http_get(f"{urls[bid]}/v1/log-dirs", params)
        return out

    async def pre_upload(self, partitions_by_broker: dict[int, list[tuple[str, int]]],
                         timeout_ms: int = 3000) -> int:
        """Ask each broker to upload the buffered bytes of its partitions about to move, while they
        still serve (``POST /v1/pre-upload``, broker/pre_upload.py), all brokers at once; returns how
        many partitions were uploaded. Best effort: a broker that refuses or does not answer within
        ``timeout_ms`` leaves its partitions to the close, as without this."""
        assert self._session is not None, "Admin not started"
        session = self._session
        urls = await self.brokers()

        async def one(bid: int, parts: list[tuple[str, int]]) -> int:
            body = {"partitions": [{"topic": t, "partition": p} for t, p in parts]}
            try:
                async with session.post(f"{urls[bid]}/v1/pre-upload", json=body,
                                        timeout=aiohttp.ClientTimeout(total=timeout_ms / 1000)) as r:
                    await raise_for_error(r)
                    answer = await r.json()
            except (FerryError, *RETRIABLE_CONNECTION_ERRORS):
                return 0
            return sum(1 for e in answer.get("partitions", []) if e.get("error") is None)
        done = await asyncio.gather(*(one(b, ps) for b, ps in partitions_by_broker.items() if b in urls and ps))
        return sum(done)

    async def moves(self, broker_ids: list[int] | None = None, timeout_ms: int = 3000) -> dict[int, Any]:
        """Each broker's `/v1/moves` (six-step timelines), asked concurrently; a broker that does not
        answer within `timeout_ms` (dead, frozen) is skipped: the other side of a move reports it too."""
        urls = await self.brokers()
        ids = [b for b in sorted(broker_ids if broker_ids is not None else urls) if b in urls]

        async def one(bid: int) -> Any:
            try:
                return await self.http_get(f"{urls[bid]}/v1/moves", timeout_ms=timeout_ms)
            except (FerryError, *RETRIABLE_CONNECTION_ERRORS):
                return None
        answers = await asyncio.gather(*(one(b) for b in ids))
        return {b: a for b, a in zip(ids, answers, strict=True) if a is not None}
