"""Opaque pagination cursors: the keyset of the last row, base64url-encoded JSON."""

from __future__ import annotations

import base64
import json
from datetime import datetime

from api.problems import ProblemError


def encode_cursor(key: tuple[datetime, str]) -> str:
    raw = json.dumps({"t": key[0].isoformat(), "i": key[1]}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
        return datetime.fromisoformat(str(data["t"])), str(data["i"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ProblemError(422, "Invalid cursor", "This cursor was not issued by this api.") from exc
