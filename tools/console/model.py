"""The console's view model: what the cluster's APIs answered -> the JSON the page draws.

Pure functions, driven by the tests without sockets or clocks: :func:`build_view` turns one
:class:`Observation` (the controllers' and brokers' answers of one poll) and the :class:`History`
kept between polls (rates need two samples, the moves list outlives a broker's answer) into the
view; :func:`diff_view` turns two views into the small update the page applies (a moved partition
sends one ``[partition, leader]`` pair, not the 10,000-partition map again).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from prometheus_client.parser import text_string_to_metric_families

from metadata_quorum.kernel.errors import ErrorCode, FerryError

#: moves shown, newest first
MOVES_KEPT = 50
#: points of each broker's throughput and latency series (one per metrics poll)
SERIES_POINTS = 300
INT32_MAX = 2**31 - 1

JsonDict = dict[str, Any]


@dataclass(frozen=True)
class MetricsSample:
    """The counters of one broker's ``/metrics`` that the console draws, at ``at_ms``."""

    at_ms: int
    produce_records: float = 0.0
    produce_bytes: float = 0.0
    produce_requests: float = 0.0
    latency_sum_s: float = 0.0
    latency_count: float = 0.0


@dataclass
class Observation:
    """One poll's answers; ``None`` where the API did not answer (a dead broker, a lost leader)."""

    at_ms: int
    #: describe_cluster: broker id -> {"fenced", "endpoints", "rack"}
    brokers: dict[int, JsonDict]
    #: broker id -> its /v1/health, or None when it did not answer
    broker_health: dict[int, JsonDict | None]
    #: topic -> [(partition, leader, replicas)], from describe_topics
    partitions: dict[str, list[tuple[int, int, list[int]]]]
    #: broker id -> its /v1/moves answer's "moves" list (brokers that answered)
    moves: dict[int, list[JsonDict]] = field(default_factory=dict)
    #: broker id -> its metrics, when this poll read them
    metrics: dict[int, MetricsSample] = field(default_factory=dict)
    #: controller node id -> its /v1/health, or None
    controllers: dict[int, JsonDict | None] = field(default_factory=dict)
    #: topic -> consumer group -> total lag (records), when known
    group_lag: dict[str, dict[str, int]] = field(default_factory=dict)
    #: an autoscaling experiment's panels (tools/console/runs.py), when the console follows one
    run: JsonDict | None = None
    #: when ``partitions`` was read (a large cluster's topics are read less often than each poll); a
    #: move that completed later overrides its partition's leader on the map
    partitions_at_ms: int | None = None


@dataclass
class History:
    """What the view keeps between polls: the previous metrics, the series, the moves seen."""

    last_metrics: dict[int, MetricsSample] = field(default_factory=dict)
    series: dict[int, deque[list[float]]] = field(default_factory=dict)
    moves: dict[str, JsonDict] = field(default_factory=dict)


def parse_metrics(text: str, at_ms: int) -> MetricsSample:
    """A broker's Prometheus text -> the produce counters (summed over their labels)."""
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
    return MetricsSample(
        at_ms,
        produce_records=sums.get("ferry_broker_produce_records_total", 0.0),
        produce_bytes=sums.get("ferry_broker_produce_bytes_total", 0.0),
        produce_requests=sums.get("ferry_broker_produce_requests_total", 0.0),
        latency_sum_s=sums.get("ferry_broker_produce_latency_seconds_sum", 0.0),
        latency_count=sums.get("ferry_broker_produce_latency_seconds_count", 0.0),
    )


def rates(prev: MetricsSample, cur: MetricsSample) -> list[float]:
    """``[at_ms, records/s, bytes/s, mean produce latency ms]`` between two samples; a counter
    that went down (the broker restarted) counts from zero."""
    dt_s = max((cur.at_ms - prev.at_ms) / 1000, 1e-3)

    def delta(a: float, b: float) -> float:
        return b - a if b >= a else b
    n = delta(prev.latency_count, cur.latency_count)
    latency_ms = delta(prev.latency_sum_s, cur.latency_sum_s) / n * 1000 if n > 0 else 0.0
    return [float(cur.at_ms), round(delta(prev.produce_records, cur.produce_records) / dt_s, 1),
            round(delta(prev.produce_bytes, cur.produce_bytes) / dt_s, 1), round(latency_ms, 2)]


def move_key(move: Mapping[str, Any]) -> str:
    return f"{move.get('topic')}/{move.get('partition')}/{move.get('move_id')}"


