"""Argument parsing for ``onnx-reducer``. ``reduce`` takes Polygraphy ``debug reduce``'s options
with the same spelling, aliases and meaning, plus a few of our own (marked below)."""

from __future__ import annotations

import argparse
import tomllib
from importlib import metadata
from pathlib import Path

from checks.memory import parse_size
from persistence.options import JobOptions
from reducer_cli.client_args import add_client_parsers
from reducer_cli.passes_cmd import add_passes_parser
from reducer_cli.phases import phase_legend
from reducer_cli.release_cmd import add_release_parser
from reducer_cli.service_args import add_service_parsers
from reducer_core.strategies import MODES
from reducer_core.verdict import Pinning

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_ORIGINAL_PASSED = 3
EXIT_INVALID_MODEL = 4
# The run finished and wrote its files, but the answer is suspect: the check fails whatever the model
# (EXIT_SUSPECT), or a written model did not get its verdict when checked once more (EXIT_UNVERIFIED).
EXIT_SUSPECT = 10
EXIT_UNVERIFIED = 11
EXIT_INTERRUPTED = 130


# Commands that read a local model file: a missing one is bad usage (exit 2) for each of them, as it
# is for `submit`; exit 4 is kept for a model that was read and refused.
LOCAL_MODEL_COMMANDS = frozenset({"reduce", "precision", "golden", "inspect", "bisect-releases", "bisect-passes"})


def missing_file_message(name: str, what: str = "Model file") -> str | None:
    """Why ``name`` cannot be read as a file given on the command line, or None when it can."""
    path = Path(name)
    if path.is_file():
        return None
    if path.is_dir():
        return f"{what} '{name}' is a folder; give the file itself."
    return f"{what} '{name}' does not exist. Check the path (a relative path starts from the current folder)."


def version_text() -> str:
    """``onnx-reducer --version``: this package's version and the onnx/onnxruntime it runs with (what
    a bug report needs). A source checkout that is not installed reads its pyproject.toml."""
    try:
        own = metadata.version("onnx-reducer")
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        own = tomllib.loads(pyproject.read_text())["project"]["version"] if pyproject.is_file() else "unknown"
    parts = []
    for dependency in ("onnx", "onnxruntime"):
        try:
            parts.append(f"{dependency} {metadata.version(dependency)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dependency} not installed")
    return f"onnx-reducer {own} ({', '.join(parts)})"


def _memory_size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _add_shown_output_args(container: argparse._ActionsContainer) -> None:
    """--show-output / --hide-fail-output: which check output is shown (reduce and precision)."""
    shown = container.add_mutually_exclusive_group()
    shown.add_argument("--show-output", action="store_true", help="Show the check's output for passing iterations too.")
    shown.add_argument("--hide-fail-output", action="store_true", help="Do not show the check's output on failures.")


def _add_log_output_args(container: argparse._ActionsContainer) -> None:
    """-v / -q / --no-progress (reduce and precision)."""
    container.add_argument("-v", "--verbose", action="count", default=0, help="More log output.")
    container.add_argument("-q", "--quiet", action="count", default=0, help="Less log output.")
    container.add_argument("--no-progress", dest="progress", action="store_false", help="No live progress line.")


def _add_debug_replay_args(container: argparse._ActionsContainer, default_replay: str) -> None:
    """--load-debug-replay / --save-debug-replay, saving to default_replay unless told otherwise."""
    container.add_argument(
        "--load-debug-replay", default=None, help="Resume: verdicts recorded by --save-debug-replay."
    )
    container.add_argument(
        "--save-debug-replay",
        default=default_replay,
        help=f"Where verdicts are saved after every check (default: {default_replay}).",
    )


def _add_input_shapes_arg(container: argparse._ActionsContainer, *aliases: str) -> None:
    """--model-input-shapes (and the given aliases) into args.input_shapes."""
    container.add_argument(
        "--model-input-shapes",
        *aliases,
        dest="input_shapes",
        nargs="+",
        default=[],
        metavar="NAME:[D0,...]",
        help="Fix input shapes, then infer intermediate shapes.",
    )


