"""Apache Kafka 4.4's command-line tools, unmodified, against a real cluster.

The representative checks of tools/peer/tool_checks.py (QUICK, each step once); `make
conformance` runs them all, thoroughly, and prints the table. A check that fails where it needs
an API the brokers do not advertise yet is an expected failure naming the API and the tool's
error; it passes once the API is there.
"""
from __future__ import annotations

import pytest

from tools.peer.checks import Check, Outcome, Peer, run_check
from tools.peer.tool_checks import ALL, QUICK

pytestmark = pytest.mark.integration

BY_TOOL = {c.run.__name__: c for c in QUICK}


def assert_works(peer: Peer, check: Check) -> None:
    row = run_check(peer, check)
    if row.outcome is Outcome.NEEDS_API:
        pytest.xfail(row.detail)
    assert row.outcome is Outcome.WORKS, f"{check.tool} {check.name}: {row.detail}"


def test_topics_and_configs(peer: Peer) -> None:
    for name in ("topics_lifecycle", "configs_topic", "configs_broker", "configs_group"):
        assert_works(peer, BY_TOOL[name])


def test_console_clients_and_consumer_groups(peer: Peer) -> None:
    for name in ("console_round_trip", "group_reset_offsets"):
        assert_works(peer, BY_TOOL[name])


def test_consumer_groups_delete_offsets(peer: Peer) -> None:
    assert_works(peer, BY_TOOL["group_delete_offsets"])


def test_reassign_partitions(peer: Peer) -> None:
    assert_works(peer, BY_TOOL["reassign"])


def test_perf_tests_and_verifiable_clients(peer: Peer) -> None:
    for name in ("perf_tests", "verifiable_round_trip"):
        assert_works(peer, BY_TOOL[name])


def test_acls_deny_a_topic_and_a_refused_produce_changes_nothing(peer: Peer) -> None:
    (check,) = [c for c in ALL if c.tool == "kafka-acls"]
    assert_works(peer, check)


def test_every_quick_check_is_run_here() -> None:
    covered = {"topics_lifecycle", "configs_topic", "configs_broker", "configs_group", "console_round_trip", "group_reset_offsets",
               "group_delete_offsets", "reassign", "perf_tests", "verifiable_round_trip"}
    assert covered == set(BY_TOOL)
