"""Kafka's admin APIs on every broker, forwarded to the controller quorum (KRaft's forwarding).

CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs,
AlterPartitionReassignments and ElectLeaders become controller write operations;
DescribeConfigs and ListPartitionReassignments controller reads (on the active controller, so
a client sees its own change at once); DescribeCluster answers from this broker's metadata
image; DescribeLogDirs and AlterReplicaLogDirs are about this broker's own disks and never leave
it. Each handler translates a decoded request into the operation's JSON arguments and the
operation's reply into Kafka's response, with Kafka's per-item error codes: a bad topic fails
alone, and a quorum that does not answer fails every item with the code the client retries on
(see :mod:`broker.kafka.forwarding`). Nothing here touches a socket, so the tests drive the
handlers with a fake controller.
"""
from __future__ import annotations

import asyncio
import base64
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, Protocol, Sequence

from kafka.protocol.admin.cluster import (AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse,
                                          DescribeClusterRequest, DescribeClusterResponse, DescribeLogDirsRequest,
                                          DescribeLogDirsResponse)
from kafka.protocol.admin.configs import (AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest,
                                          DescribeConfigsResponse, IncrementalAlterConfigsRequest,
                                          IncrementalAlterConfigsResponse)
from kafka.protocol.admin.topics import (AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
                                         CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
                                         CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
                                         ElectLeadersRequest, ElectLeadersResponse, ListPartitionReassignmentsRequest,
                                         ListPartitionReassignmentsResponse)
from kafka.protocol.api_message import ApiMessage

from broker.kafka.authorization import OPEN, TOPIC, Authorization
from broker.kafka.auto_create import TopicDefaults
from broker.kafka.config_catalog import BrokerValue, ConfigEntry, broker_entries, group_entries, topic_entries
from broker.kafka.data_apis import ZERO_UUID, kafka_endpoint_of, kafka_error, topic_uuid
from broker.kafka.forwarding import ControllerCalls, ForwardingFailure, forward_timeout_ms, forwarding_failure
from broker.kafka.wire import Request
from broker.log_dirs_report import LogDirReport, TopicFilter
from metadata_quorum.acls import AclOperation
from metadata_quorum.kernel.controller_api import ControllerApi
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.configs import ConfigChanges, ConfigOp, ConfigResourceChange
from metadata_quorum.kernel.messages.replication import ElectLeadersRequest as ElectLeadersArgs
from metadata_quorum.kernel.messages.replication import ListPartitionReassignmentsRequest as ListPartitionReassignmentsArgs
from metadata_quorum.kernel.messages.replication import Reassignment
from metadata_quorum.kernel.messages.topics import CreatedTopic, DeletedTopic, GrownTopic, NewTopic, PartitionsIncrease
from metadata_quorum.image import MetadataImage
from metadata_quorum.ops.group_configs import KAFKA_DEFAULTS, check_group_name
from metadata_quorum.records import STORAGE_S3
from metadata_quorum.s3_replicas import replication_factor

TOPIC_RESOURCE = 2  # ConfigResource types on the wire
BROKER_RESOURCE = 4
GROUP_RESOURCE = 32
CONFIG_RESOURCES = {TOPIC_RESOURCE: "topic", BROKER_RESOURCE: "broker", GROUP_RESOURCE: "group"}
BROKER_ENDPOINTS = 1  # DescribeCluster's endpoint type
ENDPOINT_TYPES = {1: "BROKER", 2: "CONTROLLER"}  # Kafka's EndpointType
PREFERRED_ELECTION, UNCLEAN_ELECTION = 0, 1
CONFIG_OPS = {0: "set", 1: "delete", 2: "append", 3: "subtract"}  # IncrementalAlterConfigs' operations
MAX_MESSAGE_BYTES, BROKER_MAX_MESSAGE_BYTES = "max.message.bytes", "message.max.bytes"
# The first version of each API whose response carries THROTTLING_QUOTA_EXCEEDED (KIP-599)
QUOTA_ERROR_SINCE = {"CreateTopics": 6, "CreatePartitions": 3, "DeleteTopics": 5}


