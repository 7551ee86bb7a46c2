"""Declarative check specs: the YAML/JSON document the command line (``--check-spec``) and the
service accept. See ``docs/check-specs.md`` for the schema with examples.

    kind: compare                                   # compare | golden | error | op-present | command
    reference: {runtime: onnxruntime}               # compare only
    target: {runtime: onnxruntime, precision: fp16} # compare, golden, error
    tolerance: {atol: 0.001, rtol: 0.001}           # compare, golden
    timeout: 600                                    # seconds per check run (every kind)
    memory_limit: 2GiB                              # resident memory of a check run (every kind)
    repeat: 1                                       # runs per check (every kind)
    fail_if: any                                    # any | all | majority of the runs
    requires: {gpu: H100, onnxruntime: ">=1.20"}    # what a service worker must offer (every kind)

``parse_check_spec`` validates the document and raises ``CheckSpecError`` naming the offending
field (``tolerance.atol: must be a number >= 0, got 'abc'``). ``build_check`` turns a spec into a
``ModelCheck`` whose ``run(model_path)`` runs isolated in a child process.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
import reprlib
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import regex
import yaml

from checks.memory import parse_size
from checks.requirements import RequirementError, Requirements, parse_requirements
from reducer_core.errors import UsageError

if TYPE_CHECKING:
    from reducer_core.verdict import Verdict

KINDS = ("compare", "golden", "error", "op-present", "command")
INTERACTIVE_KIND = "interactive"  # the service only: verdicts from a person on the job's page
FAIL_IF = ("any", "all", "majority")
RUNTIMES = ("onnxruntime", "tensorrt")
PRECISIONS = ("fp32", "fp16", "bf16", "int8")
ORT_PRECISIONS = ("fp32", "fp16")
OPTIMIZATIONS = ("all", "extended", "basic", "none")
# What a TensorRT build may be told to leave out: builder flags, then tactic sources (TensorRT's names)
TRT_BUILDER_FLAGS = ("TF32", "FP16")
TRT_TACTIC_SOURCES = ("CUBLAS", "CUBLAS_LT", "CUDNN", "EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")
TRT_BUILD_OPTIONS = (*TRT_BUILDER_FLAGS, *TRT_TACTIC_SOURCES)
DEFAULT_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week; the service also holds timeout x repeat to its job time limit
MAX_REPEAT = 100
MAX_INTEGER_DIGITS = 64  # no field takes a longer number; Python converts none over 4,300 digits
_INT_TAG = "tag:yaml.org,2002:int"
MAX_NESTING = 32  # mappings/lists inside each other; a spec needs about 4
GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider", "ROCMExecutionProvider")


class CheckSpecError(UsageError):
    """A check spec is invalid; the message names the field (``tolerance.atol: ...``)."""


class ModelCheck(Protocol):
    """A check of one model file. ``run`` never raises for problems of the model: a runtime error
    is a ``fail`` (error kind) or ``crash``, a hang a ``timeout``, a broken tool ``infra-error``."""

    @property
    def identity(self) -> str: ...

    def run(self, model_path: Path) -> tuple[Verdict, str]: ...


# ---------------------------------------------------------------------------------------------
# spec dataclasses


@dataclass(frozen=True)
class RuntimeSpec:
    """Where a model runs. onnxruntime: ``provider`` (default CPUExecutionProvider),
    ``optimization`` (graph optimisation level), ``precision`` fp32|fp16 (fp16: converted with
    onnxconverter-common, inputs/outputs kept fp32). tensorrt: ``precision`` fp32|fp16|bf16|int8."""

    runtime: str = "onnxruntime"
    precision: str = "fp32"
    optimization: str = "all"
    provider: str | None = None
    # onnxruntime: graph optimizers (transformers or rules) left out, InferenceSession's
    # ``disabled_optimizers``; tensorrt: builder flags / tactic sources turned off (TRT_BUILD_OPTIONS)
    disabled_optimizers: tuple[str, ...] = ()
    disabled_build_options: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"runtime": self.runtime, "precision": self.precision}
        if self.runtime == "onnxruntime":
            data["optimization"] = self.optimization
            if self.provider is not None:
                data["provider"] = self.provider
            if self.disabled_optimizers:
                data["disabled_optimizers"] = list(self.disabled_optimizers)
        elif self.disabled_build_options:
            data["disabled_build_options"] = list(self.disabled_build_options)
        return data

    @property
    def needs_gpu(self) -> bool:
        return self.runtime == "tensorrt" or (self.provider or "") in GPU_PROVIDERS

    @property
    def label(self) -> str:
        parts = [self.runtime, self.precision]
        if self.runtime == "onnxruntime":
            parts += [self.provider or "CPUExecutionProvider", f"opt={self.optimization}"]
            if self.disabled_optimizers:
                parts.append("without=" + ",".join(self.disabled_optimizers))
        elif self.disabled_build_options:
            parts.append("without=" + ",".join(self.disabled_build_options))
        return "/".join(parts)


@dataclass(frozen=True)
class Tolerance:
    """A value ``t`` (target) mismatches its reference ``r`` when ``|t - r| > atol`` and
    ``|t - r| > rtol * |r|`` (Polygraphy's elementwise rule), or when their finiteness differs."""

    atol: float = 1e-5
    rtol: float = 1e-5
    per_output: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def for_output(self, name: str) -> tuple[float, float]:
        return self.per_output.get(name, (self.atol, self.rtol))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"atol": self.atol, "rtol": self.rtol}
        if self.per_output:
            data["per_output"] = {k: {"atol": a, "rtol": r} for k, (a, r) in sorted(self.per_output.items())}
        return data


