"""A job's session options from its stored ``options`` (``jobflow.reduction.job_config``), no
service needed: the form's ``confirm_flaky`` reaches ``SessionConfig``, off when the job never
asked (as for jobs stored before the option existed, whose saved sessions resume unchanged)."""

from __future__ import annotations

from jobflow.reduction import job_config
from reducer_core.config import SessionConfig


def test_confirm_flaky_reaches_the_session_config_and_is_off_by_default() -> None:
    assert job_config("auto", {"confirm_flaky": True}).confirm_flaky is True
    assert job_config("auto", {"confirm_flaky": False}).confirm_flaky is False
    assert job_config("auto", {}).confirm_flaky is False
    assert job_config("bisect", {"pin_signature": True, "task": "precision"}).confirm_flaky is False


def test_smaller_inputs_are_on_for_new_jobs_and_off_for_jobs_stored_before() -> None:
    assert job_config("auto", {"reduce_data": True}).reduce_data is True  # the api stores it with new jobs
    assert job_config("auto", {}).reduce_data is False


def test_a_job_that_never_asked_saves_the_same_session_as_before() -> None:
    stored = {"reduce_inputs": True, "reduce_outputs": True, "pin_signature": True}
    assert job_config("auto", stored).to_json() == job_config("auto", stored | {"confirm_flaky": False}).to_json()
    assert "confirm_flaky" not in job_config("auto", stored).to_json()
    asked = job_config("auto", stored | {"confirm_flaky": True})
    assert asked.to_json()["confirm_flaky"] is True
    assert asked == SessionConfig(mode="auto", localize=True, min_good=True, confirm_flaky=True)
