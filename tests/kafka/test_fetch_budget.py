"""Fetch's byte limits as Kafka applies them (KIP-74): the response-wide max_bytes over partitions
in request order, partition_max_bytes, whole batches only, and the first batch of the first
partition with data whatever its size."""
from __future__ import annotations

from broker.kafka.fetch_budget import FetchBudget, whole_batches_within
from stream_storage.batches import build_batch, iter_batches


def batches_of(*value_sizes: int) -> bytes:
    return b"".join(build_batch([(b"k", b"v" * n)]) for n in value_sizes)


def sizes(data: bytes) -> list[int]:
    return [i.size_bytes for i in iter_batches(data)]


def test_whole_batches_within_a_limit() -> None:
    data = batches_of(100, 100, 100)
    one = sizes(data)[0]
    assert whole_batches_within(data, len(data), False) == data
    assert sizes(whole_batches_within(data, 2 * one + 5, False)) == [one, one]
    assert whole_batches_within(data, one - 1, False) == b""
    assert sizes(whole_batches_within(data, one - 1, True)) == [one]  # the first batch whole
    assert sizes(whole_batches_within(data, 0, True)) == [one]
    assert whole_batches_within(b"", 10, True) == b""


def test_the_response_budget_spans_partitions_in_request_order() -> None:
    big, small = batches_of(5000), batches_of(100, 100)
    big_size, small_sizes = len(big), sizes(small)
    budget = FetchBudget(1000)
    # the first partition with data gets its first batch although it exceeds everything
    assert budget.take(b"", 1000) == b""
    assert budget.take(big, 1000) == big
    assert budget.remaining_bytes == 0 and big_size > 1000
    assert budget.take(small, 1000) == b""  # the response is full
    budget = FetchBudget(small_sizes[0] + 10)
    assert sizes(budget.take(small, 10_000)) == small_sizes[:1]
    assert budget.take(small, 10_000) == b""  # what is left holds no whole batch
    budget = FetchBudget(10_000)
    assert sizes(budget.take(small, small_sizes[0])) == small_sizes[:1]  # partition_max_bytes
    assert budget.take(big, 1000) == b""  # not the first with data: no batch beyond its limit
    assert sizes(budget.take(small, 10_000)) == small_sizes