@dataclass(frozen=True)
class CheckSpec:
    """One validated check. Fields not used by ``kind`` keep their defaults and are left out of
    ``to_json`` (and so out of ``identity``)."""

    kind: str
    timeout: float = DEFAULT_TIMEOUT_S
    repeat: int = 1
    fail_if: str = "any"
    memory_limit: int | None = None  # bytes; None: no limit (the service applies its own)
    reference: RuntimeSpec | None = None
    target: RuntimeSpec | None = None
    tolerance: Tolerance | None = None
    seed: int = 1
    input_range: tuple[float, float] = (0.0, 1.0)
    match: str | None = None
    ops: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    fail_codes: tuple[int, ...] = ()
    ignore_fail_codes: tuple[int, ...] = ()
    fail_regex: tuple[str, ...] = ()
    requires: Requirements = field(default_factory=Requirements)

    def to_json(self) -> dict[str, Any]:
        """The normalised document (defaults filled in); ``parse_check_spec`` reads it back."""
        data: dict[str, Any] = {
            "kind": self.kind,
            "timeout": self.timeout,
            "repeat": self.repeat,
            "fail_if": self.fail_if,
        }
        if self.memory_limit is not None:
            data["memory_limit"] = self.memory_limit
        if self.reference is not None:
            data["reference"] = self.reference.to_json()
        if self.target is not None:
            data["target"] = self.target.to_json()
        if self.tolerance is not None:
            data["tolerance"] = self.tolerance.to_json()
        if self.kind in ("compare", "golden", "error"):
            data["seed"] = self.seed
            data["input_range"] = list(self.input_range)
        if self.kind == "error" and self.match is not None:
            data["match"] = self.match
        if self.kind == "op-present":  # target: the ops are looked for in what onnxruntime optimized
            data["ops"] = list(self.ops)
            data["names"] = list(self.names)
        if self.kind == "command":
            data["command"] = list(self.command)
            data["fail_codes"] = list(self.fail_codes)
            data["ignore_fail_codes"] = list(self.ignore_fail_codes)
            data["fail_regex"] = list(self.fail_regex)
        if self.requires:
            data["requires"] = self.requires.to_json()
        return data

    @property
    def identity(self) -> str:
        """Stable text naming what this check does (the verdict cache key includes it). ``requires``
        is left out: it says where the check may run, not what it checks."""
        document = {k: v for k, v in self.to_json().items() if k != "requires"}
        return "spec:" + json.dumps(document, sort_keys=True, separators=(",", ":"))

    @property
    def needs_gpu(self) -> bool:
        runtimes = any(r is not None and r.needs_gpu for r in (self.reference, self.target))
        return runtimes or self.requires.needs_gpu

    @property
    def is_accuracy(self) -> bool:
        """compare/golden: kinds whose failure can be localised layer by layer."""
        return self.kind in ("compare", "golden")


# ---------------------------------------------------------------------------------------------
# parsing and validation


