"""The committed log's decoded-batch cache: bounded, least recently read dropped first, and the
answers the same whether a batch was cached or decoded again."""
from __future__ import annotations

from metadata_quorum.raft import Command, CommittedLog
from metadata_quorum.records import KVRecord


def log_of(batch_sizes: list[int]) -> CommittedLog:
    state = CommittedLog(1_000_000)
    prev = ""
    for i, size in enumerate(batch_sizes):
        records = tuple(KVRecord(key=f"k{i}-{j}", value=str(j)) for j in range(size))
        command = Command.of(f"c{i}", prev, 1, [records])
        assert state.apply_committed(command).accepted
        prev = command.command_id
    return state


def cached_records(state: CommittedLog) -> int:
    return sum(len(entry[3]) for entry in state.core.batches if entry[3] is not None)


def test_reads_keep_at_most_the_cap_of_decoded_records() -> None:
    state = log_of([300] * 20)
    state.decoded_cache_records = 1_000
    first = [state.read(offset, 300).records for offset in range(0, 6_000, 300)]
    assert cached_records(state) <= 1_000
    again = [state.read(offset, 300).records for offset in range(0, 6_000, 300)]
    assert again == first  # decoded again where dropped: the same records
    assert [o for piece in first for o, _r in piece] == list(range(6_000))


def test_the_batch_read_last_stays_however_large() -> None:
    """A reader takes a large batch in pieces; dropping it between them would decode it per piece."""
    state = log_of([50, 5_000, 50])
    state.decoded_cache_records = 1_000
    state.read(0, 10_000)
    for offset in range(50, 5_050, 500):
        piece = state.read(offset, 500, cut_batches=True)
        assert piece.records[0][0] == offset and len(piece.records) == 500
        assert state.core.batches[1][3] is not None
    state.read(5_050, 10_000)
    state.read(0, 10_000)  # the small ones read more recently: the large one goes
    assert state.core.batches[1][3] is None and cached_records(state) <= 1_000
