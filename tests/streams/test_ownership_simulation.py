"""Seeded random moves of one stream between brokers — graceful closes, crashes with WAL
recovery, stale owners poking at it — checking after every step that every acknowledged record
is readable exactly once, in order, and nothing else is."""
from __future__ import annotations

import random

import pytest

from metadata_quorum.kernel.errors import FerryError
from stream_storage.memory_store import MemoryObjectStore
from tests.streams.conftest import batch_of, heartbeat, read_all, retrying


@pytest.mark.parametrize("seed", range(8))
async def test_random_moves_never_lose_or_duplicate_acknowledged_records(make_storage, controller, clock, tmp_path,
                                                                         seed: int) -> None:
    rng = random.Random(seed)
    store = retrying(MemoryObjectStore(seed=seed, error_rate=0.05, lost_reply_rate=0.05))
    wal_dirs = {b: str(tmp_path / f"sim-wal-{b}") for b in (1, 2, 3)}
    brokers = {b: make_storage(b, store, wal_dir=wal_dirs[b], upload_bytes=2048, upload_interval_ms=rng.choice(
        [5, 50, 60_000])) for b in (1, 2, 3)}
    for s in brokers.values():
        await s.start()
    sid = await brokers[1].create_stream()
    owner, epoch = 1, 0
    await brokers[owner].open_stream(sid, epoch)
    acked: list[str] = []
    moves = 0
    for step in range(60):
        action = rng.choices(["append", "append_many", "upload", "stale", "move", "crash", "zombie", "restart"],
                             [5, 2, 1, 1, 1, 1, 1, 1])[0]
        current = brokers[owner]
        if action == "append":
            tag = f"s{step}"
            await current.append(sid, batch_of(tag, count=rng.randint(1, 4)))
            acked.append(tag)
        elif action == "append_many":
            tags = [f"s{step}.{i}" for i in range(rng.randint(2, 6))]
            bases = [await current.append(sid, batch_of(t, count=1)) for t in tags]
            assert bases == sorted(bases)
            acked += tags
        elif action == "upload":
            await current.force_upload(sid)
        elif action == "stale":
            other = brokers[rng.choice([b for b in brokers if b != owner])]
            with pytest.raises(FerryError):
                await other.append(sid, batch_of("never"))
        elif action == "move":
            target = rng.choice([b for b in brokers if b != owner])
            await current.close_stream(sid)
            epoch += 1
            await brokers[target].open_stream(sid, epoch, previous_owner=owner)
            owner = target
        elif action == "restart":  # the owner crashes and comes back: it recovers its own WAL
            await current.abort()
            clock.skew_ms += 30_000  # its old incarnation's session expires
            for b, s in brokers.items():
                if b != owner:
                    heartbeat(controller, b, s.broker_epoch)
            restarted = make_storage(owner, store, wal_dir=wal_dirs[owner], upload_bytes=2048)
            await restarted.start()
            brokers[owner] = restarted
            epoch += 1
            await restarted.open_stream(sid, epoch, previous_owner=owner)
        elif action == "zombie":  # the owner is cut off but alive: taken over, it writes on unaware
            clock.skew_ms += 30_000
            target = rng.choice([b for b in brokers if b != owner])
            for b, s in brokers.items():
                if b != owner:
                    heartbeat(controller, b, s.broker_epoch)
            epoch += 1
            await brokers[target].open_stream(sid, epoch, previous_owner=owner)
            await brokers[target].recovery.recover_from_wal(wal_dirs[owner], sid)
            try:
                await current.append(sid, batch_of(f"zombie{step}"))  # acknowledged by a fenced owner
            except FerryError:
                pass
            with pytest.raises(FerryError):
                await current.force_upload(sid)  # its commit is refused: now it knows
            with pytest.raises(FerryError):
                await current.append(sid, batch_of("never"))
            heartbeat(controller, owner, current.broker_epoch)
            current.fence(sid)
            owner = target
        else:  # the owner crashes; another broker takes over and recovers the dead WAL
            await current.abort()
            clock.skew_ms += 30_000
            target = rng.choice([b for b in brokers if b != owner])
            for b, s in brokers.items():
                if b != owner:
                    heartbeat(controller, b, s.broker_epoch)
            epoch += 1
            await brokers[target].open_stream(sid, epoch, previous_owner=owner)
            await brokers[target].recovery.recover_from_wal(wal_dirs[owner], sid)
            restarted = make_storage(owner, store, wal_dir=wal_dirs[owner], upload_bytes=2048)
            await restarted.start()
            brokers[owner] = restarted
            owner = target
        moves += action in ("move", "crash", "zombie", "restart")
        if action in ("move", "crash", "zombie", "restart") or step == 59:
            got = await read_all(brokers[owner], sid)
            keys = [r.key.decode() for r in got]
            assert [k.rsplit("-", 1)[0] for k in keys if k.endswith("-0")] == acked
            assert [r.offset for r in got] == list(range(len(got)))
    assert moves > 0
    for s in brokers.values():
        if s.wal.is_open:
            await s.close()


