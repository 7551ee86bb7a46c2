"""``ReducerClient``: the service's REST api as typed Python calls (httpx). Requests that fail to
connect, or that a gateway answers 502/503/504, are tried again with backoff (honouring
``Retry-After``); an upload carries an ``Idempotency-Key``, so a retried upload never creates a
second job. Errors are typed exceptions carrying the server's problem document."""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

from reducer_client.bundle import model_source
from reducer_client.errors import (
    ApiError,
    AuthError,
    NotFoundError,
    Problem,
    ReducerClientError,
    ServerUnreachableError,
    WaitTimeoutError,
)
from reducer_client.models import Event, Iteration, IterationPage, Job, JobPage, Submission
from reducer_client.retry import RETRY_STATUSES, RetryPolicy
from reducer_client.sse import SseParser
from reducer_client.upload import FileSource, MultipartBody, Progress, UploadSource

USER_AGENT = "onnx-reducer-client/0.1"
# A stream that sends nothing (not even a heartbeat) for this long is treated as dropped.
STREAM_IDLE_TIMEOUT_S = 60.0
# The server validates a model before it answers an upload: allow big models that long.
UPLOAD_ANSWER_TIMEOUT_S = 900.0
_RETRYABLE_TRANSPORT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError, httpx.ProxyError)
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout)
_FILENAME = re.compile(r"""filename\*?=(?:UTF-8'')?"?([^";]+)"?""", re.IGNORECASE)


def _error_for(response: httpx.Response) -> ApiError:
    try:
        body: object = response.json()
    except ValueError:
        body = response.text
    problem = Problem.from_body(response.status_code, body, response.reason_phrase)
    if response.status_code in (401, 403):
        return AuthError(problem)
    if response.status_code == 404:
        return NotFoundError(problem)
    return ApiError(problem)


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError as exc:
        raise ReducerClientError(f"The server answered {response.status_code} with a body that is not JSON.") from exc
    if not isinstance(data, dict):
        raise ReducerClientError(f"The server answered {response.status_code} with unexpected JSON.")
    return data


def _suffix_from(response: httpx.Response) -> str:
    match = _FILENAME.search(response.headers.get("content-disposition", ""))
    return PurePosixPath(match.group(1)).suffix if match else ".onnx"


