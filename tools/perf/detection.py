"""The failure-detection settings a benchmark's local cluster may override (heartbeat interval,
session timeout, tick interval), parsed the same way by every benchmark that takes them."""
from __future__ import annotations

import argparse
from typing import Any

FLAGS = ("session_timeout_ms", "heartbeat_interval_ms", "tick_interval_ms")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--session-timeout-ms", type=int, help="broker and controller session timeout "
                        "(default: LocalCluster's)")
    parser.add_argument("--heartbeat-interval-ms", type=int, help="broker heartbeat interval (default: LocalCluster's)")
    parser.add_argument("--tick-interval-ms", type=int, help="controller tick interval (default: LocalCluster's)")


def overrides(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(broker_overrides, controller_overrides)`` for ``LocalCluster``; a bad value is a usage error."""
    for name in FLAGS:
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    broker: dict[str, Any] = {}
    controller: dict[str, Any] = {}
    if args.session_timeout_ms is not None:  # the controllers fence on their own setting: both get it
        broker["session_timeout_ms"] = controller["session_timeout_ms"] = args.session_timeout_ms
    if args.heartbeat_interval_ms is not None:
        broker["heartbeat_interval_ms"] = args.heartbeat_interval_ms
    if args.tick_interval_ms is not None:
        controller["tick_interval_ms"] = args.tick_interval_ms
    return broker, controller


def settings(cluster: Any) -> dict[str, Any]:
    """The failure-detection settings ``cluster`` (a ``LocalCluster``) runs with."""
    from broker.config import BrokerConfig
    from metadata_quorum.config import ControllerConfig

    fields = BrokerConfig.__dataclass_fields__
    return {"broker": {k: cluster.broker_overrides.get(k, fields[k].default)
                       for k in ("heartbeat_interval_ms", "session_timeout_ms")},
            "controller_session_timeout_ms": cluster.controller_overrides.get(
                "session_timeout_ms", ControllerConfig.__dataclass_fields__["session_timeout_ms"].default),
            "controller_tick_interval_ms": cluster.controller_overrides.get(
                "tick_interval_ms", ControllerConfig.__dataclass_fields__["tick_interval_ms"].default)}
