"""Redis pub/sub wake-ups for event followers (the event rows stay the source of truth)."""

from __future__ import annotations

import contextlib

import redis

from persistence.contracts import events_channel


class RedisNotifier:
    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)

    def __call__(self, job_id: str, seq: int) -> None:
        with contextlib.suppress(redis.RedisError):  # followers also poll the database
            self.client.publish(events_channel(job_id), str(seq))
