"""The seeded fault schedule of a chaos run (pure: the same seed gives the same schedule).

Three tracks, each a sequence of non-overlapping events:

- **process** faults, one at a time so the cluster stays within what it promises to survive (one
  controller of three, one broker at a time): ``broker_kill`` (kill -9, restart at the end),
  ``controller_kill`` (kill -9 of the active controller, restart at the end), ``owner_pause``
  (SIGSTOP of a partition's owner, SIGCONT at the end: longer than the session timeout it is
  fenced while paused and must not acknowledge after it resumes) and ``disk_full`` (a broker's
  log dir filled to below its reserve);
- **s3** faults, which may overlap the process ones: ``s3_errors`` (a fraction of requests fail
  with 503 SlowDown before reaching S3, or with 500 after S3 applied them) and ``s3_latency``;
- **reassign**: instant moves of one partition to another broker.

With ``--net`` (every node in its own network namespace, ``net.py``) the **network** faults join
the process track, one at a time like the process faults (a cut controller and a killed one
together would be more than the cluster promises): ``net_isolate`` (a broker or the active
controller cut off from everyone), ``net_broker_controllers`` (a broker cut from every controller,
S3 and clients still reachable), ``net_broker_s3``, ``net_leader_followers`` (the active
controller cut from the other controllers, brokers still reach it), ``net_one_way`` (one node can
no longer send to another), ``net_clients_broker`` (the clients cut from one broker),
``net_flap`` (a node's link down and up every few hundred ms) and ``clock_step`` (one process's
wall clock stepped by ±30 s or ±5 min and back at the fault's end, a broker's sometimes while it
is cut from the controllers; ``clock_faults.py``). Without them a seed's schedule is what it
always was.

Targets that depend on the cluster's state at the time (the active controller, a partition's
owner) are resolved by the runner; the schedule names the partition or broker by index. A seed
replays the schedule and the fault proxy's choices, not the machine's thread timings.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from itertools import pairwise

PROCESS_FAULTS = ("broker_kill", "controller_kill", "owner_pause", "disk_full")
S3_FAULTS = ("s3_errors", "s3_latency")
REASSIGN = "reassign"
ALL_FAULTS = PROCESS_FAULTS + S3_FAULTS + (REASSIGN,)
LINK_FAULTS = ("net_isolate", "net_broker_controllers", "net_broker_s3", "net_leader_followers", "net_one_way",
               "net_clients_broker", "net_flap")
NET_FAULTS = LINK_FAULTS + ("clock_step",)  # what --net adds: the network's faults and a clock step
KNOWN_FAULTS = ALL_FAULTS + NET_FAULTS
# the nodes a network fault names; "leader" is the active controller when the fault fires
NET_NODES = ("leader", "c1", "c2", "c3", "b1", "b2", "b3", "s3", "clients")

# (shortest, longest) seconds a fault lasts; pauses straddle the local cluster's 4 s session.
DURATION_S: dict[str, tuple[float, float]] = {
    "broker_kill": (1.0, 5.0),
    "controller_kill": (0.5, 4.0),
    "owner_pause": (1.0, 6.0),
    "disk_full": (2.0, 6.0),
    "s3_errors": (2.0, 8.0),
    "s3_latency": (2.0, 8.0),
    "net_isolate": (1.0, 8.0),
    "net_broker_controllers": (1.0, 8.0),
    "net_broker_s3": (1.0, 8.0),
    "net_leader_followers": (1.0, 8.0),
    "net_one_way": (1.0, 8.0),
    "net_clients_broker": (1.0, 8.0),
    "net_flap": (2.0, 8.0),
    "clock_step": (1.0, 8.0),
}


@dataclass(frozen=True)
class FaultEvent:
    """One fault from ``start_s`` to ``end_s`` (equal for an instant event), seconds from the run's start.

    ``target`` is a broker id (``broker_kill``, ``disk_full``, ``reassign``'s destination) or a
    partition index (``owner_pause``, ``reassign``'s partition is ``partition``); ``rate`` and
    ``latency_ms`` parameterise the S3 faults.
    """

    start_s: float
    end_s: float
    kind: str
    target: int | None = None
    partition: int | None = None
    rate: float = 0.0
    after_fraction: float = 0.0
    latency_ms: int = 0
    node: str = ""  # network faults: the node cut (a NET_NODES name)
    peer: str = ""  # net_one_way: node can no longer send to peer
    period_ms: int = 0  # net_flap: the link is down and up for period_ms each
    step_ms: int = 0  # clock_step: the wall clock's offset from start_s to end_s

    def what(self) -> str:
        return {"net_isolate": f"isolate {self.node}",
                "net_broker_controllers": f"cut broker {self.target} from the controllers",
                "net_broker_s3": f"cut broker {self.target} from S3",
                "net_leader_followers": "cut the active controller from its followers",
                "net_one_way": f"{self.node} cannot send to {self.peer}",
                "net_clients_broker": f"cut the clients from broker {self.target}",
                "net_flap": f"flap {self.node}'s link every {self.period_ms} ms",
                "clock_step": f"step {self.node}'s wall clock {self.step_ms / 1000:+g} s and back"
                              + (" while cut from the controllers" if self.peer else ""),
                "broker_kill": f"kill -9 broker {self.target}",
                "controller_kill": "kill -9 the active controller",
                "owner_pause": f"SIGSTOP the owner of partition {self.partition}",
                "disk_full": f"fill broker {self.target}'s log dir",
                "s3_errors": f"S3 errors {self.rate:.0%} ({self.after_fraction:.0%} after applying)",
                "s3_latency": f"S3 latency {self.latency_ms} ms",
                "reassign": f"move partition {self.partition} to broker {self.target}"}[self.kind]

    def describe(self) -> str:
        span = f"{self.start_s:6.2f}s" if self.end_s == self.start_s else f"{self.start_s:6.2f}–{self.end_s:.2f}s"
        return f"{span}  {self.what()}"


@dataclass(frozen=True)
class ScheduleSpec:
    seed: int
    duration_s: float
    faults: frozenset[str] = field(default_factory=lambda: frozenset(ALL_FAULTS))
    brokers: int = 3
    partitions: int = 6
    warmup_s: float = 3.0
    settle_s: float = 6.0  # no fault starts in the last settle_s (healing and catching up)
    process_gap_s: tuple[float, float] = (1.0, 3.0)
    s3_gap_s: tuple[float, float] = (1.0, 4.0)
    reassign_gap_s: tuple[float, float] = (1.0, 4.0)


def parse_faults(text: str | None) -> frozenset[str]:
    """``--faults a,b`` (default: all but the network's); an unknown name is a ValueError naming it and the known ones."""
    if text is None or text.strip() in ("", "all"):
        return frozenset(ALL_FAULTS)
    names = {n.strip() for n in text.split(",") if n.strip()}
    unknown = sorted(names - set(KNOWN_FAULTS))
    if unknown:
        raise ValueError(f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(KNOWN_FAULTS)}")
    return frozenset(names)


def make_schedule(spec: ScheduleSpec) -> list[FaultEvent]:
    """Every event of the run, ordered by start time."""
    if spec.duration_s <= 0 or spec.brokers < 2 or spec.partitions < 1:
        raise ValueError("a chaos run needs a positive duration, at least 2 brokers and 1 partition")
    rng = random.Random(spec.seed)
    last_start = spec.duration_s - spec.settle_s
    events: list[FaultEvent] = []
    events += _track(rng, spec, [k for k in PROCESS_FAULTS + NET_FAULTS if k in spec.faults], spec.process_gap_s,
                     last_start)
    events += _track(rng, spec, [k for k in S3_FAULTS if k in spec.faults], spec.s3_gap_s, last_start)
    if REASSIGN in spec.faults:
        t = spec.warmup_s + rng.uniform(*spec.reassign_gap_s)
        while t < last_start:
            events.append(FaultEvent(round(t, 3), round(t, 3), REASSIGN, target=rng.randrange(1, spec.brokers + 1),
                                     partition=rng.randrange(spec.partitions)))
            t += rng.uniform(*spec.reassign_gap_s)
    return sorted(events, key=lambda e: (e.start_s, e.kind))


def _track(rng: random.Random, spec: ScheduleSpec, kinds: list[str], gap_s: tuple[float, float],
           last_start: float) -> list[FaultEvent]:
    """Back-to-back events of ``kinds`` separated by a random gap; each ends before the settle time."""
    out: list[FaultEvent] = []
    t = spec.warmup_s + rng.uniform(*gap_s)
    while kinds and t < last_start:
        kind = rng.choice(kinds)
        low, high = DURATION_S[kind]
        length = min(rng.uniform(low, high), spec.duration_s - spec.settle_s / 2 - t)
        if length < low / 2:
            break
        start, end = round(t, 3), round(t + length, 3)
        if kind == "broker_kill" or kind == "disk_full":
            out.append(FaultEvent(start, end, kind, target=rng.randrange(1, spec.brokers + 1)))
        elif kind == "owner_pause":
            out.append(FaultEvent(start, end, kind, partition=rng.randrange(spec.partitions)))
        elif kind == "s3_errors":
            out.append(FaultEvent(start, end, kind, rate=round(rng.uniform(0.05, 0.5), 3),
                                  after_fraction=round(rng.uniform(0.0, 0.5), 3)))
        elif kind == "s3_latency":
            out.append(FaultEvent(start, end, kind, latency_ms=rng.randrange(20, 400)))
        elif kind in NET_FAULTS:
            out.append(_net_event(rng, spec, start, end, kind))
        else:
            out.append(FaultEvent(start, end, kind))
        t = end + rng.uniform(*gap_s)
    return out


def _net_event(rng: random.Random, spec: ScheduleSpec, start: float, end: float, kind: str) -> FaultEvent:
    broker = rng.randrange(1, spec.brokers + 1)
    if kind == "net_isolate":
        return FaultEvent(start, end, kind, node=rng.choice(("leader", f"b{broker}")))
    if kind == "net_one_way":
        node = rng.choice(NET_NODES)
        controllers = {"c1", "c2", "c3"}
        peer = rng.choice([n for n in NET_NODES if n != node and {n, node} != {"s3", "clients"}
                           and not ("leader" in (n, node) and {n, node} & controllers)])  # the leader may be cN
        return FaultEvent(start, end, kind, node=node, peer=peer)
    if kind == "net_flap":
        return FaultEvent(start, end, kind, node=rng.choice(("leader", f"b{broker}")),
                          period_ms=rng.randrange(200, 1500))
    if kind == "net_leader_followers":
        return FaultEvent(start, end, kind)
    if kind == "clock_step":
        node = rng.choice(("leader", f"b{broker}"))
        step_ms = rng.choice((30_000, -30_000, 300_000, -300_000))
        cut = node != "leader" and rng.random() < 0.5
        return FaultEvent(start, end, kind, node=node, step_ms=step_ms, peer="controllers" if cut else "")
    return FaultEvent(start, end, kind, target=broker)


def overlapping(events: list[FaultEvent], kinds: tuple[str, ...]) -> list[tuple[FaultEvent, FaultEvent]]:
    """Pairs of events of ``kinds`` whose spans overlap (none, for one track)."""
    chosen = sorted((e for e in events if e.kind in kinds), key=lambda e: e.start_s)
    return [(a, b) for a, b in pairwise(chosen) if b.start_s < a.end_s]