class _SpecLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` without aliases (``*name``: a few bytes of nested aliases expand to
    gigabytes, "billion laughs") and with at most ``MAX_NESTING`` levels (deeper documents would
    exhaust the recursion limit)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def construct_document(self, node: yaml.Node) -> Any:
        _bound_integers(node, "")
        return super().construct_document(node)

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            raise CheckSpecError("check spec: YAML aliases (*name) are not accepted; write the values out in full")
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise CheckSpecError(f"check spec: nested more than {MAX_NESTING} levels deep; a check spec needs a few")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _bound_integers(node: yaml.Node, where: str) -> None:
    """Every integer of the document at most ``MAX_INTEGER_DIGITS`` long, before it is converted
    (Python refuses to convert one of over 4,300 digits with a ValueError); ``where``: its field."""
    if isinstance(node, yaml.ScalarNode):
        if node.tag == _INT_TAG and len(str(node.value)) > MAX_INTEGER_DIGITS:
            raise CheckSpecError(
                f"{where or 'check spec'}: an integer of {len(str(node.value))} characters; a check spec's "
                f"numbers have at most {MAX_INTEGER_DIGITS} digits"
            )
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _bound_integers(item, where)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            name = _clip(str(key.value), 50) if isinstance(key, yaml.ScalarNode) else "?"
            _bound_integers(key, where or "check spec")
            _bound_integers(value, f"{where}.{name}" if where else name)


def parse_check_spec(text: str) -> CheckSpec:
    """Parse and validate a YAML or JSON check spec (JSON is YAML). Raises ``CheckSpecError``."""
    return check_spec_from_dict(_load_document(text))


def _load_document(text: str) -> Any:
    try:
        loader = _SpecLoader(text)  # the reader refuses NUL and other control characters here
    except yaml.YAMLError as exc:
        raise CheckSpecError(f"check spec: not valid YAML/JSON: {_clip(str(exc), 300)}") from exc
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise CheckSpecError(f"check spec: not valid YAML/JSON: {_clip(str(exc), 300)}") from exc
    except RecursionError as exc:
        raise CheckSpecError(f"check spec: nested too deeply (at most {MAX_NESTING} levels)") from exc
    finally:
        loader.dispose()


def parse_service_spec(text: str) -> CheckSpec | None:
    """A spec the service accepts, its text read once (the service parses it at intake only and
    stores ``to_json``): None for ``kind: interactive`` (``is_interactive_spec``). Raises
    ``CheckSpecError``."""
    document = _load_document(text)
    if _interactive_document(document):
        return None
    return check_spec_from_dict(document)


def is_interactive_spec(text: str) -> bool:
    """Whether ``text`` is the service's ``kind: interactive`` (a person gives every verdict on the
    job's page; no other field). Raises ``CheckSpecError`` for an interactive spec with more fields;
    any other text is for ``parse_check_spec``."""
    try:
        document = _load_document(text)
    except CheckSpecError:
        return False
    return _interactive_document(document)


def _interactive_document(document: Any) -> bool:
    if not isinstance(document, Mapping) or document.get("kind") != INTERACTIVE_KIND:
        return False
    extra = sorted(str(k) for k in document if k != "kind")
    if extra:
        raise CheckSpecError(
            f"{extra[0]}: kind 'interactive' takes no other field (a person answers every check on the job's page)"
        )
    return True


@functools.lru_cache(maxsize=1024)
def requirements_of(text: str) -> Requirements:
    """The ``requires`` of a stored spec; none when the spec is invalid (running it reports that)."""
    try:
        return parse_check_spec(text).requires
    except CheckSpecError:
        return Requirements()


def load_check_spec(path: str | Path) -> CheckSpec:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CheckSpecError(f"--check-spec: cannot read '{path}': {exc}") from exc
    return parse_check_spec(text)


_COMMON = {"kind", "timeout", "repeat", "fail_if", "memory_limit", "requires"}
_ALLOWED: dict[str, set[str]] = {
    "compare": _COMMON | {"reference", "target", "tolerance", "seed", "input_range"},
    "golden": _COMMON | {"target", "tolerance", "seed", "input_range"},
    "error": _COMMON | {"target", "match", "seed", "input_range"},
    "op-present": _COMMON | {"ops", "names", "target"},
    "command": _COMMON | {"command", "fail_codes", "ignore_fail_codes", "fail_regex"},
}


# The kinds a spec may name: the five above everywhere, and the service's form of interactive mode.
_ALL_KINDS = (*KINDS, INTERACTIVE_KIND)
_KIND_LIST = f"{', '.join(KINDS)}, or {INTERACTIVE_KIND} (the service: a person judges each model)"


def _did_you_mean(name: str, choices: Sequence[str]) -> str:
    """ "; did you mean 'ops'?" for a near miss, else ""."""
    close = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def _unknown_field(path: str, allowed: Sequence[str] | set[str] | frozenset[str], scope: str = "") -> CheckSpecError:
    """``path`` (e.g. ``target.precison``) is no field here: name the nearest allowed one and list them."""
    name = path.rsplit(".", 1)[-1]
    listed = ", ".join(sorted(allowed))
    return CheckSpecError(f"{path}: unknown field{scope}{_did_you_mean(name, sorted(allowed))} (allowed: {listed})")


def check_spec_from_dict(document: Any) -> CheckSpec:
    """Validate an already-decoded document (what the service receives as JSON)."""
    if not isinstance(document, Mapping):
        raise CheckSpecError(f"check spec: must be a mapping with a 'kind' field, got {_show(document)}")
    kind = document.get("kind")
    if kind is None:
        raise CheckSpecError(f"kind: required; one of {_KIND_LIST}")
    if kind == INTERACTIVE_KIND:
        raise CheckSpecError(
            "kind: 'interactive' is the service's (a person judges each model on the job's page); on the "
            "command line leave out --check and --check-spec to answer each check yourself"
        )
    if kind not in KINDS:
        raise CheckSpecError(f"kind: must be one of {_KIND_LIST}, got {_show(kind)}{_did_you_mean(kind, _ALL_KINDS)}")
    unknown = sorted(str(k) for k in document if k not in _ALLOWED[kind])
    if unknown:
        raise _unknown_field(unknown[0], _ALLOWED[kind], f" for kind '{kind}'")
    common: dict[str, Any] = {
        "kind": kind,
        "timeout": _number(document, "timeout", DEFAULT_TIMEOUT_S, positive=True, maximum=MAX_TIMEOUT_S),
        "repeat": _integer(document, "repeat", 1, minimum=1, maximum=MAX_REPEAT),
        "fail_if": _choice(document, "fail_if", FAIL_IF, "any"),
        "memory_limit": _size(document, "memory_limit"),
        "requires": _requires(document),
    }
    return CheckSpec(**common, **_KIND_PARSERS[kind](document))


def _requires(doc: Mapping[str, Any]) -> Requirements:
    if "requires" not in doc:
        return Requirements()
    try:
        return parse_requirements(doc["requires"])
    except RequirementError as exc:
        raise CheckSpecError(str(exc)) from exc


def _parse_compare(doc: Mapping[str, Any]) -> dict[str, Any]:
    if "target" not in doc:
        raise CheckSpecError("target: required for kind 'compare', e.g. {runtime: onnxruntime, precision: fp16}")
    return {
        "reference": _runtime(doc.get("reference", {}), "reference"),
        "target": _runtime(doc["target"], "target"),
        "tolerance": _tolerance(doc.get("tolerance", {})),
        **_inputs(doc),
    }


def _parse_golden(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "target": _runtime(doc.get("target", {}), "target"),
        "tolerance": _tolerance(doc.get("tolerance", {})),
        **_inputs(doc),
    }


def _parse_error(doc: Mapping[str, Any]) -> dict[str, Any]:
    match = doc.get("match")
    if match is not None:
        if not isinstance(match, str) or not match:
            raise CheckSpecError(f"match: must be a non-empty regular expression, got {_show(match)}")
        _compile(match, "match")
    return {"target": _runtime(doc.get("target", {}), "target"), "match": match, **_inputs(doc)}


def _parse_op_present(doc: Mapping[str, Any]) -> dict[str, Any]:
    ops = _strings(doc, "ops")
    names = _strings(doc, "names")
    if not ops and not names:
        raise CheckSpecError("ops: give at least one op type (ops: [Mul]) or node name (names: [...])")
    if "target" not in doc:
        return {"ops": ops, "names": names}
    target = _runtime(doc["target"], "target")
    if target.runtime != "onnxruntime":
        raise CheckSpecError(
            "target.runtime: op-present looks into the model onnxruntime optimized (optimized_model_filepath); "
            "only runtime onnxruntime saves one"
        )
    return {"ops": ops, "names": names, "target": target}


def _parse_command(doc: Mapping[str, Any]) -> dict[str, Any]:
    raw = doc.get("command")
    if isinstance(raw, str):
        command = tuple(shlex.split(raw))
    elif isinstance(raw, list) and all(isinstance(p, str | int | float) for p in raw):
        command = tuple(str(p) for p in raw)
    else:
        raise CheckSpecError(f"command: must be a string or a list of strings, got {_show(raw)}")
    if not command:
        raise CheckSpecError("command: must not be empty")
    codes = _integers(doc, "fail_codes")
    ignored = _integers(doc, "ignore_fail_codes")
    if codes and ignored:
        raise CheckSpecError("ignore_fail_codes: cannot be combined with fail_codes (as in Polygraphy)")
    regexes = _strings(doc, "fail_regex")
    for i, pattern in enumerate(regexes):
        _compile(pattern, f"fail_regex[{i}]")
    return {"command": command, "fail_codes": codes, "ignore_fail_codes": ignored, "fail_regex": regexes}


_KIND_PARSERS = {
    "compare": _parse_compare,
    "golden": _parse_golden,
    "error": _parse_error,
    "op-present": _parse_op_present,
    "command": _parse_command,
}


def _runtime(value: Any, where: str) -> RuntimeSpec:
    if not isinstance(value, Mapping):
        raise CheckSpecError(f"{where}: must be a mapping like {{runtime: onnxruntime}}, got {_show(value)}")
    allowed = {"runtime", "precision", "optimization", "provider", "disabled_optimizers", "disabled_build_options"}
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise _unknown_field(f"{where}.{unknown[0]}", allowed)
    runtime = _choice(value, "runtime", RUNTIMES, "onnxruntime", where)
    precisions = ORT_PRECISIONS if runtime == "onnxruntime" else PRECISIONS
    precision = _choice(value, "precision", precisions, "fp32", where)
    if runtime == "tensorrt":
        for key in ("optimization", "provider", "disabled_optimizers"):
            if key in value:
                raise CheckSpecError(f"{where}.{key}: only for runtime onnxruntime")
        return RuntimeSpec(runtime, precision, disabled_build_options=_build_options(value, where))
    if "disabled_build_options" in value:
        raise CheckSpecError(
            f"{where}.disabled_build_options: only for runtime tensorrt (onnxruntime: disabled_optimizers)"
        )
    optimization = _choice(value, "optimization", OPTIMIZATIONS, "all", where)
    provider = value.get("provider")
    if provider is not None and (not isinstance(provider, str) or not provider.endswith("ExecutionProvider")):
        raise CheckSpecError(
            f"{where}.provider: must name an onnxruntime execution provider such as "
            f"'CUDAExecutionProvider', got {_show(provider)}"
        )
    disabled = _strings(value, "disabled_optimizers", where)
    if any(not re.fullmatch(r"[A-Za-z][\w.]*", name) for name in disabled):
        raise CheckSpecError(
            f"{where}.disabled_optimizers: onnxruntime optimizer names are words like 'MatmulTransposeFusion' "
            f"or 'Level1_RuleBasedTransformer', got {_show(list(disabled))}"
        )
    return RuntimeSpec(runtime, precision, optimization, provider, tuple(sorted(set(disabled))))


def _build_options(value: Mapping[str, Any], where: str) -> tuple[str, ...]:
    options = _strings(value, "disabled_build_options", where)
    for name in options:
        if name not in TRT_BUILD_OPTIONS:
            raise CheckSpecError(
                f"{where}.disabled_build_options: must name TensorRT builder flags or tactic sources "
                f"({', '.join(TRT_BUILD_OPTIONS)}), got {_show(name)}{_did_you_mean(name, TRT_BUILD_OPTIONS)}"
            )
    return tuple(sorted(set(options)))


def _tolerance(value: Any) -> Tolerance:
    if not isinstance(value, Mapping):
        raise CheckSpecError(f"tolerance: must be a mapping like {{atol: 0.001, rtol: 0.001}}, got {_show(value)}")
    unknown = sorted(str(k) for k in value if k not in ("atol", "rtol", "per_output"))
    if unknown:
        raise _unknown_field(f"tolerance.{unknown[0]}", ("atol", "rtol", "per_output"))
    atol = _number(value, "atol", 1e-5, where="tolerance")
    rtol = _number(value, "rtol", 1e-5, where="tolerance")
    per_output_raw = value.get("per_output", {})
    if not isinstance(per_output_raw, Mapping):
        raise CheckSpecError(
            f"tolerance.per_output: must map output names to {{atol, rtol}}, got {_show(per_output_raw)}"
        )
    per_output: dict[str, tuple[float, float]] = {}
    for name, entry in per_output_raw.items():
        where = f"tolerance.per_output.{name}"
        if not isinstance(entry, Mapping):
            raise CheckSpecError(f"{where}: must be a mapping like {{atol: 0.01}}, got {_show(entry)}")
        unknown = sorted(str(k) for k in entry if k not in ("atol", "rtol"))
        if unknown:
            raise _unknown_field(f"{where}.{unknown[0]}", ("atol", "rtol"))
        per_output[str(name)] = (_number(entry, "atol", atol, where=where), _number(entry, "rtol", rtol, where=where))
    return Tolerance(atol, rtol, per_output)


def _inputs(doc: Mapping[str, Any]) -> dict[str, Any]:
    seed = _integer(doc, "seed", 1, minimum=0)
    raw = doc.get("input_range", [0.0, 1.0])
    ok = isinstance(raw, list) and len(raw) == 2 and all(_is_number(v) for v in raw)
    if not ok or float(raw[0]) >= float(raw[1]):
        raise CheckSpecError(f"input_range: must be [low, high] with low < high, got {_show(raw)}")
    return {"seed": seed, "input_range": (float(raw[0]), float(raw[1]))}


# --- scalar helpers ------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _path(where: str | None, key: str) -> str:
    return f"{where}.{key}" if where else key


def _number(
    doc: Mapping[str, Any],
    key: str,
    default: float,
    positive: bool = False,
    where: str | None = None,
    maximum: float | None = None,
) -> float:
    if key not in doc:
        return default
    value = doc[key]
    ok = _is_number(value) and (value > 0 if positive else value >= 0)
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise CheckSpecError(f"{_path(where, key)}: must be a number {bound}, got {_show(value)}")
    if maximum is not None and value > maximum:
        raise CheckSpecError(f"{_path(where, key)}: must be at most {maximum:g}, got {_show(value)}")
    return float(value)


def _integer(doc: Mapping[str, Any], key: str, default: int, minimum: int, maximum: int | None = None) -> int:
    if key not in doc:
        return default
    value = doc[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise CheckSpecError(f"{key}: must be an integer >= {minimum}, got {_show(value)}")
    if maximum is not None and value > maximum:
        raise CheckSpecError(f"{key}: must be at most {maximum}, got {_show(value)}")
    return value


def _size(doc: Mapping[str, Any], key: str) -> int | None:
    if key not in doc:
        return None
    try:
        return parse_size(doc[key])
    except ValueError as exc:
        raise CheckSpecError(f"{key}: {exc}") from exc


def _choice(doc: Mapping[str, Any], key: str, choices: Sequence[str], default: str, where: str | None = None) -> str:
    value = doc.get(key, default)
    if value not in choices:
        raise CheckSpecError(f"{_path(where, key)}: must be one of {', '.join(choices)}, got {_show(value)}")
    return str(value)


def _strings(doc: Mapping[str, Any], key: str, where: str | None = None) -> tuple[str, ...]:
    value = doc.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise CheckSpecError(f"{_path(where, key)}: must be a list of non-empty strings, got {_show(value)}")
    return tuple(value)


def _integers(doc: Mapping[str, Any], key: str) -> tuple[int, ...]:
    value = doc.get(key, [])
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise CheckSpecError(f"{key}: must be a list of integers, got {_show(value)}")
    return tuple(value)


def _compile(pattern: str, where: str) -> None:
    """Valid for both engines: ``re`` (``match``, in the check's child) and ``regex`` (``fail_regex``,
    matched as output streams, with a time limit)."""
    try:
        re.compile(pattern)
        regex.compile(pattern)
    except (re.error, regex.error) as exc:
        raise CheckSpecError(f"{where}: not a valid regular expression: {exc}") from exc


_SHOW = reprlib.Repr()
_SHOW.maxlevel, _SHOW.maxdict, _SHOW.maxlist, _SHOW.maxtuple = 2, 4, 4, 4
_SHOW.maxstring, _SHOW.maxother, _SHOW.maxlong = 60, 60, 40


def _show(value: Any) -> str:
    """A short repr of a user's value: bounded in depth, items and length (never the whole value)."""
    return _clip(_SHOW.repr(value), 80)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