class AdminCore(Protocol):
    """What the admin handlers need of the broker besides the controller (``broker.request_core.RequestCore``)."""

    broker_id: int
    cluster_id: str

    @property
    def image(self) -> MetadataImage | None: ...

    def static_configs(self) -> Mapping[str, BrokerValue]: ...

    def log_dirs_report(self, wanted: TopicFilter) -> list[LogDirReport]: ...

    def alter_replica_log_dirs(self, moves: list[tuple[str, int, str]]) -> Awaitable[list[FerryError | None]]: ...


@dataclass(frozen=True)
class ItemError:
    error: ErrorCode
    message: str | None


TOPIC_DENIED = ItemError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
CLUSTER_DENIED = ItemError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")


def topic_id_text(value: uuid.UUID) -> str:
    """Kafka's Uuid as Ferry writes topic ids (base64 without padding)."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def reply_error(item: Mapping[str, Any]) -> ItemError | None:
    """The error of one item of a controller operation's batch reply (None: it succeeded)."""
    name = item.get("error")
    if not name or name == "NONE":
        return None
    return ItemError(ErrorCode.from_name(str(name)), item.get("message"))


def failure_of(exc: BaseException, quota_error_supported: bool = True) -> ForwardingFailure:
    """Why a whole forwarded call failed, as the Kafka error every item of the request gets."""
    failure = forwarding_failure(exc, quota_error_supported)
    if failure is not None:
        return failure
    code, message = kafka_error(exc)
    return ForwardingFailure(code, message or "", 0)


