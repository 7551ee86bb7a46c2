"""``requires:`` in a check spec: parsed and validated, matched against a worker's capabilities,
kept out of the verdict-cache identity, and routing to the gpu queue when it needs a GPU."""

from __future__ import annotations

import importlib.metadata
import json

import pytest

from checks.capabilities import Capabilities, detect_capabilities, parse_gpu_names, unmet
from checks.requirements import Requirements
from checks.spec import CheckSpecError, parse_check_spec, requirements_of

H100_WORKER = Capabilities(
    gpus=("NVIDIA H100 80GB HBM3",),
    onnxruntime="1.20.1",
    providers=("CUDAExecutionProvider", "CPUExecutionProvider"),
    tensorrt="10.3.0.26",
)
CPU_WORKER = Capabilities(onnxruntime="1.17.0", providers=("CPUExecutionProvider",))


def spec_with(requires: str) -> str:
    return f"kind: op-present\nops: [Mul]\nrequires: {requires}\n"


def test_requires_parses_and_normalises() -> None:
    spec = parse_check_spec(
        spec_with("{gpu: H100, onnxruntime: '>=1.20', tensorrt: '10.*', provider: CUDAExecutionProvider}")
    )
    assert spec.requires == Requirements(
        gpu=("H100",), onnxruntime=">=1.20", tensorrt="==10.*", providers=("CUDAExecutionProvider",)
    )
    assert parse_check_spec(spec_with("{onnxruntime: '1.20'}")).requires.onnxruntime == "==1.20.*"
    assert parse_check_spec(spec_with("{tensorrt: 10}")).requires.tensorrt == "==10.*"
    assert parse_check_spec(spec_with("{gpu: [H100, H200]}")).requires.gpu == ("H100", "H200")


@pytest.mark.parametrize(
    ("requires", "message"),
    [
        ("{cuda: 12}", "requires.cuda: unknown field (allowed: gpu, onnxruntime, tensorrt, provider)"),
        ("{onnxruntime: 'at least 1.20'}", "requires.onnxruntime: 'at least 1.20' is not a version specifier"),
        ("{onnxruntime: 1.20}", "requires.onnxruntime: quote the version"),
        ("{gpu: []}", "requires.gpu: must be a name or a non-empty list of names"),
        ("{provider: CUDA}", "requires.provider: must name an onnxruntime execution provider"),
        ("H100", "requires: must be a mapping like"),
    ],
)
def test_bad_requires_names_the_field(requires: str, message: str) -> None:
    with pytest.raises(CheckSpecError, match="^" + message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        parse_check_spec(spec_with(requires))


def test_unmet_lists_what_a_worker_lacks() -> None:
    everything = parse_check_spec(
        spec_with("{gpu: h100, onnxruntime: '>=1.20', tensorrt: '10.*', provider: CUDAExecutionProvider}")
    ).requires
    assert unmet(everything, H100_WORKER) == []
    assert unmet(everything, CPU_WORKER) == [
        "GPU h100",
        "provider CUDAExecutionProvider",
        "onnxruntime >=1.20",
        "TensorRT ==10.*",
    ]
    assert unmet(parse_check_spec(spec_with("{gpu: [A100, H100]}")).requires, H100_WORKER) == []
    assert unmet(parse_check_spec(spec_with("{onnxruntime: '<1.20'}")).requires, H100_WORKER) == ["onnxruntime <1.20"]
    assert unmet(Requirements(), CPU_WORKER) == []


def test_requires_is_not_part_of_the_check_identity_and_routes_to_the_gpu_queue() -> None:
    plain = parse_check_spec("kind: op-present\nops: [Mul]\n")
    pinned = parse_check_spec(spec_with("{gpu: H100}"))
    assert pinned.identity == plain.identity
    assert parse_check_spec(json.dumps(pinned.to_json())).requires == pinned.requires  # survives to_json
    assert pinned.needs_gpu and not plain.needs_gpu
    assert not parse_check_spec(spec_with("{onnxruntime: '>=1.0'}")).needs_gpu
    assert requirements_of(spec_with("{gpu: H100}")).gpu == ("H100",)
    assert requirements_of("kind: nonsense") == Requirements()


def test_this_machine_is_detected_in_a_child_process() -> None:
    found = detect_capabilities()
    assert found.onnxruntime == importlib.metadata.version("onnxruntime")
    assert "CPUExecutionProvider" in found.providers
    assert detect_capabilities(gpus=("NVIDIA H100",)).gpus == ("NVIDIA H100",)
    assert parse_gpu_names("none") == ()
    assert parse_gpu_names("NVIDIA H100, NVIDIA A10") == ("NVIDIA H100", "NVIDIA A10")