@pytest.mark.parametrize("seed", range(6))
async def test_random_moves_of_streams_sharing_objects(make_storage, controller, clock, tmp_path, seed: int) -> None:
    """Three streams on three brokers, uploaded together in stream-set objects; a takeover of one
    stream makes its old owner's shared commit fail, which must fence that stream only and still
    commit the others."""
    rng = random.Random(1000 + seed)
    store = retrying(MemoryObjectStore(seed=seed, error_rate=0.05, lost_reply_rate=0.05))
    wal_dirs = {b: str(tmp_path / f"multi-wal-{b}") for b in (1, 2, 3)}

    def new_storage(b: int) -> object:
        return make_storage(b, store, wal_dir=wal_dirs[b], upload_bytes=1500, upload_interval_ms=5)

    brokers = {b: new_storage(b) for b in (1, 2, 3)}
    for s in brokers.values():
        await s.start()  # type: ignore[attr-defined]
    sids = [await brokers[1].create_stream() for _ in range(3)]  # type: ignore[attr-defined]
    owner = {sid: rng.choice([1, 2, 3]) for sid in sids}
    epoch = {sid: 0 for sid in sids}
    acked: dict[int, list[str]] = {sid: [] for sid in sids}
    for sid in sids:
        await brokers[owner[sid]].open_stream(sid, 0)  # type: ignore[attr-defined]

    def revive_all_but(dead: int | None) -> None:
        for b, s in brokers.items():
            if b != dead:
                heartbeat(controller, b, s.broker_epoch)  # type: ignore[attr-defined]

    async def take_over(sid: int, old: int, recover: bool) -> None:
        target = rng.choice([b for b in brokers if b != old])
        epoch[sid] += 1
        await brokers[target].open_stream(sid, epoch[sid], previous_owner=old)  # type: ignore[attr-defined]
        if recover:
            await brokers[target].recovery.recover_from_wal(wal_dirs[old], sid)  # type: ignore[attr-defined]
        owner[sid] = target

    for step in range(50):
        action = rng.choices(["append", "move", "crash", "zombie"], [8, 1, 1, 1])[0]
        if action == "append":
            chosen = rng.sample(sids, rng.randint(1, 3))

            async def one(sid: int, tag: str) -> None:
                await brokers[owner[sid]].append(sid, batch_of(tag, count=rng.randint(1, 3)))  # type: ignore[attr-defined]
                acked[sid].append(tag)

            import asyncio
            await asyncio.gather(*(one(sid, f"{sid}:{step}") for sid in chosen))
            continue
        if action == "move":
            sid = rng.choice(sids)
            await brokers[owner[sid]].close_stream(sid)  # type: ignore[attr-defined]
            await take_over(sid, owner[sid], recover=False)
        elif action == "crash":
            dead = rng.choice(sorted(set(owner.values())))
            await brokers[dead].abort()  # type: ignore[attr-defined]
            clock.skew_ms += 30_000
            revive_all_but(dead)
            for sid in sids:
                if owner[sid] == dead:
                    await take_over(sid, dead, recover=True)
            brokers[dead] = new_storage(dead)
            await brokers[dead].start()  # type: ignore[attr-defined]
        else:  # one stream of a live broker is taken over behind its back
            sid = rng.choice(sids)
            old = owner[sid]
            clock.skew_ms += 30_000
            revive_all_but(old)
            await take_over(sid, old, recover=True)
            revive_all_but(None)
            try:
                await brokers[old].append(sid, batch_of(f"zombie{step}"))  # type: ignore[attr-defined]
            except FerryError:
                pass
            with pytest.raises(FerryError):
                await brokers[old].force_upload(sid)  # type: ignore[attr-defined]
            brokers[old].fence(sid)  # type: ignore[attr-defined]
        for sid in sids:
            got = await read_all(brokers[owner[sid]], sid)  # type: ignore[arg-type]
            assert [r.key.decode().rsplit("-", 1)[0] for r in got if r.key.decode().endswith("-0")] == acked[sid]
            assert [r.offset for r in got] == list(range(len(got)))
    for s in brokers.values():
        if s.wal.is_open:  # type: ignore[attr-defined]
            await s.close()  # type: ignore[attr-defined]
