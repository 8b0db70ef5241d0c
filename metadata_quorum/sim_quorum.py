"""Three controller cores over a simulated replicated log that loses, delays, duplicates and
reorders messages and deposes leaders: the deterministic stand-in for pysyncobj in the simulation.

The replicated log is a small Raft (terms, AppendEntries with the log-matching check, commit by a
majority of the current term, the election restriction): enough that what it commits is what a
correct Raft commits, and free to do everything a network does. A deposed leader's entries that
no majority holds are lost when the new leader overwrites them. Each node applies what it learns
is committed to its own ``CommittedLog`` (the production apply rule) and drives its own
``ControllerCore`` (the production state machine) exactly as ``QuorumController`` does.

``SimQuorum.write`` is the client: it hands an operation to the node that believes it leads and
runs the network until the operation is answered. After every event the invariants are checked
(``InvariantViolation``): at most one leader per term; every node's committed log a prefix of one
sequence; every node's image equal to the replay of its committed log; one owner per stream and
epoch; and, through ``on_owner_change``, that no stream changes hands while its old owner's lease
could still let it acknowledge.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from metadata_quorum.controller_core import (Answer, ControllerCore, CoreConfig, FixedSlice,
                                             NotLeaderError, Outcome, Refusal, Token, to_command)
from metadata_quorum.controller_result import WriteOperation
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.image import EMPTY_IMAGE, MetadataImage
from metadata_quorum.raft import AppliedCommand, Command, CommittedLog, advance_image
from metadata_quorum.records import (STREAM_OPENED, BrokerRegistrationChangeRecord, Record, UnregisterBrokerRecord,
                                     decode_record)

KEEP_ALL_RECORDS = 1 << 62
TICK_INTERVAL_MS = 200
MAX_EVENTS_PER_WRITE = 300
MAX_IN_FLIGHT_MESSAGES = 48  # beyond this the network loses the oldest (a full buffer)
MAX_BROKER_IDS = 8  # broker ids a cut may put on a cut-off controller's side


class InvariantViolation(AssertionError):
    pass


@dataclass(frozen=True)
class Faults:
    """Per-event probabilities of what the network and the cluster do to the log."""

    drop: float = 0.05
    duplicate: float = 0.03
    depose: float = 0.0015
    #: a request reaches a node that still believes it leads an old term (when one does)
    stale_client: float = 0.25
    reorder: float = 0.3
    #: a deposed leader was cut off from the other controllers (why it lost its term) and goes on
    #: believing it leads, active, until it hears from them again: for up to ``isolation_ms``
    #: (pysyncobj's leader steps down after ``leaderFallbackTimeout`` without a majority)
    isolate: float = 0.5
    isolation_ms: int = 2000


@dataclass(frozen=True)
class Entry:
    term: int
    command: Command


@dataclass(frozen=True)
class Append:
    term: int
    leader: int
    dst: int
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    leader_commit: int


@dataclass(frozen=True)
class AppendReply:
    term: int
    src: int
    dst: int
    success: bool
    match_index: int


@dataclass
class SimNode:
    node_id: int
    state: CommittedLog
    core: ControllerCore
    term: int = 0
    leader: bool = False
    log: list[Entry] = field(default_factory=list)
    commit: int = 0  # entries known committed
    applied: int = 0
    next_index: dict[int, int] = field(default_factory=dict)
    match_index: dict[int, int] = field(default_factory=dict)
    replayed: MetadataImage = EMPTY_IMAGE
    records: list[tuple[int, Record]] = field(default_factory=list)

    def last(self) -> tuple[int, int]:
        return (self.log[-1].term if self.log else 0, len(self.log))


class SimQuorum:
    """Three controllers (cores over a simulated Raft) behind a synchronous ``write``."""

    def __init__(self, rng: random.Random, clock: Callable[[], int], advance: Callable[[int], None],
                 operations: Mapping[str, WriteOperation], config: CoreConfig, faults: Faults = Faults(),
                 nodes: int = 3, fail: Callable[[str], None] | None = None) -> None:
        self.rng = rng
        self.clock = clock
        self.advance = advance
        self.faults = faults
        self.fail = fail or self._raise
        self.nodes = [SimNode(i, state := CommittedLog(KEEP_ALL_RECORDS),
                              ControllerCore(CoreConfig(**{**config.__dict__, "node_id": i}), state, operations))
                      for i in range(nodes)]
        self.network: list[Append | AppendReply] = []
        self.outcomes: dict[tuple[int, Token], tuple[Outcome, MetadataImage]] = {}
        #: the answering node's committed image when the last ``write`` was answered: what its
        #: outcome is judged against (the caller's own reads before the call may be stale by then)
        self.answered_image: MetadataImage = EMPTY_IMAGE
        self.leader_of_term: dict[int, int] = {}
        self.committed_ids: list[tuple[str, bool, int]] = []  # per Raft index: (command id, accepted, log end)
        self.stream_owners: dict[tuple[int, int], int] = {}
        self._decoded: dict[int, list[tuple[int, Record]]] = {}  # first offset -> its committed records
        # (stream, old owner, its broker epoch, new owner)
        self.on_owner_change: Callable[[int, int, int, int], None] | None = None
        # (broker id, broker epoch): fenced for silence (not a controlled shutdown, nor an unregistration)
        self.on_fenced_for_silence: Callable[[int, int], None] | None = None
        # (broker id, broker epoch): fenced by a controller's own ``tick`` (a session that expired)
        self.on_tick_fenced: Callable[[int, int], None] | None = None
        self.events = 0
        self.counts: dict[str, int] = {"depose": 0, "drop": 0, "duplicate": 0, "lost_entries": 0, "stale_client": 0,
                                       "isolated": 0}
        #: node id -> until when (clock ms) every message to or from it is lost
        self.isolated_until_ms: dict[int, int] = {}
        #: broker id -> (the node cut off with it, until when): it reaches that controller only,
        #: and may stay cut off from the others after that node hears the new term again
        self.cut_off_brokers: dict[int, tuple[int, int]] = {}
        self._next_tick_ms = clock() + TICK_INTERVAL_MS
        self.elect()
        self.run_until(lambda: self.leader() is not None and self.leader().core.active)  # type: ignore[union-attr]

    @staticmethod
    def _raise(message: str) -> None:
        raise InvariantViolation(message)

    # -- what the simulation reads -------------------------------------------------------------------

    def reference(self) -> SimNode:
        """The node with the longest committed log (all are prefixes of it)."""
        return max(self.nodes, key=lambda n: (n.applied, -n.node_id))

    @property
    def image(self) -> MetadataImage:
        image: MetadataImage = self.reference().state.image
        return image

    @property
    def next_offset(self) -> int:
        return self.reference().state.high_watermark

    @property
    def log(self) -> list[tuple[int, Record]]:
        return self.reference().records

    def leader(self) -> SimNode | None:
        """The Raft leader of the highest term (a deposed one may still believe it leads)."""
        leaders = [n for n in self.nodes if n.leader]
        return max(leaders, key=lambda n: n.term) if leaders else None

    # -- the client ------------------------------------------------------------------------------------

    def write(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run one operation on the leader; raises its ``FerryError`` (``NOT_CONTROLLER`` or
        ``REQUEST_TIMED_OUT`` when its fate is unknown: it may still commit)."""
        client = args.get("broker_id") if isinstance(args.get("broker_id"), int) else None
        if client is not None and self._reaches(client) is not None and self._target(client) is None:
            raise FerryError(ErrorCode.NOT_CONTROLLER, f"broker {client} reaches no active controller")
        if not self.run_until(lambda: self._target(client) is not None):
            raise FerryError(ErrorCode.NOT_CONTROLLER, "no active controller")
        node = self._target(client)
        assert node is not None
        self.answered_image = node.state.image
        try:
            token = node.core.submit(op, args, self.clock())
        except NotLeaderError as e:
            raise FerryError(ErrorCode.NOT_CONTROLLER, str(e)) from None
        key = (node.node_id, token)
        if not self.run_until(lambda: key in self.outcomes):
            node.core.cancel(token)
            raise FerryError(ErrorCode.REQUEST_TIMED_OUT, f"{op} not answered within {MAX_EVENTS_PER_WRITE} events")
        outcome, self.answered_image = self.outcomes.pop(key)
        if isinstance(outcome, Answer):
            return outcome.reply
        if isinstance(outcome, Refusal):
            raise outcome.error
        raise FerryError(ErrorCode.NOT_CONTROLLER, outcome.why)

    def _reaches(self, client: int) -> SimNode | None:
        """The one controller a broker cut off with it can reach, while the cut lasts."""
        side = self.cut_off_brokers.get(client)
        if side is None or side[1] <= self.clock():
            return None
        return self.nodes[side[0]]

    def _target(self, client: int | None = None) -> SimNode | None:
        """The node a request reaches: the active leader of the highest term; for a broker cut off
        with an old leader, that one only (while it still believes it leads, else none); now and
        then, for anyone, an old leader that still believes it leads."""
        side = self._reaches(client) if client is not None else None
        if side is not None:
            if not (side.core.is_leader and side.core.active):
                return None
            self.counts["stale_client"] += 1
            return side
        active = [n for n in self.nodes if n.core.is_leader and n.core.active]
        if not active:
            return None
        if len(active) > 1 and self.rng.random() < self.faults.stale_client:
            self.counts["stale_client"] += 1
            return self.rng.choice(active)
        return max(active, key=lambda n: n.term)

    def run_until(self, done: Callable[[], bool], max_events: int = MAX_EVENTS_PER_WRITE) -> bool:
        self.settle()
        for _ in range(max_events):
            if done():
                return True
            self.event()
        return done()

    def quiet(self) -> bool:
        """Nothing in flight: no message on the network, every node holding (same last index and
        term: log matching) and having applied the leader's whole log, committed."""
        leader = self.leader()
        if self.network or leader is None or leader.commit != len(leader.log):
            return False
        return all(n.last() == leader.last() and n.commit == leader.commit and n.applied == n.commit for n in self.nodes)

    def quiesce(self, max_events: int = 2000) -> bool:
        """Run the network until it is quiet (with faults stopped it soon is)."""
        return self.run_until(self.quiet, max_events)

    # -- one event -------------------------------------------------------------------------------------

    def event(self) -> None:
        """One thing happens: time passes, and a leader replicates, a message arrives (or is lost,
        or arrives twice), or a leader is deposed. Then every node catches up and is checked."""
        self.events += 1
        self.advance(self.rng.randint(0, 3))
        now = self.clock()
        if now >= self._next_tick_ms:
            self._next_tick_ms = now + TICK_INTERVAL_MS
            for node in self.nodes:
                node.core.tick(now)
        roll = self.rng.random()
        if roll < self.faults.depose:
            self.counts["depose"] += 1
            self.elect()
        elif roll < 0.15 or not self.network:
            for node in self.nodes:
                if node.leader:
                    self.replicate(node)
            while len(self.network) > MAX_IN_FLIGHT_MESSAGES:
                self.counts["drop"] += 1
                del self.network[0]
        else:
            # mostly the oldest first; often any other (reordered, or the oldest delayed)
            reorder = self.rng.random() < self.faults.reorder
            msg = self.network.pop(self.rng.randrange(len(self.network)) if reorder else 0)
            r = self.rng.random()
            if self._cut_off(msg, now):
                self.counts["drop"] += 1
            elif r < self.faults.drop:
                self.counts["drop"] += 1
            else:
                if r < self.faults.drop + self.faults.duplicate:
                    self.counts["duplicate"] += 1
                    self.network.append(msg)
                self.deliver(msg)
        self.settle()

    def _cut_off(self, msg: Append | AppendReply, now_ms: int) -> bool:
        src = msg.leader if isinstance(msg, Append) else msg.src
        return any(self.isolated_until_ms.get(n, 0) > now_ms for n in (src, msg.dst))

    def elect(self) -> None:
        """A new term: a node whose log is as up to date as a majority's wins with a majority's votes.

        Often the old leader was cut off (``Faults.isolate``): it takes no part in the election
        and hears nothing for a while, so it goes on believing it leads its old term."""
        majority = len(self.nodes) // 2 + 1
        term = max(n.term for n in self.nodes) + 1
        old = self.leader()
        now = self.clock()
        reachable = [n for n in self.nodes if self.isolated_until_ms.get(n.node_id, 0) <= now]
        if old is not None and old in reachable and len(reachable) > majority and \
                self.rng.random() < self.faults.isolate:
            self.counts["isolated"] += 1
            until = self.isolated_until_ms[old.node_id] = now + self.rng.randint(1, self.faults.isolation_ms)
            for broker_id in range(MAX_BROKER_IDS):
                if self.rng.random() < 0.3:
                    self.cut_off_brokers[broker_id] = (old.node_id, until + self.rng.randint(0, self.faults.isolation_ms))
            reachable.remove(old)
        if len(reachable) < majority:
            reachable = list(self.nodes)
        candidates = [c for c in reachable if sum(n.last() <= c.last() for n in reachable) >= majority]
        if not candidates:
            reachable = list(self.nodes)
            candidates = [c for c in self.nodes if sum(n.last() <= c.last() for n in self.nodes) >= majority]
        winner = self.rng.choice(candidates)
        others = [n for n in reachable if n is not winner and n.last() <= winner.last()]
        voters = [winner] + self.rng.sample(others, majority - 1)
        for node in voters:
            self._set_term(node, term)
        if term in self.leader_of_term:
            self.fail(f"term {term} had a leader already")
        self.leader_of_term[term] = winner.node_id
        winner.leader = True
        for n in self.nodes:
            winner.next_index[n.node_id] = len(winner.log)
            winner.match_index[n.node_id] = 0
        winner.core.observe_leadership(True, term, self.clock())

    def _set_term(self, node: SimNode, term: int) -> None:
        if term > node.term:
            node.term = term
            if node.leader:
                node.leader = False
                node.core.observe_leadership(False, term, self.clock())

    def replicate(self, leader: SimNode) -> None:
        for n in self.nodes:
            if n is leader:
                continue
            prev = min(leader.next_index[n.node_id], len(leader.log))
            self.network.append(Append(leader.term, leader.node_id, n.node_id, prev,
                                       leader.log[prev - 1].term if prev else 0,
                                       tuple(leader.log[prev:prev + 8]), leader.commit))

    def deliver(self, msg: Append | AppendReply) -> None:
        node = self.nodes[msg.dst]
        if isinstance(msg, Append):
            if msg.term < node.term:
                self.network.append(AppendReply(node.term, node.node_id, msg.leader, False, 0))
                return
            self._set_term(node, msg.term)
            if msg.prev_index > len(node.log) or \
                    (msg.prev_index and node.log[msg.prev_index - 1].term != msg.prev_term):
                self.network.append(AppendReply(node.term, node.node_id, msg.leader, False,
                                                min(len(node.log), msg.prev_index - 1)))
                return
            for i, entry in enumerate(msg.entries):
                at = msg.prev_index + i
                if at < len(node.log) and node.log[at].term != entry.term:
                    if at < node.commit:
                        self.fail(f"node {node.node_id} asked to overwrite committed entry {at}")
                    self.counts["lost_entries"] += len(node.log) - at
                    del node.log[at:]
                if at >= len(node.log):
                    node.log.append(entry)
            match = msg.prev_index + len(msg.entries)
            node.commit = max(node.commit, min(msg.leader_commit, match))
            self.network.append(AppendReply(node.term, node.node_id, msg.leader, True, match))
            return
        if msg.term > node.term:
            self._set_term(node, msg.term)
            return
        if not node.leader or msg.term != node.term:
            return  # an answer to an older term's request
        if msg.success:
            node.match_index[msg.src] = max(node.match_index[msg.src], msg.match_index)
            node.next_index[msg.src] = max(node.next_index[msg.src], msg.match_index)
            self._advance_commit(node)
        else:
            node.next_index[msg.src] = max(0, min(node.next_index[msg.src] - 1, msg.match_index))

    def _advance_commit(self, leader: SimNode) -> None:
        majority = len(self.nodes) // 2 + 1
        matches = sorted([len(leader.log)] + [leader.match_index[n.node_id] for n in self.nodes if n is not leader],
                         reverse=True)
        n = matches[majority - 1]
        if n > leader.commit and leader.log[n - 1].term == leader.term:
            leader.commit = n

    # -- catching up ------------------------------------------------------------------------------------

    def settle(self) -> None:
        """Every node applies what it knows committed and runs its core until it has nothing to do."""
        for node in self.nodes:
            if node.applied == node.commit and not node.core.has_work() and not node.core.has_ready():
                continue
            for _ in range(100):
                self._apply(node)
                node.core.run(FixedSlice(self.clock()))
                ready = node.core.take_ready()
                if not ready:
                    break
                for planned in ready.commands:
                    if node.leader and node.term == planned.epoch:
                        node.log.append(Entry(node.term, to_command(planned)))
                    else:
                        node.core.command_failed(planned.command_id, "not the Raft leader of its term")
                for outcome in ready.outcomes:
                    self.outcomes[(node.node_id, outcome.token)] = (outcome, node.state.image)
                    if isinstance(outcome, Answer) and self.on_tick_fenced is not None:
                        for broker_id in outcome.reply.get("fenced_brokers", ()):
                            reg = node.state.image.cluster.brokers.get(broker_id)
                            if reg is not None:
                                self.on_tick_fenced(broker_id, reg.broker_epoch)
        self.check()

    def _apply(self, node: SimNode) -> None:
        while node.applied < node.commit:
            index = node.applied
            command = node.log[index].command
            applied = node.state.apply_committed(command, raft_index=index + 1)
            node.applied += 1
            first = index >= len(self.committed_ids)
            self._check_committed(node, index, applied)
            if applied.accepted and applied.next_offset > applied.first_offset:
                self._replay(node, applied, first)
            node.core.committed(applied, self.clock())

    # -- invariants -------------------------------------------------------------------------------------

    def _check_committed(self, node: SimNode, index: int, applied: AppliedCommand) -> None:
        """Every node's committed log is a prefix of one sequence (same commands, same offsets)."""
        mine = (applied.command_id, applied.accepted, applied.next_offset)
        if index < len(self.committed_ids):
            if self.committed_ids[index] != mine:
                self.fail(f"node {node.node_id} committed {mine} at index {index}, "
                          f"others {self.committed_ids[index]}")
        else:
            self.committed_ids.append(mine)

    def _replay(self, node: SimNode, applied: AppliedCommand, first: bool) -> None:
        """The node's image against an independent replay of its committed records, and stream owners."""
        records = self._decoded.get(applied.first_offset)
        if records is None:  # decoded once: every node committed the same command there
            piece = node.state.read(applied.first_offset, applied.next_offset - applied.first_offset)
            records = [(o, decode_record(r)) for o, r in piece.records if o < applied.next_offset]
            self._decoded[applied.first_offset] = records
        before = node.replayed
        node.records.extend(records)
        node.replayed = advance_image(before, [r for _o, r in records], applied.first_offset, applied.epoch)
        if not node.replayed.same_content(node.state.image):
            self.fail(f"node {node.node_id}: the image differs from the replay of its committed log "
                      f"at offset {applied.next_offset - 1}")
        if first and self.on_fenced_for_silence is not None and node.replayed.cluster is not before.cluster:
            self._check_fences(before, node.replayed, [r for _o, r in records])
        for stream_id, stream in node.replayed.streams.streams.items():
            old = before.streams.streams.get(stream_id)
            if old is stream or stream.state != STREAM_OPENED:
                continue
            owner = self.stream_owners.setdefault((stream_id, stream.epoch), stream.owner)
            if owner != stream.owner:
                self.fail(f"stream {stream_id} epoch {stream.epoch} owned by {owner} and by {stream.owner}")
            if old is not None and old.state == STREAM_OPENED and old.owner != stream.owner \
                    and self.on_owner_change is not None and first:
                self.on_owner_change(stream_id, old.owner, old.owner_epoch, stream.owner)

    def _check_fences(self, before: MetadataImage, after: MetadataImage, records: list[Record]) -> None:
        """Report brokers this command fenced for silence: ones neither shutting down (asked in
        this command or before) nor unregistered by it."""
        assert self.on_fenced_for_silence is not None
        excused = {r.broker_id for r in records
                   if isinstance(r, UnregisterBrokerRecord) or
                   (isinstance(r, BrokerRegistrationChangeRecord) and r.in_controlled_shutdown)}
        for broker_id, reg in after.cluster.brokers.items():
            old = before.cluster.brokers.get(broker_id)
            if old is None or old.broker_epoch != reg.broker_epoch or old.fenced or not reg.fenced:
                continue
            if old.in_controlled_shutdown or broker_id in excused:
                continue
            self.on_fenced_for_silence(broker_id, reg.broker_epoch)

    def check(self) -> None:
        for node in self.nodes:
            if node.leader and self.leader_of_term.get(node.term) != node.node_id:
                self.fail(f"node {node.node_id} leads term {node.term}, elected leader {self.leader_of_term.get(node.term)}")
            if node.core.is_leader and (not node.leader or node.core.epoch != node.term):
                self.fail(f"node {node.node_id}'s controller leads epoch {node.core.epoch}, Raft says "
                          f"leader={node.leader} term={node.term}")
