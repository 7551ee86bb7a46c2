"""``onnx-reducer submit | status | download | cancel | retry | delete | jobs``: the service from a
terminal or a CI pipeline, through ``reducer_client``. Arguments: reducer_cli/client_args.py; exit codes:
reducer_cli/client_exit.py (and docs/ci.md)."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from pathlib import Path

from reducer_cli.args import missing_file_message
from reducer_cli.client_args import DEFAULT_SERVER, SERVER_ENV, TOKEN_ENV
from reducer_cli.client_exit import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_INVALID_MODEL,
    EXIT_OK,
    EXIT_STILL_RUNNING,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    exit_for_job,
    exit_for_problem,
)
from reducer_cli.client_output import EventLog, Summary, UploadBar, job_lines, log
from reducer_client import (
    ApiError,
    Job,
    ModelBundleError,
    NotFoundError,
    ReducerClient,
    ReducerClientError,
    RetryPolicy,
    ServerUnreachableError,
    TarSource,
    WaitTimeoutError,
    model_source,
)
from reducer_client.ci_context import ci_labels, parse_label

RESULTS = ("min-bad", "min-good")
PRECISION_RESULTS = ("mixed",)
BISECT_TASKS = ("bisect-passes", "bisect-releases")
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")
_JOB_IN_URL = re.compile(r"/jobs/([A-Za-z0-9_-]{1,100})/?$")


class InputError(Exception):
    """A local input the user named cannot be used (exit 2)."""


# -- helpers ------------------------------------------------------------------------------------


def _client(ns: argparse.Namespace) -> ReducerClient:
    server = ns.server or os.environ.get(SERVER_ENV) or DEFAULT_SERVER
    token = ns.token or os.environ.get(TOKEN_ENV) or None
    if ns.retries < 0:
        raise InputError("--retries must be 0 or more.")
    return ReducerClient(server, token, retry=RetryPolicy(attempts=ns.retries + 1))


def job_id_of(reference: str) -> str:
    """A job id, from the id itself or any URL of the job (api or web UI)."""
    match = _JOB_IN_URL.search(reference.split("?", 1)[0])
    if match:
        return match.group(1)
    if _JOB_ID.fullmatch(reference):
        return reference
    raise InputError(f"'{reference}' is neither a job id nor a job URL.")


def _input_file(name: str, what: str) -> Path:
    missing = missing_file_message(name, what)
    if missing is not None:
        raise InputError(missing)
    return Path(name)


def _read_spec(name: str) -> str:
    """The spec's text, read once: a file, or a pipe (``--check-spec <(...)`` gives /dev/fd/N, a FIFO
    that is no regular file and can be read only once)."""
    path = Path(name)
    if not path.exists() or path.is_dir():
        _input_file(name, "--check-spec")  # says what is wrong with the name
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"--check-spec '{name}' cannot be read as UTF-8 text ({exc}).") from exc


def _report_end(job: Job) -> None:
    if job.status == "succeeded":
        log(
            f"[I] job {job.id} succeeded: {job.nodes_before} -> {job.nodes_after} nodes, "
            f"{job.progress.checks_run} checks"
        )
        if job.suspect is not None:  # exit 10: the check fails whatever the model
            log(f"[E] {job.suspect.get('message', '')}\n{str(job.suspect.get('output', '')).strip()[-800:]}")
    elif job.error is not None:
        log(f"[E] job {job.id} {job.status}: {job.error.code}: {job.error.message or ''}".rstrip(": "))
    else:
        log(f"[E] job {job.id} {job.status}")


# -- commands -----------------------------------------------------------------------------------

Action = Callable[[ReducerClient, argparse.Namespace, Summary], int]


def _guarded(ns: argparse.Namespace, action: Action) -> int:
    """Run ``action`` with a client; every failure becomes a message, an exit code and, with
    ``--json``, the summary on stdout."""
    summary = Summary()
    try:
        with _client(ns) as client:
            summary.exit_code = action(client, ns, summary)
    except ApiError as exc:
        log(f"[E] the server refused the request: {exc}")
        if exc.status in (401, 403):
            log(f"[E] give a valid token with --token or ${TOKEN_ENV} (`onnx-reducer token create --team NAME`).")
        summary.with_problem(exc.problem).exit_code = exit_for_problem(exc.problem)
    except ServerUnreachableError as exc:
        log(f"[E] {exc} Check --server or ${SERVER_ENV}.")
        summary.with_message("server-unreachable", str(exc)).exit_code = EXIT_UNREACHABLE
    except ModelBundleError as exc:
        log(f"[E] {exc}")
        summary.with_message("invalid-model", str(exc)).exit_code = EXIT_INVALID_MODEL
    except InputError as exc:
        log(f"[E] {exc}")
        summary.with_message("usage", str(exc)).exit_code = EXIT_USAGE
    except (ReducerClientError, OSError) as exc:
        log(f"[E] {exc}")
        summary.with_message("client-error", str(exc)).exit_code = EXIT_ERROR
    except KeyboardInterrupt:
        log("[E] interrupted; the job keeps running on the server (onnx-reducer status JOB, or cancel JOB).")
        summary.exit_code = EXIT_INTERRUPTED
    if ns.json:
        print(summary.dump(), flush=True)
    return summary.exit_code


def _wait_and_download(client: ReducerClient, ns: argparse.Namespace, summary: Summary, job_id: str) -> int:
    events = EventLog()
    try:
        job = client.wait(job_id, timeout_s=ns.timeout, on_event=events)
    except WaitTimeoutError as exc:
        events.flush()
        summary.with_job(client.get_job(job_id))
        log(f"[E] {exc}; it keeps running: onnx-reducer status {job_id} --wait (or cancel {job_id}).")
        return EXIT_STILL_RUNNING
    events.flush()
    summary.with_job(job)
    _report_end(job)
    if job.status == "succeeded":
        _download_results(client, job, Path(ns.output_dir or "."), summary)
    return exit_for_job(job)


def _download_results(client: ReducerClient, job: Job, folder: Path, summary: Summary) -> None:
    """A succeeded job's results: its models, or a bisect job's bundle (``_download_answer_bundle``)."""
    if job.task in BISECT_TASKS:
        _download_answer_bundle(client, job, folder, summary)
    else:
        _download(client, job.id, results_of(job), folder, summary)


def _download_answer_bundle(client: ReducerClient, job: Job, folder: Path, summary: Summary) -> None:
    """A bisect job started from a reduce job (``--source-job``) has that job's bug-report bundle
    with its answer in it (``passes.json`` / ``releases.json``): written as ``bundle.zip``, as
    ``download --bundle`` does; one without a source has no file (its answer is the job's)."""
    if not (job.raw.get("options") or {}).get("source_job_id"):
        return
    try:
        path = client.download_bundle(job.id, folder)
    except NotFoundError:
        log(f"[W] job {job.id} has no bundle: its source reduce job had none.")
        return
    log(f"[I] wrote {path} (its source's bug-report bundle with the answer; unzip it and run `python repro.py`)")
    summary.add_file(path)


def results_of(job: Job) -> tuple[str, ...]:
    """What a finished job's results are: min-bad and min-good, or a precision job's mixed model."""
    if job.task in BISECT_TASKS:
        return ()  # the answer is the job's passes (releases) field, and a bundle when it has a source
    return PRECISION_RESULTS if job.task == "precision" else RESULTS


def _download(client: ReducerClient, job_id: str, names: tuple[str, ...], folder: Path, summary: Summary) -> None:
    for name in names:
        try:
            path = client.download(job_id, name, folder)
        except NotFoundError:
            if name != "min-good":
                raise
            log("[W] no min-good: no passing subgraph was found.")
            continue
        log(f"[I] wrote {path}")
        summary.add_file(path)


def _submit(client: ReducerClient, ns: argparse.Namespace, summary: Summary) -> int:
    _check_wait_options(ns)
    model = _input_file(ns.model, "Model file")
    spec = _read_spec(ns.check_spec)
    golden = _input_file(ns.golden, "--golden") if ns.golden else None
    inputs = [_input_file(path, "--load-inputs") for path in ns.load_inputs]
    source = model_source(model)
    if isinstance(source, TarSource):
        extra = len(source.members) - 1
        log(f"[I] {model.name} keeps its weights in {extra} external-data file(s): sent together as {source.name}")
    bar = UploadBar(source.name)
    sent = client.submit(
        source,
        spec,
        golden=golden,
        inputs=inputs,
        mode=ns.mode,
        model_path=ns.model_path,
        reduce_inputs=ns.reduce_inputs,
        reduce_outputs=ns.reduce_outputs,
        pin_signature=ns.pin_signature,
        confirm_flaky=ns.confirm_flaky,
        reduce_data=ns.reduce_data,
        allow_nonfinite=ns.allow_nonfinite or None,
        idempotency_key=ns.idempotency_key,
        progress=bar,
        task=ns.task,
        labels=_submit_labels(ns),
        releases=ns.releases,
        source_job_id=ns.source_job_id,
        on=ns.on,
    )
    bar.done()
    summary.job_id, summary.status, summary.replayed = sent.job_id, sent.status, sent.replayed
    summary.url, summary.api_url = client.job_url(sent.job_id), client.api_url(sent.job_id)
    again = " (the job an earlier upload with this Idempotency-Key created)" if sent.replayed else ""
    log(f"[I] job {sent.job_id} {sent.status}{again}: {summary.url}")
    if not ns.json:
        print(summary.url, flush=True)
    if not ns.wait:
        return EXIT_OK
    return _wait_and_download(client, ns, summary, sent.job_id)


def _labels(texts: list[str]) -> dict[str, str]:
    try:
        return dict(parse_label(text) for text in texts)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _submit_labels(ns: argparse.Namespace) -> dict[str, str]:
    """The CI run's context (unless --no-ci-labels), then --label (which wins on a key)."""
    found = ci_labels(os.environ) if ns.ci_labels else {}
    if found:
        log("[I] labels from the CI run: " + ", ".join(f"{k}={v}" for k, v in found.items()))
    return found | _labels(ns.label)


def _check_wait_options(ns: argparse.Namespace) -> None:
    if not ns.wait and (ns.timeout is not None or ns.output_dir is not None):
        raise InputError("--timeout and -o/--output-dir go with --wait; add --wait (or use `onnx-reducer download`).")


def _status(client: ReducerClient, ns: argparse.Namespace, summary: Summary) -> int:
    _check_wait_options(ns)
    job_id = job_id_of(ns.job)
    summary.url, summary.api_url = client.job_url(job_id), client.api_url(job_id)
    if ns.wait:
        return _wait_and_download(client, ns, summary, job_id)
    job = client.get_job(job_id)
    summary.with_job(job)
    if not ns.json:
        print("\n".join(job_lines(job)), flush=True)
    return exit_for_job(job)


def _download_cmd(client: ReducerClient, ns: argparse.Namespace, summary: Summary) -> int:
    job = client.get_job(job_id_of(ns.job))
    summary.with_job(job)
    if ns.artifact:
        _download(client, job.id, tuple(ns.artifact), Path(ns.output_dir), summary)
        return EXIT_OK
    if job.status in ("cancelled", "failed") and job.task not in ("precision", "bisect-passes", "bisect-releases"):
        return _download_best_so_far(client, job, Path(ns.output_dir), summary)
    if job.status != "succeeded":
        log(f"[E] job {job.id} is {job.status}: it has no reduced model to download yet.")
        return exit_for_job(job)
    if getattr(ns, "bundle", False):
        summary.add_file(path := client.download_bundle(job.id, Path(ns.output_dir)))
        log(f"[I] wrote {path} (unzip it and run `python repro.py`)")
        return EXIT_OK
    _download_results(client, job, Path(ns.output_dir), summary)
    return EXIT_OK


def _download_best_so_far(client: ReducerClient, job: Job, folder: Path, summary: Summary) -> int:
    """A cancelled or failed job offers its best model so far (its smallest failing iteration) as
    min-bad: written, exit 0; a job that ended before any smaller failing model has none."""
    try:
        path = client.download(job.id, "min-bad", folder)
    except NotFoundError:
        log(f"[E] job {job.id} was {job.status} before it found a failing model: there is nothing to download.")
        return exit_for_job(job)
    best = f" ({job.progress.best_size} nodes)" if job.progress.best_size is not None else ""
    log(f"[W] job {job.id} was {job.status}: {path} is its best model so far{best}, not a finished reduction.")
    summary.add_file(path)
    return EXIT_OK


def _cancel(client: ReducerClient, ns: argparse.Namespace, summary: Summary) -> int:
    job = client.cancel(job_id_of(ns.job))
    summary.with_job(job)
    state = "cancelled" if job.status == "cancelled" else "cancel requested (its running check is being stopped)"
    log(f"[I] job {job.id}: {state}")
    return EXIT_OK


def _delete(client: ReducerClient, ns: argparse.Namespace, summary: Summary) -> int:
    job_id = job_id_of(ns.job)
    client.delete_job(job_id)
    summary.job_id = job_id
    log(f"[I] job {job_id} deleted (cancelled first if it was running), with the results no other job shares")
    return EXIT_OK


def _retry(client: ReducerClient, ns: argparse.Namespace, summary: Summary) -> int:
    job = client.retry_job(job_id_of(ns.job))
    summary.with_job(job)
    log(f"[I] job {job.id} queued again; it resumes from its last finished check: onnx-reducer status {job.id} --wait")
    return EXIT_OK


def _jobs(client: ReducerClient, ns: argparse.Namespace, summary: Summary) -> int:
    if ns.limit < 1:
        raise InputError("--limit must be 1 or more.")
    listed: list[Job] = []
    for job in client.iter_jobs(status=ns.status, page_size=min(ns.limit, 200), labels=_labels(ns.label)):
        listed.append(job)
        if len(listed) >= ns.limit:
            break
    summary.jobs = [job.raw for job in listed]
    if not ns.json:
        for line in job_table(listed):
            print(line, flush=True)
    return EXIT_OK


def job_table(jobs: list[Job]) -> list[str]:
    """The ``jobs`` listing: a header naming the columns, then a row per job (none: a line that says so)."""
    if not jobs:
        return ["No jobs (submit one with: onnx-reducer submit MODEL --check-spec SPEC)."]
    width = max(len("JOB"), *(len(job.id) for job in jobs))
    rows = [f"{'JOB':<{width}}  {'STATUS':<9}  {'NODES':>11}  {'CREATED (UTC)':<19}  MODEL"]
    for job in jobs:
        nodes = f"{job.nodes_before}->{job.nodes_after}" if job.nodes_after is not None else f"{job.nodes_before}"
        rows.append(f"{job.id:<{width}}  {job.status:<9}  {nodes:>11}  {job.created_at[:19]:<19}  {job.model_filename}")
    return rows


def _handler(action: Action) -> Callable[[argparse.Namespace], int]:
    def handle(ns: argparse.Namespace) -> int:
        return _guarded(ns, action)

    return handle


HANDLERS = {
    "submit": _handler(_submit),
    "status": _handler(_status),
    "download": _handler(_download_cmd),
    "cancel": _handler(_cancel),
    "retry": _handler(_retry),
    "delete": _handler(_delete),
    "jobs": _handler(_jobs),
}
