"""Any input to any operation either succeeds or raises FerryError — never another exception —
and a success replays cleanly."""
from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metadata_quorum.delta import replay_records
from metadata_quorum.kernel.errors import FerryError
from metadata_quorum.operations import READ_OPERATIONS, WRITE_OPERATIONS
from tests.quorum.quorum_helpers import controller, make_ctx

C = controller(3)
C.write("create_topics", {"topics": [{"name": "t", "num_partitions": 2},
                                     {"name": "l", "num_partitions": 1, "replication_factor": 2, "storage": "local"}]})
C.write("open_stream", {"stream_id": 0, "epoch": 0, "broker_id": C.image.topics.get("t").partitions[0].leader,  # type: ignore[union-attr]
                        "broker_epoch": C.image.cluster.brokers[C.image.topics.get("t").partitions[0].leader].broker_epoch})  # type: ignore[union-attr]
IMAGE = C.image

FIELDS = ["broker_id", "broker_epoch", "incarnation_id", "metadata_offset", "want_shutdown", "topics", "names",
          "reassignments", "replicas", "partitions", "election_type", "stream_id", "epoch", "object_key", "size",
          "ranges", "new_start_offset", "resources", "key", "value", "topic", "partition", "isr", "log_dirs",
          "leader_epoch", "partition_epoch", "name", "num_partitions", "replication_factor", "assignments",
          "storage", "configs", "start_offset", "end_offset", "type", "saturated_log_dirs", "validate_only"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 12), st.sampled_from(["t", "l", "", "/data/b0/d0", "any",
                                                                                    "s3", "local", "preferred", "unclean",
                                                                                    "topic", "broker", "x"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(FIELDS), inner, max_size=5)), max_leaves=12)
args_strategy = st.dictionaries(st.sampled_from(FIELDS), values, max_size=6)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(sorted(WRITE_OPERATIONS)), args=args_strategy)
def test_write_operations_fail_only_with_ferry_errors(op: str, args: dict[str, Any]) -> None:
    try:
        result = WRITE_OPERATIONS[op](IMAGE, args, make_ctx(IMAGE, 2_000_000, {0: 2_000_000}))
    except FerryError:
        return
    replay_records(IMAGE, result.records)  # must not raise


@settings(max_examples=100, deadline=None)
@given(op=st.sampled_from(sorted(READ_OPERATIONS)), args=args_strategy)
def test_read_operations_fail_only_with_ferry_errors(op: str, args: dict[str, Any]) -> None:
    try:
        READ_OPERATIONS[op](IMAGE, args)
    except FerryError:
        pass
