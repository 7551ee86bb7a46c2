"""Validation shared by the settings classes of every deployable (api, worker)."""

from __future__ import annotations

from urllib.parse import urlsplit

PLACEHOLDER_SECRETS = frozenset({"changeme", "change-me", "changethis", "secret", "password", "placeholder", "xxx"})


def refuse_placeholder_secret(url: str | None, variable: str) -> str | None:
    """Reject a URL whose password is a well-known placeholder (copied from an example file)."""
    if url is None:
        return None
    password = urlsplit(url).password
    if password is not None and password.lower() in PLACEHOLDER_SECRETS:
        raise ValueError(f"{variable} uses the placeholder password '{password}'; set a real secret.")
    return url
