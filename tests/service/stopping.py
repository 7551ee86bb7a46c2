"""What the tests of a stopped preparation share (``test_preparation_stops``, ``..._huge``)."""

from __future__ import annotations

import time

import httpx

from tests.service.helpers import submit


def wait_status(client: httpx.Client, job_id: str, wanted: set[str], timeout: float) -> str:
    """The job's status once it is one of ``wanted`` (a bound for a loaded machine, not a measure)."""
    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        status = str(client.get(f"/v1/jobs/{job_id}").json()["status"])
        if status in wanted:
            return status
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} is {status}, not {sorted(wanted)}, after {timeout:.0f} s")


def stop_then_take_next(
    client: httpx.Client, job_id: str, how: str, model: bytes, *, cancel_timeout: float, take_timeout: float
) -> tuple[str, float]:
    """Cancel or delete (``how``) the job, submit ``model`` and wait until the only worker takes it:
    that job's id, and the seconds from the stop until it was taken, less the upload's own time."""
    started = time.monotonic()
    if how == "cancel":
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
        wait_status(client, job_id, {"cancelled"}, timeout=cancel_timeout)
    else:
        assert client.delete(f"/v1/jobs/{job_id}").status_code == 204
        assert client.get(f"/v1/jobs/{job_id}").status_code == 404
    uploading = time.monotonic()
    after = submit(client, model)
    uploaded_in = time.monotonic() - uploading  # the next job's own intake: not the worker's time
    assert after.status_code == 202, after.text
    next_id = str(after.json()["id"])
    wait_status(client, next_id, {"running", "succeeded"}, timeout=take_timeout)
    return next_id, time.monotonic() - started - uploaded_in
