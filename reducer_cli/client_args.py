"""The arguments of ``onnx-reducer submit | status | download | cancel | retry | delete | jobs``. Kept apart
from the commands (reducer_cli/client_cmd.py) so that building the parser imports no HTTP client:
every ``onnx-reducer`` start-up (``inspect`` runs once per check in Polygraphy-style reductions)
stays as fast as before."""

from __future__ import annotations

import argparse

from reducer_core.strategies import MODES

DEFAULT_SERVER = "http://127.0.0.1:8000"
SERVER_ENV, TOKEN_ENV = "ONNX_REDUCER_SERVER", "ONNX_REDUCER_TOKEN"
CLIENT_COMMANDS = ("submit", "status", "download", "cancel", "retry", "delete", "jobs")

EXIT_EPILOG = """exit codes: 0 reduced (or: done); 1 other error; 2 bad usage, a refused check spec or no such job;
3 the original model did not fail the check; 4 the model was refused (invalid, unsafe, too large);
5 the job failed (check infrastructure, attempts, time limit, internal error: `onnx-reducer retry JOB`);
6 cancelled; 7 still running (--timeout passed, or `status` of an unfinished job); 8 server unreachable;
9 authentication refused (token); 130 interrupted (the job keeps running). See docs/ci.md."""


def _connection_args() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("Service")
    group.add_argument("--server", default=None, help=f"Service URL (default: ${SERVER_ENV}, else {DEFAULT_SERVER}).")
    group.add_argument("--token", default=None, help=f"API token (default: ${TOKEN_ENV}).")
    group.add_argument(
        "--retries",
        type=int,
        default=5,
        metavar="N",
        help="Retries, with backoff, of a request that cannot connect or gets 502/503/504 (default 5).",
    )
    group.add_argument("--json", action="store_true", help="Print a machine-readable summary on stdout.")
    return common


def _wait_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait", action="store_true", help="Follow the job until it ends, then download the results.")
    parser.add_argument(
        "--timeout", type=float, default=None, metavar="S", help="Stop waiting after S seconds (exit 7)."
    )
    parser.add_argument(
        "-o",
        "--output-dir",
        default=None,
        metavar="DIR",
        help="With --wait: where min-bad and min-good go (default: .).",
    )


