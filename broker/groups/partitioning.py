"""Which ``__consumer_offsets`` partition coordinates a group.

Kafka clients find a group's coordinator with FindCoordinator and the broker answers with the
leader of ``abs(groupId.hashCode()) % offsets.topic.num.partitions``. Ferry must compute the same
partition as Kafka does so that tools reading ``__consumer_offsets`` (and operators reasoning
about it) agree, which means reproducing Java's ``String.hashCode`` over UTF-16 code units with
32-bit wrap-around, and Kafka's ``Utils.abs``, which maps ``Integer.MIN_VALUE`` to 0 instead of
leaving it negative.
"""
from __future__ import annotations

_INT32_MIN = -(2**31)
_UINT32_MASK = 0xFFFFFFFF


def java_string_hashcode(value: str) -> int:
    """Java's ``String.hashCode()``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units,
    as a signed 32-bit int. Characters outside the BMP count as their two surrogates, as in Java."""
    units = value.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & _UINT32_MASK
    return h - 2**32 if h >= 2**31 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: the absolute value of a 32-bit int, with ``Integer.MIN_VALUE``
    mapped to 0 (``Math.abs`` would return it unchanged, still negative)."""
    return 0 if n == _INT32_MIN else abs(n)


def partition_for_group(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition that coordinates ``group_id``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return kafka_abs(java_string_hashcode(group_id)) % num_partitions
