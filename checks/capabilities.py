"""What a worker can run a check on: its GPU models and runtime versions, advertised in the farm's
worker list and matched against a spec's ``requires`` (``checks.requirements``). ``runtime_envs``:
the onnxruntime releases of the other environments the operator gave it (``RUNTIME_ENVS``), which
meet a ``requires.onnxruntime`` as its own release does.

``detect_capabilities()`` runs ``python -m checks.capabilities`` in a child process, so that
onnxruntime (and TensorRT, when installed) are never imported into the worker itself; the child
prints the capabilities as JSON. GPUs are found with ``nvidia-smi`` (else ``pynvml``, else none);
an operator can name them instead (``WORKER_GPUS``) when detection cannot see them."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from checks.isolated import child_env
from checks.requirements import Requirements, version_matches

DETECT_TIMEOUT_S = 60.0
_ORT_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-openvino")


@dataclass(frozen=True)
class Capabilities:
    gpus: tuple[str, ...] = ()  # GPU model names, one per device ("NVIDIA H100 80GB HBM3")
    onnxruntime: str | None = None  # version
    providers: tuple[str, ...] = ()  # onnxruntime execution providers available
    tensorrt: str | None = None  # version
    runtime_envs: tuple[str, ...] = ()  # onnxruntime releases of other environments (RUNTIME_ENVS)

    def to_json(self) -> dict[str, Any]:
        return {
            "gpus": list(self.gpus),
            "onnxruntime": self.onnxruntime,
            "providers": list(self.providers),
            "tensorrt": self.tensorrt,
            "runtime_envs": list(self.runtime_envs),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Capabilities:
        return cls(
            gpus=tuple(str(g) for g in data.get("gpus") or ()),
            onnxruntime=_optional_text(data.get("onnxruntime")),
            providers=tuple(str(p) for p in data.get("providers") or ()),
            tensorrt=_optional_text(data.get("tensorrt")),
            runtime_envs=tuple(str(v) for v in data.get("runtime_envs") or ()),
        )

    @property
    def label(self) -> str:
        """A short name for lists: the GPU model, or ``cpu`` for a worker without a GPU."""
        return self.gpus[0] if self.gpus else "cpu"


def _optional_text(value: Any) -> str | None:
    return str(value) if value else None


def unmet(requirements: Requirements, offered: Capabilities) -> list[str]:
    """One phrase per requirement ``offered`` does not meet (``GPU H100``, ``onnxruntime >=1.20``);
    empty when the worker can run the check."""
    missing = []
    if requirements.gpu and not any(want.lower() in gpu.lower() for want in requirements.gpu for gpu in offered.gpus):
        missing.append("GPU " + " or ".join(requirements.gpu))
    missing += [f"provider {p}" for p in requirements.providers if p not in offered.providers]
    if requirements.onnxruntime and not offers_onnxruntime(requirements.onnxruntime, offered):
        missing.append(f"onnxruntime {requirements.onnxruntime}")
    if requirements.tensorrt and not version_matches(requirements.tensorrt, offered.tensorrt):
        missing.append(f"TensorRT {requirements.tensorrt}")
    return missing


def offers_onnxruntime(spec: str, offered: Capabilities) -> bool:
    """The worker's own onnxruntime, or one of its runtime environments' (the check then runs in
    that environment: ``checks.runtime_envs``), satisfies ``spec``."""
    return any(version_matches(spec, version) for version in (offered.onnxruntime, *offered.runtime_envs))


def parse_gpu_names(text: str) -> tuple[str, ...]:
    """``WORKER_GPUS``: comma-separated model names; ``none`` (or empty) for no GPU."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    return () if [n.lower() for n in names] == ["none"] else names


def detect_capabilities(gpus: tuple[str, ...] | None = None) -> Capabilities:
    """This machine's capabilities, probed in a child process; ``gpus`` replaces the detected GPUs.
    A probe that fails leaves what package metadata says (versions; no providers)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "checks.capabilities"],
            capture_output=True,
            timeout=DETECT_TIMEOUT_S,
            env=child_env(),
            check=False,
        )
        found = Capabilities.from_json(json.loads(done.stdout))
    except (OSError, subprocess.TimeoutExpired, ValueError, AttributeError):
        found = Capabilities(onnxruntime=_distribution_version(*_ORT_DISTRIBUTIONS), tensorrt=_tensorrt_version())
    return found if gpus is None else replace(found, gpus=gpus)


def probe() -> Capabilities:
    """Run in the probe's child: import onnxruntime for its providers, ask nvidia-smi for GPUs."""
    return Capabilities(
        gpus=_gpu_names(),
        onnxruntime=_distribution_version(*_ORT_DISTRIBUTIONS),
        providers=_ort_providers(),
        tensorrt=_tensorrt_version() or _imported_version("tensorrt"),
    )


def _imported_version(module_name: str) -> str | None:
    """``module.__version__`` (only in the probe's child: importing a runtime may be slow)."""
    try:
        return str(importlib.import_module(module_name).__version__)
    except Exception:  # noqa: BLE001 - not installed, or broken: not offered
        return None


def _distribution_version(*names: str) -> str | None:
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(name)
    return None


def _tensorrt_version() -> str | None:
    """From package metadata (importing TensorRT is slow and may touch the GPU)."""
    return _distribution_version("tensorrt", "tensorrt-cu12", "tensorrt-cu11", "tensorrt-libs")


def _ort_providers() -> tuple[str, ...]:
    try:
        module = importlib.import_module("onnxruntime")
        return tuple(str(p) for p in module.get_available_providers())
    except Exception:  # noqa: BLE001 - a broken runtime offers no providers
        return ()


def _gpu_names() -> tuple[str, ...]:
    return _nvidia_smi_names() or _nvml_names()


def _nvidia_smi_names() -> tuple[str, ...]:
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return ()
    try:
        done = subprocess.run(
            [tool, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(line.strip() for line in done.stdout.splitlines() if line.strip()) if done.returncode == 0 else ()


def _nvml_names() -> tuple[str, ...]:
    try:
        nvml: Any = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML, no NVIDIA driver: no GPU
        return ()
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        return tuple(_text(nvml.nvmlDeviceGetName(h)) for h in handles)
    except Exception:  # noqa: BLE001
        return ()
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


if __name__ == "__main__":
    sys.stdout.write(json.dumps(probe().to_json()))