def move_view(move: Mapping[str, Any]) -> JsonDict:
    """One six-step timeline for the page: steps, total, and the window the partition served no
    produce (t2, the old owner stopped accepting, to t6, the new owner serves)."""
    t = move.get("t_ms") or {}
    t2, t6 = t.get("t2"), t.get("t6")
    steps = move.get("steps_ms") or {}
    return {
        "key": move_key(move), "topic": move.get("topic"), "partition": move.get("partition"),
        "from": move.get("from_broker"), "to": move.get("to_broker"), "move_id": move.get("move_id"),
        "complete": bool(move.get("complete")), "clean": bool(move.get("clean")),
        "steps_ms": [steps.get(str(k)) for k in range(1, 7)], "total_ms": move.get("total_ms"),
        "gap_ms": t6 - t2 if isinstance(t2, int) and isinstance(t6, int) else None,
        "done_ms": t6 if isinstance(t6, int) else None,
    }


def _prefer(a: JsonDict, b: JsonDict) -> JsonDict:
    """Of two answers for the same move (both sides report it), the more complete one."""
    def score(m: JsonDict) -> tuple[int, int]:
        return (int(bool(m.get("complete"))), sum(v is not None for v in (m.get("steps_ms") or {}).values()))
    return b if score(b) > score(a) else a


def merge_moves(history: History, answers: Mapping[int, Sequence[JsonDict]], kept: int = MOVES_KEPT) -> list[JsonDict]:
    """The brokers' timelines merged into the moves seen so far: the newest ``kept``, newest first."""
    for moves in answers.values():
        for m in moves:
            key = move_key(m)
            history.moves[key] = _prefer(history.moves[key], m) if key in history.moves else m
    newest = sorted(history.moves.values(), key=lambda m: int(m.get("move_id") or 0), reverse=True)[:kept]
    history.moves = {move_key(m): m for m in newest}
    return [move_view(m) for m in newest]


def broker_state(info: Mapping[str, Any] | None, health: Mapping[str, Any] | None) -> str:
    """alive, fenced, draining (shutting down) or dead: what a broker is, as its health and the
    controller say."""
    if health is None:
        return "dead"
    if bool(health.get("fenced")) or bool((info or {}).get("fenced")):
        return "fenced"
    if health.get("state") in ("SHUTTING_DOWN", "STOPPED"):
        return "draining"
    return "alive" if health.get("state") == "RUNNING" else str(health.get("state", "starting")).lower()


def quorum_view(controllers: Mapping[int, Mapping[str, Any] | None]) -> JsonDict:
    """Leader, term, and each controller's lag: the committed records (below the leader's high
    watermark, the next offset to commit) it has not applied yet."""
    answered = {nid: h for nid, h in controllers.items() if h is not None}
    leader = next((h for h in answered.values() if h.get("is_leader")), None)
    hwm = int(leader.get("high_watermark", 0)) if leader else max(
        (int(h.get("high_watermark", 0)) for h in answered.values()), default=0)
    nodes: list[JsonDict] = []
    for nid in sorted(controllers):
        h = controllers[nid]
        if h is None:
            nodes.append({"id": nid, "up": False})
            continue
        nodes.append({"id": nid, "up": True, "leader": bool(h.get("is_leader")), "term": h.get("term"),
                      "image_offset": h.get("image_offset"),
                      "lag": max(hwm - 1 - int(h.get("image_offset", -1) or 0), 0),
                      "queue_depth": h.get("queue_depth"), "loop_lag_max_ms": h.get("loop_lag_max_ms")})
    return {"leader_id": leader.get("node_id") if leader else None,
            "term": leader.get("term") if leader else None, "high_watermark": hwm, "nodes": nodes}


def build_view(obs: Observation, history: History) -> JsonDict:
    """The whole page's data for one poll (the page's first paint, and the base of each diff)."""
    for bid, sample in obs.metrics.items():
        prev = history.last_metrics.get(bid)
        if prev is not None and sample.at_ms > prev.at_ms:
            history.series.setdefault(bid, deque(maxlen=SERIES_POINTS)).append(rates(prev, sample))
        history.last_metrics[bid] = sample
    led: dict[int, int] = {}
    partitions: dict[str, list[int]] = {}
    for topic in sorted(obs.partitions):
        rows = sorted(obs.partitions[topic])
        leaders = [-1] * (rows[-1][0] + 1 if rows else 0)
        for p, leader, _replicas in rows:
            leaders[p] = leader
            led[leader] = led.get(leader, 0) + 1
        partitions[topic] = leaders
    moves = merge_moves(history, obs.moves)
    read_at_ms = obs.at_ms if obs.partitions_at_ms is None else obs.partitions_at_ms
    for m in reversed(moves):  # oldest first: the newest move of a partition wins
        leaders_of = partitions.get(str(m["topic"]))
        p, to = m["partition"], m["to"]
        if (m["complete"] and m["done_ms"] is not None and m["done_ms"] >= read_at_ms and leaders_of is not None
                and isinstance(p, int) and 0 <= p < len(leaders_of) and isinstance(to, int)):
            led[leaders_of[p]] = led.get(leaders_of[p], 0) - 1
            leaders_of[p] = to
            led[to] = led.get(to, 0) + 1
    brokers = []
    for bid in sorted(set(obs.brokers) | set(obs.broker_health)):
        health = obs.broker_health.get(bid)
        last = history.series.get(bid)
        rate = last[-1] if last else None
        brokers.append({"id": bid, "state": broker_state(obs.brokers.get(bid), health), "leads": led.get(bid, 0),
                        "records_per_s": rate[1] if rate else 0.0, "bytes_per_s": rate[2] if rate else 0.0,
                        "latency_ms": rate[3] if rate else 0.0,
                        "serving": (health or {}).get("partitions", {}).get("SERVING")})
    topics = [{"name": t, "partitions": len(ls), "groups": obs.group_lag.get(t, {})} for t, ls in partitions.items()]
    return {
        "at_ms": obs.at_ms,
        "brokers": brokers,
        "partitions": partitions,
        "topics": topics,
        "moves": moves,
        "quorum": quorum_view(obs.controllers),
        "series": {str(b): list(s) for b, s in sorted(history.series.items())},
        "run": obs.run,
    }


