"""Controller configuration: one JSON file shared by the whole quorum, ``--id`` picks the node.

Example::

    {
      "cluster_id": "ferry-local",
      "data_dir": "/tmp/ferry/controllers",
      "controllers": {
        "1": {"raft": "127.0.0.1:19001", "http": "127.0.0.1:18001"},
        "2": {"raft": "127.0.0.1:19002", "http": "127.0.0.1:18002"},
        "3": {"raft": "127.0.0.1:19003", "http": "127.0.0.1:18003"}
      },
      "session_timeout_ms": 9000
    }

Each controller keeps its Raft journal and full dump in ``data_dir/controller-<id>``. Every other
key has a default tuned for loopback latency (see docs/controller-api.md).
"""
from __future__ import annotations

import base64
import os
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from metadata_quorum.kernel.auth import ControllerSecurity
from metadata_quorum.kernel.errors import FerryError
from metadata_quorum.kernel.strict_config import PositiveFloat, PositiveInt, build, invalid, load_json


@dataclass(frozen=True)
class PeerAddress:
    """Where one controller listens: its Raft port and its HTTP API (both ``host:port``)."""

    raft: str
    http: str

    @property
    def url(self) -> str:
        return f"http://{self.http}"


@dataclass(frozen=True)
class RaftSettings:
    """pysyncobj settings, chosen for latency on a LAN (measured in dependencies.md).

    ``append_entries_use_batch=False`` sends every command at once (p50 ≈ 0.4 ms instead of
    ≈ 100 ms). Election timeouts of 0.5-0.8 s give a new leader in well under a second after a
    crash while riding out the tick-thread stalls of a saturated 2-core machine (up to ~0.5 s were
    measured with 2,000 partitions moving; 0.2-0.4 s elected a new leader several times a move).
    ``connection_timeout_s``: pysyncobj drops a connection that read nothing for this long; the Raft
    process sends keepalives every quarter of it, so followers can still reach each other when the
    leader dies (without them every failover after a quiet spell needed a second election round).

    ``append_entries_batch_size_bytes`` is far above any command: pysyncobj sends a single entry
    larger than it in pieces, and its last piece is marked by comparing against the entry's size
    before pickling, so the follower can unpickle a truncated entry (seen with 2,000 partitions
    moved at once: followers failed every append and the quorum kept electing). Larger socket
    buffers let a command of several MiB cross in a few reads.

    ``unsafe_no_fsync``: do not sync the journal before acknowledging an append (pysyncobj's own
    behaviour). A process crash still loses nothing, a power loss of a majority can lose
    acknowledged metadata (metadata_quorum/durable_log.py); for benchmarks and comparisons only.
    """

    append_entries_use_batch: bool = False
    raft_min_timeout_s: PositiveFloat = 0.5
    raft_max_timeout_s: PositiveFloat = 0.8
    append_entries_period_s: PositiveFloat = 0.05
    connection_retry_time_s: PositiveFloat = 0.2
    connection_timeout_s: PositiveFloat = 3.5
    auto_tick_period_s: PositiveFloat = 0.05
    log_compaction_min_entries: PositiveInt = 5000
    log_compaction_min_time_s: PositiveFloat = 300.0
    leader_fallback_timeout_s: PositiveFloat = 5.0
    append_entries_batch_size_bytes: PositiveInt = 256 * 1024 * 1024
    socket_buffer_bytes: PositiveInt = 4 * 1024 * 1024
    unsafe_no_fsync: bool = False


