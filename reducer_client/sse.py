"""A line-by-line parser of a ``text/event-stream`` (the WHATWG server-sent events format). An event
is complete only at its blank line: a frame cut off by a dropped connection is never emitted."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from reducer_client.models import Event


@dataclass
class SseParser:
    """Feed it lines (without their line ending); it returns each completed event once."""

    last_event_id: str = ""
    retry_ms: int | None = None
    heartbeats: int = 0
    _event: str = ""
    _data: list[str] = field(default_factory=list)
    _id: str | None = None

    def feed(self, line: str) -> Event | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            self.heartbeats += 1
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None

    def _dispatch(self) -> Event | None:
        if self._id is not None:
            self.last_event_id = self._id
        data, kind = "\n".join(self._data), self._event or "message"
        had_data = bool(self._data)
        self._event, self._data, self._id = "", [], None
        if not had_data:
            return None
        try:
            payload = json.loads(data)
        except json.JSONDecodeError:
            payload = {"data": data}
        if not isinstance(payload, dict):
            payload = {"data": payload}
        event_id = int(self.last_event_id) if self.last_event_id.isdigit() else 0
        return Event(id=event_id, kind=kind, data=payload)
