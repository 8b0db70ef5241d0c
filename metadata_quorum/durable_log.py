"""A Raft journal that is on disk before it is acknowledged: group-committed fsync for pysyncobj.

pysyncobj writes its journal through mmap and never syncs it: an append a follower acknowledged,
or that a leader counted toward a commit, sits in the page cache until the kernel writes it back
(up to ~30 s later). A power loss of a majority inside that window loses committed metadata.
KRaft fsyncs before it acknowledges; so does this module, with three hooks into pysyncobj:

- ``DurableJournal`` wraps pysyncobj's ``FileJournal``. ``sync()`` makes every append since the
  last sync durable with one ``fdatasync`` (plus ``msync`` off Linux) (group commit: one sync covers every append
  that arrived meanwhile). The term and vote (``.meta``) are written to a temporary file, fsynced
  and renamed, with the directory fsynced. Before the journal is trimmed after a dump, the dump
  and its directory are fsynced; the trimmed journal is written beside the old one, fsynced and
  renamed over it, so a crash mid-trim leaves one whole journal or the other.
- ``AckGate`` holds a follower's append acknowledgements (``next_node_idx`` with ``success``)
  until the next sync; a message to the same peer sent after a held one waits behind it, so each
  peer sees its messages in order. Votes, heartbeats and appends leave at once.
- The node syncs at fixed points of its tick (``raft_process._ReadFirstSyncObj``): after reading
  its sockets and right before waiting on them. A leader's own appends are synced in the same
  tick they are made, while the followers are writing theirs, and before its next commit
  computation counts it; ``setRaftCommitIndex`` syncs too if the commit index would ever pass the
  synced end, so no commit is acted on (applied, answered, sent on) before the leader holds it.

What remains outside: pysyncobj's journal has no checksums, so a torn page write in the unsynced
tail (the header's end offset reaching past records that did not reach the disk) is not detected;
the model here, like the power-loss test's, is that unsynced writes are lost whole.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from pysyncobj.journal import FileJournal, Journal, MetaStorer
from pysyncobj.pickle import dumps


# Linux keeps a shared mapping's pages in the file's page cache: fdatasync writes back pages dirtied
# through the mapping too (msync(MS_SYNC) is itself an fsync of the range there), so one call does.
_FDATASYNC_COVERS_MAPPINGS = sys.platform.startswith("linux")


class SyncListener(Protocol):
    """Told each time a file's content became durable (the power-loss recorder keeps a copy)."""

    def synced(self, path: str) -> None: ...


class NoListener:
    def synced(self, path: str) -> None:
        pass


def fsync_dir(path: str) -> None:
    """Make a rename or a file creation in ``path``'s directory durable."""
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DurableMetaStorer(MetaStorer):
    """pysyncobj's term/vote/commit-index file, written so that a power loss keeps one whole copy.

    Raft needs the term and the vote on disk before any message reflecting them is sent; pysyncobj
    writes them synchronously, but without fsync.
    """

    def __init__(self, path: str, listener: SyncListener) -> None:
        super().__init__(path)
        self._listener = listener

    def storeMeta(self, meta: dict[str, Any]) -> None:  # noqa: N802 - pysyncobj's name
        path = self.getPath()
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(dumps(meta))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path)
        self._listener.synced(path)


@dataclass
class SyncStats:
    """How the group commit went: syncs made and the appends they covered."""

    syncs: int = 0
    appends: int = 0
    sync_seconds_total: float = 0.0
    sync_seconds_max: float = 0.0


