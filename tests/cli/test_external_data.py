"""Models with external weights through `onnx-reducer reduce`: weights by reference (each
iteration writes O(graph) bytes), a model over 2 GB that loads, reduces and saves, a model
reduced from another working directory, and unsafe locations refused with exit code 4."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

SMALL_FILE_BYTES = 50 * 1024
info = helper.make_tensor_value_info


def external_tensor(
    name: str, dims: list[int], location: str, offset: int, dtype: int = TensorProto.FLOAT
) -> onnx.TensorProto:
    tensor = TensorProto(name=name, data_type=dtype, dims=dims, data_location=TensorProto.EXTERNAL)
    nbytes = int(np.prod(dims)) * np.dtype(helper.tensor_dtype_to_np_dtype(dtype)).itemsize
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(nbytes))):
        tensor.external_data.add(key=key, value=value)
    return tensor


def reduce_cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["onnx-reducer", "reduce", *argv], cwd=cwd, capture_output=True, text=True, timeout=900, check=False
    )


PEAK_WRAPPER = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[2:]).returncode
with open(sys.argv[1], "w") as f:
    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""


def reduce_cli_peak_kib(*argv: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run `onnx-reducer reduce` and return the peak RSS (KiB) of it and of its checks."""
    done = subprocess.run(
        [sys.executable, "-c", PEAK_WRAPPER, str(cwd / "peak.txt"), "onnx-reducer", "reduce", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    peak = int((cwd / "peak.txt").read_text())
    (cwd / "peak.txt").unlink()
    return done, peak


# ---- a model over 2 GB ----

BIG = 300_000_000  # float32 elements: 1.2 GB per weight
SIDE = 150_000_000  # 0.6 GB


@pytest.fixture
def big_model(tmp_path: Path) -> Iterator[Path]:
    """idx -> Gather(W1) -> Cast -> Gather(W2) -> Cast -> Gather(W3) -> y, with 3 GB of weights in
    one sparse model.data (zeros; written with truncate, so it costs no disk and no time)."""
    folder = tmp_path / "big"
    folder.mkdir()
    sizes = {"W1": BIG, "W2": BIG, "W3": SIDE}
    offsets, total = {}, 0
    for name, count in sizes.items():
        offsets[name], total = total, total + count * 4
    with open(folder / "model.data", "wb") as f:
        f.truncate(total)
    nodes = [
        helper.make_node("Gather", ["W1", "idx"], ["g1"], name="gather1"),
        helper.make_node("Cast", ["g1"], ["c1"], name="cast1", to=TensorProto.INT64),
        helper.make_node("Gather", ["W2", "c1"], ["g2"], name="gather2"),
        helper.make_node("Cast", ["g2"], ["c2"], name="cast2", to=TensorProto.INT64),
        helper.make_node("Gather", ["W3", "c2"], ["g3"], name="gather3"),
        helper.make_node("Relu", ["g3"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "big",
        [info("idx", TensorProto.INT64, [4])],
        [info("y", TensorProto.FLOAT, [4])],
        [external_tensor(name, [count], "model.data", offsets[name]) for name, count in sizes.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    (folder / "model.onnx").write_bytes(model.SerializeToString())
    try:
        yield folder / "model.onnx"
    finally:  # pytest keeps old tmp dirs: never leave gigabytes behind
        for path in tmp_path.rglob("*"):
            if path.is_file() and path.stat().st_size > SMALL_FILE_BYTES:
                path.unlink()


@pytest.mark.slow
def test_a_model_over_2gb_loads_reduces_and_saves_with_a_data_file(big_model: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    source_data = big_model.with_name("model.data")
    assert source_data.stat().st_size > 2**31

    done, peak_kib = reduce_cli_peak_kib(
        str(big_model), "-o", "reduced.onnx", "--no-progress",
        "--artifacts", "polygraphy_debug.onnx", "--art-dir", "arts", "--iter-info", "iter.json",
        "--link-weights",  # 3 GB of weights: hardlinks rather than one copy per folder
        # the failure needs both 1.2 GB Gathers: the minimal model holds 2.4 GB of weights
        "--fail-regex", r"(?s)\| gather1 .*\| gather2 ",
        "--check", "onnx-reducer", "inspect", "polygraphy_debug.onnx",
        cwd=work,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    print(f"model weights {source_data.stat().st_size / 1e9:.2f} GB, peak RSS {peak_kib / 1024:.0f} MiB")
    assert peak_kib < 1024 * 1024, f"peak RSS {peak_kib} KiB: the weights were loaded into memory"
    reduced = onnx.load(str(work / "reduced.onnx"), load_external_data=False)
    assert [n.name for n in reduced.graph.node] == ["gather1", "gather2"]
    data = work / "reduced.onnx.data"
    assert (work / "reduced.onnx").stat().st_size < SMALL_FILE_BYTES
    assert 2 * BIG * 4 <= data.stat().st_size < 2 * BIG * 4 + 2 * 4096, "exactly W1 and W2"
    locations = {e.value for t in reduced.graph.initializer for e in t.external_data if e.key == "location"}
    assert locations == {"reduced.onnx.data"}
    assert sorted(t.name for t in reduced.graph.initializer) == ["W1", "W2"]
    with open(data, "rb") as f:  # spot-check the copy: zeros as in the source, at the right offsets
        f.seek(BIG * 4 - 16)
        assert f.read(16) == b"\0" * 16
    check = subprocess.run(
        ["onnx-reducer", "inspect", "reduced.onnx"], cwd=work, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stderr

    artifacts = sorted((work / "arts").glob("*/*.onnx"))
    assert len(artifacts) >= 3
    for artifact in artifacts:
        assert artifact.stat().st_size < SMALL_FILE_BYTES, f"{artifact.name}: an iteration writes O(graph) bytes"
    links = [p for p in (work / "arts").glob("*/*") if p.suffix != ".onnx"]
    assert links and all(os.path.samefile(p, source_data) for p in links), "weights are hardlinks, never copies"
    assert (work / "iter.json").exists()
    leftovers = [p.name for p in work.iterdir() if p.is_file() and p.stat().st_size > SMALL_FILE_BYTES]
    assert sorted(leftovers) == ["reduced.onnx.data"], "no weight links or copies left behind in the work dir"
    assert source_data.stat().st_nlink == 1 + len(links)


# ---- a normal external-data model, reduced from another working directory ----

CHECK_SCRIPT = """
import sys
import onnx, onnxruntime as ort, numpy as np
model = onnx.load(sys.argv[1], load_external_data=False)
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])  # weights must resolve
feeds = {}
for i in session.get_inputs():
    feeds[i.name] = np.ones([d if isinstance(d, int) else 1 for d in i.shape], np.float32)
session.run(None, feeds)
sys.exit(7 if any(n.op_type == "Mul" for n in model.graph.node) else 0)
"""


def weighted_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1, w2, w3 = (rng.standard_normal((256, 256), dtype=np.float32) for _ in range(3))
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h1"], name="mm1"),
        helper.make_node("Mul", ["h1", "W2"], ["h2"], name="mul"),
        helper.make_node("MatMul", ["h2", "W3"], ["y"], name="mm3"),
    ]
    graph = helper.make_graph(
        nodes,
        "weighted",
        [info("x", TensorProto.FLOAT, [1, 256])],
        [info("y", TensorProto.FLOAT, [1, 256])],
        [numpy_helper.from_array(w, name) for w, name in ((w1, "W1"), (w2, "W2"), (w3, "W3"))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_external_data_model_reduced_from_another_working_directory(tmp_path: Path) -> None:
    src, work = tmp_path / "models", tmp_path / "work"
    src.mkdir()
    work.mkdir()
    model = weighted_model()
    w2 = numpy_helper.to_array(model.graph.initializer[1])
    onnx.save(model, str(src / "model.onnx"), save_as_external_data=True, location="model.data", size_threshold=0)
    (work / "check.py").write_text(CHECK_SCRIPT)
    before = sorted(p.name for p in src.iterdir())

    done = reduce_cli(
        "../models/model.onnx", "-o", "reduced.onnx", "--no-progress", "--fail-code", "7",
        "--no-reduce-data",  # the weights as they are: this test follows W2 to the reduced model
        "--artifacts", "polygraphy_debug.onnx", "--art-dir", "arts",
        "--check", sys.executable, "check.py", "polygraphy_debug.onnx",
        cwd=work,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in src.iterdir()) == before, "nothing is written next to the user's model"
    reduced = onnx.load(str(work / "reduced.onnx"))  # self-contained: no external data left
    assert [n.op_type for n in reduced.graph.node] == ["Mul"]
    assert [t.name for t in reduced.graph.initializer] == ["W2"]
    assert all(t.data_location == TensorProto.DEFAULT for t in reduced.graph.initializer)
    np.testing.assert_array_equal(numpy_helper.to_array(reduced.graph.initializer[0]), w2)
    h1 = np.ones((1, 256), np.float32)
    session = ort.InferenceSession(str(work / "reduced.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"h1": h1})[0], h1 * w2)
    for artifact in (work / "arts").glob("*/*.onnx"):
        assert artifact.stat().st_size < SMALL_FILE_BYTES
    assert sorted(p.name for p in work.iterdir()) == [
        "arts",
        "check.py",
        "onnx_reducer_debug_replay.json",
        "reduced.onnx",
    ], "the iteration model and its weight links are removed at the end"


ONNX_LOAD_CHECK = """
import sys
import onnx
model = onnx.load(sys.argv[1])  # with its external data, as Polygraphy's loaders do
assert len(model.graph.initializer[0].raw_data) > 0
sys.exit(7 if any(n.op_type == "Mul" for n in model.graph.node) else 0)
"""


@pytest.mark.parametrize("in_model_folder", [True, False])
def test_a_check_that_loads_weights_with_onnx_load_works(tmp_path: Path, in_model_folder: bool) -> None:
    """onnx.load refuses weight files with several hardlinks ("potential hardlink attack"): the
    iteration model's weights must be the model's own file or a plain copy, never a hardlink."""
    src = tmp_path / "models"
    src.mkdir()
    onnx.save(weighted_model(), str(src / "model.onnx"), save_as_external_data=True, location="model.data")
    work = src if in_model_folder else tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "check.py").write_text(ONNX_LOAD_CHECK)

    done = reduce_cli(
        str(src / "model.onnx"), "-o", "reduced.onnx", "--no-progress", "--fail-code", "7",
        "--artifacts", "polygraphy_debug.onnx", "--art-dir", "arts",
        "--check", sys.executable, "check.py", "polygraphy_debug.onnx",
        cwd=work,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert [n.op_type for n in onnx.load(str(work / "reduced.onnx")).graph.node] == ["Mul"]
    assert (src / "model.data").stat().st_nlink == 1, "the user's weights were never hardlinked"
    for sorted_weights in (work / "arts").glob("*/*.data"):
        assert sorted_weights.stat().st_nlink == 1


@pytest.mark.parametrize("location", ["../outside.data", "/etc/hostname"])
def test_unsafe_external_data_exits_4_with_a_fix(tmp_path: Path, location: str) -> None:
    (tmp_path / "outside.data").write_bytes(b"\0" * 16)
    (tmp_path / "models").mkdir()
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "W"], ["y"])],
        "g",
        [info("x", TensorProto.FLOAT, [4])],
        [info("y", TensorProto.FLOAT, [4])],
        [external_tensor("W", [4], location, 0)],
    )
    onnx.save(helper.make_model(graph), str(tmp_path / "models" / "m.onnx"))

    done = reduce_cli(
        "models/m.onnx", "-o", "r.onnx", "--fail-regex", "Op: Add", "--check", "onnx-reducer", "inspect",
        "polygraphy_debug.onnx", cwd=tmp_path,
    )  # fmt: skip

    assert done.returncode == 4
    assert location in done.stderr and "model's folder" in done.stderr
    assert not (tmp_path / "r.onnx").exists()
