"""KIP-928 for storage=local partitions at the controller: a replica in a dir its broker reports
full leaves the ISR, and leadership goes to an in-sync replica elsewhere (no process, no socket)."""
from __future__ import annotations

from tests.quorum.quorum_helpers import controller, epoch_of, partition, run


def heartbeat(image, broker_id: int, saturated: list[str]):  # type: ignore[no-untyped-def]
    return run(image, "broker_heartbeat", {"broker_id": broker_id, "broker_epoch": epoch_of(image, broker_id),
                                           "metadata_offset": image.offset, "saturated_log_dirs": saturated})


def test_a_full_dir_hands_its_local_leaderships_to_in_sync_replicas_elsewhere() -> None:
    c = controller(3)
    created = run(c.image, "create_topics", {"topics": [
        {"name": "loc", "storage": "local", "assignments": {"0": [0, 1, 2], "1": [1, 0, 2], "2": [0, 1, 2]}},
        {"name": "s3t", "assignments": {"0": [0]}}]})
    image = created.image
    p0, p1, p2 = (partition(image, "loc", i) for i in range(3))
    full = p0.directories[0]
    assert p0.leader == 0 and p1.leader == 1
    out = heartbeat(image, 0, [full])
    after = [partition(out.image, "loc", i) for i in range(3)]
    for before, now in zip((p0, p1, p2), after, strict=True):
        on_full_dir = before.directories[before.replicas.index(0)] == full
        if on_full_dir:
            assert 0 not in now.isr, "a replica that cannot append leaves the ISR"
            assert now.leader != 0 and now.leader in now.isr, "an in-sync replica elsewhere leads"
            assert now.leader_epoch > before.leader_epoch or before.leader != 0
        else:
            assert now == before, "replicas in other dirs are left alone"
    assert partition(out.image, "s3t", 0).leader == 0, "s3 partitions keep their owner"
    again = heartbeat(out.image, 0, [full])
    assert again.records == (), "reported again: nothing more to do"


def test_the_last_in_sync_replica_keeps_leading_in_a_full_dir() -> None:
    c = controller(2)
    image = run(c.image, "create_topics", {"topics": [
        {"name": "solo", "storage": "local", "assignments": {"0": [0]}}]}).image
    p = partition(image, "solo", 0)
    out = heartbeat(image, 0, [p.directories[0]])
    assert partition(out.image, "solo", 0).leader == 0 and partition(out.image, "solo", 0).isr == (0,)
