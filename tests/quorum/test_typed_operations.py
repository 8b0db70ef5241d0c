"""Every controller operation is typed end to end: its request and reply types are registered, the
typed facade has a method for it taking and returning those types, and the replies operations
really return carry exactly the keys (and value kinds) their types declare, nested items too.

A new operation added to ``metadata_quorum/operations.py`` without its messages and facade method
fails here; so does a reply key renamed in an op but not in its type (mypy catches it too).
"""
from __future__ import annotations

import asyncio
import base64
import inspect
import types
import typing
from typing import Any, Mapping

import pytest

from metadata_quorum.kernel import messages as m
from metadata_quorum.kernel.controller_api import ControllerApi, ControllerWrites
from metadata_quorum.kernel.messages.cluster import RegisterBrokerRequest
from metadata_quorum.local_controller import LocalController, LocalTransport
from metadata_quorum.operations import READ_OPERATIONS, WRITE_OPERATIONS
from tests.quorum.quorum_helpers import ManualClock, controller, epoch_of


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def conformance(value: Any, tp: Any, path: str = "reply") -> list[str]:
    """Where ``value`` departs from type ``tp``: missing or unknown keys of a TypedDict, wrong
    value kinds, recursively through lists, dicts and unions."""
    if tp is Any:
        return []
    if _is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__}, not an object"]
        hints = typing.get_type_hints(tp)
        required, optional = set(tp.__required_keys__), set(tp.__optional_keys__)
        problems = [f"{path}: missing {k!r}" for k in sorted(required - set(value))]
        problems += [f"{path}: undeclared {k!r}" for k in sorted(set(value) - required - optional)]
        for key in sorted(set(value) & (required | optional)):
            problems += conformance(value[key], hints[key], f"{path}.{key}")
        return problems
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        options = [conformance(value, a, path) for a in args]
        return [] if any(not o for o in options) else min(options, key=len)
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: {type(value).__name__}, not a list"]
        return [p for i, v in enumerate(value) for p in conformance(v, args[0], f"{path}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__}, not a dict"]
        return [p for k, v in value.items() for p in conformance(k, args[0], f"{path} key") +
                conformance(v, args[1], f"{path}[{k!r}]")]
    if tp is type(None):
        return [] if value is None else [f"{path}: {value!r} is not None"]
    if tp is int:
        return [] if isinstance(value, int) and not isinstance(value, bool) else [f"{path}: {value!r} is not an int"]
    if tp in (str, bool):
        return [] if isinstance(value, tp) else [f"{path}: {value!r} is not a {tp.__name__}"]
    raise AssertionError(f"{path}: no conformance rule for {tp!r}")


# -- the registry, the controller's registries and the facade agree ---------------------------------

def test_every_registered_operation_has_messages_and_the_right_kind() -> None:
    assert set(m.OPERATIONS) == set(WRITE_OPERATIONS) | set(READ_OPERATIONS)
    assert m.WRITE_NAMES == set(WRITE_OPERATIONS) and m.READ_NAMES == set(READ_OPERATIONS)
    for name, op in m.OPERATIONS.items():
        assert op.name == name
        assert _is_typeddict(op.request), f"{name}: request type {op.request!r} is not a TypedDict"
        assert _is_typeddict(op.reply), f"{name}: reply type {op.reply!r} is not a TypedDict"


def _facade_methods(cls: type) -> dict[str, Any]:
    return {name: fn for name, fn in vars(cls).items() if inspect.iscoroutinefunction(fn) and not name.startswith("_")}


def test_the_facade_has_one_method_per_operation_with_its_types() -> None:
    writes, reads = _facade_methods(ControllerWrites), _facade_methods(ControllerApi)
    assert set(writes) == set(m.WRITE_NAMES)
    assert set(reads) == set(m.READ_NAMES)
    for name, fn in {**writes, **reads}.items():
        hints = typing.get_type_hints(fn)
        op = m.OPERATIONS[name]
        assert hints["request"] is op.request, f"{name} takes {hints['request']!r}, not {op.request!r}"
        assert hints["return"] is op.reply, f"{name} returns {hints['return']!r}, not {op.reply!r}"


def test_the_conformance_check_sees_a_departure() -> None:
    """The check below is not vacuous: a missing key, an extra key and a wrong kind are reported."""
    good = {"broker_epoch": 3, "session_timeout_ms": 9000}
    assert conformance(good, m.REGISTER_BROKER.reply) == []
    assert conformance({"session_timeout_ms": 9000}, m.REGISTER_BROKER.reply) == ["reply: missing 'broker_epoch'"]
    assert conformance({**good, "epoch": 3}, m.REGISTER_BROKER.reply) == ["reply: undeclared 'epoch'"]
    assert conformance({**good, "broker_epoch": "3"}, m.REGISTER_BROKER.reply) == \
        ["reply.broker_epoch: '3' is not an int"]
    assert conformance({"topics": [{"name": "t", "topc_id": "x"}]}, m.CREATE_TOPICS.reply) == \
        ["reply.topics[0]: undeclared 'topc_id'"]


# -- replies operations really return match their types ---------------------------------------------

def _replies(c: LocalController, clock: ManualClock) -> list[tuple[str, Mapping[str, Any]]]:
    """Drive most operations through the in-process controller, successes and per-item errors."""
    out: list[tuple[str, Mapping[str, Any]]] = []

    def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        reply = c.write(name, args) if m.OPERATIONS[name].kind == "write" else c.read(name, args)
        out.append((name, reply))
        return reply

    b0 = epoch_of(c.image, 0)
    call("describe_cluster", {})
    call("create_topics", {"topics": [{"name": "t", "num_partitions": 2, "replication_factor": 1,
                                       "configs": {"retention.ms": "1000"}},
                                      {"name": "l", "storage": "local", "assignments": {"0": [0, 1]}},
                                      {"name": "bad name!"}]})
    call("create_partitions", {"topics": [{"name": "t", "count": 3}, {"name": "nope", "count": 2}]})
    call("describe_topics", {"names": ["t", "l", "nope"]})
    call("alter_configs", {"resources": [{"type": "topic", "name": "t", "configs": {"retention.ms": "2000"},
                                          "ops": [{"op": "append", "key": "cleanup.policy", "value": "compact"}]}]})
    call("describe_configs", {"resources": [{"type": "topic", "name": "t"}]})
    call("put_kv", {"key": "k", "value": "v"})
    call("get_kv", {"key": "k"})
    call("alter_partition_reassignments", {"reassignments": [{"topic": "t", "partition": 0, "replicas": [1]},
                                                             {"topic": "nope", "partition": 0, "replicas": [1]}]})
    call("list_partition_reassignments", {})
    call("elect_leaders", {"election_type": "preferred",
                           "partitions": [{"topic": "l", "partition": 0}, {"topic": "nope", "partition": 0}]})
    lp = c.image.topics.get("l")
    assert lp is not None
    part = lp.partitions[0]
    call("alter_partition", {"broker_id": part.leader, "broker_epoch": epoch_of(c.image, part.leader), "topic": "l",
                             "partition": 0, "leader_epoch": part.leader_epoch,
                             "partition_epoch": part.partition_epoch, "isr": [part.leader]})
    sid = call("create_stream", {})["stream_id"]
    owner = {"stream_id": sid, "epoch": 1, "broker_id": 0, "broker_epoch": b0}
    call("open_stream", owner)
    call("commit_object", {"object_key": f"o/{clock() + 1}-a", "size": 10, "broker_id": 0, "broker_epoch": b0,
                           "ranges": [{"stream_id": sid, "epoch": 1, "start_offset": 0, "end_offset": 5,
                                       "size_bytes": 10}]})
    call("commit_object", {"object_key": f"o/{clock() + 2}-b", "size": 10, "broker_id": 0, "broker_epoch": b0,
                           "ranges": [{"stream_id": sid, "epoch": 1, "start_offset": 5, "end_offset": 9}]})
    call("describe_stream", {"stream_id": sid})
    call("compact_objects", {**owner, "object_key": f"o/{clock() + 3}-c", "size": 20, "start_offset": 0,
                             "end_offset": 9, "replaces": [f"o/{clock() + 1}-a", f"o/{clock() + 2}-b"]})
    call("trim_stream", {**owner, "new_start_offset": 9})
    call("stream_recovered", owner)
    call("close_stream", owner)
    call("collect_garbage", {"broker_id": 0, "broker_epoch": b0, "horizon_ms": clock() - 1,
                             "candidates": ["o/1-x", f"o/{clock() + 3}-c"]})
    call("report_broker_dead", {"broker_id": 2, "broker_epoch": epoch_of(c.image, 2), "reporter_id": 0,
                                "reporter_epoch": b0})
    clock.advance(60_000)
    call("broker_heartbeat", {"broker_id": 0, "broker_epoch": b0, "metadata_offset": c.image.offset})
    call("tick", {})
    call("allocate_producer_ids", {"broker_id": 0, "broker_epoch": b0})
    binding = {"resource_type": "TOPIC", "resource_name": "t", "pattern_type": "LITERAL", "principal": "User:alice",
               "host": "*", "operation": "READ", "permission_type": "ALLOW"}
    call("create_acls", {"creations": [binding, {**binding, "operation": "UNKNOWN"}]})
    any_acl = {**binding, "resource_name": None, "principal": None, "host": None, "operation": "ANY",
               "permission_type": "ANY", "pattern_type": "ANY"}
    call("describe_acls", {"filter": any_acl})
    call("delete_acls", {"filters": [any_acl, {**any_acl, "resource_type": "UNKNOWN"}]})
    salt = base64.b64encode(b"salt").decode()
    call("alter_user_scram_credentials", {"upsertions": [{"name": "alice", "mechanism": 2, "iterations": 8192,
                                                          "salt": salt, "salted_password": salt}],
                                          "deletions": [{"name": "bob", "mechanism": 2}]})
    call("describe_user_scram_credentials", {"users": ["alice", "carol"]})
    call("alter_configs", {"resources": [{"type": "group", "name": "g",
                                          "configs": {"consumer.session.timeout.ms": "50000"}}]})
    call("delete_topics", {"names": ["t", "nope"], "topic_ids": ["AAAA"]})
    call("unregister_broker", {"broker_id": 2})
    call("register_broker", {"broker_id": 5, "incarnation_id": "i5", "endpoints": ["http://h:1"], "rack": "r",
                             "log_dirs": [{"dir_id": "d", "path": "/data/5"}]})
    return out


def test_replies_carry_the_keys_their_types_declare() -> None:
    clock = ManualClock()
    c = controller(3, clock)
    replies = _replies(c, clock)
    problems = [p for name, reply in replies for p in conformance(reply, m.OPERATIONS[name].reply, name)]
    assert problems == []
    covered = {name for name, _ in replies}
    assert covered == set(m.OPERATIONS), f"not driven: {sorted(set(m.OPERATIONS) - covered)}"
    # item errors and optional fields were exercised, not only the happy path
    created = dict(replies)["create_topics"]["topics"]
    assert [t.get("error") for t in created] == [None, None, "INVALID_TOPIC_EXCEPTION"]
    assert "partitions" in dict(replies)["describe_topics"]["topics"][0]
    assert [r["error"] for r in dict(replies)["create_acls"]["results"]] == ["NONE", "INVALID_REQUEST"]
    assert [r["error"] for r in dict(replies)["describe_user_scram_credentials"]["results"]] == \
        ["NONE", "RESOURCE_NOT_FOUND"]


def test_the_facade_over_a_local_controller_returns_the_replies() -> None:
    c = controller(1)
    api = ControllerApi(LocalTransport(c))

    async def scenario() -> None:
        created = await api.create_topics({"topics": [{"name": "x", "num_partitions": 1}]})
        assert created["topics"][0]["name"] == "x"
        described = await api.describe_topics({"names": ["x"]})
        assert described["topics"][0]["partitions"][0]["partition"] == 0
        await api.put_kv({"key": "a", "value": "b"})
        assert (await api.get_kv({"key": "a"}))["value"] == "b"

    asyncio.run(scenario())
    request: RegisterBrokerRequest = {"broker_id": 7, "incarnation_id": "i7"}
    assert c.call(m.REGISTER_BROKER, request)["broker_epoch"] == epoch_of(c.image, 7)


@pytest.mark.parametrize("name", sorted(m.OPERATIONS))
def test_request_types_name_only_keys_the_op_reads(name: str) -> None:
    """A request type declares no key its operation never looks at (a typo there would type-check
    callers that send a field the controller ignores)."""
    fn = WRITE_OPERATIONS.get(name) or READ_OPERATIONS[name]
    module = inspect.getsource(inspect.getmodule(fn))  # type: ignore[arg-type]
    op = m.OPERATIONS[name]
    unread = [k for k in set(op.request.__required_keys__) | set(op.request.__optional_keys__)
              if f'"{k}"' not in module]
    assert unread == []
