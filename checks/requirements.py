"""``requires:`` of a check spec: what a worker must offer to run the check (a GPU model, runtime
versions, an execution provider). Parsed and validated here; matched against a worker's
``checks.capabilities.Capabilities`` by ``checks.capabilities.unmet``.

    requires:
      gpu: H100                          # a GPU whose model name contains this (any case); a list: any of them
      onnxruntime: ">=1.20"              # a PEP 440 version specifier, or a version prefix: "1.20" = "==1.20.*"
      tensorrt: "10.*"                   # the same for TensorRT
      provider: CUDAExecutionProvider    # onnxruntime execution provider(s) the worker must have; a list: all
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

FIELDS = ("gpu", "onnxruntime", "tensorrt", "provider")
_GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider", "ROCMExecutionProvider")


class RequirementError(ValueError):
    """``requires`` is invalid; the message starts with the field (``requires.onnxruntime: ...``)."""


@dataclass(frozen=True)
class Requirements:
    gpu: tuple[str, ...] = ()  # any of these (substrings of the model name, any case)
    onnxruntime: str | None = None  # a normalised specifier set (``>=1.20``, ``==1.20.*``)
    tensorrt: str | None = None
    providers: tuple[str, ...] = ()  # all of these

    def __bool__(self) -> bool:
        return bool(self.gpu or self.onnxruntime or self.tensorrt or self.providers)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.gpu:
            data["gpu"] = list(self.gpu)
        if self.onnxruntime:
            data["onnxruntime"] = self.onnxruntime
        if self.tensorrt:
            data["tensorrt"] = self.tensorrt
        if self.providers:
            data["provider"] = list(self.providers)
        return data

    @property
    def needs_gpu(self) -> bool:
        """Only a GPU worker can serve it (the job goes to the ``gpu`` queue)."""
        return bool(self.gpu or self.tensorrt) or any(p in _GPU_PROVIDERS for p in self.providers)


def parse_requirements(value: Any) -> Requirements:
    if not isinstance(value, Mapping):
        shown = repr(value)[:60]
        raise RequirementError(f"requires: must be a mapping like {{gpu: H100, onnxruntime: '>=1.20'}}, got {shown}")
    unknown = sorted(str(k) for k in value if k not in FIELDS)
    if unknown:
        raise RequirementError(f"requires.{unknown[0]}: unknown field (allowed: {', '.join(FIELDS)})")
    return Requirements(
        gpu=_names(value, "gpu"),
        onnxruntime=_version_spec(value, "onnxruntime"),
        tensorrt=_version_spec(value, "tensorrt"),
        providers=_providers(value),
    )


def version_matches(spec: str, version: str | None) -> bool:
    """``version`` (None: not installed) satisfies the normalised ``spec``."""
    if version is None:
        return False
    try:
        return SpecifierSet(spec).contains(Version(version), prereleases=True)
    except (InvalidVersion, InvalidSpecifier):
        return False


def _names(doc: Mapping[str, Any], key: str) -> tuple[str, ...]:
    if key not in doc:
        return ()
    value = doc[key]
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not values or not all(isinstance(v, str) and v.strip() for v in values):
        raise RequirementError(f"requires.{key}: must be a name or a non-empty list of names, e.g. H100")
    return tuple(v.strip() for v in values)


def _providers(doc: Mapping[str, Any]) -> tuple[str, ...]:
    names = _names(doc, "provider")
    for name in names:
        if not name.endswith("ExecutionProvider"):
            raise RequirementError(
                f"requires.provider: must name an onnxruntime execution provider such as "
                f"'CUDAExecutionProvider', got '{name[:80]}'"
            )
    return names


def _version_spec(doc: Mapping[str, Any], key: str) -> str | None:
    """A PEP 440 specifier set (``>=1.20,<2``), or a version prefix (``1.20``, ``10.*``)."""
    if key not in doc:
        return None
    raw = doc[key]
    if isinstance(raw, float):
        raise RequirementError(f"requires.{key}: quote the version: '{raw}' is a number in YAML (1.20 reads as 1.2)")
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = str(raw)
    if not isinstance(raw, str) or not raw.strip():
        raise RequirementError(f"requires.{key}: must be a version such as '>=1.20' or '10.*'")
    text = raw.strip().replace(" ", "")
    if text[0].isdigit():
        text = "==" + text.removesuffix(".*") + ".*"
    try:
        return str(SpecifierSet(text))
    except InvalidSpecifier:
        raise RequirementError(
            f"requires.{key}: '{raw[:80]}' is not a version specifier; write e.g. '>=1.20', '>=1.18,<2' or '10.*'"
        ) from None
