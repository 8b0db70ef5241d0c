"""LazyEvent and Pulse: asyncio.Event / Condition semantics without a waiter list until one waits."""
from __future__ import annotations

import asyncio

import pytest

from metadata_quorum.kernel.signals import LazyEvent, Pulse


@pytest.mark.asyncio
async def test_lazy_event_wakes_every_waiter_and_stays_set() -> None:
    ev = LazyEvent()
    assert not ev.is_set()
    waiters = [asyncio.ensure_future(ev.wait()) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    ev.set()
    ev.clear()  # cleared before they run: those registered before set still wake, as with asyncio.Event
    assert await asyncio.gather(*waiters) == [True, True, True]
    ev.set()
    assert await ev.wait() is True  # set: no wait at all


@pytest.mark.asyncio
async def test_a_timed_out_waiter_is_forgotten() -> None:
    ev = LazyEvent()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(ev.wait(), 0.01)
    assert ev._waiters == []
    ev.set()


@pytest.mark.asyncio
async def test_pulse_waits_for_its_predicate() -> None:
    pulse = Pulse()
    state = {"n": 0}
    waiter = asyncio.ensure_future(pulse.wait_for(lambda: state["n"] >= 2))
    for _ in range(2):
        await asyncio.sleep(0)
        assert not waiter.done()
        state["n"] += 1
        pulse.notify_all()
    await asyncio.wait_for(waiter, 1)
    await asyncio.wait_for(pulse.wait_for(lambda: True), 1)  # holds already: returns at once
