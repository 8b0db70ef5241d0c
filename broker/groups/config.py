"""The group coordinator's settings, named after Kafka's broker configs."""
from __future__ import annotations

from dataclasses import dataclass

DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class GroupCoordinatorConfig:
    """Kafka's defaults unless a deployment chooses otherwise.

    - ``group_min_session_timeout_ms`` / ``group_max_session_timeout_ms``
      (``group.min/max.session.timeout.ms``): a JoinGroup outside the range gets
      INVALID_SESSION_TIMEOUT; the bounds stop a client from making failure detection too eager
      or too lax.
    - ``group_max_size`` (``group.max.size``): members beyond it get GROUP_MAX_SIZE_REACHED.
    - ``group_initial_rebalance_delay_ms`` (``group.initial.rebalance.delay.ms``): how long the
      first rebalance of an empty group waits for more members, extended by the same amount each
      time one arrives, up to the rebalance timeout; it saves a rebalance per member when a whole
      application starts at once. Small clusters and tests often want it lower.
    - ``new_member_join_timeout_ms``: a member whose first JoinGroup is parked cannot heartbeat
      (it has no member id yet); it is dropped after this long so that retries from clients that
      timed out do not pile up as defunct members.
    - ``offset_metadata_max_bytes`` (``offset.metadata.max.bytes``): longer commit metadata gets
      OFFSET_METADATA_TOO_LARGE (measured in UTF-8 bytes).
    - ``offsets_retention_ms`` (``offsets.retention.minutes``): offsets of a group that has been
      empty this long (of a group without group management: not committed for this long) are
      deleted; ``None`` keeps them forever. Checked every
      ``offsets_retention_check_interval_ms`` (``offsets.retention.check.interval.ms``).
    """

    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 2**31 - 1
    group_initial_rebalance_delay_ms: int = 3_000
    new_member_join_timeout_ms: int = 300_000
    offset_metadata_max_bytes: int = 4_096
    offsets_retention_ms: int | None = 7 * DAY_MS
    offsets_retention_check_interval_ms: int = 600_000

    def __post_init__(self) -> None:
        if not 0 <= self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms:
            raise ValueError(
                f"need 0 <= group_min_session_timeout_ms ({self.group_min_session_timeout_ms}) <= "
                f"group_max_session_timeout_ms ({self.group_max_session_timeout_ms})"
            )
        if self.group_max_size < 1:
            raise ValueError(f"group_max_size must be at least 1, got {self.group_max_size}")
        for name in ("group_initial_rebalance_delay_ms", "new_member_join_timeout_ms", "offset_metadata_max_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.offsets_retention_ms is not None and self.offsets_retention_ms < 0:
            raise ValueError(f"offsets_retention_ms must not be negative, got {self.offsets_retention_ms}")
        if self.offsets_retention_check_interval_ms < 1:
            raise ValueError(
                f"offsets_retention_check_interval_ms must be positive, got {self.offsets_retention_check_interval_ms}"
            )
