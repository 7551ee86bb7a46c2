"""A prepared reduction: the indexed model, where its weights live, tensor values for freezing
and fallback inference, and the IR version cap of the installed onnxruntime."""

from __future__ import annotations

import importlib.util
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import onnx
from onnxconverter_common import float16

from checks.fp16_warnings import summarised_fp16_warnings
from checks.ort_runtime import input_signatures, isolated_fallback_inference, max_ir_version
from engine.data_loader import feeds_from_script, ranged_inputs
from reducer_core import modelio, weight_edits
from reducer_core.candidate import Candidate
from reducer_core.control_flow import has_shape
from reducer_core.errors import UsageError
from reducer_core.extract import SerializedPieces, boundary_inputs, extract, extract_bytes
from reducer_core.graph import GraphIndex
from reducer_core.prepare import Shape, apply_tensor_metadata, prepare
from reducer_core.samples import input_samples
from reducer_core.tensors import TensorMap, load_tensor_file
from reducer_core.verification import file_sha256


class Log(Protocol):
    def info(self, message: str) -> None: ...

    def warning(self, message: str) -> None: ...


@dataclass(frozen=True)
class ReduceOptions:
    """What a reduction needs to know about its model (the CLI and the service both build one)."""

    model: Path
    work_dir: Path
    artifact_stem: str = "polygraphy_debug"
    external_data_dir: Path | None = None
    input_shapes: Mapping[str, Shape] = field(default_factory=dict)
    shape_inference: bool = True
    force_fallback_shape_inference: bool = False
    load_inputs: Sequence[Path] = ()
    seed: int = 1
    ignore_external_data: bool = False
    fp_to_fp16: bool = False
    val_ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    data_loader_script: str | None = None
    save: modelio.SaveOptions = field(default_factory=modelio.SaveOptions)
    link_weights: bool = False
    """Hardlink weight files beside iteration models (see WeightSources.hardlink); otherwise the
    model's own files are referenced in place when the work folder is the model's folder, and
    copied once per folder when it is not."""

    @property
    def identity(self) -> str:
        """Everything besides the graph that shapes candidate models: cached verdicts and replays
        are reused only under the same identity (see VerdictCache)."""
        shapes = sorted((name, [str(d) for d in dims]) for name, dims in self.input_shapes.items())
        parts = [
            f"shapes={shapes}",
            f"shape-inference={self.shape_inference}",
            f"fallback={self.force_fallback_shape_inference}",
            f"seed={self.seed}",
        ]
        parts += [f"inputs={_file_digest(path)}" for path in self.load_inputs]
        parts += [f"val-range={sorted(self.val_ranges.items())}"] if self.val_ranges else []
        if self.data_loader_script:
            parts.append(f"data-loader={_file_digest(Path(self.data_loader_script.partition(':')[0]))}")
        parts += [f"ignore-external-data={self.ignore_external_data}", f"fp16={self.fp_to_fp16}"]
        return " ".join(parts)


def _file_digest(path: Path) -> str:
    return file_sha256(path)[:16]


