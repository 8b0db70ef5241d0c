"""Network faults of a ``--net`` chaos run: which links each one cuts, and applying it.

``links_for`` is pure: a scheduled network fault and the active controller's id give the one-way
links to blackhole and the nodes whose link goes down. ``inject`` applies them through
``net.Network`` and returns the heal, which restores every link and waits until the nodes it cut
serve again (a broker RUNNING and unfenced, a controller ready, a leader elected).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Awaitable, Callable

from tools.chaos.net import CLIENTS, S3, Network, pairs_between
from tools.chaos.schedule import NET_FAULTS, PROCESS_FAULTS, FaultEvent
from tools.cluster import LocalCluster

CONTROLLERS = ("c1", "c2", "c3")


@dataclass(frozen=True)
class NetCut:
    """What one network fault does: one-way links cut, nodes whose link flaps or goes down."""

    links: tuple[tuple[str, str], ...] = ()
    down: tuple[str, ...] = ()
    flap_ms: int = 0
    what: str = ""


def _node(name: str, leader: int) -> str:
    return f"c{leader}" if name == "leader" else name


def links_for(e: FaultEvent, leader: int, controllers: tuple[str, ...] = CONTROLLERS) -> NetCut:
    """The cut a network fault makes, ``leader`` being the active controller's id when it fires."""
    broker = f"b{e.target}"
    if e.kind == "net_isolate":
        node = _node(e.node, leader)
        return NetCut(down=(node,), what=f"isolate {node}")
    if e.kind == "net_flap":
        node = _node(e.node, leader)
        return NetCut(down=(node,), flap_ms=e.period_ms, what=f"flap {node}'s link every {e.period_ms} ms")
    if e.kind == "net_broker_controllers":
        return NetCut(tuple(pairs_between([broker], list(controllers))), what=f"cut {broker} from the controllers")
    if e.kind == "net_broker_s3":
        return NetCut(tuple(pairs_between([broker], [S3])), what=f"cut {broker} from S3")
    if e.kind == "net_clients_broker":
        return NetCut(tuple(pairs_between([CLIENTS], [broker])), what=f"cut the clients from {broker}")
    if e.kind == "net_leader_followers":
        me = f"c{leader}"
        return NetCut(tuple(pairs_between([me], [c for c in controllers if c != me])),
                      what=f"cut the active controller {me} from its followers")
    if e.kind == "net_one_way":
        src, dst = _node(e.node, leader), _node(e.peer, leader)
        return NetCut(((src, dst),), what=f"{src} cannot send to {dst}")
    raise ValueError(f"not a network fault: {e.kind}")


def leaseless_brokers(cut: NetCut, controllers: tuple[str, ...] = CONTROLLERS) -> list[int]:
    """The brokers a cut leaves unable to renew their lease: down, or unable to send to every
    controller, or to hear from every one (a one-way cut to the leader alone is not counted: a new
    leader may be reachable)."""
    out = []
    for node in sorted(touched(cut)):
        if not node.startswith("b"):
            continue
        if node in cut.down and not cut.flap_ms or all((node, c) in cut.links for c in controllers) \
                or all((c, node) in cut.links for c in controllers):
            out.append(int(node[1:]))
    return out


def heal_windows(applied: list[tuple[str, str, float, float, bool]],
                 load_stop_s: float) -> list[tuple[str, float, float]]:
    """From what the runner applied (kind, what, start, end, applied without error), each network
    fault's heal: what it was, when it healed, and until when its effect alone can be judged (the
    next process or network fault's start, or the load's end)."""
    track = sorted((a for a in applied if a[0] in PROCESS_FAULTS + NET_FAULTS), key=lambda a: a[2])
    out = []
    for i, (kind, what, _start_s, end_s, ok) in enumerate(track):
        if kind in NET_FAULTS and ok:
            next_s = track[i + 1][2] if i + 1 < len(track) else float("inf")
            out.append((what, end_s, min(next_s, load_stop_s)))
    return out


def touched(cut: NetCut) -> set[str]:
    """The nodes a cut touches (waited for after the heal)."""
    return {n for link in cut.links for n in link} | set(cut.down)


async def inject(net: Network, cluster: LocalCluster, e: FaultEvent, heal_timeout_s: float,
                 noted: Callable[[NetCut], None]) -> Callable[[], Awaitable[None]]:
    """Apply ``e`` (``noted`` is told the cut once it holds); the returned heal restores the links
    and waits until the touched nodes serve."""
    leader = await asyncio.to_thread(cluster.controller_leader, 20.0)
    cut = links_for(e, leader)
    for src, dst in cut.links:
        await asyncio.to_thread(net.cut, src, dst)
    flapping: asyncio.Task[None] | None = None
    if cut.flap_ms:
        flapping = asyncio.create_task(_flap(net, cut.down[0], cut.flap_ms / 1000))
    else:
        for node in cut.down:
            await asyncio.to_thread(net.set_link, node, False)
    noted(cut)

    async def heal() -> None:
        if flapping is not None:
            flapping.cancel()
            try:
                await flapping
            except asyncio.CancelledError:
                pass
        await asyncio.to_thread(net.heal_all)
        await asyncio.to_thread(wait_serving, cluster, touched(cut), heal_timeout_s)
    return heal


async def _flap(net: Network, node: str, period_s: float) -> None:
    up = True
    while True:
        up = not up
        await asyncio.to_thread(net.set_link, node, up)
        await asyncio.sleep(period_s)


def wait_serving(cluster: LocalCluster, nodes: set[str], timeout_s: float) -> None:
    """Until a leader is active, every touched controller ready and every broker RUNNING and
    unfenced in its own view and the controllers'."""
    assert cluster.quorum is not None
    cluster.quorum.wait_leader(timeout_s)
    for node in sorted(n for n in nodes if n in CONTROLLERS):
        cluster.quorum.wait_ready(int(node[1:]), timeout_s)
    cluster.wait_brokers(None, timeout_s)
