"""Seeded random moves of one stream between brokers — graceful closes, crashes with WAL
recovery, stale owners poking at it — checking after every step that every acknowledged record
is readable exactly once, in order, and nothing else is."""
from __future__ import annotations

import random

import pytest

from metadata_quorum.errors import FerryError
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
            await brokers[target].recover_from_wal(wal_dirs[owner], sid)
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
            await brokers[target].recover_from_wal(wal_dirs[owner], sid)
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
        if s.wal._fd is not None:
            await s.close()
