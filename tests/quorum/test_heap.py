"""The garbage-collector policy of controllers and brokers (metadata_quorum/kernel/heap.py)."""
from __future__ import annotations

import asyncio
import gc
import weakref

from metadata_quorum.kernel.heap import (THAW_MIN_OBJECTS, YOUNG_THRESHOLD, HeapKeeper, HeapState,
                                         after_full_collection)


def test_survivors_of_a_full_collection_are_frozen_until_the_frozen_heap_doubles() -> None:
    state = HeapState(frozen_at_thaw=300_000)
    assert after_full_collection(state, 310_000) == "freeze"
    assert after_full_collection(state, 599_999) == "freeze"
    assert after_full_collection(state, 600_000) == "thaw"
    # a small heap is never worth a thaw: walking it is cheap, and it cannot hold much garbage
    assert after_full_collection(HeapState(frozen_at_thaw=10), THAW_MIN_OBJECTS - 1) == "freeze"
    assert after_full_collection(HeapState(frozen_at_thaw=0), THAW_MIN_OBJECTS) == "thaw"


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_the_keeper_freezes_after_full_collections_and_a_thaw_reclaims_frozen_cycles() -> None:
    loop = asyncio.new_event_loop()
    keeper = HeapKeeper(loop)
    threshold = gc.get_threshold()
    try:
        keeper.install()
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        installed = gc.get_freeze_count()
        assert installed > 1000  # start-up's objects: this test process's modules at least
        # a cycle that becomes garbage only after it was frozen
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        alive = weakref.ref(a)
        gc.collect()
        loop.run_until_complete(asyncio.sleep(0))  # the freeze runs on the loop, after the collection
        assert keeper.freezes >= 1
        assert any(o is a for o in gc.get_objects()) is False  # frozen: out of the collector's walk
        del a, b
        gc.collect()
        assert alive() is not None  # frozen cyclic garbage waits for a thaw
        # the thaw: what the frozen cycle held is reclaimed by the one whole-heap collection
        keeper.state.frozen_at_thaw = 1
        keeper.state.thaw_min_objects = 1
        keeper._scheduled = False
        gc.collect()
        loop.run_until_complete(asyncio.sleep(0))
        assert keeper.thaws == 1
        assert alive() is None
        assert 0 < gc.get_freeze_count() <= keeper.state.frozen_at_thaw
    finally:
        keeper.uninstall()
        gc.unfreeze()
        gc.set_threshold(*threshold)
        loop.close()