def _group(items: Sequence[tuple[str, Any]]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for topic, entry in items:
        out.setdefault(topic, []).append(entry)
    return out


class AdminApis:
    """Handlers of the admin APIs; each takes a decoded request and returns the response."""

    def __init__(self, core: AdminCore, controller: ControllerCalls,
                 topic_defaults: TopicDefaults = TopicDefaults(), auth: Authorization = OPEN) -> None:
        self.core = core
        self.auth = auth
        self.controller = controller
        self.api = ControllerApi(controller)  # every call with the request's own forwarding budget
        self.topic_defaults = topic_defaults  # num.partitions / default.replication.factor for -1


    # ------------------------------------------------------------------ CreateTopics
    async def create_topics(self, req: Request) -> ApiMessage:
        body: CreateTopicsRequest = req.body
        R = CreateTopicsResponse.CreatableTopicResult
        local: dict[int, ItemError] = {}
        items: list[NewTopic] = []
        # CREATE on the cluster, else on each topic
        denied = frozenset() if self.auth.allows_cluster(req, AclOperation.CREATE) else \
            self.auth.denied(req, AclOperation.CREATE, TOPIC, (t.name for t in body.topics))
        for i, t in enumerate(body.topics):
            if t.name in denied:
                local[i] = TOPIC_DENIED
                continue
            if t.assignments and (t.num_partitions != -1 or t.replication_factor != -1):
                local[i] = ItemError(ErrorCode.INVALID_REQUEST, "Both numPartitions or replicationFactor and "
                                     "replicasAssignments were set. Both cannot be used at the same time.")
                continue
            over = self._over_batch_limit({c.name: c.value for c in t.configs})
            if over is not None:
                local[i] = over
                continue
            item: NewTopic = {"name": t.name, "num_partitions": t.num_partitions,
                          "replication_factor": t.replication_factor,
                          "default_num_partitions": self.topic_defaults.num_partitions,
                          "default_replication_factor": self.topic_defaults.replication_factor,
                          "configs": {c.name: c.value for c in t.configs}}
            if t.assignments:
                item["assignments"] = {str(a.partition_index): list(a.broker_ids) for a in t.assignments}
            items.append(item)
        replies: list[CreatedTopic] = []
        throttle_ms = 0
        failure: ForwardingFailure | None = None
        if items:
            try:
                reply = await self.api.create_topics({"topics": items, "validate_only": bool(body.validate_only)},
                                                     forward_timeout_ms(body.timeout_ms))
                replies = list(reply["topics"])
            except Exception as exc:  # noqa: BLE001 - answered per topic, as Kafka does
                failure = failure_of(exc, req.api_version >= QUOTA_ERROR_SINCE["CreateTopics"])
                throttle_ms = failure.throttle_time_ms
        forwarded = iter(replies)
        results = []
        for i, t in enumerate(body.topics):
            error = local.get(i)
            answer: Mapping[str, Any] = {}
            if error is None and failure is not None:
                error = ItemError(failure.error, failure.message)
            elif error is None:
                answer = next(forwarded, {"error": "UNKNOWN_SERVER_ERROR", "message": "no answer for this topic"})
                error = reply_error(answer)
            if error is not None:
                results.append(R(name=t.name, topic_id=ZERO_UUID, error_code=error.error.code,
                                 error_message=error.message, topic_config_error_code=0, num_partitions=-1,
                                 replication_factor=-1, configs=[]))
                continue
            configs = [R.CreatableTopicConfigs(name=e.name, value=e.value, read_only=e.read_only,
                                               config_source=int(e.source), is_sensitive=e.is_sensitive)
                       for e in topic_entries({c.name: c.value for c in t.configs if c.value is not None},
                                              broker=self.core.static_configs())]
            # the new topic's configs only for a principal that may DESCRIBE_CONFIGS it, as Kafka
            config_error = 0 if self.auth.allows(req, AclOperation.DESCRIBE_CONFIGS, TOPIC, t.name) \
                else TOPIC_DENIED.error.code
            results.append(R(name=t.name, topic_id=topic_uuid(answer["topic_id"]), error_code=0, error_message=None,
                             topic_config_error_code=config_error, num_partitions=int(answer["num_partitions"]),
                             replication_factor=int(answer["replication_factor"]),
                             configs=configs if not config_error else []))
        return CreateTopicsResponse(throttle_time_ms=throttle_ms, topics=results)

    # ------------------------------------------------------------------ DeleteTopics
    async def delete_topics(self, req: Request) -> ApiMessage:
        body: DeleteTopicsRequest = req.body
        R = DeleteTopicsResponse.DeletableTopicResult
        wanted: list[tuple[str | None, uuid.UUID | None]] = []
        if req.api_version >= 6:
            for t in body.topics:
                by_id = t.name is None and t.topic_id is not None and t.topic_id != ZERO_UUID
                wanted.append((None, t.topic_id) if by_id else (t.name, None))
        else:
            wanted = [(name, None) for name in body.topic_names]
        image = self.core.image

        def name_of(tid: uuid.UUID) -> str | None:
            topic = image.topics.by_id.get(topic_id_text(tid)) if image is not None else None
            return topic.name if topic is not None else None
        denied = self.auth.denied(req, AclOperation.DELETE, TOPIC, [n if tid is None else name_of(tid)
                                                                    for n, tid in wanted])
        names = [n for n, tid in wanted if tid is None and n is not None and n not in denied]
        ids = [topic_id_text(tid) for _n, tid in wanted if tid is not None and name_of(tid) not in denied]
        answers: list[DeletedTopic] = []
        failure: ForwardingFailure | None = None
        if names or ids:
            try:
                reply = await self.api.delete_topics({"names": names, "topic_ids": ids},
                                                     forward_timeout_ms(body.timeout_ms))
                answers = list(reply["topics"])  # the names' answers, then the ids'
            except Exception as exc:  # noqa: BLE001 - answered per topic
                failure = failure_of(exc, req.api_version >= QUOTA_ERROR_SINCE["DeleteTopics"])
        by_name, by_id = iter(answers[:len(names)]), iter(answers[len(names):])
        results = []
        for name, tid in wanted:
            if name is None and tid is None:
                results.append(R(name=None if req.api_version >= 6 else "", topic_id=ZERO_UUID,
                                 error_code=ErrorCode.INVALID_REQUEST.code,
                                 error_message="a topic needs a name or a topic id"))
                continue
            if (name if tid is None else name_of(tid)) in denied:
                results.append(R(name=name if name is not None or req.api_version >= 6 else "",
                                 topic_id=tid or ZERO_UUID, error_code=TOPIC_DENIED.error.code,
                                 error_message=TOPIC_DENIED.message))
                continue
            answer: Mapping[str, Any] = {} if failure is not None else \
                next(by_id if tid is not None else by_name, {})
            error = ItemError(failure.error, failure.message) if failure is not None else \
                reply_error(answer) if answer else ItemError(ErrorCode.UNKNOWN_SERVER_ERROR, "no answer for this topic")
            found_id = answer.get("topic_id")
            resp_name = answer.get("name") or name
            results.append(R(name=resp_name if resp_name is not None or req.api_version >= 6 else "",
                             topic_id=topic_uuid(found_id) if error is None and isinstance(found_id, str)
                             else (tid or ZERO_UUID),
                             error_code=error.error.code if error else 0,
                             error_message=error.message if error else None))
        return DeleteTopicsResponse(throttle_time_ms=failure.throttle_time_ms if failure else 0, responses=results)

    # ------------------------------------------------------------------ CreatePartitions
    async def create_partitions(self, req: Request) -> ApiMessage:
        body: CreatePartitionsRequest = req.body
        R = CreatePartitionsResponse.CreatePartitionsTopicResult
        denied = self.auth.denied(req, AclOperation.ALTER, TOPIC, (t.name for t in body.topics))
        allowed = [t for t in body.topics if t.name not in denied]
        items: list[PartitionsIncrease] = [
            {"name": t.name, "count": t.count,
             "assignments": None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]}
            for t in allowed]
        answers: list[GrownTopic] = []
        failure: ForwardingFailure | None = None
        if items:
            try:
                reply = await self.api.create_partitions({"topics": items, "validate_only": bool(body.validate_only)},
                                                         forward_timeout_ms(body.timeout_ms))
                answers = list(reply["topics"])
            except Exception as exc:  # noqa: BLE001 - answered per topic
                failure = failure_of(exc, req.api_version >= QUOTA_ERROR_SINCE["CreatePartitions"])
        results = []
        by_name = dict(zip((id(t) for t in allowed), answers, strict=False))  # none when the write failed
        for t in body.topics:
            answer = by_name.get(id(t))
            error = TOPIC_DENIED if t.name in denied else ItemError(failure.error, failure.message) \
                if failure is not None else reply_error(answer) if answer is not None else \
                ItemError(ErrorCode.UNKNOWN_SERVER_ERROR, "no answer")
            results.append(R(name=t.name, error_code=error.error.code if error else 0,
                             error_message=error.message if error else None))
        return CreatePartitionsResponse(throttle_time_ms=failure.throttle_time_ms if failure else 0, results=results)

    # ------------------------------------------------------------------ DescribeConfigs
    async def describe_configs(self, req: Request) -> ApiMessage:
        body: DescribeConfigsRequest = req.body
        synonyms = bool(body.include_synonyms) if req.api_version >= 1 else False
        docs = bool(body.include_documentation) if req.api_version >= 3 else False
        results = await asyncio.gather(*(self._describe_resource(r.resource_type, r.resource_name,
                                                                 r.configuration_keys, synonyms, docs,
                                                                 self._config_refusal(req, r.resource_type,
                                                                                      r.resource_name, False))
                                         for r in body.resources))
        return DescribeConfigsResponse(throttle_time_ms=0, results=list(results))

    def _config_refusal(self, req: Request, rtype: int, name: str, alter: bool) -> ItemError | None:
        """DESCRIBE_CONFIGS (or ALTER_CONFIGS) on the topic, or on the cluster for a broker."""
        op = AclOperation.ALTER_CONFIGS if alter else AclOperation.DESCRIBE_CONFIGS
        if rtype == TOPIC_RESOURCE and not self.auth.allows(req, op, TOPIC, name):
            return TOPIC_DENIED
        if rtype == BROKER_RESOURCE and not self.auth.allows_cluster(req, op):
            return CLUSTER_DENIED
        return None

    async def _describe_resource(self, rtype: int, name: str, keys: list[str] | None, synonyms: bool,
                                 docs: bool, refused: ItemError | None = None) -> Any:
        R = DescribeConfigsResponse.DescribeConfigsResult
        if refused is not None:
            return R(error_code=refused.error.code, error_message=refused.message, resource_type=rtype,
                     resource_name=name, configs=[])
        try:
            entries = await self._config_entries(rtype, name, keys)
        except Exception as exc:  # noqa: BLE001 - answered per resource
            failure = failure_of(exc)
            return R(error_code=failure.error.code, error_message=failure.message, resource_type=rtype,
                     resource_name=name, configs=[])
        C = R.DescribeConfigsResourceResult
        configs = [C(name=e.name, value=e.value, read_only=e.read_only, config_source=int(e.source),
                     is_default=e.is_default, is_sensitive=e.is_sensitive, config_type=int(e.type),
                     documentation=e.documentation if docs else None,
                     synonyms=[C.DescribeConfigsSynonym(name=s.name, value=s.value, source=int(s.source))
                               for s in e.synonyms] if synonyms else [])
                   for e in entries]
        return R(error_code=0, error_message=None, resource_type=rtype, resource_name=name, configs=configs)

    async def _config_entries(self, rtype: int, name: str, keys: list[str] | None) -> list[ConfigEntry]:
        if rtype == TOPIC_RESOURCE:
            reply = await self.api.describe_configs({"resources": [{"type": "topic", "name": name}]},
                                                    forward_timeout_ms(None))
            return topic_entries(reply["resources"][0]["configs"], keys, broker=self.core.static_configs())
        if rtype == GROUP_RESOURCE:
            check_group_name(name)
            reply = await self.api.describe_configs({"resources": [{"type": "group", "name": name}]},
                                                    forward_timeout_ms(None))
            return group_entries(reply["resources"][0]["configs"], KAFKA_DEFAULTS, keys)
        if rtype != BROKER_RESOURCE:
            raise FerryError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}: this broker describes "
                                                        "topic (2), broker (4) and group (32) configs")
        own = str(self.core.broker_id)
        if name not in ("", own):
            raise FerryError(ErrorCode.INVALID_REQUEST,
                             f"Unexpected broker id, expected {own} or empty string, but received {name}")
        reply = await self.api.describe_configs({"resources": [{"type": "broker", "name": ""},
                                                               {"type": "broker", "name": own}]},
                                                forward_timeout_ms(None))
        defaults, mine = reply["resources"][0]["configs"], reply["resources"][1]["configs"]
        if name == "":
            return broker_entries(self.core.broker_id, {}, {}, defaults, keys)
        return broker_entries(self.core.broker_id, self.core.static_configs(), mine, defaults, keys)

    # ------------------------------------------------------------------ AlterConfigs / IncrementalAlterConfigs
    async def alter_configs(self, req: Request) -> ApiMessage:
        body: AlterConfigsRequest = req.body
        R = AlterConfigsResponse.AlterConfigsResourceResponse
        results = []
        for r in body.resources:
            nulls = [c.name for c in r.configs if c.value is None]
            over = self._config_refusal(req, r.resource_type, r.resource_name, True) or (
                self._over_batch_limit({c.name: c.value for c in r.configs})
                if r.resource_type == TOPIC_RESOURCE else None)
            over = over or self._read_only(r.resource_type, [c.name for c in r.configs])
            error = ItemError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}") \
                if nulls else over if over is not None else await self._alter_resource(r.resource_type, r.resource_name, {
                    "configs": {c.name: c.value for c in r.configs}, "replace": True}, bool(body.validate_only))
            results.append(R(error_code=error.error.code if error else 0, error_message=error.message if error else None,
                             resource_type=r.resource_type, resource_name=r.resource_name))
        return AlterConfigsResponse(throttle_time_ms=0, responses=results)

    async def incremental_alter_configs(self, req: Request) -> ApiMessage:
        body: IncrementalAlterConfigsRequest = req.body
        R = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
        results = []
        for r in body.resources:
            keys = [c.name for c in r.configs]
            error: ItemError | None = self._config_refusal(req, r.resource_type, r.resource_name, True)
            if error is not None:
                pass
            elif len(set(keys)) != len(keys):
                error = ItemError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
            elif any(c.config_operation not in CONFIG_OPS for c in r.configs):
                bad = next(c for c in r.configs if c.config_operation not in CONFIG_OPS)
                error = ItemError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {bad.config_operation} "
                                                             f"for {bad.name}")
            elif r.resource_type == TOPIC_RESOURCE and (over := self._over_batch_limit(
                    {c.name: c.value for c in r.configs if CONFIG_OPS[c.config_operation] == "set"})) is not None:
                error = over
            elif (read_only := self._read_only(r.resource_type, [c.name for c in r.configs
                                                                 if CONFIG_OPS[c.config_operation] != "delete"])):
                error = read_only
            else:
                ops: list[ConfigOp] = [{"op": CONFIG_OPS[c.config_operation], "key": c.name, "value": c.value}
                                       for c in r.configs]
                error = await self._alter_resource(r.resource_type, r.resource_name, {"ops": ops},
                                                   bool(body.validate_only))
            results.append(R(error_code=error.error.code if error else 0, error_message=error.message if error else None,
                             resource_type=r.resource_type, resource_name=r.resource_name))
        return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)

    def _read_only(self, rtype: int, keys: Sequence[str]) -> ItemError | None:
        """The broker configs this broker reports are applied at start-up (broker_configs.py): a
        change to one would be stored and never applied, so it is refused as Kafka refuses a
        non-dynamic broker config (ConfigAdminManager: INVALID_REQUEST with DynamicBrokerConfig's
        message), and nothing changes. Kafka's dynamic broker configs (the replication throttles,
        ``replica.alter.log.dirs.io.max.bytes.per.second``, …) are not among them and are stored."""
        if rtype != BROKER_RESOURCE:
            return None
        static = self.core.static_configs()
        fixed = sorted({k for k in keys if k in static})
        if not fixed:
            return None
        return ItemError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: [{', '.join(fixed)}]")

    def _over_batch_limit(self, configs: Mapping[str, str | None]) -> ItemError | None:
        """A topic's ``max.message.bytes`` may not exceed the broker's ``message.max.bytes``: the
        broker (and its storage's append) refuse a larger batch whatever the topic says, and the
        value reported must be the one enforced."""
        value = configs.get(MAX_MESSAGE_BYTES)
        limit = self.core.static_configs().get(BROKER_MAX_MESSAGE_BYTES)
        if value is None or limit is None:
            return None
        try:
            too_large = int(value.strip()) > int(limit.value)
        except ValueError:
            return None  # not a number: the controller refuses it with Kafka's wording
        if not too_large:
            return None
        return ItemError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {MAX_MESSAGE_BYTES}: "
                                                   f"Value must be no more than {limit.value} (the brokers' "
                                                   f"{BROKER_MAX_MESSAGE_BYTES}, the largest batch they accept)")

    async def _alter_resource(self, rtype: int, name: str, change: ConfigChanges,
                              validate_only: bool) -> ItemError | None:
        if rtype not in CONFIG_RESOURCES:
            return ItemError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}: this broker alters "
                                                        "topic (2), broker (4) and group (32) configs")
        resource: ConfigResourceChange = {"type": CONFIG_RESOURCES[rtype], "name": name, **change}
        try:
            await self.api.alter_configs({"resources": [resource], "validate_only": validate_only},
                                         forward_timeout_ms(None))
        except Exception as exc:  # noqa: BLE001 - answered per resource
            failure = failure_of(exc)
            return ItemError(failure.error, failure.message)
        return None

    # ------------------------------------------------------------------ DescribeCluster
    async def describe_cluster(self, req: Request) -> ApiMessage:
        body: DescribeClusterRequest = req.body
        B = DescribeClusterResponse.DescribeClusterBroker
        endpoint_type = body.endpoint_type if req.api_version >= 1 else BROKER_ENDPOINTS
        ops = self.auth.cluster_operations(req) if body.include_cluster_authorized_operations else None
        if endpoint_type != BROKER_ENDPOINTS:
            # as Kafka 4.4's brokers (AuthHelper.computeDescribeClusterResponse): the controllers'
            # endpoints are asked of a controller, any other type is unknown
            known = ENDPOINT_TYPES.get(endpoint_type)
            error, message = (ErrorCode.MISMATCHED_ENDPOINT_TYPE, "The request was sent to an endpoint of type "
                              f"BROKER, but we wanted an endpoint of type {known}") if known is not None else \
                (ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, f"Unsupported endpoint type {endpoint_type}")
            return DescribeClusterResponse(
                throttle_time_ms=0, error_code=error.code, error_message=message,
                endpoint_type=endpoint_type, cluster_id=self.core.cluster_id, controller_id=-1, brokers=[],
                authorized_operations=None)
        include_fenced = bool(body.include_fenced_brokers) if req.api_version >= 2 else False
        brokers = []
        image = self.core.image
        if image is not None:
            for bid, reg in sorted(image.cluster.brokers.items()):
                hp = kafka_endpoint_of(reg.endpoints)
                if hp is None or (reg.fenced and not include_fenced):
                    continue
                brokers.append(B(broker_id=bid, host=hp[0], port=hp[1], rack=reg.rack, is_fenced=reg.fenced))
        # KRaft names a live broker as the controller: admin requests sent there are forwarded
        return DescribeClusterResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                       endpoint_type=BROKER_ENDPOINTS, cluster_id=self.core.cluster_id,
                                       controller_id=self.core.broker_id, brokers=brokers,
                                       authorized_operations=ops)

    # ------------------------------------------------------------------ reassignments
    async def alter_partition_reassignments(self, req: Request) -> ApiMessage:
        body: AlterPartitionReassignmentsRequest = req.body
        T = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
        P = T.ReassignablePartitionResponse
        allow_rf_change = bool(body.allow_replication_factor_change) if req.api_version >= 1 else True
        local: dict[tuple[str, int], ItemError] = {}
        items: list[Reassignment] = []
        top = ItemError(ErrorCode.NONE, None) if self.auth.allows_cluster(req, AclOperation.ALTER) else CLUSTER_DENIED
        for t in (body.topics if top is not CLUSTER_DENIED else []):
            for p in t.partitions:
                refused = None if allow_rf_change else self._rf_change(t.name, p.partition_index, p.replicas)
                if refused is not None:
                    local[(t.name, p.partition_index)] = refused
                else:
                    # Kafka's list is the replica set: an s3 partition's assigned brokers (s3_replicas.py)
                    items.append({"topic": t.name, "partition": p.partition_index, "replica_set": True,
                                  "replicas": None if p.replicas is None else list(p.replicas)})
        answers: dict[tuple[str, int], ItemError | None] = {}
        if items:
            try:
                reply = await self.api.alter_partition_reassignments({"reassignments": items},
                                                                     forward_timeout_ms(body.timeout_ms))
                answers = {(str(a["topic"]), int(a["partition"])): reply_error(a) for a in reply["responses"]}
            except Exception as exc:  # noqa: BLE001 - the whole request failed: a top-level error
                failure = failure_of(exc)
                top = ItemError(failure.error, failure.message)
        entries = []
        for t in body.topics:
            for p in t.partitions:
                key = (t.name, p.partition_index)
                error = local.get(key) or (top if top.error is not ErrorCode.NONE else answers.get(key))
                entries.append((t.name, P(partition_index=p.partition_index, error_code=error.error.code if error else 0,
                                          error_message=error.message if error else None)))
        return AlterPartitionReassignmentsResponse(
            throttle_time_ms=0, allow_replication_factor_change=allow_rf_change, error_code=top.error.code,
            error_message=top.message, responses=[T(name=n, partitions=ps) for n, ps in _group(entries).items()])

    def _rf_change(self, topic: str, partition: int, replicas: list[int] | None) -> ItemError | None:
        """KIP-860: with allow_replication_factor_change false, a reassignment keeps the replica count."""
        image = self.core.image
        if replicas is None or image is None:
            return None
        topic_id = image.topics.by_name.get(topic)
        reg = image.topics.partition(topic_id, partition) if topic_id is not None else None
        if reg is None:
            return None
        # an s3 partition's replica count is its assigned brokers' (s3_replicas.py), not its one owner
        current = replication_factor(image.kv, reg) if reg.storage == STORAGE_S3 else len(reg.original_replicas)
        if len(replicas) == current:
            return None
        return ItemError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"The replication factor is changed from {current} to {len(replicas)} but "
                         "allowReplicationFactorChange is false")

    async def list_partition_reassignments(self, req: Request) -> ApiMessage:
        body: ListPartitionReassignmentsRequest = req.body
        T = ListPartitionReassignmentsResponse.OngoingTopicReassignment
        P = T.OngoingPartitionReassignment
        args: ListPartitionReassignmentsArgs = {}
        if body.topics is not None:
            args["partitions"] = [{"topic": t.name, "partition": p} for t in body.topics for p in t.partition_indexes]
        if not self.auth.allows_cluster(req, AclOperation.DESCRIBE):
            return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=CLUSTER_DENIED.error.code,
                                                      error_message=CLUSTER_DENIED.message, topics=[])
        try:
            reply = await self.api.list_partition_reassignments(args, forward_timeout_ms(body.timeout_ms))
        except Exception as exc:  # noqa: BLE001 - a top-level error
            failure = failure_of(exc)
            return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=failure.error.code,
                                                      error_message=failure.message, topics=[])
        entries = [(str(r["topic"]), P(partition_index=int(r["partition"]), replicas=list(r["replicas"]),
                                       adding_replicas=list(r["adding_replicas"]),
                                       removing_replicas=list(r["removing_replicas"])))
                   for r in reply["reassignments"]]
        return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                                  topics=[T(name=n, partitions=ps) for n, ps in _group(entries).items()])

    # ------------------------------------------------------------------ ElectLeaders
    async def elect_leaders(self, req: Request) -> ApiMessage:
        body: ElectLeadersRequest = req.body
        T = ElectLeadersResponse.ReplicaElectionResult
        P = T.PartitionResult
        election_type = body.election_type if req.api_version >= 1 else PREFERRED_ELECTION
        wanted = None if body.topic_partitions is None else \
            [(t.topic, p) for t in body.topic_partitions for p in t.partitions]
        if not self.auth.allows_cluster(req, AclOperation.ALTER):
            top = CLUSTER_DENIED
        elif election_type not in (PREFERRED_ELECTION, UNCLEAN_ELECTION):
            top = ItemError(ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}")
        else:
            args: ElectLeadersArgs = {"election_type": "preferred" if election_type == PREFERRED_ELECTION
                                      else "unclean"}
            if wanted is not None:
                args["partitions"] = [{"topic": t, "partition": p} for t, p in wanted]
            try:
                reply = await self.api.elect_leaders(args, forward_timeout_ms(body.timeout_ms))
            except Exception as exc:  # noqa: BLE001 - the whole request failed
                failure = failure_of(exc)
                top = ItemError(failure.error, failure.message)
            else:
                entries = []
                for r in reply["results"]:
                    error = reply_error(r)
                    entries.append((str(r["topic"]), P(partition_id=int(r["partition"]),
                                                       error_code=error.error.code if error else 0,
                                                       error_message=error.message if error else None)))
                return ElectLeadersResponse(throttle_time_ms=0, error_code=0, replica_election_results=[
                    T(topic=n, partition_result=ps) for n, ps in _group(entries).items()])
        # v0 has no top-level error: every partition asked for carries it
        failed = [(t, P(partition_id=p, error_code=top.error.code, error_message=top.message))
                  for t, p in (wanted or [])]
        return ElectLeadersResponse(throttle_time_ms=0, error_code=top.error.code, replica_election_results=[
            T(topic=n, partition_result=ps) for n, ps in _group(failed).items()])

    # ------------------------------------------------------------------ log dirs (this broker's own)
    async def describe_log_dirs(self, req: Request) -> ApiMessage:
        body: DescribeLogDirsRequest = req.body
        R = DescribeLogDirsResponse.DescribeLogDirsResult
        T = R.DescribeLogDirsTopic
        P = T.DescribeLogDirsPartition
        wanted: Callable[[str, int], bool]
        if body.topics is None:
            wanted = lambda _t, _p: True  # noqa: E731
        else:
            asked = {(t.topic, p) for t in body.topics for p in t.partitions}
            wanted = lambda t, p: (t, p) in asked  # noqa: E731
        if not self.auth.allows_cluster(req, AclOperation.DESCRIBE):
            return DescribeLogDirsResponse(throttle_time_ms=0, error_code=CLUSTER_DENIED.error.code, results=[])
        results = []
        for report in self.core.log_dirs_report(wanted):
            entries = [(r.topic, P(partition_index=r.partition, partition_size=r.size_bytes, offset_lag=r.offset_lag,
                                   is_future_key=r.is_future)) for r in report.replicas]
            results.append(R(error_code=report.error.code if report.error else 0, log_dir=report.path,
                             topics=[T(name=n, partitions=ps) for n, ps in _group(entries).items()],
                             total_bytes=report.total_bytes, usable_bytes=report.usable_bytes, is_cordoned=False))
        return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results)

    async def alter_replica_log_dirs(self, req: Request) -> ApiMessage:
        body: AlterReplicaLogDirsRequest = req.body
        T = AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult
        P = T.AlterReplicaLogDirPartitionResult
        moves = [(t.name, p, d.path) for d in body.dirs for t in d.topics for p in t.partitions]
        outcomes: list[FerryError | None]
        if self.auth.allows_cluster(req, AclOperation.ALTER):
            outcomes = await self.core.alter_replica_log_dirs(moves)
        else:
            outcomes = [FerryError(CLUSTER_DENIED.error, CLUSTER_DENIED.message or "")] * len(moves)
        entries = []
        for (topic, partition, _path), exc in zip(moves, outcomes, strict=True):
            code = kafka_error(exc)[0].code if exc is not None else 0
            entries.append((topic, P(partition_index=partition, error_code=code)))
        return AlterReplicaLogDirsResponse(throttle_time_ms=0, results=[
            T(topic_name=n, partitions=ps) for n, ps in _group(entries).items()])
