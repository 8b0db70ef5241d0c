"""An immutable mapping whose updates copy only the buckets they touch.

The metadata image holds tens of thousands of partitions, streams and keys, and a new image is
built after every operation. Copying whole dicts each time would make a one-record change cost
the size of the cluster; ``PMap.update`` copies the bucket index (256 slots) and the few buckets
that changed, and shares the rest with the previous image (maps of up to 32 entries are one
plain bucket). Bucketing is deterministic (no
per-process string hash), so iteration order is the same in every process.
"""
from __future__ import annotations

import zlib
from typing import Any, Generic, Iterator, Mapping, TypeVar, overload

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

_BUCKETS = 256
_SMALL = 32  # up to this many entries a map is one plain bucket (cheap to iterate and copy)
#: value passed to :meth:`PMap.update` to delete a key.
REMOVE: Any = object()


def _hash(key: object) -> int:
    if isinstance(key, int):
        return key
    if isinstance(key, str):
        return zlib.crc32(key.encode())
    return zlib.crc32(repr(key).encode())


class PMap(Mapping[K, V], Generic[K, V]):
    __slots__ = ("_buckets", "_size", "_mask")

    def __init__(self, items: Mapping[K, V] | None = None) -> None:
        items = items or {}
        if len(items) <= _SMALL:
            self._buckets: tuple[dict[K, V], ...] = (dict(items),)
            self._mask = 0
        else:
            buckets: list[dict[K, V]] = [{} for _ in range(_BUCKETS)]
            for key, value in items.items():
                buckets[_hash(key) & (_BUCKETS - 1)][key] = value
            self._buckets = tuple(buckets)
            self._mask = _BUCKETS - 1
        self._size = len(items)

    def _bucket_of(self, key: object) -> int:
        return _hash(key) & self._mask if self._mask else 0

    def __getitem__(self, key: K) -> V:
        return self._buckets[self._bucket_of(key)][key]

    @overload
    def get(self, key: K, /) -> V | None: ...

    @overload
    def get(self, key: K, default: V | T, /) -> V | T: ...

    def get(self, key: K, default: object = None, /) -> object:
        return self._buckets[self._bucket_of(key)].get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._buckets[self._bucket_of(key)]

    def __iter__(self) -> Iterator[K]:
        if not self._mask:
            return iter(self._buckets[0])
        return (key for bucket in self._buckets if bucket for key in bucket)

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"PMap({dict(self.items())!r})"

    def update(self, changes: Mapping[K, Any]) -> "PMap[K, V]":
        """A new map with ``changes`` applied (value ``REMOVE`` deletes); ``self`` is unchanged."""
        if not changes:
            return self
        if not self._mask:  # small: copy the one bucket, and spread it out if it grew large
            merged: dict[K, V] = dict(self._buckets[0])
            for key, value in changes.items():
                if value is REMOVE:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            return PMap(merged)
        buckets = list(self._buckets)
        copied: set[int] = set()
        size = self._size
        for key, value in changes.items():
            i = _hash(key) & self._mask
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
        new: PMap[K, V] = PMap.__new__(PMap)
        new._buckets = tuple(buckets)
        new._mask = self._mask
        new._size = size
        return new

    def shares_bucket_with(self, other: "PMap[K, V]", key: K) -> bool:
        """Whether ``key``'s bucket is the very same object in both maps (structural sharing)."""
        return self._buckets[self._bucket_of(key)] is other._buckets[other._bucket_of(key)]


EMPTY_PMAP: PMap[Any, Any] = PMap()
