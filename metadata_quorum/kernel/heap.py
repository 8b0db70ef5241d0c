"""How a long-running Ferry process keeps Python's cyclic garbage collector off its event loop.

A broker or controller holding 10,000 partitions keeps ~1 million objects alive: the metadata
image (immutable, replaced piece by piece on every record), stream handles, slots. CPython's
full collection walks every tracked object; it runs each time the objects promoted since the
last one reach a quarter of the heap, which a large move does every few seconds. Measured on a
10,000-partition move: collections took ~45 % of a broker's CPU and ~30 % of the active
controller's, in pauses of up to ~1 s on the event loop — heartbeats waited behind them.

The policy (``after_full_collection``, pure):

- after a full collection, what survived it goes to the permanent generation (``gc.freeze``):
  later collections walk only what was allocated since. Frozen objects are still freed by
  reference counting when they die, which is how the image's replaced pieces go (they hold no
  cycles); only cyclic garbage made of frozen objects waits;
- so that such garbage cannot pile up, once the frozen heap has doubled since the last thaw
  everything is unfrozen and collected once: one whole-heap walk per doubling of the heap, not
  one per quarter of it;
- young collections run every ``YOUNG_THRESHOLD`` allocations instead of 700: most of what a
  request allocates dies before then and is never walked.
"""
from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass
from typing import Any, Literal

YOUNG_THRESHOLD = 20_000
THAW_GROWTH = 2.0  # the frozen heap's growth since the last thaw that triggers a whole-heap collection
THAW_MIN_OBJECTS = 200_000  # below this, a whole-heap walk is cheap: no reason to wait for one

Action = Literal["freeze", "thaw"]


@dataclass
class HeapState:
    """What the policy remembers between collections."""

    frozen_at_thaw: int = 0
    thaw_min_objects: int = THAW_MIN_OBJECTS


def after_full_collection(state: HeapState, frozen_now: int) -> Action:
    """After a full collection: freeze its survivors, or (the frozen heap doubled) thaw everything
    so that the next full collection reclaims cyclic garbage among the frozen."""
    if frozen_now >= state.thaw_min_objects and frozen_now >= THAW_GROWTH * max(state.frozen_at_thaw, 1):
        return "thaw"
    return "freeze"


class HeapKeeper:
    """Applies the policy from ``gc.callbacks``; the freeze itself runs on the event loop, after
    the collection (the collector's own lists must not change under it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.state = HeapState(frozen_at_thaw=gc.get_freeze_count())
        self._scheduled = False
        self.freezes = 0
        self.thaws = 0

    def install(self) -> None:
        gc.collect()
        gc.freeze()  # what start-up allocated (modules, boto3's models, aiohttp) lives as long as the process
        self.state.frozen_at_thaw = gc.get_freeze_count()
        _young, older, oldest = gc.get_threshold()
        gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
        gc.callbacks.append(self._on_gc)

    def uninstall(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or info.get("generation") != 2 or self._scheduled:
            return
        self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._after_full)
        except RuntimeError:  # the loop is closed
            self._scheduled = False

    def _after_full(self) -> None:
        self._scheduled = False
        if after_full_collection(self.state, gc.get_freeze_count()) == "thaw":
            gc.unfreeze()
            gc.collect()  # the one whole-heap walk per doubling: reclaims cycles among the frozen
            self.thaws += 1
            self.state.frozen_at_thaw = 0
        gc.freeze()
        self.freezes += 1
        if self.state.frozen_at_thaw == 0:
            self.state.frozen_at_thaw = gc.get_freeze_count()
