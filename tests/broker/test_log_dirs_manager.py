"""Log dirs on disk: stable ids, KIP-113 start-up recovery, the -future/-delete move, the reserve."""
from __future__ import annotations

import os

from broker.log_dirs import LogDirState, delete_dir_name, future_dir_name
from broker.log_dirs_manager import RESERVED_FILE, LogDirsManager, _move_replica_dir

UID = "0123456789abcdef0123456789abcdef"


def _replica(root: str, name: str, topic: str, partition: int) -> None:
    os.makedirs(os.path.join(root, name))
    with open(os.path.join(root, name, "partition.metadata"), "w") as f:
        f.write(f"version: 0\ntopic_id: x\ntopic: {topic}\npartition: {partition}\n")


def test_ids_are_stable_and_leftovers_recovered(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path / "d0")
    m = LogDirsManager([d])
    m.prepare()
    first_id = m.dirs[0].dir_id
    _replica(d, "a-0", "a", 0)
    _replica(d, future_dir_name("a", 0, UID), "a", 0)  # unfinished move: current copy wins
    _replica(d, future_dir_name("b", 1, UID), "b", 1)  # swap half done: promoted
    _replica(d, delete_dir_name("c", 2, UID), "c", 2)  # retired copy: deleted
    again = LogDirsManager([d])
    again.prepare()
    assert again.dirs[0].dir_id == first_id
    assert sorted(n for n in os.listdir(d) if not n.startswith((".", "meta"))) == ["a-0", "b-1"]


def test_move_through_future_dir(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src, dst = str(tmp_path / "d0"), str(tmp_path / "d1")
    os.makedirs(src)
    os.makedirs(dst)
    _replica(src, "t-3", "t", 3)
    _move_replica_dir(src, dst, "t", 3)
    assert os.listdir(src) == []
    assert os.listdir(dst) == ["t-3"]
    assert "topic: t" in open(os.path.join(dst, "t-3", "partition.metadata")).read()


def test_reserve_file_held_and_dir_state_reported(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path / "d0")
    m = LogDirsManager([d], reserved_bytes=4096)
    m.prepare()
    assert os.path.getsize(os.path.join(d, RESERVED_FILE)) == 4096
    assert m.info(d).state is LogDirState.ONLINE and not m.is_saturated(d)
    assert m.heartbeat_dirs() == ([], [])
    huge = LogDirsManager([str(tmp_path / "d1")], reserved_bytes=1 << 60)  # more than any disk has free
    huge.prepare()
    assert huge.info(str(tmp_path / "d1")).state is LogDirState.SATURATED
    assert huge.heartbeat_dirs() == ([huge.dirs[0].dir_id], [])