class DurableJournal(Journal):
    """pysyncobj's file journal, plus ``sync()`` and durable trims (see the module docstring)."""

    def __init__(self, inner: FileJournal, path: str, dump_path: str | None, listener: SyncListener | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``inner``: the journal pysyncobj opened at ``path`` (taken over, not reopened)."""
        self._path = path
        self._dump_path = dump_path
        self._listener: SyncListener = listener or NoListener()
        self._clock = clock
        self._inner = self._adopt(inner)
        self.stats = SyncStats()
        # Entries up to this Raft index are on disk; ``dirty``: something changed since the last sync.
        self._synced_last_index = 0
        self.dirty = True  # pysyncobj may add its first no-op before the first sync

    def _adopt(self, inner: FileJournal) -> FileJournal:
        inner._FileJournal__metaStorer = DurableMetaStorer(self._path + ".meta", self._listener)
        return inner

    # -- durability --------------------------------------------------------------------------------

    def _file_fd(self) -> int:
        return int(self._inner._FileJournal__journalFile._ResizableFile__f.fileno())

    def sync(self) -> bool:
        """Make every change since the last sync durable; False if there was nothing to sync."""
        if not self.dirty:
            return False
        start = self._clock()
        if not _FDATASYNC_COVERS_MAPPINGS:
            self._inner.flush()  # msync(MS_SYNC) of the mapping
        os.fdatasync(self._file_fd())
        self.dirty = False
        self._synced_last_index = self._last_index()
        elapsed = self._clock() - start
        self.stats.syncs += 1
        self.stats.sync_seconds_total += elapsed
        self.stats.sync_seconds_max = max(self.stats.sync_seconds_max, elapsed)
        self._listener.synced(self._path)
        return True

    @property
    def synced_last_index(self) -> int:
        return self._synced_last_index

    def _last_index(self) -> int:
        return int(self._inner[-1][1]) if len(self._inner) else 0

    # -- pysyncobj's Journal -----------------------------------------------------------------------

    def add(self, command: bytes, idx: int, term: int) -> None:
        self._inner.add(command, idx, term)
        self.stats.appends += 1
        self.dirty = True

    def clear(self) -> None:
        """Start over empty (a snapshot is being installed): replace the file, not rewrite it in place."""
        self._replace_with([])

    def deleteEntriesFrom(self, entryFrom: int) -> None:  # noqa: N802, N803 - pysyncobj's names
        self._inner.deleteEntriesFrom(entryFrom)
        self._synced_last_index = min(self._synced_last_index, self._last_index())
        self.dirty = True

    def deleteEntriesTo(self, entryTo: int) -> None:  # noqa: N802, N803
        """Drop the entries a dump now covers, once the dump itself is durable."""
        if self._dump_path is not None and os.path.exists(self._dump_path):
            fsync_path(self._dump_path)
            fsync_dir(self._dump_path)
            self._listener.synced(self._dump_path)
        self._replace_with([tuple(self._inner[i]) for i in range(entryTo, len(self._inner))])

    def _replace_with(self, entries: list[tuple[Any, ...]]) -> None:
        """Write ``entries`` to a new journal file, sync it, rename it over the old one."""
        self._inner.onOneSecondTimer()  # the commit index, before the meta file is reopened
        tmp = self._path + ".new"
        for stale in (tmp, tmp + ".meta"):
            if os.path.exists(stale):
                os.remove(stale)
        fresh = FileJournal(tmp)
        try:
            for entry in entries:
                fresh.add(*entry)
            fresh.flush()
            os.fdatasync(fresh._FileJournal__journalFile._ResizableFile__f.fileno())
        finally:
            fresh._destroy()
        if os.path.exists(tmp + ".meta"):
            os.remove(tmp + ".meta")
        self._inner._destroy()
        os.replace(tmp, self._path)
        fsync_dir(self._path)
        self._inner = self._adopt(FileJournal(self._path))
        self._synced_last_index = self._last_index()
        self.dirty = False
        self._listener.synced(self._path)

    def __getitem__(self, item: Any) -> Any:
        return self._inner[item]

    def __len__(self) -> int:
        return len(self._inner)

    def _destroy(self) -> None:
        self.sync()
        self._inner._destroy()

    def flush(self) -> None:
        self.sync()

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:  # noqa: N802, N803
        # Nothing acts on a commit index (apply, answer, send it to followers) before this returns:
        # a leader never counts itself toward a commit of entries it does not hold on disk.
        if raftCommitIndex > self._synced_last_index and self.dirty:
            self.sync()
        self._inner.setRaftCommitIndex(raftCommitIndex)

    def getRaftCommitIndex(self) -> int:  # noqa: N802
        return int(self._inner.getRaftCommitIndex())

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:  # noqa: N802, N803
        self._inner.setCurrentTerm(term, votedForNodeId)

    def getCurrentTerm(self) -> int:  # noqa: N802
        return int(self._inner.getCurrentTerm())

    def getVotedForNodeId(self) -> Any:  # noqa: N802
        return self._inner.getVotedForNodeId()

    def onOneSecondTimer(self) -> None:  # noqa: N802
        self._inner.onOneSecondTimer()


# -- which messages wait for the sync ----------------------------------------------------------------

def acknowledges_append(message: Any) -> bool:
    """A follower's reply that tells the leader it holds entries: it must wait for the sync."""
    return isinstance(message, dict) and message.get("type") == "next_node_idx" and bool(message.get("success"))


def must_hold(message: Any, journal_dirty: bool, peer_has_held: bool) -> bool:
    """Hold ``message`` until the next sync? An acknowledgement of unsynced entries waits, and so
    does anything sent to a peer behind a held message (each peer sees its messages in order)."""
    return peer_has_held or (journal_dirty and acknowledges_append(message))


class AckGate:
    """Holds outgoing acknowledgements until the journal is synced, then sends them in order."""

    def __init__(self, journal: DurableJournal, send: Callable[[Any, Any], bool]) -> None:
        self._journal = journal
        self._send = send
        self._held: dict[Any, list[Any]] = {}

    def send(self, node: Any, message: Any) -> bool:
        if must_hold(message, self._journal.dirty, node in self._held):
            self._held.setdefault(node, []).append(message)
            return True
        return bool(self._send(node, message))

    @property
    def holding(self) -> int:
        return sum(len(v) for v in self._held.values())

    def flush(self) -> None:
        """Sync the journal (if anything changed) and release every held message."""
        self._journal.sync()
        held, self._held = self._held, {}
        for node, messages in held.items():
            for message in messages:
                self._send(node, message)
