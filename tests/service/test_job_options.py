"""Issue 27: a job's options travel typed (``persistence.options.JobOptions``), each default stated
once, and the spec's requirements are stored parsed at intake so fair share parses no spec.

- every option's default agrees across the three entry points: the api's upload schema (OpenAPI)
  and form, the command line's parser, and what the worker runs a job stored with none of them;
- an old-style row (options stored before some existed, a key this code does not know) reads
  with its meaning then, and its unknown key is kept;
- ``jobs.requires`` is written at intake and fair share's takes read it: no spec is parsed."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.inspection import form_options
from checks.capabilities import Capabilities
from examples.build_example_model import build_example_model
from persistence.db import Database
from persistence.enums import JobStatus, JobTask
from persistence.models import Job
from persistence.options import REDUCE_FLAGS, JobOptions
from persistence.repositories import TeamRepository
from reducer_cli.args import build_parser
from reducer_cli.reduce_cmd import config_from_args
from reducer_core.config import SessionConfig
from reducer_core.verdict import Pinning
from tests.service.conftest import client_for
from tests.service.helpers import OP_PRESENT_MUL, count_spec_parses, stored_job, submit
from tests.service.in_process import in_process_context
from worker.context import RunnerContext
from worker.prepared import JobInput
from worker.run_job import take

SESSION_OPTIONS = ("mode", *REDUCE_FLAGS)  # the options a reduce job's session runs with
GPU_SPEC = OP_PRESENT_MUL + "requires: {gpu: H100}\n"


def _openapi_defaults(api_url: str) -> dict[str, Any]:
    document = httpx.get(api_url + "/openapi.json").json()
    body = document["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    return {name: prop["default"] for name, prop in body["properties"].items() if "default" in prop}


def _cli_config(*extra: str) -> SessionConfig:
    return config_from_args(build_parser().parse_args(["reduce", "model.onnx", *extra]))


def _worker_config(database: Database, options: JobOptions, spec: str = OP_PRESENT_MUL) -> SessionConfig:
    """What the worker runs a job with whose row the api wrote from ``options`` (``JobInput.of``)."""
    with database.session() as session:
        job = stored_job(session, TeamRepository(session).get_or_create("team-a").id)
        job.mode, job.options, job.check_spec = options.mode, options.to_stored(), spec
        session.flush()
        return JobInput.of(session, session.get(Job, job.id) or job).config


def _session_value(config: SessionConfig, name: str) -> Any:
    value = getattr(config, name)
    return Pinning.of(value) if name == "pin_signature" else value


def test_each_option_s_default_is_the_same_in_the_api_schema_the_cli_and_the_worker(
    quiet_api: str, database: Database
) -> None:
    schema = _openapi_defaults(quiet_api)
    form = form_options({})  # the api's form, every option left out
    cli = _cli_config("--check", "true")
    worker = _worker_config(database, form)
    for name in SESSION_OPTIONS:
        assert name in schema, f"the upload schema states no default for {name}"
        api_value = _session_value(dataclasses.replace(SessionConfig(), **{name: schema[name]}), name)
        assert api_value == _session_value(cli, name) == _session_value(worker, name), name
        assert getattr(form, name) == schema[name], name
    assert schema["task"] == form.task.value == JobTask.REDUCE.value
    assert schema["allow_nonfinite"] is form.allow_nonfinite is False
    assert schema["flaky"] is form.flaky is False


def test_an_interactive_job_and_a_cli_run_without_a_check_do_not_confirm_small_answers(database: Database) -> None:
    form = form_options({}, interactive=True)
    assert form.confirm_flaky is False
    assert _cli_config().confirm_flaky is False  # no --check, no --check-spec: a person answers
    assert _worker_config(database, form, "kind: interactive").confirm_flaky is False


def test_an_old_style_row_reads_as_it_ran_and_keeps_keys_it_does_not_know(database: Database) -> None:
    old = {"reduce_inputs": False, "pin_signature": True, "legacy_knob": {"level": 3}}  # no confirm_flaky, reduce_data
    with database.session() as session:
        job = stored_job(session, TeamRepository(session).get_or_create("team-a").id)
        job.mode, job.options = "bisect", old
        session.flush()
        row = session.get(Job, job.id)
        assert row is not None
        options = JobOptions.from_stored(row.mode, row.options)
        config = JobInput.of(session, row).config
    assert options.confirm_flaky is False  # stored before it existed: the job ran without it
    assert options.reduce_data is False and options.reduce_inputs is False and options.task is JobTask.REDUCE
    assert options.extra == {"legacy_knob": {"level": 3}}
    assert options.to_stored()["legacy_knob"] == {"level": 3}  # stored back unchanged
    assert config.mode == "bisect" and not (config.reduce_inputs or config.confirm_flaky or config.reduce_data)
    assert "confirm_flaky" not in config.to_json()  # its saved session resumes unchanged


@pytest.fixture
def cpu_ctx(db_url: str, data_dir: Path) -> Iterator[RunnerContext]:
    for ctx in in_process_context(db_url, data_dir):
        ctx.capabilities = Capabilities(onnxruntime="1.20.1", providers=("CPUExecutionProvider",))
        yield ctx


def test_intake_stores_the_requirements_and_fair_share_takes_parse_no_spec(
    quiet_api: str, tokens: dict[str, str], cpu_ctx: RunnerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = build_example_model().SerializeToString()
    with client_for(quiet_api, tokens["team-a"]) as client:
        gpu = submit(client, model, spec=GPU_SPEC).json()["id"]  # older: fair share's first pick, if it could
        cpu = submit(client, model).json()["id"]
    with cpu_ctx.db.session() as session:
        stored = {job_id: session.get(Job, job_id) for job_id in (gpu, cpu)}
        assert {k: v.requires for k, v in stored.items() if v is not None} == {gpu: {"gpu": ["H100"]}, cpu: {}}
    parsed = count_spec_parses(monkeypatch)
    taken = take(cpu_ctx)  # this CPU worker skips the H100 job and takes the other
    assert taken is not None and taken.job_id == cpu
    assert take(cpu_ctx) is None
    assert parsed == [], "fair share parsed a check spec to match a job against the worker"
    with cpu_ctx.db.session() as session:
        job = session.get(Job, gpu)
        assert job is not None and job.status is JobStatus.QUEUED