def _add_load_inputs_arg(container: argparse._ActionsContainer, help_text: str, metavar: str | None = None) -> None:
    """--load-inputs / --load-input-data (Polygraphy's name): input sample files into args.load_inputs."""
    container.add_argument(
        "--load-inputs",
        "--load-input-data",
        dest="load_inputs",
        nargs="+",
        default=[],
        metavar=metavar,
        help=help_text,
    )


def _add_check_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Check command (Polygraphy-compatible)")
    group.add_argument(
        "--check",
        "--check-inference",
        dest="check",
        nargs=argparse.REMAINDER,
        default=None,
        help="Command that checks the iteration model; everything after it is the command. Non-zero exit = "
        "fail. Without --check, an interactive session asks you whether each iteration passed.",
    )
    codes = group.add_mutually_exclusive_group()
    codes.add_argument(
        "--fail-code",
        "--fail-returncode",
        dest="fail_codes",
        nargs="+",
        type=int,
        default=None,
        help="Exit code(s) that count as failures; any other code passes.",
    )
    codes.add_argument(
        "--ignore-fail-code",
        "--ignore-fail-returncode",
        dest="ignore_fail_codes",
        nargs="+",
        type=int,
        default=None,
        help="Exit code(s) never counted as failures.",
    )
    group.add_argument(
        "--fail-regex",
        dest="fail_regex",
        nargs="+",
        default=None,
        help="Regex(es) over the check's stdout+stderr; a match counts as a failure.",
    )
    _add_shown_output_args(group)
    group.add_argument(
        "--check-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="[onnx-reducer] Kill a check after this many seconds; a timeout is its own verdict.",
    )
    group.add_argument(
        "--check-memory-limit",
        type=_memory_size,
        default=None,
        metavar="SIZE",
        help="[onnx-reducer] Kill a check whose processes together use more resident memory than this "
        "(e.g. 2GiB, 512MB); the verdict is a crash with signature memory-limit. Linux only.",
    )
    pinning = group.add_mutually_exclusive_group()
    pinning.add_argument(
        "--pin-signature",
        dest="pin_signature",
        type=Pinning,
        choices=list(Pinning),
        default=Pinning.KIND,
        help="[onnx-reducer] Which failures of a candidate count as the original's. 'kind' (default): "
        "Polygraphy's verdicts (any listed --fail-regex or --fail-code, any exit code), except that a "
        "crash by signal, a timeout or a memory-limit kill never stands in for a failure that exited "
        "with a code, or the reverse. 'strict': the same signature exactly (the same matched "
        "expression, exit code or signal). 'off': the same as --any-failure.",
    )
    pinning.add_argument(
        "--any-failure",
        dest="pin_signature",
        action="store_const",
        const=Pinning.OFF,
        help="[onnx-reducer] Count any failure or crash (Polygraphy's behaviour), also one of another "
        "kind than the original's; a timeout or a memory-limit kill still counts only when the "
        "original ended that way. Short for --pin-signature off.",
    )


def _add_spec_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Declarative checks [onnx-reducer]")
    group.add_argument(
        "--check-spec",
        default=None,
        metavar="SPEC",
        help="A YAML/JSON check spec (kind: compare | golden | error | op-present | command; see "
        "docs/check-specs.md). Runs each check isolated in a child process. Instead of --check.",
    )
    group.add_argument(
        "--golden",
        default=None,
        metavar="GOLDEN",
        help="Golden values (`onnx-reducer golden`, or Polygraphy JSON): every candidate's boundary inputs "
        "come from here, so a subgraph sees the values it saw inside the full model.",
    )
    group.add_argument(
        "--no-localize",
        dest="localize",
        action="store_false",
        help="For compare/golden specs, skip the layerwise localisation (first tensor beyond tolerance) and "
        "reduce straight away.",
    )


