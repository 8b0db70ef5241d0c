"""Simulated power loss for a controller's Raft files: keep only what was synced.

A process killed with SIGKILL loses nothing the kernel already holds; a machine that loses power
loses everything not yet written back. To test the second on an ordinary machine, each Raft
process can record, at every sync, a copy of the file as it then was (``<file>.synced``); after
the controllers are killed, ``restore_synced_state`` puts every Raft file back to its last synced
copy, and deletes those never synced. That is the worst case a power loss allows (the kernel
wrote back nothing on its own).

Recording is switched on by ``FERRY_RAFT_RECORD_SYNCS=1`` in the controller's environment: a
fault-injection aid for tests, costing a copy of the journal per sync; never set it in production.
"""
from __future__ import annotations

import os
import shutil

RECORD_ENV = "FERRY_RAFT_RECORD_SYNCS"
SYNCED_SUFFIX = ".synced"
RAFT_FILES = ("raft.journal", "raft.journal.meta", "raft.dump")


def recording_enabled(environ: dict[str, str] | None = None) -> bool:
    return (environ if environ is not None else os.environ).get(RECORD_ENV, "") == "1"


class SyncRecorder:
    """A ``durable_log.SyncListener`` that copies each file as it stood when it was synced."""

    def synced(self, path: str) -> None:
        tmp = path + SYNCED_SUFFIX + ".tmp"
        shutil.copyfile(path, tmp)
        os.replace(tmp, path + SYNCED_SUFFIX)


def restore_synced_state(node_data_dir: str) -> dict[str, str]:
    """Power loss of one (stopped) controller: each Raft file goes back to its last synced copy, or
    away if it never was synced; temporary files go. Returns what happened to each file."""
    outcome: dict[str, str] = {}
    for name in sorted(os.listdir(node_data_dir)):
        if name.endswith(".tmp") or name.endswith(".new") or name.endswith(".new.meta"):
            os.remove(os.path.join(node_data_dir, name))
    for name in RAFT_FILES:
        path = os.path.join(node_data_dir, name)
        synced = path + SYNCED_SUFFIX
        if os.path.exists(synced):
            os.replace(synced, path)
            outcome[name] = "reverted to the last sync"
        elif os.path.exists(path):
            os.remove(path)
            outcome[name] = "lost (never synced)"
    return outcome
