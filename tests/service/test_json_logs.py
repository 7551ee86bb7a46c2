"""Structured logs: one JSON object per line, with the job id while a job runs."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest

from persistence.jsonlog import JsonFormatter, bind_job, configure_logging


def test_records_are_json_lines_with_the_bound_job() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("onnx_reducer.test_json_logs")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        logger.warning("outside %s", "a job")
        with bind_job("job-123"):
            logger.info("inside")
            try:
                raise ValueError("boom")
            except ValueError:
                logger.exception("failed")
        logger.info("after")
    finally:
        logger.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["message"] for line in lines] == ["outside a job", "inside", "failed", "after"]
    assert "job_id" not in lines[0] and "job_id" not in lines[3]
    assert lines[1]["job_id"] == lines[2]["job_id"] == "job-123"
    assert lines[1]["level"] == "info" and lines[0]["logger"] == "onnx_reducer.test_json_logs"
    assert "ValueError: boom" in lines[2]["exception"]


def test_configure_logging_installs_one_json_handler_and_text_on_request() -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging(log_format="json")
        assert len(root.handlers) == 1 and isinstance(root.handlers[0].formatter, JsonFormatter)
        configure_logging(log_format="text")
        assert not isinstance(root.handlers[0].formatter, JsonFormatter)
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_without_log_format_a_terminal_gets_readable_lines_and_a_pipe_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make run` in a terminal prints readable access lines; containers and log collectors (a pipe)
    keep JSON; LOG_FORMAT=json asks for JSON on a terminal too."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    monkeypatch.delenv("LOG_FORMAT", raising=False)
    try:
        terminal = _Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        configure_logging()
        access = logging.getLogger("newcomer_test.access")  # uvicorn's own levels vary by test
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", "/v1/jobs", "1.1", 200)
        line = terminal.getvalue().strip()
        assert line.endswith('INFO newcomer_test.access 127.0.0.1:5000 - "GET /v1/jobs HTTP/1.1" 200'), line
        assert not line.startswith("{")

        monkeypatch.setenv("LOG_FORMAT", "json")
        configure_logging()
        assert isinstance(root.handlers[0].formatter, JsonFormatter)

        monkeypatch.delenv("LOG_FORMAT")
        pipe = io.StringIO()
        monkeypatch.setattr(sys, "stderr", pipe)
        configure_logging()
        access.info("GET /healthz 200")
        assert json.loads(pipe.getvalue())["message"] == "GET /healthz 200"
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
