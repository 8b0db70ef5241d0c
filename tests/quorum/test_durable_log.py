"""The durable Raft journal: group commit, acknowledgements held until synced, durable trims, and
the power-loss recorder (no sockets, no threads)."""
from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path
from typing import Any

from pysyncobj.journal import FileJournal, createJournal

from metadata_quorum.durable_log import AckGate, DurableJournal, acknowledges_append, must_hold
from metadata_quorum.power_loss import SyncRecorder, restore_synced_state

ACK = {"type": "next_node_idx", "next_node_idx": 5, "reset": False, "success": True}
NACK = {"type": "next_node_idx", "next_node_idx": 2, "reset": True, "success": False}
VOTE = {"type": "response_vote", "term": 3}
APPEND = {"type": "append_entries", "term": 3, "commit_index": 1}


def _entry(idx: int, term: int = 1) -> tuple[bytes, int, int]:
    return (b"cmd-%d" % idx, idx, term)


class Recorder:
    """A sync listener noting the order in which files became durable (and keeping copies)."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.copies = SyncRecorder()

    def synced(self, path: str) -> None:
        self.events.append(os.path.basename(path))
        self.copies.synced(path)


def _journal(tmp_path: Path, recorder: Recorder | None = None) -> DurableJournal:
    path = str(tmp_path / "raft.journal")
    return DurableJournal(FileJournal(path), path, str(tmp_path / "raft.dump"), recorder)


def _entries_on_disk(path: str) -> list[tuple[Any, ...]]:
    journal = createJournal(path)
    try:
        return [tuple(journal[i]) for i in range(len(journal))]
    finally:
        journal._destroy()


def test_only_an_acknowledgement_of_unsynced_entries_is_held_and_what_follows_it_to_that_peer() -> None:
    assert acknowledges_append(ACK)
    assert not any(acknowledges_append(m) for m in (NACK, VOTE, APPEND, {"type": "ferry_keepalive"}, "x"))
    assert must_hold(ACK, journal_dirty=True, peer_has_held=False)
    assert not must_hold(ACK, journal_dirty=False, peer_has_held=False)
    for message in (NACK, VOTE, APPEND):
        assert not must_hold(message, journal_dirty=True, peer_has_held=False)
        assert must_hold(message, journal_dirty=False, peer_has_held=True)  # keeps that peer's order


def test_one_sync_covers_every_append_since_the_last_and_releases_held_acks_in_order(tmp_path: Path) -> None:
    recorder = Recorder()
    journal = _journal(tmp_path, recorder)
    journal.sync()
    sent: list[tuple[str, Any]] = []

    def send(node: str, message: Any) -> bool:
        sent.append((node, message))
        return True

    gate = AckGate(journal, send)
    for idx in range(1, 4):
        journal.add(*_entry(idx))
    assert gate.send("leader", ACK) and gate.send("leader", NACK) and gate.send("other", VOTE)
    assert sent == [("other", VOTE)]  # the vote went at once; the ack and what follows it wait
    assert gate.holding == 2
    syncs_before = journal.stats.syncs
    gate.flush()
    assert journal.stats.syncs == syncs_before + 1 and journal.stats.appends == 3
    assert sent[1:] == [("leader", ACK), ("leader", NACK)]
    assert recorder.events[-1] == "raft.journal"
    gate.flush()  # nothing changed: no sync, nothing sent
    assert journal.stats.syncs == syncs_before + 1 and len(sent) == 3
    gate.send("leader", ACK)  # the journal is clean: an ack of synced entries goes at once
    assert sent[-1] == ("leader", ACK)
    journal._destroy()


def test_a_commit_index_past_the_synced_end_syncs_first(tmp_path: Path) -> None:
    recorder = Recorder()
    journal = _journal(tmp_path, recorder)
    journal.add(*_entry(1))
    journal.sync()
    journal.add(*_entry(2))
    journal.setRaftCommitIndex(1)  # already durable: no sync
    assert journal.dirty and journal.synced_last_index == 1
    journal.setRaftCommitIndex(2)
    assert not journal.dirty and journal.synced_last_index == 2
    journal._destroy()


def test_a_trim_syncs_the_dump_first_and_replaces_the_journal_whole(tmp_path: Path) -> None:
    recorder = Recorder()
    journal = _journal(tmp_path, recorder)
    for idx in range(1, 11):
        journal.add(*_entry(idx))
    journal.setCurrentTerm(4, "node-2")
    journal.sync()
    with open(tmp_path / "raft.dump", "wb") as f, gzip.GzipFile(fileobj=f, mode="wb") as g:
        pickle.dump((None, _entry(6), _entry(5), set()), g)
    recorder.events.clear()
    journal.deleteEntriesTo(4)  # keeps entries 5..10
    assert recorder.events == ["raft.dump", "raft.journal"]  # the dump is durable before the trim
    assert [tuple(journal[i]) for i in range(len(journal))] == [_entry(i) for i in range(5, 11)]
    journal.add(*_entry(11))
    journal._destroy()
    assert _entries_on_disk(str(tmp_path / "raft.journal")) == [_entry(i) for i in range(5, 12)]
    assert not os.path.exists(tmp_path / "raft.journal.new")
    reopened = _journal(tmp_path)
    assert (reopened.getCurrentTerm(), reopened.getVotedForNodeId()) == (4, "node-2")
    reopened._destroy()


def test_power_loss_keeps_what_was_synced_and_drops_the_rest(tmp_path: Path) -> None:
    recorder = Recorder()
    journal = _journal(tmp_path, recorder)
    journal.setCurrentTerm(2, "node-1")  # the vote is synced as it is stored
    for idx in range(1, 4):
        journal.add(*_entry(idx))
    journal.sync()
    for idx in range(4, 6):
        journal.add(*_entry(idx))  # never synced
    journal._inner._destroy()  # the process goes; the kernel still holds every write until the power does
    assert len(_entries_on_disk(str(tmp_path / "raft.journal"))) == 5  # the page cache still had them
    outcome = restore_synced_state(str(tmp_path))
    assert outcome == {"raft.journal": "reverted to the last sync", "raft.journal.meta": "reverted to the last sync"}
    assert _entries_on_disk(str(tmp_path / "raft.journal")) == [_entry(i) for i in range(1, 4)]
    reopened = _journal(tmp_path)
    assert (reopened.getCurrentTerm(), reopened.getVotedForNodeId()) == (2, "node-1")
    reopened._destroy()


def test_power_loss_of_a_journal_never_synced_loses_it_whole(tmp_path: Path) -> None:
    plain = FileJournal(str(tmp_path / "raft.journal"))  # pysyncobj's own journal: no sync, no record
    for idx in range(1, 4):
        plain.add(*_entry(idx))
    plain._destroy()
    assert restore_synced_state(str(tmp_path)) == {"raft.journal": "lost (never synced)"}
    assert not os.path.exists(tmp_path / "raft.journal")
