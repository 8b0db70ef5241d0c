"""Whether a producer follows the leader a refusal names at once (pure: no sockets, no clock).

A broker that no longer serves a partition answers ``NOT_LEADER_OR_FOLLOWER`` with details naming
who leads it now, or who will once the move's election is done (``broker/admission.py``,
``not_leader``): ``leader_id``, ``leader_epoch`` and ``leader_url``. Kafka's clients apply that
leader from the answer itself (KIP-951) instead of refreshing metadata after a back-off; the
owner-to-be holds a request until it serves, so a producer that goes there at once is answered
the moment the move ends, where a back-off doubling up to its cap would land its retry up to a
cap later.

The rule is KIP-951's: follow only a named leader at a leader epoch newer than the one the
producer knows for the partition, and never the broker that just refused. The epoch rises with
every follow, so a producer cannot be sent back and forth; a refusal that names nothing newer
(the owner-to-be whose hold ran out names itself) goes through the usual back-off and refresh.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class LeaderHint:
    """The leader a refusal names."""

    leader_id: int
    leader_epoch: int
    url: str | None


def parse_leader_hint(details: Mapping[str, Any] | None) -> LeaderHint | None:
    """The named leader of a ``NOT_LEADER_OR_FOLLOWER`` answer's details, or None when they name
    none (no details, no leader, or values of the wrong type)."""
    if not isinstance(details, Mapping):
        return None
    leader, epoch, url = details.get("leader_id"), details.get("leader_epoch"), details.get("leader_url")
    if type(leader) is not int or type(epoch) is not int or leader < 0 or epoch < 0:
        return None
    if url is not None and (not isinstance(url, str) or not url):
        return None
    return LeaderHint(leader, epoch, url)


def follow_at_once(hint: LeaderHint | None, refused_by: int, known_epoch: int, known_url: str | None) -> bool:
    """Send the next attempt to the named leader now, without back-off or metadata refresh?

    ``refused_by``: the broker that answered; ``known_epoch``: the leader epoch the producer's
    metadata has for the partition; ``known_url``: the address it has for the named broker (None
    when it knows none: the hint's own address is then needed)."""
    if hint is None or hint.leader_id == refused_by or hint.leader_epoch <= known_epoch:
        return False
    return hint.url is not None or known_url is not None
