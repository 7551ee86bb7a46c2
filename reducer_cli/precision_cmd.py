"""``onnx-reducer precision``: which nodes must stay fp32 for the fp16 model to pass the check.

The command line's hooks of ``reduce`` (``CommandLineRun``: the iteration artifact, the debug
replay after every check, the log) around an ``engine.precision.PrecisionSession``. Before the
search the fp32 original runs once (``reference_run``: a compare spec is judged against its
outputs, and its ranges give the search's start); every iteration artifact is a real
mixed-precision model. At the end the answer grows until no fp16 tensor of its file holds inf
(``PrecisionSession.finite_answer``; ``--allow-nonfinite`` keeps the search's answer and names
those tensors), then it writes the answer's mixed-precision model, judges that file once more
(exit 1 when it does not pass: no answer is reported), prints the node names, writes them for
ModelOpt AutoCast (``MIXED.nodes_to_exclude.txt``) and trtexec (``MIXED.trtexec.txt``) and, with
``--summary-json``, a summary naming the nodes and the tensors kept fp32 and what was verified."""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import tempfile
from pathlib import Path

from checks.build import build_check as build_spec_check
from checks.mixed_precision import require_fp16_target
from checks.spec import CheckSpec, ModelCheck
from engine.precision import (
    FiniteAnswer,
    PrecisionPlan,
    PrecisionSession,
    WrittenMixed,
    autocast_patterns,
    reference_run,
    trtexec_flags,
)
from engine.session import SessionCheck
from engine.workspace import Workspace
from reducer_cli.check_inputs import check_golden
from reducer_cli.progress import ProgressReporter
from reducer_cli.reduce_cmd import CommandLineRun, spec_from_args
from reducer_core.records import ReductionResult
from reducer_core.samples import samples_lines, samples_summary


def build_precision_check(args: argparse.Namespace, log: ProgressReporter | None = None) -> SessionCheck:
    """The ``--check-spec`` check (``--golden`` or ``--load-inputs`` feed it, every sample: see
    ``reducer_cli.check_inputs``): one that runs the model in fp16."""
    spec = require_fp16_target(spec_from_args(args))
    golden, digest = check_golden(args, spec, Path(args.golden) if args.golden else None, log)
    return SessionCheck(build_spec_check(spec, golden), spec, golden, digest, task="precision")


def _build(spec: CheckSpec, golden: Path | None) -> ModelCheck:
    return build_spec_check(spec, golden)


class PrecisionRun(CommandLineRun):
    """``reduce``'s command-line hooks; only the start and the results differ."""

    session: PrecisionSession
    reference_dir: Path | None = None
    written: WrittenMixed | None = None
    answer: FiniteAnswer | None = None
    tensorrt: dict[str, object] | None = None

    @classmethod
    def begin(
        cls, args: argparse.Namespace, workspace: Workspace, check: SessionCheck, log: ProgressReporter
    ) -> PrecisionRun:
        folder = Path(tempfile.mkdtemp(prefix="onnx_reducer_precision_", dir=workspace.options.work_dir))
        try:
            plan = reference_run(workspace, check, _build, folder, getattr(args, "io_types", "fp32"))
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        _log_plan(log, workspace, plan)
        run = cls(args, PrecisionSession.begin(workspace, plan, args.mode), log)
        run.reference_dir = folder
        return run

    def keep_fp32(self, result: ReductionResult) -> list[str]:
        """The answer's nodes: the search's, grown so that no fp16 tensor holds inf (once computed)."""
        return self.session.keep_fp32(self.answer.candidate if self.answer is not None else result.min_bad)

    def write_results(self, result: ReductionResult) -> None:
        allow = bool(getattr(self.args, "allow_nonfinite", False))
        answer = self.session.finite_answer(result.min_bad, allow_nonfinite=allow)
        self.answer = answer
        keep = self.keep_fp32(result)
        if answer.added:
            self.log.info(
                f"The search's {len(answer.searched)} node(s) left inf in fp16 tensors; {len(answer.added)} more "
                f"node(s) kept fp32 so that none holds inf ({answer.rounds} capture runs): {', '.join(answer.added)}"
            )
        if answer.nonfinite:
            holding = ", ".join(f"{name} ({count} values)" for name, count in sorted(answer.nonfinite.items()))
            why = "--allow-nonfinite" if allow else "no node can be kept fp32 to avoid it"
            self.log.warning(
                f"fp16 tensors holding inf or NaN where the fp32 model is finite ({why}): {holding}. A fused or "
                "approximate GPU kernel can turn such an inf into NaN."
            )
        if not keep:
            self.log.info("The fp16 model already passes the check: no node needs fp32.")
        else:
            self.log.info(f"{len(keep)} of {result.nodes_before} node(s) must stay fp32: {', '.join(keep)}")
        written = self.session.save_mixed(answer.candidate, Path(self.args.output), verify=self.check)
        self.written = written
        self._write_tensorrt_forms(keep)
        extra = f" (weights in {written.data})" if written.data else ""
        tensors = written.mixed.fp32_tensors
        self.log.info(f"fp32 tensors: {', '.join(tensors) if tensors else 'none'}")
        self.log.info(
            f"Mixed-precision model written to {self.args.output}{extra}, checked again: "
            f"{written.verdict.kind.value if written.verdict else 'not checked'}"
        )
        for name in keep:
            print(name)

    def _write_tensorrt_forms(self, keep: list[str]) -> None:
        """The answer for ModelOpt AutoCast (one anchored name pattern a line, for
        ``--nodes_to_exclude``) and TensorRT 10's trtexec (flags), beside ``-o``; both logged."""
        patterns = autocast_patterns(keep)
        outputs = {node.name: len(node.output) for node in self.session.workspace.index.nodes}
        flags = trtexec_flags(keep, outputs)
        autocast, trtexec = tensorrt_paths(Path(self.args.output))
        autocast.write_text("".join(f"{p}\n" for p in patterns))
        trtexec.write_text(flags + "\n")
        self.tensorrt = {"nodes_to_exclude": patterns, "trtexec": flags}
        quoted = " ".join(shlex.quote(p) for p in patterns)
        self.log.info(f"ModelOpt AutoCast ({autocast}): --nodes_to_exclude {quoted}")
        self.log.info(f"trtexec on TensorRT 10, fp32 model ({trtexec}): {flags}")

    def summary(self, result: ReductionResult) -> None:
        for line in summary_lines(result, self.keep_fp32(result)):
            self.log.info(line)

    def write_summary(self, path: str, result: ReductionResult) -> None:
        summary = precision_summary(result, self.keep_fp32(result), self.session.plan, self.written, self.answer)
        summary |= self.tensorrt or {}
        Path(path).write_text(json.dumps(summary, indent=1))

    def cleanup(self) -> None:
        try:
            super().cleanup()
        finally:
            if self.reference_dir is not None:
                shutil.rmtree(self.reference_dir, ignore_errors=True)


