"""Broker sessions as the active controller tracks them: when each broker was last heard from.

Heartbeats are not records (KRaft keeps them in memory too): only the active controller knows
them, a controller that loses leadership forgets them, and a newly active one gives every
unfenced broker a full session from its activation, since it cannot know when they last beat.
The lease argument rests on one rule: a heartbeat is counted no earlier than it *arrived*, and a
broker's own lease runs from when it *sent* it, which came first; so the controller never deems
a session expired before the broker's lease has run out. No clock is read here: every time is
handed in.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from metadata_quorum.image import MetadataImage


@dataclass
class ObserverState:
    """A broker as the leader sees it through heartbeats (KRaft observers)."""

    metadata_offset: int = -1
    last_fetch_ms: int = 0
    last_caught_up_ms: int = 0


class BrokerSessions:
    """Last heartbeat time per broker id, and what each broker's heartbeats said about its log."""

    def __init__(self) -> None:
        self.last_heartbeat_ms: dict[int, int] = {}
        self.observers: dict[int, ObserverState] = {}

    def note_arrival(self, image: MetadataImage, args: Mapping[str, Any], now_ms: int) -> None:
        """A heartbeat of a registered broker incarnation renews its session when it *arrives*.

        Run, it may wait: behind commands in flight when Raft commits slowly, behind a long group.
        Counting it only then fenced live brokers of a busy controller, and fencing moves their
        partitions (more load, more fencing).
        """
        broker_id, broker_epoch = args.get("broker_id"), args.get("broker_epoch")
        if type(broker_id) is not int or type(broker_epoch) is not int:
            return  # the operation itself reports the bad input
        reg = image.cluster.brokers.get(broker_id)
        if reg is not None and reg.broker_epoch == broker_epoch:
            self.last_heartbeat_ms[broker_id] = max(self.last_heartbeat_ms.get(broker_id, 0), now_ms)

    def note_heartbeat(self, args: Mapping[str, Any], high_watermark: int, now_ms: int) -> None:
        """A heartbeat the operation accepted (current broker epoch): renew and record its offset."""
        try:
            broker_id = int(args["broker_id"])
            metadata_offset = int(args.get("metadata_offset", -1))
        except (KeyError, TypeError, ValueError):
            return  # the operation itself reports the bad input
        self.last_heartbeat_ms[broker_id] = now_ms
        obs = self.observers.setdefault(broker_id, ObserverState())
        obs.metadata_offset = metadata_offset
        obs.last_fetch_ms = now_ms
        if metadata_offset + 1 >= high_watermark:
            obs.last_caught_up_ms = now_ms

    def start(self, image: MetadataImage, now_ms: int) -> None:
        """On activation: every unfenced broker gets a full session from ``now_ms``, so one that
        died during the failover is still fenced one session later."""
        for broker_id, reg in image.cluster.brokers.items():
            if not reg.fenced:
                self.last_heartbeat_ms.setdefault(broker_id, now_ms)

    def extend(self, held_ms: float) -> None:
        """Credit ``held_ms`` to every session: time the controller could not read heartbeats.

        Fencing later never breaks the lease argument (a broker stops acknowledging when its own
        lease runs out); a broker that really died is fenced that much later.
        """
        credit = int(held_ms)
        for broker_id in self.last_heartbeat_ms:
            self.last_heartbeat_ms[broker_id] += credit

    def forget(self) -> None:
        """Leadership lost: another controller tracks the sessions now."""
        self.last_heartbeat_ms.clear()
