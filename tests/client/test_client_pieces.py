"""The client's pieces without a service: the SSE parser, Retry-After, the streamed tar and
multipart bodies (read back with tarfile and with the server's own multipart parser), bundling a
model's external data, the exit-code tables, and job references."""

from __future__ import annotations

import io
import tarfile
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from python_multipart import MultipartParser

from persistence.enums import ErrorCode
from reducer_cli import args as cli_args
from reducer_cli import client_exit
from reducer_cli.client_cmd import InputError, job_id_of
from reducer_cli.client_output import UploadBar, event_line, job_lines
from reducer_cli.main import run
from reducer_client import Event, FileSource, Job, ModelBundleError, Problem, RetryPolicy, TarSource, model_source
from reducer_client.retry import retry_after_seconds
from reducer_client.sse import SseParser
from reducer_client.upload import MultipartBody

# -- server-sent events ---------------------------------------------------------------------------


def feed(parser: SseParser, text: str) -> list[tuple[int, str, dict[str, object]]]:
    events = [parser.feed(line) for line in text.split("\n")]
    return [(e.id, e.kind, e.data) for e in events if e is not None]


def test_sse_parser_emits_complete_events_and_counts_heartbeats() -> None:
    parser = SseParser()
    stream = (
        'retry: 2000\n\nid: 1\nevent: job.queued\ndata: {"seq":1}\n\n: heartbeat\n\n'
        'id: 2\nevent: iteration\ndata: {"number":\ndata: 1}\n\n'
    )
    assert feed(parser, stream) == [(1, "job.queued", {"seq": 1}), (2, "iteration", {"number": 1})]
    assert parser.retry_ms == 2000
    assert parser.heartbeats == 1
    assert parser.last_event_id == "2"


def test_sse_parser_never_emits_a_frame_cut_off_before_its_blank_line() -> None:
    parser = SseParser()
    assert feed(parser, 'id: 1\nevent: job.queued\ndata: {}\n\nid: 2\nevent: iteration\ndata: {"num') == [
        (1, "job.queued", {})
    ]
    assert parser.last_event_id == "1"  # what a reconnect sends as Last-Event-ID


# -- retries ----------------------------------------------------------------------------------------


def test_retry_after_as_seconds_or_http_date() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds(format_datetime(now + timedelta(seconds=30), usegmt=True), now) == 30.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None


def test_backoff_doubles_up_to_its_cap_and_retry_after_wins() -> None:
    policy = RetryPolicy(base_s=1.0, max_delay_s=5.0)
    assert 1.0 <= policy.delay(1) <= 1.25
    assert 4.0 <= policy.delay(3) <= 5.0
    assert 5.0 <= policy.delay(10) <= 6.25
    assert policy.delay(1, "12") == 12.0


# -- upload bodies ------------------------------------------------------------------------------------


def model_with_external_data(folder: Path, location: str = "weights/w.bin") -> Path:
    weight = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8), "w")
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 8])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "model.onnx"
    (folder / location).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path), save_as_external_data=True, location=location, size_threshold=0)
    return path


def test_a_model_with_external_data_is_sent_as_a_tar_of_the_model_and_its_weights(tmp_path: Path) -> None:
    path = model_with_external_data(tmp_path)
    source = model_source(path)
    assert isinstance(source, TarSource)
    assert source.name == "model.tar"
    data = b"".join(source.chunks())
    assert len(data) == source.size
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        assert archive.getnames() == ["model.onnx", "weights/w.bin"]
        for name in archive.getnames():
            member = archive.extractfile(name)
            assert member is not None
            assert member.read() == (tmp_path / name).read_bytes()


def test_plain_models_bundles_and_unreadable_files_are_sent_as_they_are(tmp_path: Path) -> None:
    plain = tmp_path / "plain.onnx"
    onnx.save(helper.make_model(helper.make_graph([], "g", [], [])), str(plain))
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\x01not a model")
    bundle = tmp_path / "bundle.tar"
    with tarfile.open(bundle, "w") as archive:
        archive.add(plain, arcname="plain.onnx")
    for path in (plain, garbage, bundle):
        source = model_source(path)
        assert isinstance(source, FileSource)
        assert b"".join(source.chunks()) == path.read_bytes()


