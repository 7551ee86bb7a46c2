"""Streaming multipart parsing: the file parts (``model``, and the optional ``golden`` values) go
straight to files with a running sha256 each (never into memory); only the known text fields are
kept, each capped; parts of any other name are skipped unread into memory. The file parts together
may hold at most the upload limit, and every byte of the body counts against one total limit (that
limit plus a fixed allowance for the form), chunked or not: over it the request is answered 413 as
soon as the limit is crossed (or at once, from ``Content-Length``). A malformed body, or one cut
short before its closing boundary, answers 400; a
client that disconnects mid-upload leaves nothing behind."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from fastapi import Request
from python_multipart import MultipartParser
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import parse_options_header
from starlette.requests import ClientDisconnect

from api.problems import ProblemError

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

MULTIPART_OVERHEAD = 1024 * 1024
MAX_PARTS = 16
TEXT_FIELDS = frozenset(
    {"check_spec", "mode", "task", "model_path", "reduce_inputs", "reduce_outputs", "pin_signature", "confirm_flaky"}
    | {"reduce_data", "labels"}
    | {"releases", "flaky"}  # a bisect-releases job's (api.release_answers)
    | {"allow_nonfinite"}  # a precision job's (api.inspection)
    | {"source_job_id", "on"}  # a bisection started from a reduce job (api.source_jobs)
)
MAX_INPUT_FILES = 8  # 'inputs' parts: several files are several samples, in order


class UploadAbortedError(Exception):
    """The client went away mid-upload: nothing was stored, and there is nobody to answer."""


@dataclass
class UploadedFile:
    """One file part, written to ``path`` as it streamed in."""

    path: Path
    filename: str
    size: int = 0
    sha256: str = ""


@dataclass
class UploadedForm:
    fields: dict[str, str] = field(default_factory=dict)
    file_path: Path | None = None
    filename: str = ""
    size: int = 0
    sha256: str = ""
    golden: UploadedFile | None = None
    inputs: list[UploadedFile] = field(default_factory=list)  # in the order sent


def too_large(limit: int) -> ProblemError:
    return ProblemError(
        413,
        "Upload too large",
        f"The upload is larger than this server's limit of {limit} bytes (MAX_UPLOAD_BYTES).",
        max_upload_bytes=limit,
    )


def malformed(reason: str) -> ProblemError:
    return ProblemError(400, "Malformed multipart body", f"The multipart/form-data body cannot be parsed: {reason}.")


class _FormSink:
    """python-multipart callbacks writing the file parts to disk and collecting text fields."""

    def __init__(self, targets: dict[str, Path], max_file: int, max_field: int) -> None:
        self.form = UploadedForm()
        self.targets, self.max_file, self.max_field = targets, max_file, max_field
        self.files: dict[str, UploadedFile] = {}
        self.digests: dict[str, hashlib._Hash] = {}
        self.file_bytes = 0
        self.header_field, self.header_value = b"", b""
        self.headers: dict[bytes, bytes] = {}
        self.name = ""
        self.is_file = False
        self.buffer = bytearray()
        self.keep = False
        self.parts = 0
        self.sink: BinaryIO | None = None
        self.sinks: list[BinaryIO] = []
        self.ended = False  # the closing boundary was seen

    def on_end(self) -> None:
        self.ended = True

    def on_part_begin(self) -> None:
        self.headers, self.buffer = {}, bytearray()
        self.parts += 1
        if self.parts > MAX_PARTS:
            raise ProblemError(400, "Too many form parts", f"The form has more than {MAX_PARTS} parts.")

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.header_field += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def on_header_end(self) -> None:
        self.headers[self.header_field.lower()] = self.header_value
        self.header_field, self.header_value = b"", b""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self.headers.get(b"content-disposition", b""))
        self.name = options.get(b"name", b"").decode(errors="replace")
        if self.name == "inputs":  # repeatable: inputs-0, inputs-1... in the order sent
            count = len(self.form.inputs)
            if count >= MAX_INPUT_FILES:
                raise ProblemError(422, "Invalid upload", f"Send at most {MAX_INPUT_FILES} 'inputs' file parts.")
            self.name = f"inputs-{count}"
            self.targets[self.name] = self.targets["inputs"].with_name(f"{self.name}.bin")
        self.is_file = self.name in self.targets
        self.keep = self.name in TEXT_FIELDS
        if self.is_file:
            if self.name in self.files:
                raise ProblemError(422, "Invalid upload", f"Send at most one '{self.name}' file part.")
            default = f"{self.name}.onnx" if self.name == "model" else self.name
            filename = options.get(b"filename", default.encode()).decode(errors="replace")
            self.files[self.name] = UploadedFile(self.targets[self.name], filename)
            if self.name.startswith("inputs-"):
                self.form.inputs.append(self.files[self.name])
            self.digests[self.name] = hashlib.sha256()
            self.sink = open(self.targets[self.name], "wb")  # noqa: SIM115 - closed in on_part_end/close
            self.sinks.append(self.sink)

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        chunk = data[start:end]
        if self.is_file:
            assert self.sink is not None
            self.files[self.name].size += len(chunk)
            self.file_bytes += len(chunk)
            if self.file_bytes > self.max_file:  # the model and the golden values together
                raise too_large(self.max_file)
            self.digests[self.name].update(chunk)
            self.sink.write(chunk)
            return
        if not self.keep:
            return  # an unknown field: counted against the total, never kept
        self.buffer += chunk
        if len(self.buffer) > self.max_field:
            raise ProblemError(413, "Field too large", f"Form field '{self.name}' exceeds {self.max_field} bytes.")

    def on_part_end(self) -> None:
        if self.is_file and self.sink is not None:
            self.sink.close()
            self.sink = None
            uploaded = self.files[self.name]
            uploaded.sha256 = self.digests[self.name].hexdigest()
            if self.name == "model":
                self.form.file_path, self.form.filename = uploaded.path, uploaded.filename
                self.form.size, self.form.sha256 = uploaded.size, uploaded.sha256
            elif self.name == "golden":
                self.form.golden = uploaded
        elif self.keep:
            self.form.fields[self.name] = self.buffer.decode(errors="replace")
        self.buffer, self.keep = bytearray(), False

    def close(self) -> None:
        for sink in self.sinks:
            if not sink.closed:
                sink.close()


async def read_form(request: Request, staging: Path, max_file: int, max_field: int) -> UploadedForm:
    """Parse the multipart body: the model part into ``staging/upload.bin``, the golden values (if
    sent) into ``staging/golden.bin``, each ``inputs`` part (input samples, repeatable) into
    ``staging/inputs-N.bin``, and the text fields."""
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    if content_type != b"multipart/form-data" or b"boundary" not in options:
        raise ProblemError(415, "Unsupported Media Type", "Send the job as multipart/form-data.")
    max_total = max_file + MULTIPART_OVERHEAD
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_total:
        raise too_large(max_file)
    targets = {"model": staging / "upload.bin", "golden": staging / "golden.bin", "inputs": staging / "inputs.bin"}
    sink = _FormSink(targets, max_file, max_field)
    parser = MultipartParser(options[b"boundary"], callbacks=_callbacks(sink))
    total = 0
    try:
        async for chunk in request.stream():
            total += len(chunk)
            if total > max_total:
                raise too_large(max_file)
            parser.write(chunk)
        parser.finalize()
        if not sink.ended:
            raise malformed("the body ends before its closing boundary (was the upload cut short?)")
    except MultipartParseError as exc:
        raise malformed(str(exc) or type(exc).__name__) from None
    except ClientDisconnect:
        raise UploadAbortedError() from None
    finally:
        sink.close()
    if sink.form.file_path is None:
        raise ProblemError(422, "Invalid upload", "The form has no 'model' file part (the ONNX model or a bundle).")
    return sink.form


def _callbacks(sink: _FormSink) -> MultipartCallbacks:
    return {
        "on_part_begin": sink.on_part_begin,
        "on_header_field": sink.on_header_field,
        "on_header_value": sink.on_header_value,
        "on_header_end": sink.on_header_end,
        "on_headers_finished": sink.on_headers_finished,
        "on_part_data": sink.on_part_data,
        "on_part_end": sink.on_part_end,
        "on_end": sink.on_end,
    }
