"""ACLs in the metadata log: create_acls, delete_acls and describe_acls as Kafka's AclControlManager."""
from __future__ import annotations

from typing import Any

import pytest

from metadata_quorum.controller_result import OpContext
from metadata_quorum.delta import replay_records
from metadata_quorum.image import EMPTY_IMAGE, MetadataImage
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.operations import run_read, run_write
from metadata_quorum.records import AccessControlEntryRecord, RemoveAccessControlEntryRecord


def binding(name: str = "t", pattern: str = "LITERAL", principal: str = "User:alice", operation: str = "READ",
            permission: str = "ALLOW", rtype: str = "TOPIC", host: str = "*") -> dict[str, Any]:
    return {"resource_type": rtype, "resource_name": name, "pattern_type": pattern, "principal": principal,
            "host": host, "operation": operation, "permission_type": permission}


def flt(name: str | None = None, pattern: str = "ANY", rtype: str = "ANY", principal: str | None = None,
        operation: str = "ANY", permission: str = "ANY", host: str | None = None) -> dict[str, Any]:
    return {"resource_type": rtype, "resource_name": name, "pattern_type": pattern, "principal": principal,
            "host": host, "operation": operation, "permission_type": permission}


def write(image: MetadataImage, op: str, args: dict[str, Any]) -> tuple[MetadataImage, dict[str, Any]]:
    result = run_write(image, op, args, OpContext(now_ms=0, next_offset=image.offset + 1))
    return replay_records(image, list(result.records)), result.reply


def names(image: MetadataImage, **kw: Any) -> list[tuple[str, str, str]]:
    return [(a["resource_name"], a["pattern_type"], a["principal"])
            for a in run_read(image, "describe_acls", {"filter": flt(**kw)})["acls"]]


def test_create_writes_one_record_per_new_binding_and_ids_are_record_offsets() -> None:
    image, reply = write(EMPTY_IMAGE, "create_acls", {"creations": [binding("a"), binding("b"), binding("a")]})
    assert reply == {"results": [{"error": "NONE"}] * 3}  # a repeat succeeds without a record
    assert sorted(image.acls.by_id) == [0, 1]
    again, reply = write(image, "create_acls", {"creations": [binding("a")]})
    assert reply == {"results": [{"error": "NONE"}]} and again.acls.by_id == image.acls.by_id
    assert isinstance(image.to_records()[-1], AccessControlEntryRecord)
    assert MetadataImage.from_records(image.to_records()).same_content(image)


@pytest.mark.parametrize("bad, message", [
    (binding(rtype="ANY"), "Invalid resourceType ANY"),
    (binding(rtype="UNKNOWN"), "Invalid resourceType UNKNOWN"),
    (binding(pattern="MATCH"), "Invalid patternType MATCH"),
    (binding(pattern="ANY"), "Invalid patternType ANY"),
    (binding(operation="ANY"), "Invalid operation ANY"),
    (binding(operation="UNKNOWN"), "Invalid operation UNKNOWN"),
    (binding(permission="ANY"), "Invalid permissionType ANY"),
    (binding(rtype="CLUSTER", name="c"), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (binding(name=""), "Resource name should not be empty"),
    (binding(principal="alice"), "Could not parse principal"),
])
def test_create_refuses_a_bad_binding_alone_with_kafkas_message(bad: dict[str, Any], message: str) -> None:
    image, reply = write(EMPTY_IMAGE, "create_acls", {"creations": [bad, binding("ok")]})
    first, second = reply["results"]
    assert first["error"] == "INVALID_REQUEST" and first["message"].startswith(message)
    assert second == {"error": "NONE"}
    assert [b.resource_name for b in image.acls.by_id.values()] == ["ok"]


def test_a_malformed_request_changes_nothing() -> None:
    for args in ({"creations": [{"resource_type": 2}]}, {"creations": "x"}, {}):
        with pytest.raises(FerryError) as err:
            run_write(EMPTY_IMAGE, "create_acls", args, OpContext(now_ms=0, next_offset=0))
        assert err.value.error is ErrorCode.INVALID_REQUEST


def test_describe_with_match_finds_the_literal_name_the_wildcard_and_every_prefix() -> None:
    image, _ = write(EMPTY_IMAGE, "create_acls", {"creations": [
        binding("orders"), binding("*", principal="User:bob"), binding("ord", "PREFIXED"),
        binding("orders-eu", "PREFIXED"), binding("other"), binding("orders", rtype="GROUP")]})
    assert names(image, name="orders", pattern="MATCH", rtype="TOPIC") == [
        ("orders", "LITERAL", "User:alice"), ("*", "LITERAL", "User:bob"), ("ord", "PREFIXED", "User:alice")]
    assert names(image, name="orders", pattern="LITERAL", rtype="TOPIC") == [("orders", "LITERAL", "User:alice")]
    assert names(image, name="ord", pattern="ANY", rtype="ANY") == [("ord", "PREFIXED", "User:alice")]
    assert len(names(image)) == 6
    assert names(image, principal="User:bob") == [("*", "LITERAL", "User:bob")]
    assert names(image, principal="User:*") == []  # a filter's principal is matched as written


def test_delete_returns_what_each_filter_matched_and_removes_it_once() -> None:
    image, _ = write(EMPTY_IMAGE, "create_acls", {"creations": [
        binding("t_1", "PREFIXED"), binding("t_1", principal="User:bob", operation="WRITE"),
        binding("t_2", principal="User:bob", operation="WRITE")]})
    result = run_write(image, "delete_acls", {"filters": [flt("t_1", "MATCH", "TOPIC"), flt(principal="User:bob"),
                                                           flt("x", "UNKNOWN")]},
                       OpContext(now_ms=0, next_offset=image.offset + 1))
    first, second, third = result.reply["results"]
    assert [(a["resource_name"], a["pattern_type"]) for a in first["matching_acls"]] == [
        ("t_1", "PREFIXED"), ("t_1", "LITERAL")]
    assert [a["resource_name"] for a in second["matching_acls"]] == ["t_1", "t_2"]
    assert third["error"] == "INVALID_REQUEST"
    assert sorted(r.acl_id for r in result.records if isinstance(r, RemoveAccessControlEntryRecord)) == [0, 1, 2]
    after = replay_records(image, list(result.records))
    assert names(after) == []
    assert MetadataImage.from_records(after.to_records()).same_content(after)


def test_describe_refuses_a_filter_with_unknown_elements() -> None:
    with pytest.raises(FerryError) as err:
        run_read(EMPTY_IMAGE, "describe_acls", {"filter": flt(operation="UNKNOWN")})
    assert err.value.error is ErrorCode.INVALID_REQUEST


def test_a_snapshot_without_an_acl_removes_it_from_a_followers_image() -> None:
    from metadata_quorum.client import snapshot_delta

    old, _ = write(EMPTY_IMAGE, "create_acls", {"creations": [binding("a"), binding("b")]})
    kept, _ = write(EMPTY_IMAGE, "create_acls", {"creations": [binding("b")]})
    _delta, image = snapshot_delta(old, kept.to_records(), 10)
    assert image.offset == 10 and [b.resource_name for b in image.acls.by_id.values()] == ["b"]