def test_external_data_outside_the_folder_or_missing_is_refused_with_advice(tmp_path: Path) -> None:
    path = model_with_external_data(tmp_path)
    (tmp_path / "weights" / "w.bin").unlink()
    with pytest.raises(ModelBundleError, match="not a file next to the model"):
        model_source(path)
    model = onnx.load(str(path), load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "../elsewhere/w.bin"
    onnx.save(model, str(path))
    with pytest.raises(ModelBundleError, match="outside its own folder"):
        model_source(path)


def test_multipart_body_has_its_announced_length_and_parses_with_the_servers_parser(tmp_path: Path) -> None:
    path = model_with_external_data(tmp_path)
    golden = tmp_path / "golden.json"
    golden.write_text('{"x": 1}')
    body = MultipartBody(
        {"check_spec": "kind: op-present\nops: [Mul]\n", "mode": "linear"},
        {"model": model_source(path), "golden": FileSource(golden)},
    )
    seen: list[tuple[int, int]] = []
    data = b"".join(body.stream(lambda sent, total: seen.append((sent, total))))
    assert len(data) == body.length
    assert seen[0] == (0, body.file_bytes) and seen[-1] == (body.file_bytes, body.file_bytes)
    assert b"".join(body.stream()) == data  # a retry sends the same body again

    parts: dict[str, bytearray] = {}
    headers: list[bytes] = []
    current: list[str] = []

    def on_header_value(chunk: bytes, start: int, end: int) -> None:
        headers.append(chunk[start:end])

    def on_headers_finished() -> None:
        disposition = next(h for h in reversed(headers) if h.startswith(b"form-data;"))
        name = disposition.split(b'name="')[1].split(b'"')[0].decode()
        current.append(name)
        parts[name] = bytearray()

    def on_part_data(chunk: bytes, start: int, end: int) -> None:
        parts[current[-1]] += chunk[start:end]

    parser = MultipartParser(
        body.boundary,
        callbacks={
            "on_header_value": on_header_value,
            "on_headers_finished": on_headers_finished,
            "on_part_data": on_part_data,
        },
    )
    parser.write(data)
    parser.finalize()
    assert parts["check_spec"].decode() == "kind: op-present\nops: [Mul]\n"
    assert parts["mode"] == b"linear"
    assert parts["golden"] == golden.read_bytes()
    with tarfile.open(fileobj=io.BytesIO(bytes(parts["model"]))) as archive:
        assert archive.getnames() == ["model.onnx", "weights/w.bin"]


# -- exit codes ----------------------------------------------------------------------------------------


def test_exit_codes_shared_with_reduce_have_the_same_numbers() -> None:
    shared = ("EXIT_OK", "EXIT_ERROR", "EXIT_USAGE", "EXIT_ORIGINAL_PASSED", "EXIT_INVALID_MODEL", "EXIT_INTERRUPTED")
    assert {name: getattr(client_exit, name) for name in shared} == {name: getattr(cli_args, name) for name in shared}
    own = [client_exit.EXIT_JOB_FAILED, client_exit.EXIT_CANCELLED, client_exit.EXIT_STILL_RUNNING]
    own += [client_exit.EXIT_UNREACHABLE, client_exit.EXIT_AUTH]
    assert len(set(own)) == len(own) and not set(own) & {getattr(cli_args, name) for name in shared}


def test_every_service_error_code_has_an_exit_code() -> None:
    assert set(client_exit.JOB_ERROR_EXITS) == {code.value for code in ErrorCode}
    assert client_exit.JOB_ERROR_EXITS[ErrorCode.ORIGINAL_DID_NOT_FAIL] == 3
    assert client_exit.JOB_ERROR_EXITS[ErrorCode.INVALID_MODEL] == 4
    assert client_exit.JOB_ERROR_EXITS[ErrorCode.INVALID_CHECK] == 2


@pytest.mark.parametrize(
    ("status", "title", "type_", "code"),
    [
        (401, "Unauthorized", "about:blank", 9),
        (422, "Invalid model", "about:blank", 4),
        (422, "Unsafe external data", "about:blank", 4),
        (422, "Unsafe bundle", "about:blank", 4),
        (413, "Upload too large", "about:blank", 4),
        (422, "Anything", "https://example.com/problems/invalid-model", 4),
        (422, "Invalid check spec", "about:blank", 2),
        (422, "Invalid golden values", "about:blank", 2),
        (413, "Field too large", "about:blank", 2),
        (404, "Not Found", "about:blank", 2),
        (409, "Job already finished", "about:blank", 1),
        (500, "Internal Server Error", "about:blank", 1),
    ],
)
def test_refusals_map_to_exit_codes(status: int, title: str, type_: str, code: int) -> None:
    assert client_exit.exit_for_problem(Problem(status=status, title=title, detail="", type=type_)) == code


def test_a_problem_from_a_body_that_is_not_one_keeps_the_status() -> None:
    problem = Problem.from_body(502, "<html>Bad Gateway</html>", "Bad Gateway")
    assert (problem.status, problem.title, problem.detail) == (502, "Bad Gateway", "<html>Bad Gateway</html>")
    full = Problem.from_body(
        422, {"type": "about:blank", "title": "T", "status": 422, "detail": "D", "instance": "/v1/jobs", "x": 1}
    )
    assert (full.title, full.detail, full.instance, full.extra) == ("T", "D", "/v1/jobs", {"x": 1})


def test_job_references_are_ids_or_urls() -> None:
    job = "0123456789abcdef0123456789abcdef"
    for reference in (job, f"http://h:8000/v1/jobs/{job}", f"http://h:8000/#/jobs/{job}", f"https://h/v1/jobs/{job}/"):
        assert job_id_of(reference) == job
    with pytest.raises(InputError):
        job_id_of("../../etc")


# -- command line output --------------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_upload_bar_draws_on_a_terminal_and_prints_one_line_in_a_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    terminal, log = Terminal(), io.StringIO()
    for stream in (terminal, log):
        bar = UploadBar("model.onnx", stream)
        for sent in (0, 500_000, 2_000_000):
            bar(sent, 2_000_000)
        bar.done()
    assert "\r[I] uploading model.onnx [" in terminal.getvalue()
    assert "100% 2.0/2.0 MB" in terminal.getvalue()
    assert log.getvalue() == "[I] uploaded model.onnx (2.0 MB)\n"
    monkeypatch.setenv("CI", "true")
    assert not UploadBar("model.onnx", Terminal()).live


def test_iteration_events_print_one_line_each() -> None:
    event = Event(
        7,
        "iteration",
        {"number": 3, "phase": "bisect", "nodes": 2, "verdict": "fail", "reproduces": True, "duration_s": 0.25},
    )
    line = event_line(event)
    assert line is not None and line.startswith("[I] iteration    3 | bisect")
    assert "candidate      2 nodes | FAIL (reproduces)" in line and "| check    0.25s" in line
    assert event_line(Event(8, "job.succeeded", {})) is None
    late = event_line(Event(9, "iteration", event.data | {"late": True}))
    assert late == line + " | late: after the end, not the answer"


def test_an_iteration_answered_from_a_cache_says_which_instead_of_a_check_time() -> None:
    data = {"number": 4, "phase": "bisect", "nodes": 2, "verdict": "pass", "reproduces": False, "duration_s": 0.0}
    line = event_line(Event(9, "iteration", data | {"cached": "farm"}))
    assert line is not None and "| cached (farm)  | best" in line and "check" not in line
    job_line = event_line(Event(10, "iteration", data | {"cached": "job"}))
    assert job_line is not None and "| cached (job)   | best" in job_line


def test_wait_options_without_wait_are_bad_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, spec = tmp_path / "m.onnx", tmp_path / "s.yaml"
    model.write_bytes(b"x")
    spec.write_text("kind: op-present\nops: [Mul]\n")
    server = "http://127.0.0.1:9"  # never contacted: the options are checked first
    assert run(["submit", str(model), "--check-spec", str(spec), "-o", "out", "--server", server]) == 2
    assert run(["submit", str(model), "--check-spec", str(tmp_path / "missing.yaml"), "--server", server]) == 2
    assert "go with --wait" in capsys.readouterr().err


def test_a_flaky_jobs_status_says_so_in_the_clients_lines() -> None:
    body = {
        "id": "j1",
        "status": "succeeded",
        "progress": {"checks_run": 30},
        "flaky": {"status": "flaky", "fails_percent": 69, "rechecks": 12, "evidence": []},
    }
    job = Job.from_json(body)
    assert job.flaky is not None and job.flaky["fails_percent"] == 69
    assert "flaky: fails ~69 % of runs (12 re-checks)" in job_lines(job)
    repeatable = Job.from_json(body | {"flaky": {"status": "repeatable", "fails_percent": None}})
    assert not any(line.startswith("flaky:") for line in job_lines(repeatable))
    assert Job.from_json(body | {"flaky": None}).flaky is None


def test_a_finishing_event_prints_a_line_and_an_unknown_kind_passes_through_silently() -> None:
    finishing = Event(10, "job.finishing", {"status": "finishing", "best_size": 3, "checks_run": 9})
    assert event_line(finishing) == "[I] finishing: storing and verifying the answer (best 3 nodes)"
    parser = SseParser()
    events = feed(parser, 'id: 11\nevent: job.some-later-kind\ndata: {"x": 1}\n\n')
    assert events == [(11, "job.some-later-kind", {"x": 1})]  # an older client keeps reading
    assert event_line(Event(11, "job.some-later-kind", {"x": 1})) is None
