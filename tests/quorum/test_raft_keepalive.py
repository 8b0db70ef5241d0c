"""Raft connections between followers stay usable through quiet spells.

pysyncobj drops a connection that has read nothing for ``connectionTimeout``, and notices only when
the connection is next used. Followers exchange nothing while the leader lives, so the first vote
request after the leader dies used to find the connection stale and be dropped with it (a second
election round, ~1.3 s failovers). Real pysyncobj nodes over loopback, in this process.
"""
from __future__ import annotations

import time

import pytest
from pysyncobj import SyncObjConf

from metadata_quorum.raft_process import KEEPALIVE, _ReadFirstSyncObj
from tools.proc import free_ports

CONNECTION_TIMEOUT_S = 1.0


def start_nodes(keepalive_interval_s: float) -> list[_ReadFirstSyncObj]:
    addresses = [f"127.0.0.1:{p}" for p in free_ports(3)]
    nodes = []
    for me in addresses:
        conf = SyncObjConf(connectionTimeout=CONNECTION_TIMEOUT_S, raftMinTimeout=0.6, raftMaxTimeout=0.9,
                           appendEntriesPeriod=0.05, autoTickPeriod=0.02, connectionRetryTime=10.0,
                           dynamicMembershipChange=False)
        nodes.append(_ReadFirstSyncObj(me, [a for a in addresses if a != me], conf=conf, consumers=[],
                                       keepalive_interval_s=keepalive_interval_s))
    return nodes


def follower_pair(nodes: list[_ReadFirstSyncObj]) -> tuple[_ReadFirstSyncObj, _ReadFirstSyncObj]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        leaders = [n for n in nodes if n._isLeader()]
        followers = [n for n in nodes if not n._isLeader()]
        if len(leaders) == 1 and all(n._getLeader() is not None for n in followers):
            return followers[0], followers[1]
        time.sleep(0.02)
    raise AssertionError("no leader elected")


def send_after_quiet_spell(keepalive_interval_s: float) -> bool:
    nodes = start_nodes(keepalive_interval_s)
    try:
        for _attempt in range(5):
            a, b = follower_pair(nodes)
            term = a.raftCurrentTerm
            time.sleep(2 * CONNECTION_TIMEOUT_S)  # the followers have nothing to say to each other
            if a.raftCurrentTerm == term and not a._isLeader() and not b._isLeader():
                break  # no election meanwhile (one on a starved machine would have used the connection)
        else:
            raise AssertionError("the leader kept changing")
        # the side that does not reconnect (pysyncobj: the lower address waits to be called)
        low, high = sorted((a, b), key=lambda n: n._SyncObj__selfNode.address)
        peer = next(n for n in low._SyncObj__otherNodes if n.address == high._SyncObj__selfNode.address)
        return bool(low._SyncObj__transport.send(peer, KEEPALIVE))
    finally:
        for n in nodes:
            n.destroy()


@pytest.mark.integration
def test_a_follower_can_still_reach_another_after_a_quiet_spell() -> None:
    assert send_after_quiet_spell(keepalive_interval_s=CONNECTION_TIMEOUT_S / 4)


@pytest.mark.integration
def test_without_keepalives_the_quiet_connection_is_dropped_at_first_use() -> None:
    """What the keepalive is for: this is the send a vote request would have made."""
    assert not send_after_quiet_spell(keepalive_interval_s=3600.0)