def _add_golden_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="The ONNX model.")
    parser.add_argument("-o", "--output", required=True, help="Where to write the golden values.")
    _add_load_inputs_arg(
        parser,
        "Input values (Polygraphy JSON or .npz); several files are several samples, in order, and each "
        "sample in them is one golden sample.",
    )
    parser.add_argument("--seed", type=int, default=1, help="Seed for generated inputs (sample i uses seed+i).")
    parser.add_argument("--samples", type=int, default=1, help="Number of generated input samples (default 1).")
    parser.add_argument(
        "--input-range",
        nargs=2,
        type=float,
        default=(0.0, 1.0),
        metavar=("LOW", "HIGH"),
        help="Range of generated inputs (default 0 1, as Polygraphy).",
    )
    parser.add_argument(
        "--chunk-mb",
        type=float,
        default=256.0,
        help="Mark at most this many MB of tensors as outputs per run, so memory never holds them all.",
    )
    parser.add_argument("--external-data-dir", default=None, help="Folder holding the model's external data.")


def _add_reduce_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="The ONNX model to reduce.")
    parser.add_argument("-o", "--output", default=None, help="Where to write the minimal failing model.")
    parser.add_argument(
        "--min-good",
        "--minimal-good",
        dest="min_good",
        default=None,
        help="Where to write the passing model closest in size to the minimal failing one.",
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        default=JobOptions.mode,
        help="bisect: O(log N), Polygraphy's outputs-then-inputs search. linear: one node at a "
        "time. minimize: delta debugging, ends 1-minimal. auto (default): optimistic descent, "
        "then minimize; fewest checks for the smallest result.",
    )
    confirm = parser.add_mutually_exclusive_group()
    confirm.add_argument(
        "--confirm-flaky",
        dest="confirm_flaky",
        action="store_true",
        default=None,
        help="The default (but with interactive verdicts): an answer of 2-3 nodes gets up to 3 re-checks "
        "of the candidates inside it that passed once (a flaky single culprit whose one-node candidate "
        "happened to pass shows no other inconsistency); one-node answers and larger ones pay nothing. "
        "[onnx-reducer]",
    )
    confirm.add_argument(
        "--no-confirm-flaky",
        dest="confirm_flaky",
        action="store_false",
        help="Take a 2-3-node answer as it is: no re-checks unless verdicts were inconsistent (then "
        "they are re-checked anyway). Saves up to 3 checks with a check known to be deterministic. "
        "[onnx-reducer]",
    )
    parser.add_argument(
        "--no-reduce-bodies",
        dest="reduce_bodies",
        action="store_false",
        help="Keep the bodies of Loop and If nodes whole, as Polygraphy does (by default they are "
        "reduced too once the outer graph is minimal). [onnx-reducer]",
    )
    data = parser.add_mutually_exclusive_group()
    data.add_argument(
        "--reduce-data",
        dest="reduce_data",
        action="store_true",
        default=JobOptions.reduce_data,
        help="Once the graph is minimal, shrink the min-bad model's input sizes (batch, sequence...) "
        "and then its weights to the smallest that still fail the same way; each step costs a check "
        "(about 2*log2(size) at most per size). Sizes given with --model-input-shapes and the inputs "
        "of --load-inputs, golden values or samples are kept; op-present checks skip it. [onnx-reducer]",
    )
    data.add_argument(
        "--no-reduce-data",
        dest="reduce_data",
        action="store_false",
        help="Keep the min-bad model's input sizes and weights (the default). [onnx-reducer]",
    )
    passes = parser.add_mutually_exclusive_group()
    passes.add_argument(
        "--no-reduce-inputs",
        dest="reduce_inputs",
        action="store_false",
        help="Keep the model's inputs: only remove nodes from the end.",
    )
    passes.add_argument(
        "--no-reduce-outputs",
        dest="reduce_outputs",
        action="store_false",
        help="Keep the model's outputs: only remove nodes from the start.",
    )
    it = parser.add_argument_group("Iterations")
    it.add_argument(
        "--iter-artifact",
        "--intermediate-artifact",
        dest="iter_artifact",
        default="polygraphy_debug.onnx",
        help="Where each iteration's model is written (the check reads it).",
    )
    it.add_argument(
        "--no-remove-intermediate",
        dest="remove_intermediate",
        action="store_false",
        help="Keep the iteration model after the reduction ends.",
    )
    it.add_argument(
        "--iter-info",
        "--iteration-info",
        dest="iteration_info",
        default=None,
        help="JSON file rewritten each iteration with the iteration number and candidate size.",
    )
    it.add_argument(
        "--artifacts",
        nargs="+",
        default=None,
        help="Files to sort into good/ and bad/ after each check (the iteration model is copied, "
        "other files are moved); the iteration number goes into the name.",
    )
    it.add_argument(
        "--art-dir",
        "--artifacts-dir",
        dest="artifacts_dir",
        default="polygraphy_artifacts",
        help="Folder holding good/ and bad/ (default: polygraphy_artifacts).",
    )
    _add_parallel_args(parser)
    _add_debug_replay_args(it, "onnx_reducer_debug_replay.json")
    shapes = parser.add_argument_group("Shapes and data")
    _add_input_shapes_arg(shapes, "--model-inputs")
    shapes.add_argument(
        "--no-shape-inference",
        dest="shape_inference",
        action="store_false",
        help="Do not run ONNX shape inference.",
    )
    shapes.add_argument(
        "--force-fallback-shape-inference",
        action="store_true",
        help="Take intermediate shapes from an onnxruntime run instead of ONNX shape inference.",
    )
    _add_load_inputs_arg(
        shapes,
        "Input samples (Polygraphy JSON or .npz; several files are several samples, in order). A "
        "--check-spec of kind compare, golden or error judges every sample (its fail_if decides); the first "
        "sample also feeds fallback inference and the values of removed branches frozen to constants. Files "
        "of other tensors (Polygraphy layerwise outputs) add values to the samples.",
    )
    shapes.add_argument("--seed", type=int, default=1, help="Seed for generated inputs (fallback inference).")
    shapes.add_argument(
        "--external-data-dir",
        "--load-external-data",
        dest="external_data_dir",
        default=None,
        help="Folder holding the model's external data (default: the model's folder).",
    )
    shapes.add_argument(
        "--link-weights",
        action="store_true",
        help="[onnx-reducer] Hardlink weight files beside iteration models instead of copying them once "
        "(when the iteration model is not in the model's own folder). Saves disk on huge models, but "
        "onnx.load refuses hardlinked weights, so only use it with checks that do not call onnx.load.",
    )
    out = parser.add_argument_group("Output")
    _add_log_output_args(out)
    out.add_argument("--summary-json", default=None, help="[onnx-reducer] Write the final summary as JSON here.")
    out.add_argument(
        "--bundle",
        default=None,
        metavar="FILE.zip",
        help="[onnx-reducer] Write a bug-report bundle here: min_bad/min_good models, the inputs min-bad sees, "
        "the check, the environment and a repro.py that needs only onnx, onnxruntime and numpy.",
    )
    _add_polygraphy_compat_args(parser)
    _add_spec_args(parser)
    _add_check_args(parser)