@dataclass(frozen=True)
class ControllerConfig:
    """Everything one controller process needs; ``node_id`` selects this node in ``controllers``."""

    node_id: int
    controllers: dict[int, PeerAddress]
    data_dir: str
    cluster_id: str = "ferry-local"
    session_timeout_ms: PositiveInt = 9000
    reelection_timeout_ms: PositiveInt = 2000
    tick_interval_ms: PositiveInt = 200
    commit_timeout_ms: PositiveInt = 5000
    request_timeout_ms: PositiveInt = 10000
    max_inflight_commands: PositiveInt = 256
    max_inflight_records: PositiveInt = 8000
    max_group_ops: PositiveInt = 1000
    max_group_records: PositiveInt = 20000
    max_command_records: PositiveInt = 4000
    max_queued_ops: PositiveInt = 20000
    write_slice_ms: PositiveInt = 50
    log_retention_records: PositiveInt = 100_000
    long_poll_max_wait_ms: PositiveInt = 30_000
    max_partitions_per_request: PositiveInt = 10_000
    raft: RaftSettings = field(default_factory=RaftSettings)
    # When set: bearer tokens on the HTTP API and pysyncobj's password on Raft (metadata_quorum/kernel/auth.py).
    security: ControllerSecurity | None = None

    @property
    def me(self) -> PeerAddress:
        return self.controllers[self.node_id]

    @property
    def node_data_dir(self) -> str:
        return os.path.join(self.data_dir, f"controller-{self.node_id}")

    @property
    def http_host(self) -> str:
        return self.me.http.rsplit(":", 1)[0]

    @property
    def http_port(self) -> int:
        return int(self.me.http.rsplit(":", 1)[1])

    def peer_raft_addresses(self) -> list[str]:
        return [p.raft for nid, p in sorted(self.controllers.items()) if nid != self.node_id]

    def node_id_for_raft(self, raft_address: str) -> int | None:
        for nid, peer in self.controllers.items():
            if peer.raft == raft_address:
                return nid
        return None

    def directory_id(self, node_id: int) -> str:
        """A stable id for a controller's metadata directory, printed as Kafka prints a Uuid."""
        name = f"{self.cluster_id}/{node_id}/{os.path.abspath(os.path.join(self.data_dir, f'controller-{node_id}'))}"
        raw = uuid.uuid5(uuid.NAMESPACE_URL, name).bytes
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _bad(message: str) -> FerryError:
    return invalid(message)


def parse_config(data: dict[str, Any], node_id: int) -> ControllerConfig:
    """Build and check a config from its JSON form (metadata_quorum/kernel/strict_config.py: an unknown
    key or a bad value is INVALID_CONFIG naming the key)."""
    if not isinstance(data, dict):
        raise _bad("the controller config must be a JSON object")
    raw_peers = data.get("controllers")
    if not isinstance(raw_peers, dict) or not raw_peers:
        raise _bad("'controllers' must map controller ids to {\"raft\": host:port, \"http\": host:port}")
    peers: dict[int, PeerAddress] = {}
    for key, value in raw_peers.items():
        try:
            nid = int(key)
        except ValueError:
            raise _bad(f"controller id {key!r} is not an integer") from None
        if nid < 0:
            raise _bad(f"controller setting 'controllers.{key}': a controller id must be >= 0")
        if not isinstance(value, dict) or "raft" not in value or "http" not in value:
            raise _bad(f"controller {nid} needs both 'raft' and 'http' addresses")
        extra_keys = sorted(set(value) - {"raft", "http"})
        if extra_keys:
            raise _bad(f"unknown controller setting 'controllers.{key}.{extra_keys[0]}'; known: http, raft")
        for kind in ("raft", "http"):
            addr = value[kind]
            host, _, port = addr.rpartition(":") if isinstance(addr, str) else ("", "", "")
            if not host or not port.isdigit() or not 0 < int(port) <= 65535:
                raise _bad(f"controller setting 'controllers.{key}.{kind}': {addr!r} is not host:port "
                           "with a port from 1 to 65535")
        peers[nid] = PeerAddress(raft=value["raft"], http=value["http"])
    if node_id not in peers:
        raise _bad(f"controller id {node_id} is not in 'controllers' ({sorted(peers)})")
    if "data_dir" not in data:
        raise _bad("'data_dir' is required")
    raw = {k: v for k, v in data.items() if k != "controllers"}
    if len(peers) == 1:
        raft_raw = raw.get("raft", {})
        if isinstance(raft_raw, dict) and "auto_tick_period_s" not in raft_raw:
            # Alone, a node sees its own commit only on its next tick (no follower reply wakes it).
            raw["raft"] = {**raft_raw, "auto_tick_period_s": 0.005}
    config = build(ControllerConfig, raw, "controller", given={"node_id": node_id, "controllers": peers})
    if config.raft.raft_min_timeout_s <= 3 * config.raft.append_entries_period_s:
        raise _bad("controller setting 'raft.raft_min_timeout_s' must exceed 3 × 'raft.append_entries_period_s'")
    if config.security is not None:
        config.security.check("controller")
    if config.raft.raft_max_timeout_s < config.raft.raft_min_timeout_s:
        raise _bad("controller setting 'raft.raft_max_timeout_s' must not be below 'raft.raft_min_timeout_s'")
    return config


def load_config(path: str, node_id: int) -> ControllerConfig:
    return parse_config(load_json(path, "controller"), node_id)


def quorum_config_json(
    controllers: dict[int, PeerAddress], data_dir: str, **overrides: Any
) -> dict[str, Any]:
    """The JSON form of a quorum config (what tools write for ``ferry controller --config``)."""
    body: dict[str, Any] = {
        "controllers": {str(nid): asdict(peer) for nid, peer in sorted(controllers.items())},
        "data_dir": data_dir,
    }
    body.update(overrides)
    return body