def _log_plan(log: ProgressReporter, workspace: Workspace, plan: PrecisionPlan) -> None:
    spec = plan.check.spec
    judged = "the fp32 original's outputs" if spec is not None and spec.kind == "golden" else "the spec"
    log.info(f"Reference: {plan.reference_detail}; candidates are compared with {judged}.")
    superset = plan.superset(workspace.index)
    beyond = plan.out_of_range()
    if beyond:
        log.info(
            f"Range analysis: {len(beyond)} tensor(s) beyond fp16's range (65504): {', '.join(beyond[:10])}"
            f"{' ...' if len(beyond) > 10 else ''}; the search starts from their {len(superset)} writers and readers."
        )


def tensorrt_paths(output: Path) -> tuple[Path, Path]:
    """Where the AutoCast pattern list and the trtexec flags go, beside the mixed model."""
    stem = output.name.removesuffix(".onnx")
    return output.with_name(f"{stem}.nodes_to_exclude.txt"), output.with_name(f"{stem}.trtexec.txt")


def summary_lines(result: ReductionResult, keep_fp32: list[str]) -> list[str]:
    return [
        "==== Precision summary ====",
        f"nodes: {result.nodes_before}  kept fp32 by the search: {len(keep_fp32)}",
        f"checks run: {result.checks_run}  cache hits: {result.cache_hits}  iterations: {len(result.iterations)}",
        f"time: {result.elapsed_s:.2f}s total, {result.check_time_s:.2f}s in checks",
        f"fp16 model: {result.original.kind.value} [{result.original.signature or 'no signature'}]",
        *(
            line.replace("original model", "fp16 model").replace("minimal model", "mixed model")
            for line in samples_lines(result)
        ),
    ]


def precision_summary(
    result: ReductionResult,
    keep_fp32: list[str],
    plan: PrecisionPlan | None = None,
    written: WrittenMixed | None = None,
    answer: FiniteAnswer | None = None,
) -> dict[str, object]:
    """``--summary-json``: the nodes to keep in fp32 and every check (``fp32_nodes``: the size of
    the candidate set; ``passes``: the mixed model passed); with the written model, the answer
    per tensor (``fp32_tensors``) and ``verified`` (the written file judged once more); with the
    finite answer, ``finite`` (the nodes added so that no fp16 tensor holds inf, the fp16 tensors
    that still do). The command adds the TensorRT forms (``nodes_to_exclude``, ``trtexec``)."""
    summary: dict[str, object] = {
        "task": "precision",
        "keep_fp32": keep_fp32,
        "nodes": result.nodes_before,
        "fp16_already_passes": not keep_fp32,
        "checks_run": result.checks_run,
        "cache_hits": result.cache_hits,
        "elapsed_s": result.elapsed_s,
        "check_time_s": result.check_time_s,
        "fp16_verdict": result.original.to_json(),
        **samples_summary(result),  # "original": the fp16 model, "min_bad": the mixed model
        "iterations": [
            {
                "number": r.number,
                "phase": r.phase,
                "fp32_nodes": len(r.candidate),
                "verdict": r.verdict.kind.value,
                "passes": r.reproduces,
                "cached": r.cached,
                "fingerprint": r.candidate.fingerprint,
            }
            for r in result.iterations
        ],
    }
    if plan is not None:
        spec = plan.check.spec
        summary["io_types"] = plan.io
        summary["reference"] = "fp32 original" if spec is not None and spec.kind == "golden" else "spec"
        summary["out_of_range_tensors"] = plan.out_of_range()
    if written is not None:
        summary |= {
            "fp32_tensors": list(written.mixed.fp32_tensors),
            "fp32_nodes_in_model": list(written.mixed.fp32_nodes),
            "fp16_tensors": written.mixed.fp16_tensors,
            "casts": written.mixed.casts,
            "verified": written.verified_json(),
        }
    if answer is not None:
        summary["finite"] = answer.to_json()
    return summary