def _add_parallel_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Parallel checks [onnx-reducer]")
    group.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="Run up to N checks at once (default 1, or one per --devices entry): the check the reduction "
        "waits for plus speculative ones it is likely to need next. Same answer as one at a time with a "
        "deterministic check. Each slot writes its iteration artifact into its own folder and runs a --check "
        "command there: a mirror of the working folder at the same path under onnx_reducer_slots/slotI/ (links "
        "to the entries of each folder on the way, copies of small files), so relative paths ('..' too), "
        "absolute paths and the environment mean what they mean with --jobs 1.",
    )
    group.add_argument(
        "--devices",
        default=None,
        metavar="LIST",
        help="Comma-separated GPUs, one per slot: slot I's check runs with CUDA_VISIBLE_DEVICES set to the "
        "I-th entry (e.g. --devices 0,1,2,3; repeat one to share it: 0,0,1,1). Without --jobs, one slot per entry.",
    )


def _add_polygraphy_compat_args(parser: argparse.ArgumentParser) -> None:
    """The rest of `polygraphy debug reduce`'s options, with its spelling and meaning, so that
    switching tools means changing only the command name."""
    log = parser.add_argument_group("Logging (Polygraphy-compatible)")
    log.add_argument("--silent", action="store_true", help="Disable all output.")
    log.add_argument(
        "--verbosity",
        nargs="+",
        default=None,
        help="Polygraphy verbosity names (e.g. INFO, VERBOSE, WARNING); per-path values are "
        "accepted and the last name decides.",
    )
    log.add_argument(
        "--log-format",
        nargs="+",
        choices=["timestamp", "line-info", "no-colors"],
        default=[],
        help="'timestamp' prefixes log lines with the time; the others are accepted (no colors "
        "are used, line info is not recorded).",
    )
    log.add_argument("--log-file", default=None, help="Also write the log to this file.")
    save = parser.add_argument_group("Saving the reduced models (Polygraphy-compatible)")
    save.add_argument(
        "--save-external-data",
        "--external-data-path",
        dest="save_external_data",
        nargs="?",
        const="",
        default=None,
        metavar="EXTERNAL_DATA_PATH",
        help="Save the weights of -o/--min-good models in external file(s) beside them (default name: <model>.data).",
    )
    save.add_argument(
        "--external-data-size-threshold",
        default=None,
        help="Tensors at least this big (bytes, or with a K/M/G suffix) go to the external file.",
    )
    save.add_argument(
        "--no-save-all-tensors-to-one-file",
        dest="all_tensors_to_one_file",
        action="store_false",
        help="With --save-external-data, one file per tensor.",
    )
    load = parser.add_argument_group("Loading (Polygraphy-compatible)")
    load.add_argument(
        "--ignore-external-data",
        action="store_true",
        help="Load only the model's structure, without its weights: iteration models reference "
        "weight files that are not there (for checks that need no weights).",
    )
    load.add_argument(
        "--fp-to-fp16",
        action="store_true",
        help="Convert the model's floating-point tensors to fp16 before reducing (onnxconverter-common).",
    )
    load.add_argument(
        "--no-onnxruntime-shape-inference",
        action="store_true",
        help="Accepted; onnx-reducer always uses onnx.shape_inference (or fallback inference).",
    )
    data = parser.add_argument_group("Data loader, for fallback inference and frozen branches (Polygraphy-compatible)")
    data.add_argument(
        "--val-range",
        nargs="+",
        default=[],
        help="Range of generated values: [min,max] for every input, NAME:[min,max] for one.",
    )
    data.add_argument(
        "--iterations", "--iters", type=int, default=1, help="Accepted; fallback inference uses the first sample."
    )
    data.add_argument(
        "--data-loader-backend-module",
        choices=["numpy", "torch"],
        default="numpy",
        help="Accepted; inputs are generated with numpy.",
    )
    data.add_argument(
        "--data-loader-script",
        default=None,
        help="SCRIPT.py[:FUNC] defining a function (default load_data) that yields "
        "Dict[str, np.ndarray]; its first feed dict is used.",
    )


