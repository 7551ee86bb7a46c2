"""A bounded pool of intake worker processes: uploads are inspected there (``api.inspection``), so
a huge or hostile model never stalls the api's event loop or holds its GIL, and a crash or an
out-of-memory kill while parsing costs one worker process, not the api.

At most ``workers`` uploads are inspected at once and ``max_pending`` wait or run; beyond that the
api answers 503 with ``Retry-After`` (``IntakeBusyError``)."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from api.inspection import Inspection, InspectRequest, Refusal, inspect_upload, warm_up
from api.problems import ProblemError
from checks.lifeline import exit_with_parent_process


def busy(retry_after_s: int) -> ProblemError:
    return ProblemError(
        503,
        "Intake busy",
        "This server is validating as many uploads as it can at the moment; send the job again in a few seconds.",
        headers={"Retry-After": str(retry_after_s)},
    )


class IntakePool:
    def __init__(self, workers: int, max_pending: int, retry_after_s: int) -> None:
        self.workers, self.max_pending, self.retry_after_s = workers, max(max_pending, workers), retry_after_s
        self.pending = 0
        self._lock = threading.Lock()
        self._executor: ProcessPoolExecutor | None = None

    def _pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._executor is None:
                # spawn: a fresh interpreter, never a fork of the api's threads and connections
                context = multiprocessing.get_context("spawn")
                # the workers leave with the api, also when it is SIGKILLed (checks.lifeline)
                self._executor = ProcessPoolExecutor(
                    self.workers, mp_context=context, initializer=exit_with_parent_process
                )
            return self._executor

    def warm(self) -> None:
        """Start the worker processes now (in the background), so the first upload does not wait
        for them to start and import ONNX."""
        pool = self._pool()
        for _ in range(self.workers):
            pool.submit(warm_up)

    def reserve(self) -> None:
        """Take a place, or raise 503 when ``max_pending`` uploads are already being inspected."""
        with self._lock:
            if self.pending >= self.max_pending:
                raise busy(self.retry_after_s)
            self.pending += 1

    def release(self) -> None:
        with self._lock:
            self.pending -= 1

    async def inspect(self, request: InspectRequest) -> Inspection | Refusal:
        """Run ``inspect_upload`` in a worker process (the caller holds a ``reserve``d place)."""
        pool = self._pool()
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, inspect_upload, request)
        except BrokenProcessPool:
            self._discard(pool)
            return Refusal(
                422,
                "Invalid model",
                "Validating the upload killed the validator process (it ran out of memory or crashed while "
                "parsing the model). Check that the file is a valid ONNX model or bundle.",
            )

    def _discard(self, pool: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is pool:
                self._executor = None
        pool.shutdown(wait=False, cancel_futures=True)

    def shutdown(self) -> None:
        with self._lock:
            pool, self._executor = self._executor, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
