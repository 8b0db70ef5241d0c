"""The producer's rule for following the leader a refusal names (tools/leader_hint.py)."""
from __future__ import annotations

from tools.leader_hint import LeaderHint, follow_at_once, parse_leader_hint


def test_parse_takes_a_named_leader_and_refuses_malformed_details():
    assert parse_leader_hint({"leader_id": 2, "leader_epoch": 5, "leader_url": "http://h:1"}) == \
        LeaderHint(2, 5, "http://h:1")
    assert parse_leader_hint({"leader_id": 2, "leader_epoch": 5, "leader_url": None}) == LeaderHint(2, 5, None)
    for bad in (None, {}, {"leader_id": -1, "leader_epoch": 5}, {"leader_id": 2, "leader_epoch": -1},
                {"leader_id": "2", "leader_epoch": 5}, {"leader_id": True, "leader_epoch": 5},
                {"leader_id": 2, "leader_epoch": 5, "leader_url": ""}, {"leader_id": 2, "leader_epoch": 5, "leader_url": 3}):
        assert parse_leader_hint(bad) is None, bad


def test_follows_only_another_broker_at_a_newer_epoch_whose_address_is_known():
    hint = LeaderHint(2, 6, "http://b2")
    assert follow_at_once(hint, refused_by=1, known_epoch=5, known_url=None)
    assert not follow_at_once(hint, refused_by=2, known_epoch=5, known_url=None)  # the owner-to-be names itself
    assert not follow_at_once(hint, refused_by=1, known_epoch=6, known_url=None)  # nothing newer than known
    assert not follow_at_once(hint, refused_by=1, known_epoch=7, known_url=None)  # stale hint
    assert not follow_at_once(None, refused_by=1, known_epoch=5, known_url=None)
    no_url = LeaderHint(2, 6, None)
    assert follow_at_once(no_url, refused_by=1, known_epoch=5, known_url="http://b2")
    assert not follow_at_once(no_url, refused_by=1, known_epoch=5, known_url=None)
