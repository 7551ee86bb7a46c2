"""``onnx-reducer precision``: which nodes must stay fp32 for the fp16 model to pass the check.

The command line's hooks of ``reduce`` (``CommandLineRun``: the iteration artifact, the debug
replay after every check, the log) around an ``engine.precision.PrecisionSession``; at the end it
writes the mixed-precision model, prints the node names and, with ``--summary-json``, a summary
whose ``keep_fp32`` lists them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from checks.mixed_precision import require_fp16_target
from checks.spec import build_check as build_spec_check
from engine.precision import PrecisionSession
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


class PrecisionRun(CommandLineRun):
    """``reduce``'s command-line hooks; only the start and the results differ."""

    session: PrecisionSession

    @classmethod
    def begin(
        cls, args: argparse.Namespace, workspace: Workspace, check: SessionCheck, log: ProgressReporter
    ) -> PrecisionRun:
        return cls(args, PrecisionSession.begin(workspace, check, args.mode), log)

    def keep_fp32(self, result: ReductionResult) -> list[str]:
        return self.session.keep_fp32(result.min_bad)

    def write_results(self, result: ReductionResult) -> None:
        keep = self.keep_fp32(result)
        if not keep:
            self.log.info("The fp16 model already passes the check: no node needs fp32.")
        else:
            self.log.info(f"{len(keep)} of {result.nodes_before} node(s) must stay fp32: {', '.join(keep)}")
        data = self.session.save_mixed(result.min_bad, Path(self.args.output), self.log)
        extra = f" (weights in {data})" if data else ""
        self.log.info(f"Mixed-precision model written to {self.args.output}{extra}")
        for name in keep:
            print(name)

    def summary(self, result: ReductionResult) -> None:
        for line in summary_lines(result, self.keep_fp32(result)):
            self.log.info(line)

    def write_summary(self, path: str, result: ReductionResult) -> None:
        summary = precision_summary(result, self.keep_fp32(result))
        Path(path).write_text(json.dumps(summary, indent=1))


def summary_lines(result: ReductionResult, keep_fp32: list[str]) -> list[str]:
    return [
        "==== Precision summary ====",
        f"nodes: {result.nodes_before}  kept fp32: {len(keep_fp32)}",
        f"checks run: {result.checks_run}  cache hits: {result.cache_hits}  iterations: {len(result.iterations)}",
        f"time: {result.elapsed_s:.2f}s total, {result.check_time_s:.2f}s in checks",
        f"fp16 model: {result.original.kind.value} [{result.original.signature or 'no signature'}]",
        *(
            line.replace("original model", "fp16 model").replace("minimal model", "mixed model")
            for line in samples_lines(result)
        ),
    ]


def precision_summary(result: ReductionResult, keep_fp32: list[str]) -> dict[str, object]:
    """``--summary-json``: the nodes to keep in fp32 and every check (``fp32_nodes``: the size of
    the candidate set; ``passes``: the mixed model passed)."""
    return {
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