def _add_precision_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="The ONNX model (fp32) whose fp16 conversion fails the check.")
    parser.add_argument("-o", "--output", required=True, help="Where to write the mixed-precision model.")
    parser.add_argument(
        "--check-spec",
        required=True,
        metavar="SPEC",
        help="A check spec that runs the model in fp16 on onnxruntime and fails on the fp16 model, e.g. kind "
        "compare with target {runtime: onnxruntime, precision: fp16} (see docs/check-specs.md).",
    )
    parser.add_argument("--golden", default=None, metavar="GOLDEN", help="Golden values feeding the spec's check.")
    _add_load_inputs_arg(
        parser,
        "Input samples for the spec's check (Polygraphy JSON or .npz; several files are several samples, "
        "in order): every sample is judged and the spec's fail_if decides. Instead of --golden.",
        metavar="FILE",
    )
    parser.add_argument(
        "--summary-json", default=None, help="Write the summary (keep_fp32: the node names, and every check) here."
    )
    parser.add_argument(
        "--io-types",
        choices=("fp32", "fp16"),
        default="fp32",
        help="The type of the mixed model's float inputs and outputs (default fp32, as the original's).",
    )
    parser.add_argument(
        "--allow-nonfinite",
        action="store_true",
        help="Keep the search's answer even where fp16 tensors of the mixed model hold inf (e.g. a GELU's Div "
        "reading an overflowed value: right on a CPU since erf(inf) = 1, NaN in a fused GPU kernel); the "
        "summary names those tensors. Default: more nodes stay fp32 until no fp16 tensor holds inf.",
    )
    parser.add_argument(
        "--mode", choices=MODES, default="auto", help="The search over the nodes kept in fp32 (reduce's modes)."
    )
    parser.add_argument(
        "--iter-artifact",
        dest="iter_artifact",
        default="polygraphy_debug.onnx",
        help="Where each iteration's model is written: the real mixed-precision model of the candidate "
        "(fp16 but for the nodes it keeps in fp32), the file the check judges.",
    )
    parser.add_argument(
        "--no-remove-intermediate",
        dest="remove_intermediate",
        action="store_false",
        help="Keep the iteration model after the search ends.",
    )
    _add_debug_replay_args(parser, "onnx_reducer_precision_replay.json")
    parser.add_argument("--check-timeout", type=float, default=None, metavar="SECONDS", help="Kill a check after this.")
    parser.add_argument(
        "--check-memory-limit", type=_memory_size, default=None, metavar="SIZE", help="Kill a check above this RSS."
    )
    _add_input_shapes_arg(parser)
    parser.add_argument("--external-data-dir", default=None, help="Folder holding the model's external data.")
    _add_log_output_args(parser)
    _add_shown_output_args(parser)
    parser.set_defaults(  # what `reduce`'s shared code reads and `precision` does not offer
        check=None,
        fail_codes=None,
        ignore_fail_codes=None,
        fail_regex=None,
        pin_signature=Pinning.KIND,
        localize=False,
        min_good=None,
        reduce_inputs=True,
        reduce_outputs=True,
        iteration_info=None,
        artifacts=None,
        artifacts_dir="polygraphy_artifacts",
        shape_inference=True,
        force_fallback_shape_inference=False,
        seed=1,
        link_weights=False,
        silent=False,
        verbosity=None,
        log_format=[],
        log_file=None,
        save_external_data=None,
        external_data_size_threshold=None,
        all_tensors_to_one_file=True,
        ignore_external_data=False,
        fp_to_fp16=False,
        val_range=[],
        data_loader_script=None,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="onnx-reducer",
        description="Reduce a failing ONNX model to the smallest subgraph that still fails.",
    )
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    reduce = sub.add_parser(
        "reduce",
        help="Reduce a failing model (the options of `polygraphy debug reduce`).",
        description="Reduce a failing model to a minimal failing subgraph. Options and defaults follow "
        "`polygraphy debug reduce`, so switching tools means changing only the command name.",
        epilog=phase_legend(),
    )
    _add_reduce_args(reduce)
    golden = sub.add_parser(
        "golden",
        help="Store a model's inputs and every intermediate tensor (onnxruntime CPU) for --golden.",
        description="Run the model on onnxruntime CPU with every tensor marked as an output and store the "
        "inputs plus every tensor's value, sample by sample, in one file (written as it goes).",
    )
    _add_golden_args(golden)
    precision = sub.add_parser(
        "precision",
        help="Find the fewest nodes that must stay fp32 for the fp16 model to pass a check spec.",
        description="Search the smallest set of nodes that must stay fp32 (the rest converted to fp16 by "
        "onnxconverter-common) for the model to pass the check spec; write that mixed-precision model and "
        "print the node names.",
        epilog=phase_legend(),
    )
    _add_precision_args(precision)
    inspect = sub.add_parser("inspect", help="Print a model's inputs, outputs and nodes ('Op: <OpType>').")
    inspect.add_argument("model")
    inspect.add_argument("--mode", default="basic", help="Accepted for Polygraphy compatibility.")
    inspect.add_argument("--external-data-dir", default=None)
    add_release_parser(sub)
    add_passes_parser(sub)
    add_service_parsers(sub)
    add_client_parsers(sub)
    return parser
