"""The goal-driven planner: which partitions to move, and where, to balance a cluster.

Goals in priority order, as in Cruise Control's goal list and AutoMQ's AutoBalancer:

0. rack — with ``racks`` (broker id → rack), every topic's partitions spread over the racks:
   at most ceil(partitions of the topic ÷ racks) on any rack, so losing a rack takes at most
   that share of any topic (Cruise Control's RackAwareDistributionGoal; a Ferry partition has
   one replica, so spreading a topic is what rack awareness can mean);
1. capacity — no broker above its configured network-in/out limit or request-rate limit (records
   in + out per second, a proxy for CPU) when limits are set;
2. net_in — every broker's network-in within mean × (1 ± band);
3. net_out — the same for network-out;
4. partition count — no broker holds more than mean × (1 + count_band) partitions (and, when
   ``count_lower_band`` is set, none fewer than mean × (1 - count_lower_band)). The lower side is
   off by default: in Ferry a partition costs a broker open streams and WAL space, so too many on
   one broker matters, while a broker holding few but hot partitions is balanced by the load goals;
   filling it up with cold partitions would only add moves.

A partition too big for the band (alone above mean × (1 + band)) is a giant: its broker may hold
it above the band, and should hold nothing else; the band of the other brokers is then computed
from the mean without the giants. This is how the plan reaches the feasibility floor
max(1, largest partition ÷ mean broker load).

Each goal is worked on in turn; a move for one goal must not make any higher-priority goal worse
(it is first searched for without worsening any other load goal, then, failing that, with only
the higher ones protected). Every accepted move strictly lowers the goals' violations in
lexicographic order, so the search ends; the passes repeat until a whole pass finds nothing to
do, so the result is a fixed point: planning it again gives no moves.

Hot partitions go first: an over-loaded broker sheds the largest partition that fits where it
goes. Moves of partitions whose load is below ``min_move_share`` of the mean broker load are
trivial and never made for a load goal. Ties break on broker index and canonical partition
order, so the same input always gives the same plan.

Modes: ``add_brokers`` — partitions move only onto the new brokers; ``remove_brokers`` —
partitions move only off the removed brokers (every one of them), nothing else moves.

Ferry partitions have one replica on S3, so a move copies no data; the cost of a plan is its
number of moves (each a sub-second produce pause on that partition).
"""
from __future__ import annotations

import math
from bisect import bisect_right, insort
from dataclasses import dataclass

import numpy as np

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.rebalance.model import RESOURCES, ClusterLoad, Plan, moves_between

_INF = float("inf")


@dataclass(frozen=True)
class PlannerConfig:
    balance_band: float = 0.10
    count_band: float = 0.10
    count_lower_band: float | None = None
    capacity_bytes_per_s: tuple[float | None, ...] = (None, None)  # per resource in RESOURCES
    max_request_rate: float | None = None  # records in + out per second per broker
    racks: tuple[tuple[int, str], ...] = ()  # (broker id, rack); empty: no rack goal
    min_move_share: float = 0.001
    add_brokers: tuple[int, ...] = ()
    remove_brokers: tuple[int, ...] = ()
    candidate_brokers: int = 8
    candidate_partitions: int = 64
    max_passes: int = 50
    selection: str = "closest"  # "closest": the partition nearest the transfer that evens the pair; "largest"


def plan(cluster: ClusterLoad, config: PlannerConfig | None = None) -> Plan:
    """Plan moves that meet the goals as far as they can be met. Pure: changes nothing."""
    cfg = config or PlannerConfig()
    search = _Search(cluster, cfg)
    search.run()
    owners_after = np.asarray(search.broker_ids, dtype=np.int64)[search.owner].copy()
    return Plan(moves=moves_between(cluster, owners_after), owners_after=owners_after, passes=search.passes,
                moves_by_goal=dict(search.moves_by_goal), unmet_goals=search.unmet_goals())


