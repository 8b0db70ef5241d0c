"""Chaos hosts: every controller, broker and the S3 endpoint in its own network namespace.

``NetPlan`` is pure: the names and addresses of one run's network and the ``ip`` commands that
build it, cut it and tear it down. A run takes a free ``/24`` of ``10.200.0.0/16`` by creating
its bridge ``fbr<N>`` (creation fails when another run holds ``N``, so parallel runs cannot
collide). The bridge holds ``10.200.<N>.1``: the runner and its clients (in the root namespace)
reach every node through it. Node ``i`` lives in namespace ``ferry<N>-<node>`` at
``10.200.<N>.<i + 2>``, linked to the bridge by a veth pair (``fv<N><node>`` on the bridge
side, ``eth0`` inside).

Cuts (the machine has no netem): a blackhole route to a peer inside a node's namespace means
the node can no longer send to that peer (a one-way cut; both sides make a two-way cut, and no
TCP connection survives either, since its acknowledgements cannot return); the node's veth down
on the bridge side isolates it completely (flapping toggles it). ``Network`` runs the commands.
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass

from tools.proc import Placement

CLIENTS = "clients"  # the root namespace: the runner, its producers and consumers
S3 = "s3"


@dataclass(frozen=True)
class NetPlan:
    """The network of one run: ``subnet`` (1–250) picks ``10.200.<subnet>.0/24``."""

    subnet: int
    nodes: tuple[str, ...] = ("c1", "c2", "c3", "b1", "b2", "b3", S3)

    def __post_init__(self) -> None:
        if not 1 <= self.subnet <= 250:
            raise ValueError(f"subnet must be 1-250, got {self.subnet}")
        if len(self.nodes) > 200 or any(len(n) > 6 or not n.isalnum() for n in self.nodes):
            raise ValueError(f"node names must be at most 6 letters or digits: {self.nodes}")

    @property
    def bridge(self) -> str:
        return f"fbr{self.subnet}"

    @property
    def gateway(self) -> str:
        """The bridge's address: where the clients' packets come from."""
        return f"10.200.{self.subnet}.1"

    def netns(self, node: str) -> str:
        return f"ferry{self.subnet}-{node}"

    def veth(self, node: str) -> str:
        return f"fv{self.subnet}{node}"

    def ip(self, node: str) -> str:
        if node == CLIENTS:
            return self.gateway
        return f"10.200.{self.subnet}.{self.nodes.index(node) + 2}"

    def prefix(self, node: str) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.netns(node))

    def placement(self, node: str) -> Placement:
        return Placement(self.ip(node), self.prefix(node))

    def setup(self) -> list[list[str]]:
        """The commands that build the network, the bridge first (it claims the subnet)."""
        out = [["ip", "link", "add", self.bridge, "type", "bridge"],
               ["ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge],
               ["ip", "link", "set", self.bridge, "up"]]
        for node in self.nodes:
            ns = self.netns(node)
            out += [["ip", "netns", "add", ns],
                    ["ip", "link", "add", self.veth(node), "type", "veth", "peer", "name", "eth0", "netns", ns],
                    ["ip", "link", "set", self.veth(node), "master", self.bridge],
                    ["ip", "link", "set", self.veth(node), "up"],
                    ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"],
                    ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.ip(node)}/24", "dev", "eth0"],
                    ["ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up"]]
        return out

    def teardown(self) -> list[list[str]]:
        """Everything ``setup`` made, each command on its own (one failing does not stop the rest)."""
        out = [["ip", "link", "del", self.veth(node)] for node in self.nodes]
        out += [["ip", "netns", "del", self.netns(node)] for node in self.nodes]
        out += [["ip", "route", "del", "blackhole", f"{self.ip(node)}/32"] for node in self.nodes]
        return out + [["ip", "link", "del", self.bridge]]

    def _route(self, action: str, src: str, dst: str) -> list[str]:
        where = [] if src == CLIENTS else ["ip", "netns", "exec", self.netns(src)]
        return [*where, "ip", "route", action, "blackhole", f"{self.ip(dst)}/32"]

    def cut(self, src: str, dst: str) -> list[list[str]]:
        """``src`` can no longer send to ``dst`` (one way)."""
        if src == dst or CLIENTS not in (src, dst) and (src not in self.nodes or dst not in self.nodes):
            raise ValueError(f"cannot cut {src} -> {dst}")
        return [self._route("add", src, dst)]

    def heal(self, src: str, dst: str) -> list[list[str]]:
        return [self._route("del", src, dst)]

    def link(self, node: str, up: bool) -> list[list[str]]:
        """The node's veth on the bridge side down (isolated from everyone) or up again."""
        return [["ip", "link", "set", self.veth(node), "up" if up else "down"]]


def pairs_between(group_a: list[str], group_b: list[str], both_ways: bool = True) -> list[tuple[str, str]]:
    """The one-way links a cut between two groups removes."""
    out = [(a, b) for a in group_a for b in group_b if a != b]
    return out + ([(b, a) for a in group_a for b in group_b if a != b] if both_ways else [])


class Network:
    """The network of ``NetPlan`` on this machine; ``create`` claims a free subnet."""

    def __init__(self, plan: NetPlan) -> None:
        self.plan = plan
        self.cuts: set[tuple[str, str]] = set()
        self.down: set[str] = set()

    @staticmethod
    def run(cmd: list[str]) -> None:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        if done.returncode != 0:
            raise OSError(f"{' '.join(cmd)}: {done.stderr.strip() or done.returncode}")

    @classmethod
    def create(cls, nodes: tuple[str, ...] | None = None) -> "Network":
        """Build a network on the first subnet no other run holds; an OSError when ``ip`` is refused."""
        last: OSError | None = None
        for subnet in range(1, 251):
            plan = NetPlan(subnet) if nodes is None else NetPlan(subnet, nodes)
            try:
                cls.run(plan.setup()[0])
            except OSError as exc:
                last = exc
                if "exists" in str(exc):
                    continue
                raise
            net = cls(plan)
            try:
                for cmd in plan.setup()[1:]:
                    cls.run(cmd)
            except BaseException:
                net.destroy()
                raise
            return net
        raise OSError(f"no free subnet for a chaos network: {last}")

    def cut(self, src: str, dst: str) -> None:
        if (src, dst) not in self.cuts:
            for cmd in self.plan.cut(src, dst):
                self.run(cmd)
            self.cuts.add((src, dst))

    def heal(self, src: str, dst: str) -> None:
        if (src, dst) in self.cuts:
            for cmd in self.plan.heal(src, dst):
                self.run(cmd)
            self.cuts.discard((src, dst))

    def set_link(self, node: str, up: bool) -> None:
        for cmd in self.plan.link(node, up):
            self.run(cmd)
        (self.down.discard if up else self.down.add)(node)

    def heal_all(self) -> None:
        for src, dst in sorted(self.cuts):
            self.heal(src, dst)
        for node in sorted(self.down):
            self.set_link(node, True)

    def destroy(self) -> None:
        """Tear everything down; what is already gone is no error."""
        for cmd in self.plan.teardown():
            subprocess.run(cmd, capture_output=True, timeout=20)


def netns_permitted() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    try:
        done = subprocess.run(["ip", "netns", "add", "ferry-probe"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode != 0:
        return done.stderr.strip() or f"ip netns add exited with {done.returncode}"
    subprocess.run(["ip", "netns", "del", "ferry-probe"], capture_output=True, timeout=10)
    return None