def diff_view(prev: JsonDict | None, cur: JsonDict) -> JsonDict | None:
    """What changed from ``prev`` to ``cur`` (None: nothing). Keys other than ``partitions`` are
    sent whole when they changed; of ``partitions``, a topic whose size is the same sends only
    its changed ``[partition, leader]`` pairs; a new or resized topic is sent whole."""
    if prev is None:
        return {"full": cur}
    out: JsonDict = {}
    for key, value in cur.items():
        if key not in ("partitions", "at_ms") and prev.get(key) != value:
            out[key] = value
    old_parts: dict[str, list[int]] = prev.get("partitions", {})
    changed: dict[str, list[list[int]]] = {}
    whole: dict[str, list[int]] = {}
    for topic, leaders in cur["partitions"].items():
        before = old_parts.get(topic)
        if before is None or len(before) != len(leaders):
            whole[topic] = leaders
        elif before != leaders:
            changed[topic] = [[p, ld] for p, (b, ld) in enumerate(zip(before, leaders, strict=True)) if b != ld]
    gone = [t for t in old_parts if t not in cur["partitions"]]
    if changed:
        out["leaders"] = changed
    if whole:
        out["topics_set"] = whole
    if gone:
        out["topics_gone"] = gone
    if not out:
        return None
    out["at_ms"] = cur["at_ms"]
    return out


def parse_move_form(body: Any) -> tuple[str, int, list[int]]:
    """The move form's JSON ``{"topic", "partition", "replicas"}`` -> its parts, strictly: a
    partition is an int32 >= 0 and replicas a non-empty list of broker ids (ints, or a
    comma-separated string as typed in the form); anything else is INVALID_REQUEST."""
    if not isinstance(body, dict):
        raise FerryError(ErrorCode.INVALID_REQUEST, "the body must be a JSON object")
    topic = body.get("topic")
    if not isinstance(topic, str) or not topic.strip():
        raise FerryError(ErrorCode.INVALID_REQUEST, "topic must be a non-empty string")
    partition = body.get("partition")
    if isinstance(partition, str) and partition.strip().isdecimal() and partition.strip().isascii():
        partition = int(partition.strip())
    if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition <= INT32_MAX:
        raise FerryError(ErrorCode.INVALID_REQUEST, "partition must be an integer from 0 to 2147483647")
    raw = body.get("replicas")
    if isinstance(raw, str):
        items: list[Any] = [s.strip() for s in raw.split(",")]
        if not all(s.isascii() and (s.isdecimal() or (s[:1] == "-" and s[1:].isdecimal())) for s in items):
            raise FerryError(ErrorCode.INVALID_REQUEST, f"replicas must be broker ids separated by commas, not {raw!r}")
        raw = [int(s) for s in items]
    if not isinstance(raw, list) or not raw or any(isinstance(r, bool) or not isinstance(r, int) for r in raw):
        raise FerryError(ErrorCode.INVALID_REQUEST, "replicas must be a non-empty list of broker ids")
    if any(not -(2**31) <= r <= INT32_MAX for r in raw):
        raise FerryError(ErrorCode.INVALID_REQUEST, "a broker id is an int32")
    return topic.strip(), partition, list(raw)


def group_lag(committed: Mapping[str, Mapping[tuple[str, int], int]],
              ends: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """Each group's lag per topic: the sum over its partitions of log end - committed offset
    (a partition whose end is unknown, or a committed offset of -1, counts nothing)."""
    out: dict[str, dict[str, int]] = {}
    for group, offsets in sorted(committed.items()):
        for (topic, partition), offset in offsets.items():
            end = ends.get((topic, partition))
            if end is None or offset < 0:
                continue
            lags = out.setdefault(topic, {})
            lags[group] = lags.get(group, 0) + max(end - offset, 0)
    return out
