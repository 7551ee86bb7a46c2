"""What the Redis broker holds for a job, read in kombu's Redis layout: a queue is a list of
messages; a message delivered to a worker and not yet acknowledged is in the hash ``unacked``
(tag -> ``[message, exchange, routing_key]``) and the sorted set ``unacked_index`` (tag -> time
of delivery), from where kombu hands it out again after the visibility timeout.

``forget_unacked`` removes a job's messages from there when the farm has re-sent the job itself
(``worker/presence.py``): the broker's redelivery would only repeat it. A worker still holding
such a message is unaffected (its acknowledgement of a removed tag does nothing).
``forget_unacked_of_ended`` removes the messages of ended jobs, which a killed worker leaves behind
when other workers carry its job on (an idle worker sweeps them, ``worker/presence.py``)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from typing import Any

import redis

from persistence.contracts import RUN_JOB_TASK

UNACKED = "unacked"
UNACKED_INDEX = "unacked_index"


class BrokerMessages:
    def __init__(self, redis_url: str) -> None:
        self.client = redis.Redis.from_url(redis_url, socket_timeout=10)

    def forget_unacked(self, job_id: str) -> int:
        """Remove every unacknowledged message for ``job_id``; how many were removed."""
        tags = [tag for tag, raw in self.client.hscan_iter(UNACKED) if job_of(raw) == job_id]
        if tags:
            pipe = self.client.pipeline()
            pipe.zrem(UNACKED_INDEX, *tags)
            pipe.hdel(UNACKED, *tags)
            pipe.execute()
        return len(tags)

    def forget_unacked_of_ended(self, ended: Callable[[list[str]], set[str]]) -> int:
        """Remove the unacknowledged messages of the jobs that ``ended`` picks out of those held: an
        ended job needs no message, and one a killed worker held would otherwise stay until the
        visibility timeout (hours). How many were removed."""
        held = {tag: job for tag, raw in self.client.hscan_iter(UNACKED) if (job := job_of(raw)) is not None}
        if not held:
            return 0
        gone = ended(sorted(set(held.values())))
        tags = [tag for tag, job in held.items() if job in gone]
        if tags:
            pipe = self.client.pipeline()
            pipe.zrem(UNACKED_INDEX, *tags)
            pipe.hdel(UNACKED, *tags)
            pipe.execute()
        return len(tags)

    def unacked_jobs(self) -> list[str]:
        """The job of each unacknowledged message."""
        return [job for _, raw in self.client.hscan_iter(UNACKED) if (job := job_of(raw)) is not None]

    def waiting_jobs(self, queues: Iterable[str]) -> list[str]:
        """The job of each message waiting in ``queues`` (not yet delivered)."""
        found = []
        for queue in queues:
            for raw in self.client.lrange(queue, 0, -1):
                job = _job_of_message(_loads(raw))
                if job is not None:
                    found.append(job)
        return found

    def close(self) -> None:
        self.client.close()


def job_of(raw: bytes | str) -> str | None:
    """The job id of an ``unacked`` entry, None when it is not a run-job message."""
    entry = _loads(raw)
    if isinstance(entry, list) and entry:
        return _job_of_message(entry[0])
    return None


def _job_of_message(message: Any) -> str | None:
    if not isinstance(message, dict) or (message.get("headers") or {}).get("task") != RUN_JOB_TASK:
        return None
    body: Any = message.get("body", "")
    try:
        if (message.get("properties") or {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        return str(args[0])
    except (ValueError, TypeError, IndexError, KeyError):
        return None


def _loads(raw: bytes | str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None
