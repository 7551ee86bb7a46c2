"""A short-lived, bounded cache of token -> team for the request path: a request then costs no
database round trip for authentication. Entries live ``ttl_s`` seconds, so a revoked token is
refused within that time (``onnx-reducer token revoke``); keys are the tokens' sha256, never the
tokens."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from persistence.models import Team
from persistence.repositories.teams import hash_token


class TokenCache:
    def __init__(self, ttl_s: float, max_entries: int = 10_000) -> None:
        self.ttl_s, self.max_entries = ttl_s, max_entries
        self._entries: OrderedDict[str, tuple[float, Team]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, token: str) -> Team | None:
        if self.ttl_s <= 0:
            return None
        key = hash_token(token)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] < time.monotonic():
                del self._entries[key]
                return None
            return entry[1]

    def put(self, token: str, team: Team) -> None:
        if self.ttl_s <= 0:
            return
        with self._lock:
            self._entries[hash_token(token)] = (time.monotonic() + self.ttl_s, team)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