def validate_modes(cluster: ClusterLoad, cfg: PlannerConfig) -> None:
    """Reject broker ids that make no sense for the mode, with a message a person can act on."""
    known = set(cluster.brokers)
    if cfg.add_brokers and cfg.remove_brokers:
        raise FerryError(ErrorCode.INVALID_REQUEST, "--add-broker and --remove-broker cannot be used together")
    unknown = sorted(set(cfg.remove_brokers) - known)
    if unknown:
        raise FerryError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                         f"cannot remove unknown brokers {unknown}; known brokers are {sorted(known)}")
    if cfg.remove_brokers and not (known - set(cfg.remove_brokers)):
        raise FerryError(ErrorCode.INVALID_REQUEST, "cannot remove every broker: no broker would be left")
    if any(b < 0 for b in cfg.add_brokers):
        raise FerryError(ErrorCode.INVALID_REQUEST, f"broker ids must be non-negative, got {list(cfg.add_brokers)}")
    if not 0 < cfg.balance_band < 1 or not 0 <= cfg.count_band or not 0 <= (cfg.count_lower_band or 0) < 1:
        raise FerryError(ErrorCode.INVALID_REQUEST, "balance bands must be between 0 and 1")
    if len(cfg.capacity_bytes_per_s) != len(RESOURCES):
        raise FerryError(ErrorCode.INVALID_REQUEST, f"one capacity per resource {RESOURCES} is needed")
    if cfg.max_request_rate is not None and cfg.max_request_rate <= 0:
        raise FerryError(ErrorCode.INVALID_REQUEST, f"the request-rate capacity must be positive, got "
                         f"{cfg.max_request_rate}")
    if cfg.racks:
        racked = {b for b, _r in cfg.racks}
        missing = sorted((known | set(cfg.add_brokers)) - racked)
        if missing:
            raise FerryError(ErrorCode.INVALID_REQUEST, f"brokers {missing} have no rack; give every broker one")


def mean_without_giants(x: np.ndarray, n_brokers: int, band: float) -> float:
    """Mean broker load once partitions too big for any band (each alone above it) have a broker each."""
    desc = np.sort(x)[::-1]
    total, k = float(desc.sum()), 0
    while k < min(n_brokers - 1, desc.size) and desc[k] > (1 + band) * total / (n_brokers - k):
        total -= float(desc[k])
        k += 1
    return total / (n_brokers - k)