class ReducerClient:
    """A client of one onnx-reducer service. Use as a context manager (it holds a connection pool)::

    with ReducerClient("https://reducer.example.com", token) as client:
        job = client.submit(Path("model.onnx"), "kind: op-present\\nops: [Mul]\\n")
        final = client.wait(job.job_id, timeout=3600)
        client.download(final.id, "min-bad", Path("out"))
    """

    def __init__(
        self,
        server: str,
        token: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        timeout_s: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self.retry = retry or RetryPolicy()
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json, application/problem+json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # Downloads may redirect to a presigned object-store URL (ARTIFACT_STORE=s3); httpx drops the
        # token on a redirect to another origin, and the URL itself authorises the one download.
        self._http = httpx.Client(
            base_url=self.server,
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            transport=transport,
            follow_redirects=True,
        )

    def __enter__(self) -> ReducerClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- links ---------------------------------------------------------------------------------

    def job_url(self, job_id: str) -> str:
        """The job's page in the web UI."""
        return f"{self.server}/#/jobs/{job_id}"

    def api_url(self, job_id: str) -> str:
        return f"{self.server}/v1/jobs/{quote(job_id, safe='')}"

    @staticmethod
    def _path(job_id: str, *rest: str) -> str:
        return "/".join(["/v1/jobs", quote(job_id, safe=""), *rest])

    # -- sending with retries --------------------------------------------------------------------

    def _send(
        self, build: Callable[[], httpx.Request], *, idempotent: bool = True, stream: bool = False
    ) -> httpx.Response:
        """Send the request ``build`` makes (a fresh one per attempt); errors become exceptions."""
        attempts = max(1, self.retry.attempts)
        for attempt in range(1, attempts + 1):
            last = attempt == attempts
            try:
                response = self._http.send(build(), stream=stream)
            except httpx.UnsupportedProtocol as exc:
                raise ReducerClientError(f"The server URL must start with http:// or https:// ({exc}).") from exc
            except _RETRYABLE_TRANSPORT as exc:
                if last or not (idempotent or isinstance(exc, _NOT_SENT)):
                    raise self._unreachable(exc, attempt) from exc
                self.retry.sleep(self.retry.delay(attempt))
                continue
            if response.status_code in RETRY_STATUSES:
                retry_after = response.headers.get("retry-after")
                response.read()
                response.close()
                if last or not idempotent:
                    raise ServerUnreachableError(
                        f"{self.server} answered {response.status_code} {response.reason_phrase} "
                        f"({attempt} attempt{'s' if attempt > 1 else ''}): {_error_for(response).problem}"
                    )
                self.retry.sleep(self.retry.delay(attempt, retry_after))
                continue
            if response.is_error:
                response.read()
                response.close()
                raise _error_for(response)
            return response
        raise AssertionError("unreachable")  # the loop returns or raises

    def _unreachable(self, exc: Exception, attempts: int) -> ServerUnreachableError:
        tries = f"{attempts} attempt{'s' if attempts > 1 else ''}"
        return ServerUnreachableError(f"{self.server} cannot be reached ({type(exc).__name__}: {exc}; {tries}).")

    def _get(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        return _json(self._send(lambda: self._http.build_request("GET", path, params=clean)))

    # -- jobs ------------------------------------------------------------------------------------

    def submit(
        self,
        model: Path | UploadSource,
        check_spec: str,
        *,
        golden: Path | None = None,
        inputs: Sequence[Path] = (),
        mode: str | None = None,
        model_path: str | None = None,
        reduce_inputs: bool | None = None,
        reduce_outputs: bool | None = None,
        pin_signature: bool | None = None,
        confirm_flaky: bool | None = None,
        reduce_data: bool | None = None,
        idempotency_key: str | None = None,
        progress: Progress | None = None,
        allow_nonfinite: bool | None = None,
        task: str | None = None,
        labels: Mapping[str, str] | None = None,
        releases: Sequence[str] = (),
        source_job_id: str | None = None,
        on: str | None = None,
    ) -> Submission:
        """Upload ``model`` (an ``.onnx`` file, a ``.tar``/``.zip`` bundle, or an ``.onnx`` whose
        external-data files lie next to it: those are bundled on the fly; or a prepared
        ``UploadSource``, see ``model_source``) with a check spec (YAML or JSON text); ``task``:
        ``reduce`` (the server's default) or ``precision`` (which nodes must stay fp32); an option left
        ``None`` is not sent (the server's default; ``confirm_flaky``: on, ``reduce_data``: off);
        ``reduce_data=True``: the answer's input sizes and weights shrink too; ``allow_nonfinite=True``
        (task precision): keep the search's answer even where an fp16 tensor holds inf; ``inputs``: input
        samples (.npz or Polygraphy JSON) that the check judges, every one; ``labels``: ``key=value``
        pairs stored with the job (``ci_context.ci_labels`` reads a CI run's); ``source_job_id`` (tasks
        bisect-passes and bisect-releases): a succeeded reduce job of the team the bisection starts
        from (its answer goes into that job's bundle), ``on`` (bisect-passes): ``min-bad`` (the
        default with a source) or ``original``, the model bisected. Streamed from
        disk; ``progress(sent, total)`` sees the file bytes go out. Retries reuse one
        ``Idempotency-Key`` (a new one unless given), so at most one job is created."""
        key = idempotency_key or uuid.uuid4().hex
        files = [("model", model if isinstance(model, UploadSource) else model_source(model))]
        if golden is not None:
            files.append(("golden", FileSource(golden)))
        files += [("inputs", FileSource(path)) for path in inputs]  # several files: several samples, in order
        options = {
            "reduce_inputs": reduce_inputs,
            "reduce_outputs": reduce_outputs,
            "pin_signature": pin_signature,
            "confirm_flaky": confirm_flaky,
            "reduce_data": reduce_data,
            "allow_nonfinite": allow_nonfinite,
        }
        fields = {"check_spec": check_spec, "mode": mode, "model_path": model_path, "task": task}
        fields["labels"] = json.dumps(dict(labels)) if labels else None
        fields["releases"] = ",".join(releases) or None  # task bisect-releases: the onnxruntime releases
        fields |= {"source_job_id": source_job_id, "on": on}  # a bisection started from a reduce job
        fields |= {name: str(value).lower() for name, value in options.items() if value is not None}
        body = MultipartBody({k: v for k, v in fields.items() if v is not None}, files)
        headers = {
            "Content-Type": body.content_type,
            "Content-Length": str(body.length),
            "Idempotency-Key": key,
        }
        timeout = httpx.Timeout(60.0, connect=10.0, read=UPLOAD_ANSWER_TIMEOUT_S)
        response = self._send(
            lambda: self._http.build_request(
                "POST", "/v1/jobs", content=body.stream(progress), headers=headers, timeout=timeout
            )
        )
        data = _json(response)
        return Submission(
            job_id=str(data["id"]),
            status=str(data.get("status", "queued")),
            location=str(data.get("location") or response.headers.get("location", "")),
            replayed=response.headers.get("idempotent-replayed") == "true",
            idempotency_key=key,
        )

    def get_job(self, job_id: str) -> Job:
        return Job.from_json(self._get(self._path(job_id)))

    def list_jobs(
        self,
        *,
        status: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> JobPage:
        """One page of the team's jobs, newest first; pass ``next_cursor`` back for the next;
        ``labels``: only the jobs carrying every one of them."""
        label = [f"{key}={value}" for key, value in (labels or {}).items()] or None
        data = self._get("/v1/jobs", {"status": status, "limit": limit, "cursor": cursor, "label": label})
        return JobPage([Job.from_json(item) for item in data.get("items", [])], data.get("next_cursor"))

    def iter_jobs(
        self, *, status: str | None = None, page_size: int = 50, labels: Mapping[str, str] | None = None
    ) -> Iterator[Job]:
        """Every job of the team (carrying ``labels``), following the cursors."""
        cursor: str | None = None
        while True:
            page = self.list_jobs(status=status, limit=page_size, cursor=cursor, labels=labels)
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def iterations(self, job_id: str, *, after: int = 0, limit: int = 200) -> IterationPage:
        data = self._get(self._path(job_id, "iterations"), {"after": after, "limit": limit})
        return IterationPage([Iteration.from_json(item) for item in data.get("items", [])], data.get("next_after"))

    def iter_iterations(self, job_id: str, *, page_size: int = 200) -> Iterator[Iteration]:
        after = 0
        while True:
            page = self.iterations(job_id, after=after, limit=page_size)
            yield from page.items
            if page.next_after is None:
                return
            after = page.next_after

    def cancel(self, job_id: str) -> Job:
        """Cancel a job (a queued one ends at once, a running check is killed within about a second)."""
        path = self._path(job_id, "cancel")
        return Job.from_json(_json(self._send(lambda: self._http.build_request("POST", path))))

    def delete_job(self, job_id: str) -> None:
        """Delete a job: cancelled first if it still runs, then its results and the stored files no
        other job shares are removed. The server answers 409 while a cancelled job is still stopping
        (send it again a few seconds later)."""
        path = self._path(job_id)
        self._send(lambda: self._http.build_request("DELETE", path)).close()

    def retry_job(self, job_id: str) -> Job:
        """Queue a job again that failed for a reason outside its model and spec (it resumes)."""
        path = self._path(job_id, "retry")
        return Job.from_json(_json(self._send(lambda: self._http.build_request("POST", path), idempotent=False)))

    # -- events ----------------------------------------------------------------------------------

    def follow_events(self, job_id: str, *, after: int = 0, timeout_s: float | None = None) -> Iterator[Event]:
        """The job's events after event ``after``, as they happen, until the job has ended. A dropped
        connection is resumed with ``Last-Event-ID`` (no event lost or repeated; a half-received
        event is discarded and received again); a stream silent for longer than the heartbeat allows
        counts as dropped. Raises WaitTimeoutError when ``timeout_s`` passes first."""
        deadline = time.monotonic() + timeout_s if timeout_s is not None else None
        last, failures = after, 0
        while True:
            received = 0
            try:
                for event in self._event_stream(job_id, last, deadline, timeout_s):
                    last, received, failures = event.id, received + 1, 0
                    yield event
            except _RETRYABLE_TRANSPORT as exc:
                self._check_deadline(job_id, deadline, timeout_s)
                failures += 1
                if failures >= max(1, self.retry.attempts):
                    raise self._unreachable(exc, failures) from exc
                self.retry.sleep(self.retry.delay(failures))
                continue
            self._check_deadline(job_id, deadline, timeout_s)
            if received == 0:
                if self.get_job(job_id).finished:
                    return  # every event up to the end has been seen
                self.retry.sleep(min(self.retry.base_s, self._left(deadline)))  # a stream that outlived its time

    def _event_stream(
        self, job_id: str, after: int, deadline: float | None, timeout_s: float | None
    ) -> Iterator[Event]:
        """One connection: its complete events, until the server ends the stream."""
        read_timeout = min(STREAM_IDLE_TIMEOUT_S, self._left(deadline) + 0.5)
        timeout = httpx.Timeout(10.0, read=read_timeout)
        headers = {"Accept": "text/event-stream", "Last-Event-ID": str(after)}
        path = self._path(job_id, "events")
        response = self._send(
            lambda: self._http.build_request("GET", path, headers=headers, timeout=timeout), stream=True
        )
        parser = SseParser()
        try:
            for line in response.iter_lines():
                event = parser.feed(line)
                if event is not None:
                    yield event
                self._check_deadline(job_id, deadline, timeout_s)
        finally:
            response.close()

    @staticmethod
    def _left(deadline: float | None) -> float:
        return STREAM_IDLE_TIMEOUT_S if deadline is None else max(deadline - time.monotonic(), 0.0)

    @staticmethod
    def _check_deadline(job_id: str, deadline: float | None, timeout_s: float | None) -> None:
        if deadline is not None and timeout_s is not None and time.monotonic() >= deadline:
            raise WaitTimeoutError(job_id, timeout_s)

    def wait(
        self, job_id: str, *, timeout_s: float | None = None, on_event: Callable[[Event], None] | None = None
    ) -> Job:
        """Follow the job's events until it ends; returns the finished job. ``on_event`` sees each
        event once. Raises WaitTimeoutError when ``timeout_s`` passes first (the job keeps running)."""
        for event in self.follow_events(job_id, timeout_s=timeout_s):
            if on_event is not None:
                on_event(event)
        return self.get_job(job_id)

    # -- artifacts -------------------------------------------------------------------------------

    def download(self, job_id: str, artifact: str, directory: Path, *, filename: str | None = None) -> Path:
        """Stream an artifact (``min-bad``, ``min-good``, ``original``, ``golden``, ``iteration-N``) to
        ``directory/filename`` (default: the artifact's name with the server's suffix: ``.onnx``, or
        ``.tar`` for a model with external weights, which holds the model and its weight files)."""
        path = self._path(job_id, "artifacts", quote(artifact, safe=""))
        return self._stream_to(path, directory, lambda response: filename or f"{artifact}{_suffix_from(response)}")

    def download_bundle(self, job_id: str, directory: Path, *, filename: str = "bundle.zip") -> Path:
        """Stream a finished reduce job's bug-report bundle (a zip: min-bad/min-good, the inputs
        min-bad sees, the check, the worker's environment, ``repro.py``, README) to ``directory``."""
        return self._stream_to(self._path(job_id, "bundle"), directory, lambda response: filename)

    def _stream_to(self, path: str, directory: Path, name: Callable[[httpx.Response], str]) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        attempts = max(1, self.retry.attempts)
        for attempt in range(1, attempts + 1):
            response = self._send(lambda: self._http.build_request("GET", path), stream=True)
            try:
                return self._save(response, directory, name(response))
            except _RETRYABLE_TRANSPORT as exc:
                if attempt == attempts:
                    raise self._unreachable(exc, attempt) from exc
                self.retry.sleep(self.retry.delay(attempt))
            finally:
                response.close()
        raise AssertionError("unreachable")

    @staticmethod
    def _save(response: httpx.Response, directory: Path, filename: str) -> Path:
        target = directory / PurePosixPath(filename).name
        partial = target.with_name(f".{target.name}.part")
        try:
            with open(partial, "wb") as sink:
                for chunk in response.iter_bytes(1024 * 1024):
                    sink.write(chunk)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        return target
