"""Whether a produce for a partition this broker has just handed over is forwarded (pure).

librdkafka puts every refused batch behind ``retry.backoff.ms`` (100 ms by default) whatever
the refusal names, so a ``NOT_LEADER_OR_FOLLOWER`` from the old owner costs a librdkafka
producer at least that back-off per move, although the move itself takes ~40 ms. The same client
applies the per-partition ``CurrentLeader`` and the ``NodeEndpoints`` of a Produce v10+ answer
(KIP-951) whatever its error code, success included: it then sends that partition's next batches
to the named leader, with no error and no back-off. So the old owner forwards what it can no
longer take: it holds the request until the owner it names leads, sends the partition's record
batches unchanged to it, and answers with the owner's own result plus the new leader
(``broker/kafka/produce_forwarder.py`` is the connection, ``broker/kafka/data_apis.py`` the answer).

This module decides, from plain values, what happens to one partition of one request:

* ``HERE``: the core's usual path (append when served here, the owner-to-be's hold, or the
  refusal naming the leader);
* ``AWAIT``: the old owner holds the request until the election names the owner (then decide again);
* ``FORWARD``: send it to ``target``, which leads at ``target_epoch``.

A forward's answer moves the client only once it has a connection to the owner: librdkafka
(v2.15) migrates a partition to a broker it is not connected to and, while batches of the
partition are still in flight to the old owner (they are, with a producer that keeps sending),
does not connect until its broker thread's next idle wake-up, up to 1 s later. So the old owner
forwards only to a broker it had named to the same client (its host and client id) in an answer,
a refusal or a forward, before this hand-over began: a client sent to a broker connects to it and
keeps the connection. A client it has not named the owner to gets today's refusal, whose back-off
(100 ms) is the lesser cost, throughout the hand-over; the next move to that broker is forwarded.

Only the broker that gave the partition up forwards, and only for ``window_ms`` after it did:
a client whose metadata is older than that, or who never used this broker, is refused as
before. A request that was itself forwarded is never forwarded again (two brokers that just
swapped a partition twice must not send it back and forth), and neither is a request whose
answer cannot name the new leader (Produce before v10), so a client never keeps sending to a
broker that no longer leads without being told.
"""
from __future__ import annotations

import collections
import enum
from dataclasses import dataclass, field
from typing import Collection, Mapping

from broker.admission import LeaderView, ServingState
from metadata_quorum.records import NO_LEADER

#: Produce v10 adds the per-partition CurrentLeader and the NodeEndpoints an answer names the
#: new leader with (KIP-951); an older client would keep sending to this broker
MIN_FORWARD_VERSION = 10
#: the client id a broker forwards with: a request carrying it is served where it arrives
FORWARDED_CLIENT_ID_PREFIX = "ferry-forward-from-broker-"


class RouteKind(enum.Enum):
    HERE = "here"
    AWAIT = "await"
    FORWARD = "forward"


@dataclass(frozen=True)
class Route:
    kind: RouteKind
    target: int = NO_LEADER
    target_epoch: int = -1


HERE = Route(RouteKind.HERE)
AWAIT = Route(RouteKind.AWAIT)


@dataclass(frozen=True)
class ProduceAsk:
    """What about the request decides whether it may be forwarded."""

    api_version: int
    forwarded: bool  # it came from a broker that forwarded it
    transactional: bool  # never forwarded (the forwarded request carries no transactional id)
    has_records: bool
    # the brokers this broker has named as a leader to the client, and how long ago it first did (ms)
    named_ms_ago: Mapping[int, float] = field(default_factory=dict)


class ClientsSentTo:
    """Which brokers this broker has named as a leader to each client (its host and client id),
    the most recently seen ``max_clients`` of them. Clients sharing a host and a client id share
    an entry: at worst one of them is forwarded to a broker it is not connected to yet."""

    def __init__(self, max_clients: int = 10_000) -> None:
        self.max_clients = max_clients
        # client -> broker -> when this broker first named it to the client (monotonic seconds)
        self._sent: collections.OrderedDict[tuple[str, str | None], dict[int, float]] = collections.OrderedDict()

    def named_ms_ago(self, client: tuple[str, str | None], now_mono_s: float) -> dict[int, float]:
        return {b: (now_mono_s - t) * 1000 for b, t in self._sent.get(client, {}).items()}

    def record(self, client: tuple[str, str | None], brokers: Collection[int], now_mono_s: float) -> None:
        named = self._sent.pop(client, {})
        for b in brokers:
            named.setdefault(b, now_mono_s)
        self._sent[client] = named
        while len(self._sent) > self.max_clients:
            self._sent.popitem(last=False)


def forwarded_client_id(broker_id: int) -> str:
    return f"{FORWARDED_CLIENT_ID_PREFIX}{broker_id}"


def is_forwarded(client_id: str | None) -> bool:
    return client_id is not None and client_id.startswith(FORWARDED_CLIENT_ID_PREFIX)


def produce_route(broker_id: int, view: LeaderView | None, state: ServingState | None,
                  since_given_up_ms: float | None, window_ms: int, listening: Collection[int],
                  ask: ProduceAsk) -> Route:
    """Where one partition's batches of a produce request go.

    ``state`` is this broker's slot of the partition (None: none), ``since_given_up_ms`` how long
    ago this broker stopped owning it (None: it never did, or owns it now), ``listening`` the
    brokers with a Kafka listener the answer can name."""
    if window_ms <= 0 or ask.forwarded or ask.transactional or not ask.has_records or \
            ask.api_version < MIN_FORWARD_VERSION:
        return HERE
    if view is None or state is None or (state.accepts_requests and not state.replica_closed):
        return HERE
    if since_given_up_ms is None or not 0 <= since_given_up_ms <= window_ms:
        return HERE
    if view.leader == broker_id:
        return HERE  # coming back here: the core holds it while this broker opens the partition
    # named to the client before this hand-over began: within one hand-over a client is either
    # forwarded or refused throughout (a batch forwarded after a refused one would reach the owner
    # with a gap in its sequence numbers, OUT_OF_ORDER_SEQUENCE_NUMBER)
    known = {b for b, ago_ms in ask.named_ms_ago.items() if ago_ms > since_given_up_ms}
    if view.leader != NO_LEADER:
        if view.leader not in listening or view.leader not in known:
            return HERE
        return Route(RouteKind.FORWARD, view.leader, view.leader_epoch)
    if view.next_leader == broker_id:
        return HERE  # moving back here before the election: the core holds it as the owner-to-be's
    if view.next_leader != NO_LEADER and view.next_leader not in known:
        return HERE  # refused at once, naming the owner-to-be (which holds it until it serves)
    # between owners: the election behind this broker's closing commit names the owner
    return AWAIT
