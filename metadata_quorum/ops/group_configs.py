"""Group configs (ConfigResource type GROUP, KIP-848): the names Ferry knows, Kafka's defaults and
bounds, and the check Kafka's GroupConfig.validate makes (pure).

A group's configs are dynamic configs like a topic's (``ConfigRecord`` with resource type
``group`` in the metadata log); they may be set before the group exists, as in Kafka. The consumer
group coordinator (``broker.groups.consumer_coordinator``) reads them for each group it serves:
``consumer.session.timeout.ms`` is how long a member may go unheard before it is removed, and
``consumer.heartbeat.interval.ms`` the interval its heartbeats are told to keep.

Kafka also has ``share.*`` group configs (share groups, KIP-932); Ferry has no share groups, so
those names are refused as every name Kafka's GroupConfig does not know is
("Unknown group config name: ...").
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from metadata_quorum.kernel.errors import ErrorCode, FerryError

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"

_JAVA_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_INT_MIN, _INT_MAX = -(2 ** 31), 2 ** 31 - 1


@dataclass(frozen=True)
class GroupConfigDefaults:
    """Kafka's broker configs behind the group configs: the defaults a group without its own value
    gets (``group.consumer.session.timeout.ms``, ``group.consumer.heartbeat.interval.ms``) and the
    bounds a group's value must respect (``group.consumer.min/max.*``). Ferry's brokers and
    controllers use Kafka's defaults for all six."""

    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 45_000
    max_session_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = 5_000
    min_heartbeat_interval_ms: int = 5_000
    max_heartbeat_interval_ms: int = 15_000


KAFKA_DEFAULTS = GroupConfigDefaults()

#: name -> (the broker config its default comes from, documentation)
GROUP_CONFIG_DOCS: dict[str, tuple[str, str]] = {
    CONSUMER_HEARTBEAT_INTERVAL_MS: ("group.consumer.heartbeat.interval.ms",
                                     "The heartbeat interval given to the members of this consumer group."),
    CONSUMER_SESSION_TIMEOUT_MS: ("group.consumer.session.timeout.ms",
                                  "The timeout to detect client failures when using the consumer group protocol."),
}


def group_config_default(name: str, defaults: GroupConfigDefaults = KAFKA_DEFAULTS) -> int:
    return defaults.session_timeout_ms if name == CONSUMER_SESSION_TIMEOUT_MS else defaults.heartbeat_interval_ms


def _parse_int(name: str, value: str) -> int:
    text = value.strip()
    if not _JAVA_INTEGER.match(text) or not _INT_MIN <= int(text) <= _INT_MAX:
        raise FerryError(ErrorCode.INVALID_CONFIG,
                         f"Invalid value {value} for configuration {name}: Not a number of type INT")
    number = int(text)
    if number < 1:
        raise FerryError(ErrorCode.INVALID_CONFIG,
                         f"Invalid value {value} for configuration {name}: Value must be at least 1")
    return number


def check_group_name(name: str) -> None:
    """Kafka refuses the empty name (there are no default group resources)."""
    if not name:
        raise FerryError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")


def check_group_configs(configs: Mapping[str, str | None],
                        defaults: GroupConfigDefaults = KAFKA_DEFAULTS) -> None:
    """Kafka's GroupConfig.validate over a group's whole config after a change (unset names take
    their defaults): every name known, every value an INT ≥ 1 within the broker's
    ``group.consumer.min/max.*`` bounds, and the session timeout above the heartbeat interval.
    INVALID_CONFIG otherwise, with Kafka's wording."""
    nulls = sorted(k for k, v in configs.items() if v is None)
    if nulls:
        raise FerryError(ErrorCode.INVALID_REQUEST, f"Null value not supported for group configs: {', '.join(nulls)}")
    for name in configs:
        if name not in GROUP_CONFIG_DOCS:
            raise FerryError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
    values = {name: _parse_int(name, str(value)) for name, value in configs.items() if value is not None}
    heartbeat = values.get(CONSUMER_HEARTBEAT_INTERVAL_MS, defaults.heartbeat_interval_ms)
    session = values.get(CONSUMER_SESSION_TIMEOUT_MS, defaults.session_timeout_ms)
    bounds = ((heartbeat, CONSUMER_HEARTBEAT_INTERVAL_MS, defaults.min_heartbeat_interval_ms,
               defaults.max_heartbeat_interval_ms, "group.consumer.min.heartbeat.interval.ms",
               "group.consumer.max.heartbeat.interval.ms"),
              (session, CONSUMER_SESSION_TIMEOUT_MS, defaults.min_session_timeout_ms,
               defaults.max_session_timeout_ms, "group.consumer.min.session.timeout.ms",
               "group.consumer.max.session.timeout.ms"))
    for value, name, low, high, low_name, high_name in bounds:
        if value < low:
            raise FerryError(ErrorCode.INVALID_CONFIG, f"{name} must be greater than or equal to {low_name}")
        if value > high:
            raise FerryError(ErrorCode.INVALID_CONFIG, f"{name} must be less than or equal to {high_name}")
    if session <= heartbeat:
        raise FerryError(ErrorCode.INVALID_CONFIG,
                         f"{CONSUMER_SESSION_TIMEOUT_MS} must be greater than {CONSUMER_HEARTBEAT_INTERVAL_MS}")


@dataclass(frozen=True)
class ConsumerGroupTimeouts:
    """What the coordinator enforces for one consumer group."""

    session_timeout_ms: int
    heartbeat_interval_ms: int


def consumer_group_timeouts(stored: Mapping[str, str], session_timeout_ms: int,
                            heartbeat_interval_ms: int) -> ConsumerGroupTimeouts:
    """A group's session timeout and heartbeat interval: its own values where set (the controller
    only stores values :func:`check_group_configs` accepted), the coordinator's defaults otherwise.
    A value that does not parse (never stored by Ferry) falls back to the default rather than
    stopping the coordinator."""
    def value(name: str, default: int) -> int:
        raw = stored.get(name)
        try:
            return _parse_int(name, raw) if raw is not None else default
        except FerryError:
            return default
    return ConsumerGroupTimeouts(value(CONSUMER_SESSION_TIMEOUT_MS, session_timeout_ms),
                                 value(CONSUMER_HEARTBEAT_INTERVAL_MS, heartbeat_interval_ms))