def _command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
    name: str,
    summary: str,
    description: str = "",
) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        help=summary,
        description=description or summary,
        parents=[common],
        epilog=EXIT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_client_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = _connection_args()
    submit = _command(
        sub,
        common,
        "submit",
        "Upload a failing model to the service (with --wait: follow it and download the result).",
        "Upload MODEL (.onnx; .tar/.zip bundle; an .onnx whose external-data files lie next to it is "
        "bundled for you) with a check spec; prints the job's URL.",
    )
    submit.add_argument("model", help="The model: .onnx, or a .tar/.zip bundle with its external data.")
    submit.add_argument("--check-spec", required=True, metavar="SPEC", help="Check spec file (YAML or JSON).")
    submit.add_argument("--golden", default=None, metavar="G", help="Golden values (`onnx-reducer golden`).")
    submit.add_argument(
        "--load-inputs",
        "--inputs",
        dest="load_inputs",
        nargs="+",
        default=[],
        metavar="FILE",
        help="Input samples (.npz or Polygraphy JSON; several files are several samples, in order) that a compare, "
        "golden or error spec judges, every one (its fail_if decides). Instead of --golden.",
    )
    submit.add_argument("--mode", choices=MODES, default=None, help="Reduction mode (server default: auto).")
    submit.add_argument(
        "--task",
        choices=("reduce", "precision", "bisect-passes", "bisect-releases"),
        default=None,
        help="reduce (the server's default), or precision: the fewest nodes that must stay fp32 for the fp16 "
        "model to pass the spec (with --wait, downloads mixed.onnx), or bisect-passes: the runtime optimizers "
        "the failure needs (docs/bisect-passes.md; no file to download), or bisect-releases: the first "
        "onnxruntime release that fails, on the farm's workers (docs/bisect-releases.md; no file to download).",
    )
    submit.add_argument(
        "--releases",
        type=lambda text: [part.strip() for part in text.split(",") if part.strip()],
        default=[],
        metavar="V1,V2,...",
        help="--task bisect-releases: the onnxruntime releases to bisect (default: every release the farm's "
        "workers advertise).",
    )
    submit.add_argument(
        "--source-job",
        dest="source_job_id",
        default=None,
        metavar="JOB_ID",
        help="--task bisect-passes or bisect-releases: start from this succeeded reduce job of your team: "
        "the bisection runs on its min-bad (see --on), and the answer goes into a copy of its bug-report "
        "bundle (GET /v1/jobs/{id}/bundle; --wait writes it as bundle.zip).",
    )
    submit.add_argument(
        "--on",
        choices=("min-bad", "original"),
        default=None,
        help="--task bisect-passes or bisect-releases with --source-job: the model bisected (default min-bad: a few "
        "nodes; original: the uploaded model).",
    )
    submit.add_argument("--model-path", default=None, help="The model inside a bundle that holds several.")
    submit.add_argument(
        "--no-reduce-inputs", dest="reduce_inputs", action="store_false", default=None, help="As for reduce."
    )
    submit.add_argument(
        "--no-reduce-outputs", dest="reduce_outputs", action="store_false", default=None, help="As for reduce."
    )
    submit.add_argument(
        "--any-failure",
        dest="pin_signature",
        action="store_false",
        default=None,
        help="Count any failure, not only one like the original's (as for reduce).",
    )
    _add_on_off(
        submit,
        "reduce_data",
        on_help="Shrink the min-bad model's input sizes and weights once the graph is minimal (as for "
        "reduce; sends reduce_data=true; the server keeps them by default).",
        off_help="Keep the min-bad model's input sizes and weights as they are (the server's default; "
        "sends reduce_data=false).",
    )
    _add_on_off(
        submit,
        "confirm_flaky",
        on_help="Re-check what makes an answer of 2 to 3 nodes look minimal, up to 3 checks (the server's "
        "default, as for reduce; the form field confirm_flaky).",
        off_help="Take a 2-3-node answer as it is (as for reduce; sends confirm_flaky=false).",
    )
    submit.add_argument(
        "--allow-nonfinite",
        action="store_true",
        help="With --task precision: keep the search's answer even where an fp16 tensor of the written model "
        "holds inf, as `precision --allow-nonfinite` does (sends allow_nonfinite=true; by default the answer "
        "grows until no fp16 tensor holds inf).",
    )
    submit.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A label stored with the job (repeatable; `jobs --label` filters on it). Inside GitHub Actions, "
        "GitLab CI, Jenkins or Buildkite the run's ci, repo, commit, branch and run_url are added, and "
        "$TRACEPARENT as traceparent; a --label of the same key wins.",
    )
    submit.add_argument(
        "--no-ci-labels",
        dest="ci_labels",
        action="store_false",
        help="Do not add the CI run's labels (nor $TRACEPARENT).",
    )
    submit.add_argument(
        "--idempotency-key",
        default=None,
        help="Sent as Idempotency-Key (default: a new one per command; reuse one to never submit twice).",
    )
    _wait_args(submit)
    status = _command(sub, common, "status", "Show a job (exit code: its outcome, 7 while running).")
    status.add_argument("job", help="Job id or URL.")
    _wait_args(status)
    download = _command(sub, common, "download", "Download a finished job's min-bad and min-good.")
    download.add_argument("job", help="Job id or URL.")
    download.add_argument("-o", "--output-dir", default=".", metavar="DIR")
    download.add_argument(
        "--artifact",
        action="append",
        default=None,
        metavar="NAME",
        help="min-bad, min-good, mixed, original, golden or iteration-N (repeatable; default: min-bad and min-good, "
        "or mixed for a precision job).",
    )
    download.add_argument(
        "--bundle",
        action="store_true",
        help="Download the bug-report bundle (bundle.zip: min-bad/min-good, the inputs min-bad sees, the check, "
        "the worker's environment and a repro.py) instead of the models.",
    )
    cancel = _command(sub, common, "cancel", "Cancel a job.")
    cancel.add_argument("job", help="Job id or URL.")
    retry = _command(sub, common, "retry", "Queue a failed job again (it resumes from its last finished check).")
    retry.add_argument("job", help="Job id or URL.")
    delete = _command(
        sub, common, "delete", "Delete a job (cancelled first if it runs) and the results no other job shares."
    )
    delete.add_argument("job", help="Job id or URL.")
    jobs = _command(sub, common, "jobs", "List the team's jobs, newest first.")
    jobs.add_argument(
        "--status", choices=("queued", "running", "finishing", "succeeded", "failed", "cancelled"), default=None
    )
    jobs.add_argument("--limit", type=int, default=20, help="At most this many jobs (default 20).")
    jobs.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Only jobs carrying this label, e.g. --label repo=org/app (repeatable: every one must match).",
    )


def _add_on_off(parser: argparse.ArgumentParser, dest: str, *, on_help: str, off_help: str) -> None:
    """``--NAME`` and ``--no-NAME`` (``dest`` with dashes), one or the other: True, False, or None
    when neither is given (the form field is then not sent and the server decides)."""
    switch = parser.add_mutually_exclusive_group()
    flag = dest.replace("_", "-")
    switch.add_argument(f"--{flag}", dest=dest, action="store_true", default=None, help=on_help)
    switch.add_argument(f"--no-{flag}", dest=dest, action="store_false", default=None, help=off_help)
