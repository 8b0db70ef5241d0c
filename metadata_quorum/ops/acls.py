"""ACLs in the metadata log: KRaft's AclControlManager as pure operations.

``create_acls`` writes an AccessControlEntryRecord per new binding (a binding already present,
or repeated in the request, succeeds without a record); ``delete_acls`` writes a
RemoveAccessControlEntryRecord per binding any filter matches and answers, per filter, the
bindings it deleted; ``describe_acls`` reads the bindings a filter matches. Each binding and each
filter is judged alone, with Kafka's errors (``metadata_quorum/acls.py``); a request that would
write more than Kafka's 10,000 records per user operation is INVALID_REQUEST as a whole. An ACL's
id is the offset of the record that created it: unique for ever, and chosen without randomness.
"""
from __future__ import annotations

from typing import Any

from metadata_quorum.acls import AclBinding, AclBindingFilter, check_new_binding
from metadata_quorum.controller_result import ControllerResult, OpContext
from metadata_quorum.image import MetadataImage
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.validation import req_list
from metadata_quorum.records import Record, RemoveAccessControlEntryRecord

MAX_RECORDS_PER_USER_OP = 10_000  # KRaft's bound on the records of one ACL request


def _error(exc: FerryError) -> dict[str, Any]:
    return {"error": exc.error.name, "code": exc.error.code, "message": exc.message}


def _too_many(count: int) -> FerryError:
    return FerryError(ErrorCode.INVALID_REQUEST, f"The request would write {count} ACL records; at most "
                                                 f"{MAX_RECORDS_PER_USER_OP} are allowed in one request")


def create_acls(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """args ``{"creations": [binding]}``; reply ``{"results": [{"error": "NONE"} or an error]}``."""
    raw = req_list(args, "creations")
    if len(raw) > MAX_RECORDS_PER_USER_OP:
        raise _too_many(len(raw))
    bindings = [AclBinding.from_json(item) for item in raw]
    existing = set(image.acls.by_id.values())
    records: list[Record] = []
    results: list[dict[str, Any]] = []
    for b in bindings:
        try:
            check_new_binding(b)
        except FerryError as exc:
            results.append(_error(exc))
            continue
        if b not in existing:
            existing.add(b)
            records.append(b.to_record(ctx.next_offset + len(records)))
        results.append({"error": "NONE"})
    return ControllerResult(tuple(records), {"results": results})


def delete_acls(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """args ``{"filters": [filter]}``; reply ``{"results": [{"error": "NONE", "matching_acls":
    [binding]} or an error]}`` in filter order (a binding two filters match is listed by both and
    removed once)."""
    filters = [AclBindingFilter.from_json(item) for item in req_list(args, "filters")]
    removed: set[int] = set()
    results: list[dict[str, Any]] = []
    for flt in filters:
        try:
            flt.check()
        except FerryError as exc:
            results.append(_error(exc))
            continue
        matched = image.acls.matching(flt)
        removed.update(i for i, _ in matched)
        results.append({"error": "NONE", "matching_acls": [b.to_json() for _, b in matched]})
    if len(removed) > MAX_RECORDS_PER_USER_OP:
        raise _too_many(len(removed))
    records = tuple(RemoveAccessControlEntryRecord(acl_id=i) for i in sorted(removed))
    return ControllerResult(records, {"results": results})


def describe_acls(image: MetadataImage, args: dict[str, Any]) -> dict[str, Any]:
    """args ``{"filter": filter}``; reply ``{"acls": [binding]}`` (by id); an UNKNOWN element is
    INVALID_REQUEST."""
    flt = AclBindingFilter.from_json(args.get("filter"))
    flt.check()
    return {"acls": [b.to_json() for _, b in image.acls.matching(flt)]}