class _Search:
    """Mutable search state over broker indices 0..B-1 (sorted broker ids)."""

    def __init__(self, cluster: ClusterLoad, cfg: PlannerConfig) -> None:
        validate_modes(cluster, cfg)
        self.cfg = cfg
        self.broker_ids = sorted(set(cluster.brokers) | set(cfg.add_brokers))
        index = {b: k for k, b in enumerate(self.broker_ids)}
        n_brokers = len(self.broker_ids)
        unknown = sorted({int(b) for b in np.unique(cluster.owners)} - set(index))
        if unknown:
            raise FerryError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                             f"partitions are owned by brokers {unknown} outside the broker list {self.broker_ids}")
        self.X = np.ascontiguousarray(cluster.loads, dtype=np.float64)
        self.n = self.X.shape[0]
        self.owner = np.array([index[int(b)] for b in cluster.owners], dtype=np.int64)
        self.L = np.zeros((n_brokers, len(RESOURCES)))
        np.add.at(self.L, self.owner, self.X)
        self.C = np.bincount(self.owner, minlength=n_brokers).astype(np.int64)
        removed = np.array([b in set(cfg.remove_brokers) for b in self.broker_ids])
        self.balanced = ~removed  # brokers whose load the goals look at
        if cfg.add_brokers:
            self.dest_ok = np.array([b in set(cfg.add_brokers) for b in self.broker_ids])
        else:
            self.dest_ok = ~removed
        self.mode = "remove" if cfg.remove_brokers else ("add" if cfg.add_brokers else "balance")
        n_bal = int(self.balanced.sum())
        self.mean = np.array([mean_without_giants(self.X[:, r], n_bal, cfg.balance_band)
                              for r in range(len(RESOURCES))])
        self.upper = self.mean * (1 + cfg.balance_band)
        self.lower = self.mean * (1 - cfg.balance_band)
        # A giant partition alone exceeds the band: its broker may hold it (and only it) above the band.
        self.giant = [self.X[:, r] > self.upper[r] for r in range(len(RESOURCES))]
        self.giants_of: list[dict[int, list[float]]] = []
        for r in range(len(RESOURCES)):
            held: dict[int, list[float]] = {}
            for i in np.nonzero(self.giant[r])[0].tolist():
                held.setdefault(int(self.owner[i]), []).append(float(self.X[i, r]))
            self.giants_of.append(held)
        self.tol = np.maximum(self.mean * 1e-9, 1e-12)
        # trivial moves: below min_move_share of the mean broker load, or, when brokers hold more
        # than 1 / min_move_share partitions each (the share would then exclude most of them),
        # below the mean partition load
        mean_partition = self.X[:, :].sum(axis=0) / max(1, self.n)
        self.min_move = np.maximum(np.minimum(self.mean * cfg.min_move_share, mean_partition), 1e-12)
        self.cap = np.array([_INF if c is None else float(c) for c in cfg.capacity_bytes_per_s])
        mean_count = self.n / n_bal
        self.count_upper = math.ceil(mean_count * (1 + cfg.count_band) - 1e-9)
        self.count_lower = (0 if cfg.count_lower_band is None
                            else math.floor(mean_count * (1 - cfg.count_lower_band) + 1e-9))
        self.Q = np.asarray(cluster.request_rates, dtype=np.float64)
        self.LQ = np.bincount(self.owner, weights=self.Q, minlength=n_brokers)
        self.cap_q = _INF if cfg.max_request_rate is None else float(cfg.max_request_rate)
        self.tol_q = max(float(self.Q.sum()) / max(1, n_brokers) * 1e-9, 1e-12)
        self._init_racks(cluster, cfg, n_brokers)
        self.idx = np.arange(n_brokers)
        self.passes = 0
        self.moves_by_goal: dict[str, int] = {}
        # per-broker partition lists sorted by a key (one per load resource, one for counts),
        # built once and kept sorted by every move: rebuilding them per phase was most of the
        # planning time at 10^6 partitions
        self._lists: dict[str, tuple[np.ndarray, list[list[tuple[float, int]]]]] = {}

    def _init_racks(self, cluster: ClusterLoad, cfg: PlannerConfig, n_brokers: int) -> None:
        """Per topic and rack the partition count, and each topic's cap ceil(P_t / racks)."""
        self.use_racks = bool(cfg.racks)
        if not self.use_racks:
            return
        rack_of_id = dict(cfg.racks)
        names = sorted({rack_of_id[b] for b in self.broker_ids})
        self.rack_of = np.array([names.index(rack_of_id[b]) for b in self.broker_ids], dtype=np.int64)
        usable = {int(self.rack_of[b]) for b in range(n_brokers) if self.dest_ok[b] and self.balanced[b]}
        _, self.topic_idx = np.unique(cluster.topics.astype(str), return_inverse=True)
        n_topics = int(self.topic_idx.max()) + 1
        self.rack_count = np.zeros((n_topics, len(names)), dtype=np.int64)
        np.add.at(self.rack_count, (self.topic_idx, self.rack_of[self.owner]), 1)
        per_topic = np.bincount(self.topic_idx, minlength=n_topics)
        self.rack_cap = -(-per_topic // max(1, len(usable)))

    def rack_violations(self) -> int:
        """Partitions above their topic's per-rack cap, summed over topics and racks."""
        if not self.use_racks:
            return 0
        return int(np.maximum(0, self.rack_count - self.rack_cap[:, None]).sum())

    def _rack_worse(self, i: int, s: int, d: int) -> int:
        """+1 if moving i from s to d adds a rack violation, -1 if it removes one, else 0."""
        if not self.use_racks:
            return 0
        a, b = int(self.rack_of[s]), int(self.rack_of[d])
        if a == b:
            return 0
        t = int(self.topic_idx[i])
        cap = self.rack_cap[t]
        return int(self.rack_count[t, b] >= cap) - int(self.rack_count[t, a] > cap)

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> None:
        if self.mode == "remove":
            self._evacuate()
            self.passes = 1
            return
        for _ in range(self.cfg.max_passes):
            self.passes += 1
            moved = 0
            if self.use_racks:
                moved += self._rack_phase()
            if np.isfinite(self.cap).any() or np.isfinite(self.cap_q):
                moved += self._capacity_phase()
            for r in range(len(RESOURCES)):
                if self.mean[r] <= 0:
                    continue
                moved += self._over_phase(r)
                moved += self._under_phase(r)
            moved += self._count_phase()
            if moved == 0:
                return

    def unmet_goals(self) -> list[str]:
        unmet = []
        live = self.balanced
        if self.rack_violations() > 0:
            unmet.append("rack")
        if np.any(self.L[live] > self.cap + self.tol) or np.any(self.LQ[live] > self.cap_q + self.tol_q):
            unmet.append("capacity")
        for r, name in enumerate(RESOURCES):
            if any(self._viol(self.L[b, r], self._upper(b, r), r) > self.tol[r] for b in self.idx[live].tolist()):
                unmet.append(name)
        Cl = self.C[live]
        if np.any(Cl > self.count_upper) or np.any(Cl < self.count_lower):
            unmet.append("partition_count")
        if np.any(self.C[~live] > 0):
            unmet.append("remove_brokers")
        return unmet

    # -- helpers ----------------------------------------------------------------------------------

    def _upper(self, b: int, r: int) -> float:
        held = self.giants_of[r].get(b)
        return max(self.upper[r], max(held)) if held else float(self.upper[r])

    def _viol(self, v: float, upper: float, r: int) -> float:
        return max(0.0, v - upper) + max(0.0, float(self.lower[r]) - v)

    def _delta(self, i: int, s: int, d: int, q: int) -> float:
        """Change in resource q's band violation over brokers s and d if partition i moves s -> d."""
        x = float(self.X[i, q])
        if x == 0:
            return 0.0
        L = self.L
        up_s, up_d = self._upper(s, q), self._upper(d, q)
        before = self._viol(L[s, q], up_s, q) + self._viol(L[d, q], up_d, q)
        if self.giant[q][i]:
            rest = list(self.giants_of[q].get(s, []))
            rest.remove(x)
            up_s = max([float(self.upper[q]), *rest])
            up_d = max(up_d, x)
        after = self._viol(L[s, q] - x, up_s, q) + self._viol(L[d, q] + x, up_d, q)
        return after - before

    def _acceptable(self, i: int, s: int, d: int, r: int | None, protect: tuple[int, ...]) -> bool:
        """Capacity holds at ``d``, goal r (if any) strictly improves, no protected goal gets worse."""
        X, L = self.X, self.L
        for q in range(X.shape[1]):
            x = X[i, q]
            if x > 0 and L[d, q] + x > self.cap[q] + self.tol[q]:
                return False
        if self.Q[i] > 0 and self.LQ[d] + self.Q[i] > self.cap_q + self.tol_q:
            return False
        if self.use_racks and self._rack_worse(i, s, d) > 0:
            return False
        if r is not None and self._delta(i, s, d, r) >= -self.tol[r]:
            return False
        return all(self._delta(i, s, d, q) <= self.tol[q] for q in protect)

    def _upper_array(self, r: int) -> np.ndarray:
        upper = np.full(len(self.idx), float(self.upper[r]))
        for b, held in self.giants_of[r].items():
            if held:
                upper[b] = max(upper[b], max(held))
        return upper

    def _spare_giant(self, lst: list[tuple[float, int]], s: int, dests: list[int], r: int,
                     protect: tuple[int, ...]) -> tuple[int, int] | None:
        """A broker with two giant partitions gives one (smallest first) to a lightly loaded broker."""
        giants = [i for x, i in lst if x > self.upper[r]]
        for i in giants[:-1]:
            for d in dests:
                if not self.giants_of[r].get(d) and self._acceptable(i, s, d, r, protect):
                    return i, d
        return None

    def _lists_for(self, name: str, key: np.ndarray) -> list[list[tuple[float, int]]]:
        """The maintained sorted lists for ``key`` (built on first use)."""
        if name not in self._lists:
            self._lists[name] = (key, self._sorted_lists(key))
        return self._lists[name][1]

    def _sorted_lists(self, key: np.ndarray) -> list[list[tuple[float, int]]]:
        """Per broker: its partitions as (key, index), ascending; ties by canonical index."""
        order = np.lexsort((np.arange(self.n), key, self.owner))
        owners = self.owner[order]
        bounds = np.searchsorted(owners, self.idx, side="left").tolist() + [self.n]
        keys = key[order].tolist()
        ids = order.tolist()
        return [list(zip(keys[bounds[b]:bounds[b + 1]], ids[bounds[b]:bounds[b + 1]], strict=True))
                for b in range(len(self.idx))]

    def _apply(self, i: int, s: int, d: int, goal: str) -> None:
        self.L[s] -= self.X[i]
        self.L[d] += self.X[i]
        self.LQ[s] -= self.Q[i]
        self.LQ[d] += self.Q[i]
        if self.use_racks:
            t = int(self.topic_idx[i])
            self.rack_count[t, self.rack_of[s]] -= 1
            self.rack_count[t, self.rack_of[d]] += 1
        self.C[s] -= 1
        self.C[d] += 1
        self.owner[i] = d
        for r in range(len(RESOURCES)):
            if self.giant[r][i]:
                x = float(self.X[i, r])
                self.giants_of[r][s].remove(x)
                self.giants_of[r].setdefault(d, []).append(x)
        self.moves_by_goal[goal] = self.moves_by_goal.get(goal, 0) + 1
        for key, lists in self._lists.values():
            entry = (float(key[i]), i)
            src = lists[s]
            pos = bisect_right(src, entry) - 1
            del src[pos]
            insort(lists[d], entry)

    def _protections(self, r: int) -> list[tuple[int, ...]]:
        """First keep every other load goal; failing that, only the higher-priority ones."""
        every = tuple(q for q in range(len(RESOURCES)) if q != r)
        higher = tuple(q for q in range(r))
        return [every] if every == higher else [every, higher]

    def _ranked(self, mask: np.ndarray, values: np.ndarray, descending: bool, limit: int) -> list[int]:
        cand = self.idx[mask]
        if cand.size == 0:
            return []
        vals = values[cand]
        order = np.lexsort((cand, -vals if descending else vals))
        chosen: list[int] = cand[order[:limit]].tolist()
        return chosen

    def _scan(self, lst: list[tuple[float, int]], limit: float, floor: float, s: int, d: int, r: int,
              protect: tuple[int, ...]) -> int | None:
        """The largest partition in ``lst`` with floor <= key <= limit that is acceptable."""
        pos = bisect_right(lst, (limit, self.n)) - 1
        stop = max(-1, pos - self.cfg.candidate_partitions)
        for j in range(pos, stop, -1):
            x, i = lst[j]
            if x < floor:
                return None
            if self._acceptable(i, s, d, r, protect):
                return i
        return None

    def _pick(self, lst: list[tuple[float, int]], target: float, limit: float, floor: float, s: int, d: int,
              r: int, protect: tuple[int, ...]) -> int | None:
        """A partition to move from s to d for goal r (floor <= load <= limit), or None.

        "closest": the one whose load is nearest ``target`` (the transfer that brings the pair to
        the mean), larger first on ties, so brokers land near the mean rather than on the band's
        edges and later moves still fit; "largest": the largest that fits (fewest moves when
        partitions are small against the band).
        """
        if self.cfg.selection == "largest" or target >= limit:
            return self._scan(lst, limit, floor, s, d, r, protect)
        top = bisect_right(lst, (limit, self.n)) - 1
        if top < 0:
            return None
        hi = bisect_right(lst, (target, self.n))
        lo = hi - 1
        for _ in range(self.cfg.candidate_partitions):
            below = lo >= 0 and lst[lo][0] >= floor
            above = hi <= top
            if not below and not above:
                return None
            if above and (not below or lst[hi][0] - target <= target - lst[lo][0]):
                x, i = lst[hi]
                hi += 1
            else:
                x, i = lst[lo]
                lo -= 1
            if self._acceptable(i, s, d, r, protect):
                return i
        return None

    # -- phases -----------------------------------------------------------------------------------

    def _over_phase(self, r: int) -> int:
        """Over-loaded brokers shed their largest fitting partitions onto the least loaded ones."""
        key = self.X[:, r]
        lists = self._lists_for(RESOURCES[r], key)
        stuck = np.zeros(len(self.idx), dtype=bool)
        moved = 0
        while True:
            Lr = self.L[:, r]
            upper = self._upper_array(r)
            over = (Lr > upper + self.tol[r]) & self.balanced & ~stuck
            if not over.any():
                return moved
            s = int(np.argmax(np.where(over, Lr - upper, -_INF)))
            dests = self._ranked(self.dest_ok & (self.idx != s), Lr, False, self.cfg.candidate_brokers)
            found = None
            for protect in self._protections(r):
                best_x = -1.0
                for d in dests:
                    limit = min(Lr[s] - self.lower[r], upper[d] - Lr[d])
                    if limit < self.min_move[r]:
                        break
                    target = min(Lr[s] - self.mean[r], self.mean[r] - Lr[d])
                    i = self._pick(lists[s], target, limit, self.min_move[r], s, d, r, protect)
                    if i is not None and key[i] > best_x:
                        best_x, found = key[i], (i, d)
                        if self.cfg.selection == "closest":
                            break
                if found is None and len(self.giants_of[r].get(s, ())) > 1:
                    found = self._spare_giant(lists[s], s, dests, r, protect)
                if found is not None:
                    break
            if found is None:
                stuck[s] = True
                continue
            self._apply(found[0], s, found[1], RESOURCES[r])
            moved += 1

    def _under_phase(self, r: int) -> int:
        """Under-loaded brokers take the largest fitting partitions of the most loaded ones."""
        key = self.X[:, r]
        lists = self._lists_for(RESOURCES[r], key)
        stuck = np.zeros(len(self.idx), dtype=bool)
        moved = 0
        while True:
            Lr = self.L[:, r]
            under = (Lr < self.lower[r] - self.tol[r]) & self.dest_ok & ~stuck
            if not under.any():
                return moved
            d = int(np.argmin(np.where(under, Lr, _INF)))
            sources = self._ranked(self.idx != d, Lr, True, self.cfg.candidate_brokers)
            room = self._upper(d, r) - Lr[d]
            found = None
            for protect in self._protections(r):
                best_x = -1.0
                for s in sources:
                    limit = min(Lr[s] - self.lower[r], room)
                    if limit < self.min_move[r]:
                        break
                    target = min(Lr[s] - self.mean[r], self.mean[r] - Lr[d])
                    i = self._pick(lists[s], target, limit, self.min_move[r], s, d, r, protect)
                    if i is not None and key[i] > best_x:
                        best_x, found = key[i], (i, s)
                        if self.cfg.selection == "closest":
                            break
                if found is not None:
                    break
            if found is None:
                stuck[d] = True
                continue
            self._apply(found[0], found[1], d, RESOURCES[r])
            moved += 1

    def _count_phase(self) -> int:
        """Even out partition counts by moving the coldest partitions, keeping every load goal."""
        safe_mean = np.where(self.mean > 0, self.mean, 1.0)
        key = (self.X / safe_mean).sum(axis=1)
        lists = self._lists_for("count", key)
        stuck = np.zeros(len(self.idx), dtype=bool)
        protect = tuple(range(len(RESOURCES)))
        k = self.cfg.candidate_brokers
        moved = 0
        while True:
            C = self.C
            over = (C > self.count_upper) & self.balanced & ~stuck
            under = (C < self.count_lower) & self.dest_ok & ~stuck
            if over.any():
                s = int(np.argmax(np.where(over, C, -1)))
                # a broker filled to its giant partition's load cannot take even a cold partition
                full = np.zeros(len(self.idx), dtype=bool)
                for r in range(len(RESOURCES)):
                    for b, held in self.giants_of[r].items():
                        if held and self.L[b, r] >= max(held) - self.tol[r]:
                            full[b] = True
                pairs = [(s, d) for d in self._ranked(
                    self.dest_ok & ~full & (C < self.count_upper) & (self.idx != s), C.astype(float), False, k)]
                blame = s
            elif under.any():
                d = int(np.argmin(np.where(under, C, np.iinfo(np.int64).max)))
                pairs = [(s, d) for s in self._ranked(self.balanced & (C > self.count_lower) & (self.idx != d),
                                                       C.astype(float), True, k)]
                blame = d
            else:
                return moved
            found = None
            for s, d in pairs:
                for _x, i in lists[s][: self.cfg.candidate_partitions]:
                    if self._acceptable(i, s, d, None, protect):
                        found = (i, s, d)
                        break
                if found is not None:
                    break
            if found is None:
                stuck[blame] = True
                continue
            self._apply(found[0], found[1], found[2], "partition_count")
            moved += 1

    def _capacity_phase(self) -> int:
        """Brokers above a capacity limit shed their hottest partitions to brokers with room."""
        moved = 0
        stuck = np.zeros(len(self.idx), dtype=bool)
        safe_cap = np.append(np.where(np.isfinite(self.cap), self.cap, _INF), self.cap_q)
        while True:
            usage = np.column_stack([self.L, self.LQ]) / safe_cap
            ratio = usage.max(axis=1)
            over = (ratio > 1 + 1e-9) & self.balanced & ~stuck
            if not over.any():
                return moved
            s = int(np.argmax(np.where(over, ratio, -_INF)))
            q = int(np.argmax(usage[s]))
            column = self.Q if q == len(RESOURCES) else self.X[:, q]
            mine = np.nonzero(self.owner == s)[0]
            mine = mine[np.lexsort((mine, -column[mine]))][: self.cfg.candidate_partitions]
            dests = self._ranked(self.dest_ok & (self.idx != s), ratio, False, self.cfg.candidate_brokers)
            found = None
            for i in mine.tolist():
                for d in dests:
                    if self._acceptable(i, s, d, None, ()):
                        found = (i, d)
                        break
                if found is not None:
                    break
            if found is None:
                stuck[s] = True
                continue
            self._apply(found[0], s, found[1], "capacity")
            moved += 1

    def _rack_phase(self) -> int:
        """Topics crowded on a rack move partitions (coldest first) to racks under their cap,
        onto the least loaded broker there that keeps capacity."""
        moved = 0
        safe_mean = np.where(self.mean > 0, self.mean, 1.0)
        heat = (self.X / safe_mean).sum(axis=1)
        while True:
            excess = self.rack_count - self.rack_cap[:, None]
            crowded = np.argwhere(excess > 0)
            if crowded.size == 0:
                return moved
            progress = False
            for t, rack in crowded.tolist():
                members = np.nonzero((self.topic_idx == t) & (self.rack_of[self.owner] == rack)
                                     & self.balanced[self.owner])[0]
                members = members[np.lexsort((members, heat[members]))]
                roomy = [k for k in range(self.rack_count.shape[1]) if self.rack_count[t, k] < self.rack_cap[t]]
                dests = self._ranked(self.dest_ok & self.balanced & np.isin(self.rack_of, roomy),
                                     (self.L / safe_mean).sum(axis=1), False, len(self.idx))
                for i in members.tolist()[: max(1, int(excess[t, rack]))]:
                    s = int(self.owner[i])
                    d = next((d for d in dests if self._acceptable(i, s, d, None, ())), None)
                    if d is None:
                        continue
                    self._apply(i, s, d, "rack")
                    moved += 1
                    progress = True
                    break
            if not progress:
                return moved

    def _evacuate(self) -> None:
        """Move every partition off the removed brokers, hottest first, each to the best-fitting broker."""
        safe_mean = np.where(self.mean > 0, self.mean, 1.0)
        hot = (self.X / safe_mean).max(axis=1)
        leaving = np.nonzero(~self.balanced[self.owner])[0]
        leaving = leaving[np.lexsort((leaving, -hot[leaving]))]
        dest_idx = self.idx[self.dest_ok]
        for i in leaving.tolist():
            after = self.L[dest_idx] + self.X[i]
            score = (after / safe_mean).max(axis=1)
            over_cap = np.any(after > self.cap + self.tol, axis=1)
            score = np.where(over_cap, score + 1e6, score)
            order = np.lexsort((dest_idx, self.C[dest_idx], score))
            self._apply(i, int(self.owner[i]), int(dest_idx[order[0]]), "remove_brokers")
