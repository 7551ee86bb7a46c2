"""What the test's TCP stand-ins (``proxy``, ``s3_chaos``, ``web_harness``) share."""

from __future__ import annotations

import socket
from collections.abc import Iterator


def accepted_clients(listener: socket.socket) -> Iterator[socket.socket]:
    """Each connection ``listener`` accepts, until it is closed (its ``accept`` then raises)."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        yield client