@dataclass
class Workspace:
    index: GraphIndex
    sources: modelio.WeightSources
    options: ReduceOptions
    log: Log
    values: TensorMap = field(default_factory=dict)
    ir_cap: int | None = None
    scratch: Path | None = None
    owned: list[Path] = field(default_factory=list)
    _fallback_done: bool = False
    _pieces: SerializedPieces | None = None

    def model_for(self, candidate: Candidate) -> onnx.ModelProto:
        """The candidate's model; side-branch tensors are frozen when the candidate has a primary
        node and their values are known (from --load-inputs or one fallback inference run)."""
        return extract(self.index, candidate, self._frozen_values(candidate), self.ir_cap)

    def write(self, candidate: Candidate, path: Path, suffix: bytes = b"") -> None:
        """Write the iteration model: O(candidate) concatenation of pre-serialized nodes.
        ``suffix``: serialised ``ModelProto`` fields merged into it (appended bytes)."""
        modelio.write_iteration_bytes(self.iteration_bytes(candidate) + suffix, path, self.sources)

    def iteration_bytes(self, candidate: Candidate) -> bytes:
        """The serialised iteration model ``write`` writes for ``candidate`` (weights by reference)."""
        if self._pieces is None or self._pieces.index is not self.index:
            self._pieces = SerializedPieces(self.index)
        return extract_bytes(self._pieces, candidate, self._frozen_values(candidate), self.ir_cap)

    def weight_locations(self, candidate: Candidate) -> list[str]:
        """The weight files (external-data locations) the candidate's model points into: those of
        its boundary initializers and of tensors inside its nodes (Constant, If/Loop bodies)."""
        index = self.index
        tensors = [index.initializers[n] for n in boundary_inputs(index, candidate.nodes) if n in index.initializers]
        for node in candidate.nodes:
            tensors.extend(modelio.node_tensors(index.nodes[node]))
        return sorted(modelio.tensor_locations(tensors))

    def save_self_contained(self, candidate: Candidate, path: Path) -> Path | None:
        return modelio.save_self_contained(self.model_for(candidate), path, self.sources, self.options.save)

    def _frozen_values(self, candidate: Candidate) -> Mapping[str, np.ndarray] | None:
        if candidate.primary is None:
            return None
        primary_reads = set(self.index.reads[candidate.primary])
        needed = [
            n
            for n in boundary_inputs(self.index, candidate.nodes)
            if n not in primary_reads and n not in self.index.initializers
        ]
        if any(n not in self.values for n in needed) and not self._fallback_done:
            run_fallback_inference(self)
            if any(n not in self.values for n in needed):
                self.log.warning("Some side-branch tensors have no values; they stay graph inputs.")
        return self.values

    def close(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        for path in self.owned:
            path.unlink(missing_ok=True)


def load_workspace(options: ReduceOptions, log: Log) -> Workspace:
    """Load, validate and prepare ``options.model``; move inline weights out once."""
    model, sources = modelio.load_model(options.model, options.external_data_dir, options.ignore_external_data)
    if options.fp_to_fp16:
        model, sources = _to_fp16(model, sources, log)
    prepared = prepare(model, options.input_shapes, shape_inference=options.shape_inference)
    try:
        options.work_dir.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".onnx-reducer-", dir=options.work_dir))
    except OSError as exc:
        raise UsageError(
            f"Cannot write in the working folder '{options.work_dir}' ({exc.strerror}); use a writable one."
        ) from None
    inline_weights = options.work_dir / f"{options.artifact_stem}.weights"
    try:
        return _prepare_workspace(options, log, prepared, sources, scratch, inline_weights)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        inline_weights.unlink(missing_ok=True)  # it may hold a copy of every inline weight
        raise


def _prepare_workspace(
    options: ReduceOptions,
    log: Log,
    prepared: onnx.ModelProto,
    sources: modelio.WeightSources,
    scratch: Path,
    inline_weights: Path,
) -> Workspace:
    model_dir = (options.external_data_dir or options.model.parent).resolve()
    if options.work_dir.resolve() != model_dir:
        # Elsewhere, reducer-owned names keep copies and links from clobbering the user's files.
        sources = modelio.relocate_external_data(prepared, sources, prefix=f"{options.artifact_stem}.w")
    sources.hardlink = options.link_weights
    inline_weights.unlink(missing_ok=True)  # a stale file of an interrupted run
    moved = modelio.externalize_inline_weights(prepared, sources, inline_weights, location=inline_weights.name)
    if moved:
        log.info(f"Moved {moved / 1e6:.1f} MB of inline weights to a reference file once; iterations copy none.")
    values = initial_values(options, prepared)
    workspace = Workspace(
        GraphIndex.build(prepared, _reader(options, sources)),
        sources,
        options,
        log,
        values,
        max_ir_version(),
        scratch,
    )
    if moved:
        workspace.owned.append(inline_weights)
    if options.force_fallback_shape_inference or _has_untyped_tensors(workspace.index):
        run_fallback_inference(workspace)
    warn_about_shapes(workspace.index, log)
    return workspace


def _to_fp16(
    model: onnx.ModelProto, sources: modelio.WeightSources, log: Log
) -> tuple[onnx.ModelProto, modelio.WeightSources]:
    """Polygraphy's --fp-to-fp16: every floating-point tensor converted with onnxconverter-common."""
    log.info("Converting the model's floating-point tensors to fp16 (--fp-to-fp16).")
    modelio.inline_external_data(model, sources)
    with summarised_fp16_warnings(log.warning):
        converted: onnx.ModelProto = float16.convert_float_to_float16(model, keep_io_types=False)
    return converted, modelio.WeightSources(hardlink=sources.hardlink)


