"""A restart between pysyncobj writing a full dump and trimming its journal keeps every entry."""
from __future__ import annotations

import gzip
import pickle
from pathlib import Path

from pysyncobj.journal import createJournal

from metadata_quorum.raft_process import align_journal_with_dump


def _entry(idx: int) -> tuple[bytes, int, int]:
    return (b"cmd-%d" % idx, idx, 1)


def test_journal_not_yet_trimmed_after_dump_is_aligned_and_keeps_later_entries(tmp_path: Path) -> None:
    journal_path = str(tmp_path / "raft.journal")
    dump_path = str(tmp_path / "raft.dump")
    journal = createJournal(journal_path)
    for idx in range(1, 11):
        journal.add(*_entry(idx))
    journal.flush()
    journal._destroy()
    # The dump covers entries up to 6; the node stopped before trimming the journal.
    with open(dump_path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb") as g:
        pickle.dump((None, _entry(6), _entry(5), set()), g)

    align_journal_with_dump(journal_path, dump_path)

    journal = createJournal(journal_path)
    try:
        entries = [tuple(journal[i]) for i in range(len(journal))]
    finally:
        journal._destroy()
    # pysyncobj keeps the journal only when it starts with the dump's last two entries.
    assert entries[:2] == [_entry(5), _entry(6)]
    assert entries == [_entry(i) for i in range(5, 11)]
