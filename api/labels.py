"""Job labels: ``key=value`` pairs a job is submitted with (the ``labels`` form field, a JSON
object; ``onnx-reducer submit`` fills it with the CI provider's context and ``--label``), and the
``label=key=value`` filters of ``GET /v1/jobs``. A label that breaks a rule is a 422 that says
which and how to fix it."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from api.problems import ProblemError, field_errors

MAX_LABELS = 32
MAX_KEY = 63
MAX_VALUE = 1024
# a value's UTF-8 bytes: the (key, value) index's b-tree entry holds at most 2,704 bytes, and 1,024
# characters of four-byte UTF-8 (emoji) are 4 KiB; PostgreSQL refuses such a row (was a 503)
MAX_VALUE_BYTES = 2048
KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
KEY_RULE = f"a key is 1-{MAX_KEY} characters: letters, digits, '.', '_' or '-', starting with a letter or digit"


def _invalid(detail: str, field: str = "labels") -> ProblemError:
    title = "Invalid labels" if field == "labels" else "Invalid label filter"
    return ProblemError(422, title, detail, errors=field_errors(field, detail))


def _check_pair(key: object, value: object) -> tuple[str, str]:
    if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
        shown = str(key)[:80].encode("unicode_escape").decode("ascii")
        raise _invalid(f"Label key '{shown}' is not allowed: {KEY_RULE}.")
    if not isinstance(value, str):
        raise _invalid(f"Label '{key}' must have a string value (got {type(value).__name__}).")
    if len(value) > MAX_VALUE:
        raise _invalid(f"Label '{key}' is {len(value)} characters long; the most is {MAX_VALUE}.")
    if len(value.encode()) > MAX_VALUE_BYTES:
        raise _invalid(
            f"Label '{key}' is {len(value.encode())} bytes in UTF-8; the most is {MAX_VALUE_BYTES} "
            f"({MAX_VALUE} characters of ASCII, fewer of other scripts); shorten it."
        )
    if not value.isprintable():
        raise _invalid(f"Label '{key}' holds a control character (a newline, a tab, a NUL); remove it.")
    return key, value


def parse_labels(text: str | None) -> dict[str, str]:
    """The ``labels`` form field: a JSON object of string values, at most ``MAX_LABELS`` of them."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _invalid(
            f'The labels field is not JSON ({exc.msg}); send an object like {{"repo": "org/app"}}.'
        ) from None
    if not isinstance(data, dict):
        raise _invalid('The labels field must be a JSON object like {"repo": "org/app"}.')
    if len(data) > MAX_LABELS:
        raise _invalid(f"{len(data)} labels sent; a job takes at most {MAX_LABELS}.")
    return dict(_check_pair(key, value) for key, value in data.items())


def parse_filters(filters: Sequence[str]) -> dict[str, str]:
    """``label=key=value`` query parameters (every one must match): at most ``MAX_LABELS``, a key
    at most once with one value (a job carries one value per key)."""
    if len(filters) > MAX_LABELS:
        raise _invalid(f"{len(filters)} label filters given; a job carries at most {MAX_LABELS} labels.", "label")
    wanted: dict[str, str] = {}
    for item in filters:
        key, sep, value = item.partition("=")
        if not sep:
            raise _invalid(f"The label filter '{item[:80]}' has no '='; write label=key=value.", "label")
        try:
            key, value = _check_pair(key, value)
        except ProblemError as exc:
            raise _invalid(exc.detail, "label") from None
        if wanted.get(key, value) != value:
            raise _invalid(f"The label filters give '{key}' two values; a job has one: keep one of them.", "label")
        wanted[key] = value
    return wanted