def initial_values(options: ReduceOptions, model: onnx.ModelProto) -> TensorMap:
    """Tensor values known before any run: a --data-loader-script's first feed (it overrides the
    other data options, as in Polygraphy), then --load-inputs (its first sample; files of other
    tensors merged into it), then --val-range inputs."""
    values: TensorMap = feeds_from_script(options.data_loader_script) if options.data_loader_script else {}
    files = [(path.name, load_tensor_file(path)) for path in options.load_inputs]
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in initializers]
    samples = input_samples(files, inputs).samples if files else []  # several files: several samples
    for name, value in (samples[0] if samples else {}).items():
        values.setdefault(name, value)
    if options.val_ranges:
        for name, value in ranged_inputs(input_signatures(model), options.val_ranges, options.seed).items():
            values.setdefault(name, value)
    return values


def _reader(options: ReduceOptions, sources: modelio.WeightSources) -> weight_edits.Reader:
    """How the weight step reads weights (``reducer_core.weight_edits``): not at all from files
    with ``--ignore-external-data`` (there are none to read)."""
    return None if options.ignore_external_data else modelio.weight_reader(sources)


def _has_untyped_tensors(index: GraphIndex) -> bool:
    """Some node output has no known type, or a tensor type without a shape (a Loop's carried
    value whose rank its body does not settle): a candidate's input or output needs both."""
    return any(_lacks_type(index, name) for outs in index.writes for name in outs)


def _lacks_type(index: GraphIndex, name: str) -> bool:
    known = index.types.get(name)
    return known is None or (known.HasField("tensor_type") and not has_shape(known))


_CARETS = re.compile(r"\s*\^{3,}\s*")  # a traceback's "^^^^" marks under the failing expression


def quoted_error(exc: BaseException, *folders: Path | str | None, limit: int = 300) -> str:
    """``exc`` as a log line quotes it: one line, at most ``limit`` characters, with no path inside
    ``folders`` (the run's scratch folders) or the system's temporary folder: such a file is named
    by its name alone (the folder is the run's, removed when it ends, and a server's own)."""
    text = f"{type(exc).__name__}: {exc}"
    named = [Path(folder) for folder in folders if folder] + [Path(tempfile.gettempdir())]
    prefixes = {str(path.resolve()) for path in named} | {str(path) for path in named if path.is_absolute()}
    for prefix in sorted((p.rstrip("/") for p in prefixes if len(p) > 1), key=len, reverse=True):
        text = re.sub(re.escape(prefix) + r"/(?:[^\s'\"/]+/)*", "", text)
    text = " ".join(_CARETS.sub(" ", text).split())
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def run_fallback_inference(workspace: Workspace) -> None:
    """Shapes (and values for freezing) from one onnxruntime run; on failure, keep going and say so."""
    workspace._fallback_done = True
    if importlib.util.find_spec("onnxruntime") is None:
        workspace.log.warning("onnxruntime is not installed: fallback shape inference is unavailable.")
        return

    workspace.log.info("Running onnxruntime once to find intermediate tensor shapes and values (fallback inference).")
    try:
        # In a child process (own interpreter, process group and time limit): the model is
        # untrusted, and a crash or a memory blow-up there must not take this process down.
        metas, values = isolated_fallback_inference(
            workspace.index.model,
            workspace.sources,
            workspace.values,
            workspace.options.seed,
            work_dir=workspace.scratch,
        )
    except Exception as exc:  # noqa: BLE001 - any runtime failure is reported, not fatal
        error = quoted_error(exc, workspace.scratch, workspace.options.work_dir)
        workspace.log.warning(f"Fallback inference failed ({error}); keeping ONNX shapes.")
        return
    model = onnx.ModelProto()
    model.CopyFrom(workspace.index.model)
    force = workspace.options.force_fallback_shape_inference
    index = workspace.index
    apply_tensor_metadata(model, metas if force else {k: v for k, v in metas.items() if _lacks_type(index, k)})
    workspace.index = GraphIndex.build(model, index.read_weight)
    for name, value in values.items():
        workspace.values.setdefault(name, value)


def warn_about_shapes(index: GraphIndex, log: Log) -> None:
    def dynamic(name: str) -> bool:
        t = index.types.get(name)
        return t is None or any(not d.HasField("dim_value") for d in t.tensor_type.shape.dim)

    if any(dynamic(name) for name in index.graph_inputs):
        log.warning(
            "This model has dynamic input shapes; give --model-input-shapes NAME:[d0,...] so that "
            "iteration models get fixed shapes."
        )
    if any(n.op_type == "Shape" for n in index.nodes):
        log.warning(
            "This model contains Shape operations; candidates that cut through them may fail differently. "
            "Signature pinning (default) keeps such drift from being counted."
        )
