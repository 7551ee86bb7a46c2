"""The bug-report bundle of a finished reduction: one zip to attach to an upstream issue.

    min_bad.onnx (+ min_bad.onnx.data)   the minimal failing model; its data file holds only the
                                         weights it reads (those of 1 MiB and more)
    min_good.onnx (+ .data)              the closest passing model, where the reduction saw one
    min_bad.target.onnx, ...             an fp16 onnxruntime target's converted models (as the check
                                         converted them), so repro.py needs no converter
    inputs.npz (inputs_1.npz, ...)       the values min-bad's inputs see, one file per sample
    inputs.json                          the same for ``polygraphy run --load-inputs`` (small inputs)
    golden.npz (golden_1.npz, ...)       golden values of both models' inputs and outputs (kind golden)
    expected.npz / observed.npz          reference and target outputs of min-bad (first sample), when
                                         the self-check could run it
    check.json                           the check: the spec document, or the command and its rules,
                                         and ``pinned``: the failure min-bad was judged with
    check_files/                         small files the command names (its script), by relative path
    environment.json                     onnx, onnxruntime and providers, TensorRT, GPU, Python, OS, host
    repro.py                             ``python repro.py [MODEL]``: exit 1 when the pinned failure
                                         reproduces (0 passes, 2 cannot run here, 3 another failure)
    README.md                            the finding, the check count, the original model's sha256

Where the inputs come from: a spec check feeds every candidate golden values by tensor name and
generates the rest from its seed (``checks.kinds.feeds_for``), so the bundle stores exactly those
and ``repro.py`` generates them the same way for another MODEL. A command or op-present check
reads the model only; its ``inputs.npz`` holds the values min-bad's inputs take inside the
original model (one isolated onnxruntime run of the original on the run's inputs), or generated
values when that run fails.

``check.json`` also holds ``pinned``: the failure the reduction pinned on min-bad (min-bad's own
verdict: its kind and signature, the pinning level, and for compare/golden checks the outputs that
mismatched, ``pinned_failure``); repro.py says REPRODUCED (exit 1) only when it sees that failure,
and names anything else (0 passes, 2 cannot run here, 3 another failure).

Before zipping, the builder runs the bundle's own ``repro.py`` on min-bad and min-good in a clean
environment (``engine.bundle_env``: only onnx, onnxruntime and numpy importable, no onnx-reducer
on PATH), always: the final verification's verdicts were given in the reduction's environment,
and the bundle's claim is about the recipient's. ``expected.npz``/``observed.npz`` come from the
run on min-bad; what each run printed goes into the README word for word, and the README lists
exactly the files in the zip. The bundle is ``verified`` when repro.py reproduced the pinned
failure on min-bad (exit 1) and min-good, where there is one, passed (exit 0); the CLI exits 11
and the service keeps no bundle otherwise. ``BundleReport.checks_run`` counts the runs."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from checks.golden import GoldenStore
from checks.kinds import feeds_for
from checks.mixed_precision import keep_fp32_of
from checks.ort_runtime import FallbackInferenceError, isolated_fallback_inference, random_inputs
from checks.runtimes.onnxruntime import fp16_storage, to_fp16
from checks.spec import CheckSpec
from engine import bundle_repro
from engine.bundle_env import CleanEnvironment, clean_environment
from engine.workspace import Workspace
from reducer_core import modelio
from reducer_core.candidate import Candidate
from reducer_core.records import ReductionResult
from reducer_core.tensors import TensorMap
from reducer_core.verdict import Pinning, Verdict
from reducer_core.verification import file_sha256

EXTERNAL_THRESHOLD = 1 << 20  # weights of at least 1 MiB go to the model's .data file
INPUTS_JSON_LIMIT = 32 << 20  # inputs.json (base64) only for inputs up to this size
CHECK_FILE_LIMIT = 1 << 20  # files a command names are shipped up to this size
REPRO_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class BundleCheck:
    """The check a bundle's ``repro.py`` runs: ``document`` is ``check.json`` (a spec's normalised
    document; for a command also ``artifact``, the iteration model's name it reads). ``spec``:
    the parsed spec (None for the command line's ``--check COMMAND``); ``golden``: the golden file
    the check read; ``cwd``: where a command ran (files it names are shipped from there)."""

    document: dict[str, Any]
    spec: CheckSpec | None = None
    golden: Path | None = None
    cwd: Path | None = None
    env: Mapping[str, str] | None = None  # the base of repro.py's clean environment; None: this process's
    pinning: Pinning = Pinning.KIND  # how the reduction pinned the failure (``reducer_core.verdict``)

    @classmethod
    def of_spec(
        cls, spec: CheckSpec, golden: Path | None = None, artifact: str = "", cwd: Path | None = None
    ) -> BundleCheck:
        document = spec.to_json()
        if spec.kind == "command":
            document["artifact"] = artifact
        return cls(document, spec, golden, cwd)

    @classmethod
    def of_command(
        cls,
        command: Sequence[str],
        artifact: str,
        fail_codes: Sequence[int] = (),
        ignore_fail_codes: Sequence[int] = (),
        fail_regex: Sequence[str] = (),
        timeout: float | None = None,
        cwd: Path | None = None,
    ) -> BundleCheck:
        """The command line's ``--check COMMAND`` (it reads the iteration artifact ``artifact``)."""
        document = {
            "kind": "command",
            "command": list(command),
            "fail_codes": list(fail_codes),
            "ignore_fail_codes": list(ignore_fail_codes),
            "fail_regex": list(fail_regex),
            "timeout": timeout,
            "artifact": artifact,
        }
        return cls(document, None, None, cwd)

    @property
    def kind(self) -> str:
        return str(self.document["kind"])


@dataclass
class BundleReport:
    path: Path
    finding: str
    reproduced: bool | None  # repro.py on min-bad exited 1 (None: it could not run here, or another failure)
    good_passes: bool | None  # repro.py on min-good exited 0 (None: no min-good, or could not run)
    members: list[str] = field(default_factory=list)
    checks_run: int = 0  # repro.py runs the bundle made itself (its check, once per run)
    bad_code: int | None = None  # repro.py's exit code on min-bad (None: it ran past its time)
    good_code: int | None = None  # ... on min-good (None: no min-good, or past its time)
    has_good: bool = False
    tries: int = 1  # runs on min-bad (a flaky check: until one reproduced, at most the reduction's repeats)

    @property
    def verified(self) -> bool:
        """repro.py reproduced the pinned failure on min-bad in the clean environment, and min-good
        (where there is one) passed there."""
        return self.bad_code == 1 and (not self.has_good or self.good_code == 0)

    def why_unverified(self) -> str:
        """One sentence for a bundle that is not verified (the CLI's log, the service job's event)."""
        where = "run in a clean environment (onnx, onnxruntime, numpy)"
        if self.bad_code != 1:
            return f"repro.py on min_bad.onnx, {where}: {_said(self.bad_code)}"
        return f"repro.py on min_good.onnx, {where}: {_said(self.good_code)}"


def _said(code: int | None) -> str:
    return {
        1: "the failure reproduces (exit 1)",
        0: "it passes (exit 0)",
        2: "it cannot run the check there (exit 2)",
        3: "another failure, not the pinned one (exit 3)",
        None: "it ran past its time",
    }.get(code, f"it exited {code}")


def finding(workspace: Workspace, result: ReductionResult) -> str:
    """One sentence: the nodes the failure needs, and what the closest passing graph lacks."""
    bad = sorted(result.min_bad.nodes)
    if result.min_good is None:
        labels = ", ".join(_node_label(workspace, n) for n in bad[:10]) + (" ..." if len(bad) > 10 else "")
        return f"The failure needs {len(bad)} node(s): {labels}; no passing graph close to it was seen."
    missing = sorted(result.min_bad.nodes - result.min_good.nodes)
    if not missing:
        return f"The failure needs {len(bad)} node(s); the closest passing graph has the same nodes but other inputs."
    labels = ", ".join(_node_label(workspace, n) for n in missing[:10]) + (" ..." if len(missing) > 10 else "")
    noun = "node" if len(missing) == 1 else "nodes"
    pronoun = "it" if len(missing) == 1 else "them"
    return f"The failure needs {noun} {labels}; the closest passing graph lacks {pronoun}."


def _node_label(workspace: Workspace, node: int) -> str:
    proto = workspace.index.nodes[node]
    return f"{proto.name} ({proto.op_type})" if proto.name else f"#{node} ({proto.op_type})"


def environment(worker: str | None = None) -> dict[str, Any]:
    """What ran the reduction: library versions, onnxruntime's providers, TensorRT, the GPU."""
    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "os": platform.platform(),
        "machine": platform.machine(),
        "host": worker or socket.gethostname(),
        "onnx": onnx.__version__,
        "numpy": np.__version__,
    }
    for package in ("onnxruntime", "onnxruntime-gpu", "onnxconverter-common", "polygraphy", "tensorrt", "onnx-reducer"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            env[package] = importlib.metadata.version(package)
    try:
        import onnxruntime as ort  # noqa: PLC0415 - optional: a bundle records the providers only where onnxruntime is installed

        env["onnxruntime_providers"] = list(ort.get_available_providers())
    except ImportError:
        env["onnxruntime_providers"] = None
    env["gpu"] = _nvidia_smi()
    return env


def _nvidia_smi() -> list[dict[str, str]] | None:
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    query = "name,driver_version,memory.total"
    try:
        out = subprocess.run(
            [binary, f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        cuda = subprocess.run([binary], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    version = next(
        (line.split("CUDA Version:")[1].split()[0] for line in cuda.splitlines() if "CUDA Version:" in line), ""
    )
    gpus = []
    for line in out.stdout.strip().splitlines():
        name, driver, memory = ([*(p.strip() for p in line.split(",")), "", ""])[:3]
        gpus.append({"name": name, "driver": driver, "memory": memory, "cuda": version})
    return gpus


# --- writing --------------------------------------------------------------------------------------


def _save_model(workspace: Workspace, candidate: Candidate, path: Path) -> onnx.ModelProto:
    """``path`` with only the weights ``candidate`` reads (large ones in ``<name>.data``); returns
    the model as written, its external weights not loaded. A candidate that reads no weight file
    is written as its iteration model: the bytes its check judged and ``-o``/the job's min-bad
    hand over (``reducer_core.verification``)."""
    if not workspace.weight_locations(candidate):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(workspace.iteration_bytes(candidate))
        return onnx.load(str(path), load_external_data=False)
    options = modelio.SaveOptions(external_location=f"{path.name}.data", size_threshold=EXTERNAL_THRESHOLD)
    modelio.save_self_contained(workspace.model_for(candidate), path, workspace.sources, options)
    return onnx.load(str(path), load_external_data=False)


def _save_converted(model: onnx.ModelProto, runtime: Any, path: Path) -> None:
    """The model an onnxruntime fp16 runtime runs, converted as ``OrtRunner`` converts it."""
    keep = keep_fp32_of(model)
    cpu = (runtime.provider or "CPUExecutionProvider") == "CPUExecutionProvider"
    converted = fp16_storage(model, keep) if cpu else to_fp16(model, keep)
    large = converted.ByteSize() > EXTERNAL_THRESHOLD
    onnx.save_model(
        converted,
        str(path),
        save_as_external_data=large,
        location=f"{path.name}.data",
        size_threshold=EXTERNAL_THRESHOLD,
    )


def _graph_input_names(model: onnx.ModelProto) -> list[str]:
    initializers = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in initializers]


def _write_samples(folder: Path, stem: str, samples: Sequence[Mapping[str, np.ndarray]]) -> list[str]:
    names = []
    for i, sample in enumerate(samples):
        name = f"{stem}.npz" if i == 0 else f"{stem}_{i}.npz"
        arrays: dict[str, Any] = {k: np.asarray(v) for k, v in sample.items()}
        np.savez(folder / name, **arrays)
        names.append(name)
    return names


def _golden_samples(golden: Path | None) -> list[Mapping[str, np.ndarray] | None]:
    if golden is None:
        return [None]
    store = GoldenStore.open(golden)
    return [store.sample(i) for i in range(store.samples)]


def _inputs_from_original(workspace: Workspace, names: list[str], model: onnx.ModelProto) -> TensorMap:
    """What min-bad's inputs are inside the original model on the run's inputs (one isolated
    onnxruntime run); generated values for those it cannot give."""
    generated = random_inputs(model, workspace.options.seed)
    full = Candidate(frozenset(range(len(workspace.index))))
    try:
        _, values = isolated_fallback_inference(
            workspace.model_for(full), workspace.sources, workspace.values, workspace.options.seed, workspace.scratch
        )
    except FallbackInferenceError:
        values = {}
    return {name: values[name] if name in values else generated[name] for name in names}


def _check_files(check: BundleCheck, folder: Path) -> list[str]:
    """Small files a command names by a relative path (its script, a config), copied by that path."""
    if check.kind != "command" or check.cwd is None:
        return []
    copied = []
    artifact = str(check.document.get("artifact") or "")
    for part in check.document["command"]:
        relative = Path(str(part))
        if str(part) == artifact or relative.is_absolute() or ".." in relative.parts or not str(part):
            continue
        source = check.cwd / relative
        with contextlib.suppress(OSError):
            if source.is_file() and source.stat().st_size <= CHECK_FILE_LIMIT:
                target = folder / "check_files" / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
                copied.append(relative.as_posix())
    return copied


def pinned_failure(result: ReductionResult, pinning: Pinning) -> dict[str, Any]:
    """The failure the reduction pinned on min-bad, as ``check.json`` records it for repro.py:
    min-bad's own verdict (the original's where min-bad has no record of its own), the pinning
    level, and the outputs a compare/golden verdict found beyond tolerance."""
    records = [r for r in result.iterations if r.candidate == result.min_bad and r.reproduces]
    verdict: Verdict = records[-1].verdict if records else result.original
    pinned: dict[str, Any] = {"kind": verdict.kind.value, "signature": verdict.signature, "pinning": pinning.value}
    found = re.search(r"outputs beyond tolerance: (.+?); worst ", verdict.detail)
    if verdict.signature.startswith("mismatch:") and found is not None:
        pinned["outputs"] = [name.strip() for name in found.group(1).split(", ") if name.strip()]
    return pinned


def _run_repro(
    folder: Path, model: str, check: BundleCheck, clean: CleanEnvironment, save: bool
) -> tuple[int | None, str]:
    """repro.py's exit code on ``model`` (None: past its time) and everything it printed."""
    timeout = float(check.document.get("timeout") or REPRO_TIMEOUT_S) * 2 + 60
    command = [*clean.python, "repro.py", model, *(["--save-outputs", "."] if save else [])]
    try:
        proc = subprocess.run(
            command, cwd=folder, capture_output=True, text=True, timeout=timeout, env=clean.env, check=False
        )
    except subprocess.TimeoutExpired:
        return None, f"repro.py {model} ran past {timeout:.0f} s"
    output = proc.stdout + proc.stderr
    if proc.returncode not in bundle_repro.VERDICTS and proc.returncode != bundle_repro.CANNOT_RUN:
        return proc.returncode, output
    if proc.returncode == bundle_repro.REPRODUCED and bundle_repro.VERDICTS[bundle_repro.REPRODUCED] not in output:
        return None, output  # exit 1 without its verdict line: repro.py itself died (a traceback)
    return proc.returncode, output


def write_bundle(
    path: Path,
    workspace: Workspace,
    result: ReductionResult,
    check: BundleCheck,
    original: Path,
    worker: str | None = None,
    original_name: str | None = None,
    verified: Mapping[str, bool] | None = None,
) -> BundleReport:
    """Build the bundle of ``result`` and write it to ``path`` (a zip; replaced atomically).
    ``original``: the model file reduced (its sha256 goes in the README, under ``original_name``,
    default its file name); ``worker``: the host named in environment.json (default this one);
    ``verified``: sha256 of the models the final verification judged -> whether the check agreed
    (the README says so; the self-check runs them all the same, in its clean environment)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".bundle-", dir=path.parent) as tmp:
        folder = Path(tmp) / "bundle"
        folder.mkdir()
        clean = clean_environment(Path(tmp).resolve() / "clean", _uses_tensorrt(check), check.env)
        named = (original, original_name or original.name)
        report = _fill(folder, workspace, result, check, named, worker, verified or {}, clean)
        partial = path.with_name(path.name + ".part")
        members = sorted(p for p in folder.rglob("*") if p.is_file())
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
            for member in members:
                archive.write(member, member.relative_to(folder).as_posix())
        os.replace(partial, path)
    report.path = path
    report.members = [m.relative_to(folder).as_posix() for m in members]
    return report


def _fill(
    folder: Path,
    workspace: Workspace,
    result: ReductionResult,
    check: BundleCheck,
    original: tuple[Path, str],
    worker: str | None,
    verified: Mapping[str, bool],
    clean: CleanEnvironment,
) -> BundleReport:
    spec = check.spec
    models = {"min_bad": _save_model(workspace, result.min_bad, folder / "min_bad.onnx")}
    if result.min_good is not None:
        models["min_good"] = _save_model(workspace, result.min_good, folder / "min_good.onnx")
    if spec is not None:
        for role, runtime in (("reference", spec.reference), ("target", spec.target)):
            if runtime is not None and runtime.runtime == "onnxruntime" and runtime.precision != "fp32":
                for stem in models:
                    weighted = modelio.load_model_with_weights(folder / f"{stem}.onnx")
                    _save_converted(weighted, runtime, folder / f"{stem}.{role}.onnx")
    bad = models["min_bad"]
    golden = _golden_samples(check.golden)
    if spec is not None and spec.kind in ("compare", "golden", "error"):
        inputs = [feeds_for(bad, spec, sample)[0] for sample in golden]  # as the check fed min-bad
    else:
        inputs = [_inputs_from_original(workspace, _graph_input_names(bad), bad)]
    _write_samples(folder, "inputs", inputs)
    if sum(v.nbytes for sample in inputs for v in sample.values()) <= INPUTS_JSON_LIMIT:
        (folder / "inputs.json").write_text(bundle_repro.polygraphy_inputs_json(inputs))
    if check.golden is not None:
        wanted = _tensor_names(models.values())
        _write_samples(folder, "golden", [{n: s[n] for n in wanted if n in s} for s in golden if s is not None])
    pinned = pinned_failure(result, check.pinning)
    document = check.document | {"pinned": pinned}
    (folder / "check.json").write_text(json.dumps(document, indent=1, sort_keys=True))
    shipped = _check_files(check, folder)
    (folder / "environment.json").write_text(json.dumps(environment(worker), indent=1))
    shutil.copyfile(bundle_repro.__file__, folder / "repro.py")
    outputs = spec is not None and spec.kind in ("compare", "golden", "error")  # expected/observed.npz
    # a flaky check (``reducer_core.flakiness``) may pass min-bad on one run: as many runs as the
    # reduction's passes needed, until one reproduces; each counts, the README shows the last
    attempts = result.flakiness.repeats if result.flakiness is not None and result.flakiness.flaky else 1
    tries = 0
    while True:
        tries += 1
        bad_run = ("min_bad.onnx", *_run_repro(folder, "min_bad.onnx", check, clean, save=outputs))
        if bad_run[1] == 1 or tries >= max(1, attempts):
            break
    runs = [bad_run]
    if result.min_good is not None:
        runs.append(("min_good.onnx", *_run_repro(folder, "min_good.onnx", check, clean, save=False)))
    sentence = finding(workspace, result)
    bad_code = runs[0][1]
    good_code = runs[1][1] if len(runs) > 1 else None
    report = BundleReport(
        folder,
        sentence,
        bad_code == 1 if bad_code in (0, 1) else None,
        good_code == 0 if good_code in (0, 1) else None,
        checks_run=len(runs) + tries - 1,
        tries=tries,
        bad_code=bad_code,
        good_code=good_code,
        has_good=result.min_good is not None,
    )
    known = {name: verified.get(file_sha256(folder / name)) for name, _, _ in runs}
    readme = _readme(result, check, original, sentence, shipped, report, runs, known, clean, pinned)
    (folder / "README.md").write_text(readme + _files_section(folder))
    return report


def _tensor_names(models: Iterable[onnx.ModelProto]) -> set[str]:
    names: set[str] = set()
    for model in models:
        names.update(_graph_input_names(model))
        names.update(o.name for o in model.graph.output)
    return names


def _readme(
    result: ReductionResult,
    check: BundleCheck,
    original: tuple[Path, str],
    sentence: str,
    shipped: list[str],
    report: BundleReport,
    runs: list[tuple[str, int | None, str]],
    known: Mapping[str, bool | None],
    clean: CleanEnvironment,
    pinned: Mapping[str, Any],
) -> str:
    original_verdict = " ".join(
        p for p in (result.original.kind.value, result.original.signature, result.original.detail) if p
    )
    lines = [
        "# Bug report: minimal failing ONNX model",
        "",
        sentence,
        "",
        f"- Original model: `{original[1]}`, sha256 `{file_sha256(original[0])}`, {result.nodes_before} nodes",
        f"- Minimal failing model: `min_bad.onnx`, {len(result.min_bad)} node(s)",
    ]
    if result.min_good is not None:
        lines.append(f"- Closest passing model: `min_good.onnx`, {len(result.min_good)} node(s)")
    lines += [
        f"- Checks run by the reduction: {result.checks_run} (cached verdicts reused: {result.cache_hits})",
        f"- Original failure: {original_verdict}",
        f"- Check: kind `{check.kind}` (`check.json`); the failure pinned on min-bad: "
        f"{pinned.get('signature') or pinned.get('kind')} (pinning {pinned.get('pinning')})",
        "",
        "## Reproduce",
        "",
        "Needs only `pip install onnx onnxruntime numpy`"
        + (" (and TensorRT with Polygraphy for the TensorRT target)" if _uses_tensorrt(check) else "")
        + ":",
        "",
        "    python repro.py                 # min_bad.onnx: exit 1 when the pinned failure reproduces",
    ]
    if result.min_good is not None:
        lines.append("    python repro.py min_good.onnx   # exit 0: the closest passing model passes")
    lines += [
        "",
        "Exit codes: 1 the pinned failure reproduces, 0 the model passes, 2 the check cannot run here "
        "(a command that is not installed, a missing runtime or GPU), 3 another failure.",
    ]
    if shipped:
        lines += ["", f"The command's files ({', '.join(shipped)}) are in `check_files/`; repro.py runs it there."]
    status = "verified" if report.verified else "NOT verified: " + report.why_unverified()
    lines += [
        "",
        "## Self-check",
        "",
        f"Before zipping, onnx-reducer ran `repro.py` in a clean environment: {clean.describe()}.",
        f"This bundle is {status}.",
        f"- Checks the bundle ran itself (repro.py, beyond the reduction's): {report.checks_run}",
    ]
    for name, code, _ in runs:
        lines.append(f"- `python repro.py {name}`: {_said(code)}")
    if report.tries > 1:
        lines.append(f"- The check is flaky: min_bad.onnx was run {report.tries} times; below, the last run")
    agreed = [name for name, ok in known.items() if ok]
    if agreed:
        lines.append(
            f"- The reduction's final verification also judged these exact bytes, in the reduction's own "
            f"environment: {', '.join(agreed)}"
        )
    for name, _, output in runs:
        lines += ["", f"What `python repro.py {name}` printed, word for word:", "", "```", output.rstrip("\n"), "```"]
    return "\n".join(lines) + "\n"


_FILE_NOTES = {
    "min_bad.onnx": "the minimal failing model",
    "min_bad.onnx.data": "the weights min_bad.onnx reads (those of 1 MiB and more)",
    "min_good.onnx": "the closest passing model",
    "min_good.onnx.data": "the weights min_good.onnx reads",
    "inputs.json": "the same inputs for `polygraphy run --load-inputs`",
    "expected.npz": "the reference's outputs of min-bad (first sample), saved by the self-check",
    "observed.npz": "the target's outputs of min-bad (first sample), saved by the self-check",
    "check.json": "the check, and the failure pinned on min-bad (`pinned`)",
    "environment.json": "versions, execution providers, GPU and host of the reduction",
    "repro.py": "the check, self-contained",
    "README.md": "this file",
}


def _file_note(name: str) -> str:
    if name in _FILE_NOTES:
        return _FILE_NOTES[name]
    if re.fullmatch(r"inputs(_\d+)?\.npz", name):
        return "the inputs min-bad was judged with (one file per sample); repro.py feeds them to min_bad.onnx"
    if re.fullmatch(r"golden(_\d+)?\.npz", name):
        return "golden values of both models' inputs and outputs (one file per sample)"
    if name.startswith("check_files/"):
        return "a file the command names, run from there"
    if re.fullmatch(r"min_(bad|good)\.(reference|target)\.onnx(\.data)?", name):
        return "the model as the fp16 onnxruntime runtime runs it (converted as the check converted it)"
    return ""


def _files_section(folder: Path) -> str:
    """The README's list of the files in the zip: exactly those (README.md itself included)."""
    names = sorted({p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} | {"README.md"})
    lines = ["", "## Files", ""]
    for name in names:
        note = _file_note(name)
        lines.append(f"- `{name}`" + (f": {note}" if note else ""))
    return "\n".join(lines) + "\n"


def _uses_tensorrt(check: BundleCheck) -> bool:
    spec = check.spec
    return spec is not None and any(r is not None and r.runtime == "tensorrt" for r in (spec.reference, spec.target))
