"""Kafka's automatic topic creation (``auto.create.topics.enable``), on Metadata requests.

As in Kafka, a Metadata request naming a topic that does not exist creates it when the broker's
``auto.create.topics.enable`` is true and the request allows it (``allow_auto_topic_creation``,
Metadata v4+; v0-3 always allow). A Produce to an unknown topic is answered
``UNKNOWN_TOPIC_OR_PARTITION`` and creates nothing (as Kafka 4's ``handleProduceRequest``): the
producer's next Metadata request creates it. The creation is the controller's ``create_topics``
operation, the one CreateTopics is forwarded to, with the broker's ``num.partitions`` and
``default.replication.factor``. An illegal name is ``INVALID_TOPIC_EXCEPTION`` and an internal
topic name is never created this way.

Where Kafka answers ``LEADER_NOT_AVAILABLE`` at once and creates in the background, the broker
waits up to :data:`AUTO_CREATE_WAIT_MS` for the creation to reach its own metadata image and
then answers with the new topic and its leaders: a librdkafka producer (whose retry of Metadata
is 100-250 ms away, and whose messages wait for it) sends its first batch in the same round
trip. A creation that takes longer goes on, and the request is answered
``LEADER_NOT_AVAILABLE``, which clients retry.

:func:`unknown_topic_decision` is the pure decision; :class:`AutoTopicCreator` runs creations
(one at a time per name, however many clients ask for it).
"""
from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass
from typing import Iterable

from broker.kafka.forwarding import ControllerCalls
from metadata_quorum.kernel.controller_api import ControllerApi
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.topics import NewTopic
from metadata_quorum.ops.topics import validate_topic_name

log = logging.getLogger("ferry.broker.kafka.auto_create")

#: how long a Metadata request waits for the topics it creates (see the module's docstring)
AUTO_CREATE_WAIT_MS = 1_000
#: the controller call's own budget: it goes on after the request was answered
AUTO_CREATE_TIMEOUT_MS = 30_000
#: Kafka's internal topics: created only by their own coordinators (Ferry's: FindCoordinator)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


@dataclass(frozen=True)
class TopicDefaults:
    """The broker's topic-creation settings (Kafka's names in brackets)."""

    auto_create: bool = True  # auto.create.topics.enable
    num_partitions: int = 1  # num.partitions
    replication_factor: int = 1  # default.replication.factor


class Decision(enum.Enum):
    CREATE = "create"
    UNKNOWN = "unknown"  # UNKNOWN_TOPIC_OR_PARTITION
    INVALID = "invalid"  # INVALID_TOPIC_EXCEPTION


def unknown_topic_decision(name: str | None, defaults: TopicDefaults, request_allows: bool) -> Decision:
    """What a Metadata request gets for a topic name the image does not hold (Kafka's
    ``KafkaApis.getTopicMetadata``: an illegal name is INVALID_TOPIC_EXCEPTION whether or not
    creation is allowed)."""
    try:
        validate_topic_name(name)
    except FerryError:
        return Decision.INVALID
    if name in INTERNAL_TOPICS or not (defaults.auto_create and request_allows):
        return Decision.UNKNOWN
    return Decision.CREATE


class AutoTopicCreator:
    """Runs auto-creations through the controller, one per topic name at a time."""

    def __init__(self, controller: ControllerCalls, defaults: TopicDefaults) -> None:
        self.controller = controller
        self.api = ControllerApi(controller)
        self.defaults = defaults
        self._pending: dict[str, asyncio.Task[None]] = {}

    def _start(self, name: str) -> asyncio.Task[None]:
        task = self._pending.get(name)
        if task is None:
            task = asyncio.ensure_future(self._create(name))
            self._pending[name] = task
            task.add_done_callback(lambda _t: self._pending.pop(name, None))
        return task

    async def _create(self, name: str) -> None:
        item: NewTopic = {"name": name, "num_partitions": self.defaults.num_partitions,
                          "replication_factor": self.defaults.replication_factor}
        try:
            reply = await self.api.create_topics({"topics": [item]}, AUTO_CREATE_TIMEOUT_MS)
        except Exception as exc:  # noqa: BLE001 - the client is answered LEADER_NOT_AVAILABLE and asks again
            log.debug("auto-creation of topic %s failed: %r", name, exc)
            return
        for answer in reply.get("topics", ()):
            if answer.get("error") not in (None, "NONE", "TOPIC_ALREADY_EXISTS"):
                log.debug("auto-creation of topic %s refused: %s %s", name, answer.get("error"), answer.get("message"))

    async def create(self, names: Iterable[str], wait_ms: int = AUTO_CREATE_WAIT_MS) -> None:
        """Start creating ``names`` and wait up to ``wait_ms`` for those creations to finish
        (the forwarded write returns once this broker's image holds its result)."""
        tasks = [self._start(n) for n in names]
        if tasks and wait_ms > 0:
            await asyncio.wait(tasks, timeout=wait_ms / 1000)  # never cancels them


def metadata_error(decision: Decision) -> ErrorCode:
    """The topic-level error of a topic that is still unknown after the decision was carried out."""
    if decision is Decision.INVALID:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if decision is Decision.CREATE:
        return ErrorCode.LEADER_NOT_AVAILABLE
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
