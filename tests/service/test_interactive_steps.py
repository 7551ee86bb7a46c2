"""Issue 27: the interactive steps an api runs at once are bounded by its own services
(``Services.interactive_steps``), not by a semaphore of the module shared by every app of the
process (the embedded server and the tests run several apps in one process)."""

from __future__ import annotations

import threading
from pathlib import Path

from api.app import create_app
from api.interactive import start_interactive
from api.services import MAX_INTERACTIVE_STEPS, Services
from api.settings import ApiSettings


def _services(db_url: str, data_dir: Path) -> Services:
    app = create_app(ApiSettings(database_url=db_url, data_dir=data_dir), enqueue=lambda job_id, queue: None)
    services: Services = app.state.services
    return services


def test_an_app_s_interactive_step_does_not_wait_for_another_app_s(db_url: str, data_dir: Path) -> None:
    busy, free = _services(db_url, data_dir), _services(db_url, data_dir)
    for _ in range(MAX_INTERACTIVE_STEPS):  # every step of the first app taken (long model loads, say)
        assert busy.interactive_steps.acquire(blocking=False)
    answers: list[list[int]] = []
    step = threading.Thread(target=lambda: answers.append(start_interactive(free, "no-such-job")))
    try:
        step.start()
        step.join(120)  # a bound for a loaded machine: it returns as soon as the step has run
        assert not step.is_alive(), "the second app's step waited for the first app's"
        assert answers == [[]]  # no such job: nothing to announce
        assert not busy.interactive_steps.acquire(blocking=False)  # the first app's are still all taken
    finally:
        for _ in range(MAX_INTERACTIVE_STEPS):
            busy.interactive_steps.release()
        step.join(120)
        busy.db.dispose()
        free.db.dispose()
