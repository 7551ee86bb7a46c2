"""When and how long to wait before trying a request again: exponential backoff with jitter on
connection errors and 502/503/504, honouring the server's ``Retry-After``."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

RETRY_STATUSES = frozenset({502, 503, 504})
MAX_RETRY_AFTER_S = 300.0


@dataclass
class RetryPolicy:
    """``attempts`` tries in all (the first one included); the n-th wait is ``base_s * 2**(n-1)``
    (at most ``max_delay_s``), jittered by up to a quarter, or what ``Retry-After`` asks for."""

    attempts: int = 5
    base_s: float = 0.5
    max_delay_s: float = 30.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)

    def delay(self, retry: int, retry_after: str | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        asked = retry_after_seconds(retry_after)
        if asked is not None:
            return min(asked, MAX_RETRY_AFTER_S)
        backoff = min(self.base_s * 2.0 ** (retry - 1), self.max_delay_s)
        return backoff * (1 + random.uniform(0, 0.25))  # jitter: clients do not retry in step


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds: a number of seconds, or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
