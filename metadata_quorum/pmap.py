"""An immutable mapping whose updates copy only the buckets they touch.

The metadata image holds tens of thousands of partitions, streams and keys, and a new image is
built after every operation. Copying whole dicts each time would make a one-record change cost
the size of the cluster; ``PMap.update`` copies the bucket index (256 slots) and the few buckets
that changed, and shares the rest with the previous image. Bucketing is deterministic (no
per-process string hash), so iteration order is the same in every process.
"""
from __future__ import annotations

import zlib
from typing import Any, Generic, Iterator, Mapping, TypeVar

K = TypeVar("K")
V = TypeVar("V")

_BUCKETS = 256
_MASK = _BUCKETS - 1
#: value passed to :meth:`PMap.update` to delete a key.
REMOVE: Any = object()


def _index(key: Any) -> int:
    if isinstance(key, int):
        return key & _MASK
    if isinstance(key, str):
        return zlib.crc32(key.encode()) & _MASK
    return zlib.crc32(repr(key).encode()) & _MASK


_EMPTY_BUCKETS: tuple[dict[Any, Any], ...] = tuple({} for _ in range(_BUCKETS))


class PMap(Mapping[K, V], Generic[K, V]):
    __slots__ = ("_buckets", "_size")

    def __init__(self, items: Mapping[K, V] | None = None) -> None:
        if not items:
            self._buckets = _EMPTY_BUCKETS
            self._size = 0
            return
        buckets: list[dict[Any, Any]] = [{} for _ in range(_BUCKETS)]
        for key, value in items.items():
            buckets[_index(key)][key] = value
        self._buckets = tuple(buckets)
        self._size = sum(len(b) for b in buckets)

    def __getitem__(self, key: K) -> V:
        return self._buckets[_index(key)][key]  # type: ignore[no-any-return]

    def get(self, key: K, default: Any = None) -> Any:
        return self._buckets[_index(key)].get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._buckets[_index(key)]

    def __iter__(self) -> Iterator[K]:
        for bucket in self._buckets:
            yield from bucket

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"PMap({dict(self.items())!r})"

    def update(self, changes: Mapping[K, Any]) -> "PMap[K, V]":
        """A new map with ``changes`` applied (value ``REMOVE`` deletes); ``self`` is unchanged."""
        if not changes:
            return self
        buckets = list(self._buckets)
        copied: set[int] = set()
        size = self._size
        for key, value in changes.items():
            i = _index(key)
            if i not in copied:
                buckets[i] = dict(buckets[i])
                copied.add(i)
            bucket = buckets[i]
            if value is REMOVE:
                if key in bucket:
                    del bucket[key]
                    size -= 1
            else:
                if key not in bucket:
                    size += 1
                bucket[key] = value
        new = PMap.__new__(PMap)
        new._buckets = tuple(buckets)
        new._size = size
        return new

    def shares_bucket_with(self, other: "PMap[K, V]", key: K) -> bool:
        """Whether ``key``'s bucket is the very same object in both maps (structural sharing)."""
        i = _index(key)
        return self._buckets[i] is other._buckets[i]


EMPTY_PMAP: PMap[Any, Any] = PMap()
