"""A follower's fetch loop for one ``storage=local`` replica (Kafka's ReplicaFetcherThread, one
task per partition).

It fetches from the leader at its log end with the epoch of its last batch; a divergence answer
makes it truncate (``LocalReplica.truncate``) and fetch again; an answer with batches is
appended as it is. Refusals (the leader does not know its epoch yet, is gone, or the network
failed) are retried with the project's one backoff until the metadata log names a new leader,
which stops this loop and starts another.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable, Protocol

from broker.local_replica import ROLE_FOLLOWER, LocalReplica
from broker.replica_fetch_http import ReplicaFetchClient
from metadata_quorum.kernel.backoff import STEP_BACKOFF
from metadata_quorum.kernel.errors import ErrorCode, FerryError

log = logging.getLogger("ferry.broker.replica_fetcher")

FETCH_MAX_BYTES = 1024 * 1024
PAUSED_RECHECK_S = 0.2


class FollowerThrottle(Protocol):
    """KIP-73 on the follower's side (replication_throttle.py)."""

    def fetch_bytes(self, replica: LocalReplica, max_bytes: int) -> int: ...

    def delay_s(self, replica: LocalReplica, nbytes: int) -> float: ...

    def paused(self, replica: LocalReplica) -> bool:
        """The replica's log dir is full (KIP-928): it fetches nothing until there is room, so it
        does not look caught up to its leader (Kafka's fetcher marks such a partition failed)."""
        ...


async def follow(replica: LocalReplica, client: ReplicaFetchClient, leader_url: Callable[[int], str | None],
                 max_wait_ms: int, max_bytes: int = FETCH_MAX_BYTES,
                 throttle: FollowerThrottle | None = None) -> None:
    """Fetch from the leader while ``replica`` follows it at the same epoch."""
    leader, epoch = replica.leader_id, replica.leader_epoch
    failures = 0
    while replica.role == ROLE_FOLLOWER and replica.leader_id == leader and replica.leader_epoch == epoch:
        url = leader_url(leader)
        if throttle is not None and throttle.paused(replica):
            await asyncio.sleep(PAUSED_RECHECK_S)
            continue
        try:
            if url is None:
                raise FerryError(ErrorCode.LEADER_NOT_AVAILABLE, f"no endpoint for broker {leader}")
            size = throttle.fetch_bytes(replica, max_bytes) if throttle is not None else max_bytes
            result = await client.fetch(url, replica.topic, replica.partition, replica.broker_id,
                                        replica.log.log_end_offset, replica.log.latest_epoch, epoch, size,
                                        max_wait_ms)
        except asyncio.CancelledError:
            raise
        except FerryError as exc:
            if replica.role != ROLE_FOLLOWER or replica.leader_epoch != epoch:
                return
            if exc.error is ErrorCode.OFFSET_OUT_OF_RANGE and isinstance(exc.details, dict) and \
                    int(exc.details.get("log_start_offset", -1)) > replica.log.log_end_offset:
                replica.reset_to(int(exc.details["log_start_offset"]))
                continue
            if failures == 0 or failures % 50 == 0:
                log.info("%s-%d: fetch from broker %d failed: %s", replica.topic, replica.partition, leader, exc)
            await asyncio.sleep(STEP_BACKOFF.delay_s(failures))
            failures += 1
            continue
        failures = 0
        if replica.role != ROLE_FOLLOWER or replica.leader_epoch != epoch:
            return
        if result.divergence is not None:
            replica.truncate(result.divergence)
            continue
        replica.append_from_leader(result.data, result.high_watermark)
        if throttle is not None and result.data:
            delay_s = throttle.delay_s(replica, len(result.data))
            if delay_s > 0:
                await asyncio.sleep(delay_s)
