"""A chaos run's full disks: each broker's log dir a small tmpfs, filled and emptied by the
``disk_full`` fault (``runner.py``)."""
from __future__ import annotations

import os
import shutil
import subprocess

TMPFS_BYTES = 64 * 1024 * 1024
RESERVED_BYTES = 4 * 1024 * 1024  # the log dirs' KIP-928 reserve: below it a dir is saturated
FILLER = "chaos-filler"


def mount_tmpfs(path: str, size_bytes: int) -> str | None:
    """Mount a tmpfs at ``path``; the reason it could not, else None."""
    os.makedirs(path, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", path],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip() or f"mount exited with {done.returncode}")


def unmount(path: str) -> None:
    subprocess.run(["umount", "-l", path], capture_output=True, timeout=10)


def fill(path: str, size: int) -> None:
    """A file of ``size`` bytes (allocated, so the dir's free space really drops)."""
    with open(path, "wb") as f:
        if size > 0:
            try:
                os.posix_fallocate(f.fileno(), 0, size)
            except OSError:
                f.write(b"\0" * size)


def save_and_unmount(path: str) -> None:
    """Keep what the tmpfs held (meta.properties, partition dirs) beside it, then unmount it."""
    keep = path + ".tmpfs-copy"
    try:
        shutil.copytree(path, keep, ignore=shutil.ignore_patterns(FILLER, ".ferry-reserved"), dirs_exist_ok=True)
    except OSError:
        pass
    unmount(path)
