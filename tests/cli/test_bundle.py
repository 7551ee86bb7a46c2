"""``reduce --bundle``: for every check kind the bundle's repro.py, unpacked and run in a fresh
virtual environment that holds only onnx, onnxruntime and numpy (and their own dependencies),
exits 1 on min_bad.onnx and 0 on min_good.onnx; a model with large external weights ships only
the weights min-bad reads."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from packaging.requirements import Requirement

from checks.golden import write_golden
from reducer_cli.main import run
from tests.checks.models import overflow_model
from tests.cli.helpers import save_branchy
from tests.models import IR_VERSION, OPSET
from tests.precision_models import COMPARE_FP16, one_node_overflows

ALLOWED = ("onnx", "onnxruntime", "numpy")


def _closure(names: tuple[str, ...]) -> set[str]:
    """The distributions ``names`` need (their requirements without extras, recursively)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        key = dist.metadata["Name"].lower()
        if key in seen:
            continue
        seen.add(key)
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


@pytest.fixture(scope="module")
def repro_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv without system site-packages whose only packages are symlinks to onnx, onnxruntime,
    numpy and their dependencies (a .pth file points at the folder holding the links)."""
    root = tmp_path_factory.mktemp("repro-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    links = root / "links"
    links.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for name in sorted(_closure(ALLOWED)):
        files = importlib.metadata.distribution(name).files or []
        for top in {Path(str(f)).parts[0] for f in files}:
            source = site / top
            if source.exists() and not (links / top).exists() and not top.startswith(".."):
                (links / top).symlink_to(source)
    python = root / "venv" / "bin" / "python"
    venv_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ["PATH"]},
    ).stdout.strip()
    (Path(venv_site) / "repro_links.pth").write_text(str(links) + "\n")
    return python


def _clean_env() -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}


def test_the_repro_venv_has_the_three_packages_and_nothing_of_onnx_reducer(repro_python: Path, tmp_path: Path) -> None:
    probe = (
        "import importlib.util, json\n"
        "names = ['onnx', 'onnxruntime', 'numpy', 'reducer_core', 'checks', 'engine', 'reducer_cli', "
        "'onnxconverter_common', 'polygraphy', 'yaml']\n"
        "print(json.dumps({n: importlib.util.find_spec(n) is not None for n in names}))\n"
    )
    out = subprocess.run(
        [str(repro_python), "-c", probe], cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, check=True
    )
    found = json.loads(out.stdout)
    assert found == {
        "onnx": True,
        "onnxruntime": True,
        "numpy": True,
        "reducer_core": False,
        "checks": False,
        "engine": False,
        "reducer_cli": False,
        "onnxconverter_common": False,
        "polygraphy": False,
        "yaml": False,
    }


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def _reduce_with_bundle(*args: str) -> Path:
    code = run(["reduce", "--bundle", "bug.zip", "--no-progress", "-q", *args])  # --check takes the rest
    assert code == 0
    folder = Path("unpacked")
    with zipfile.ZipFile("bug.zip") as archive:
        archive.extractall(folder)
    return folder


def _repro(python: Path, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "repro.py", *args], cwd=folder, env=_clean_env(), capture_output=True, text=True, check=False
    )


def _assert_reproduces(python: Path, folder: Path) -> str:
    bad = _repro(python, folder)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "REPRODUCED" in bad.stdout
    good = _repro(python, folder, "min_good.onnx")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "NOT REPRODUCED" in good.stdout
    readme = (folder / "README.md").read_text()
    original = Path("model.onnx").read_bytes()
    assert hashlib.sha256(original).hexdigest() in readme
    assert "the failure reproduces (exit 1)" in readme
    env = json.loads((folder / "environment.json").read_text())
    assert env["onnx"] == onnx.__version__ and "CPUExecutionProvider" in env["onnxruntime_providers"]
    return bad.stdout


def test_compare_bundle_ships_the_fp16_models_and_reproduces_without_onnx_reducer(
    in_tmp: Path, repro_python: Path
) -> None:
    onnx.save(one_node_overflows(), "model.onnx")
    Path("spec.yaml").write_text(COMPARE_FP16)
    folder = _reduce_with_bundle("model.onnx", "--check-spec", "spec.yaml")
    names = {p.name for p in folder.iterdir()}
    assert {"min_bad.onnx", "min_good.onnx", "min_bad.target.onnx", "min_good.target.onnx", "inputs.npz"} <= names
    assert {"inputs.json", "expected.npz", "observed.npz", "check.json", "repro.py", "README.md"} <= names
    out = _assert_reproduces(repro_python, folder)
    assert "MISMATCH y: non-finite" in out
    assert "polygraphy run min_bad.onnx --onnxrt" in out
    assert (
        "The failure needs node scale_up (Mul); the closest passing graph lacks it."
        in (folder / "README.md").read_text()
    )
    with np.load(folder / "inputs.npz") as inputs:  # what the check fed: uniform in the spec's [70, 100]
        assert list(inputs.files) == ["a"]
        values = inputs["a"]
        assert values.min() >= 70 and values.max() < 100
    with np.load(folder / "expected.npz") as expected, np.load(folder / "observed.npz") as observed:
        assert np.isfinite(expected["y"]).all() and np.isinf(observed["y"]).all()
    # another model has no shipped fp16 conversion and the venv has no converter: exit 2, not a verdict
    (folder / "other.onnx").write_bytes((folder / "min_bad.onnx").read_bytes())
    other = _repro(repro_python, folder, "other.onnx")
    assert other.returncode == 2, other.stdout + other.stderr
    assert "other.target.onnx is missing" in other.stdout


def test_golden_bundle_feeds_min_bad_the_values_it_saw_inside_the_model(in_tmp: Path, repro_python: Path) -> None:
    """With golden values the overflowing node sees inputs near 400 (fresh [0, 1) values would
    not overflow): the bundle carries them for every sample, and repro.py uses them."""
    onnx.save(overflow_model(), "model.onnx")
    rng = np.random.default_rng(3)
    samples = [{"x": rng.uniform(0.5, 1.0, size=(1, 16)).astype(np.float32)} for _ in range(2)]
    write_golden(Path("model.onnx"), Path("g.golden"), samples)
    spec = "kind: golden\ntarget: {runtime: onnxruntime, precision: fp16}\ntolerance: {atol: 0.01, rtol: 0.01}\n"
    Path("spec.yaml").write_text(spec)
    folder = _reduce_with_bundle("model.onnx", "--check-spec", "spec.yaml", "--golden", "g.golden")
    assert (folder / "golden.npz").exists() and (folder / "golden_1.npz").exists()
    assert (folder / "inputs.npz").exists() and (folder / "inputs_1.npz").exists()
    min_bad = onnx.load(str(folder / "min_bad.onnx"))
    assert [n.name for n in min_bad.graph.node] == ["overflow"]
    with np.load(folder / "inputs.npz") as inputs:
        np.testing.assert_allclose(inputs["s"], np.maximum(samples[0]["x"], 0) * 400, rtol=1e-6)
    out = _assert_reproduces(repro_python, folder)
    assert "reference = golden values of p" in out


def _error_model() -> onnx.ModelProto:
    """Relu -> Gather(row 5 of 2) raises in onnxruntime; a Neg branch beside it is harmless."""
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Gather", ["r", "row"], ["y"], name="bad_gather"),
            helper.make_node("Neg", ["x"], ["z"], name="negate"),
        ],
        "error",
        [helper.make_tensor_value_info("x", f, [2, 3])],
        [helper.make_tensor_value_info("y", f, [1, 3]), helper.make_tensor_value_info("z", f, [2, 3])],
        initializer=[helper.make_tensor("row", TensorProto.INT64, [1], [5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def test_error_bundle_reproduces_the_runtime_error(in_tmp: Path, repro_python: Path) -> None:
    onnx.save(_error_model(), "model.onnx")
    Path("spec.yaml").write_text("kind: error\nmatch: out of bounds|indices\n")
    folder = _reduce_with_bundle("model.onnx", "--check-spec", "spec.yaml")
    assert [n.name for n in onnx.load(str(folder / "min_bad.onnx")).graph.node] == ["bad_gather"]
    out = _assert_reproduces(repro_python, folder)
    assert "the runtime raised" in out


def test_op_present_bundle(in_tmp: Path, repro_python: Path) -> None:
    save_branchy("model.onnx")
    Path("spec.yaml").write_text("kind: op-present\nops: [Mul]\n")
    folder = _reduce_with_bundle("model.onnx", "--check-spec", "spec.yaml")
    assert [n.op_type for n in onnx.load(str(folder / "min_bad.onnx")).graph.node] == ["Mul"]
    out = _assert_reproduces(repro_python, folder)
    assert "present: Mul" in out
    # no spec-generated inputs here: min-bad's input is the value it takes inside the original model
    with np.load(folder / "inputs.npz") as inputs:
        assert len(inputs.files) == 1


def test_command_bundle_ships_the_script_and_reruns_the_command(in_tmp: Path, repro_python: Path) -> None:
    """A --check COMMAND reading the iteration artifact: repro.py runs it on MODEL, with the
    script the command names shipped in check_files/, judged by its exit code and regex."""
    save_branchy("model.onnx")
    Path("has_sigmoid.py").write_text(
        "import sys, onnx\n"
        "ops = {n.op_type for n in onnx.load(sys.argv[1], load_external_data=False).graph.node}\n"
        "print('BUG: sigmoid found' if 'Sigmoid' in ops else 'fine')\n"
        "sys.exit(3 if 'Sigmoid' in ops else 0)\n"
    )
    command = [sys.executable, "has_sigmoid.py", "polygraphy_debug.onnx"]
    folder = _reduce_with_bundle("model.onnx", "--fail-regex", "BUG: .* found", "--check", *command)
    assert (folder / "check_files" / "has_sigmoid.py").exists()
    check = json.loads((folder / "check.json").read_text())
    assert check["command"] == command and check["fail_regex"] == ["BUG: .* found"]
    out = _assert_reproduces(repro_python, folder)
    assert "matched: BUG: .* found" in out


def test_bundle_carries_only_the_weights_min_bad_reads(in_tmp: Path, repro_python: Path) -> None:
    """Two 8 MiB external weights; the failure needs the node reading one of them: the bundle's
    data file holds that one only (and the zip is far smaller than both)."""
    f = TensorProto.FLOAT
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((1024, 2048)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((2048, 1024)).astype(np.float32), "w2")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="first"),
            helper.make_node("MatMul", ["h", "w2"], ["y"], name="culprit"),
        ],
        "weights",
        [helper.make_tensor_value_info("x", f, [1, 1024])],
        [helper.make_tensor_value_info("y", f, [1, 1024])],
        initializer=[w1, w2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.save(model, "model.onnx", save_as_external_data=True, location="model.weights", size_threshold=1024)
    Path("spec.yaml").write_text("kind: op-present\nnames: [culprit]\n")
    # the weights as they are (an op-present check fails at any size: the weight step would shrink w2)
    folder = _reduce_with_bundle("model.onnx", "--check-spec", "spec.yaml", "--no-reduce-data")
    data = folder / "min_bad.onnx.data"
    assert data.stat().st_size == 2048 * 1024 * 4  # w2 only
    loaded = onnx.load(str(folder / "min_bad.onnx"))
    assert [t.name for t in loaded.graph.initializer] == ["w2"]
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.graph.initializer[0]), numpy_helper.to_array(w2))
    with zipfile.ZipFile("bug.zip") as archive:  # min-good (the first MatMul) carries w1 alone
        sizes = {i.filename: i.file_size for i in archive.infolist() if i.filename.endswith(".data")}
    assert sizes == {"min_bad.onnx.data": 2048 * 1024 * 4, "min_good.onnx.data": 1024 * 2048 * 4}
    _assert_reproduces(repro_python, folder)


def test_bundle_needs_a_check_repro_can_run(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Interactive mode (no --check) has nothing repro.py could run: refused before any check."""
    save_branchy("model.onnx")
    code = run(["reduce", "model.onnx", "--bundle", "bug.zip", "--no-progress", "-q"])
    assert code != 0
    assert "--bundle needs a check repro.py can run" in capsys.readouterr().err
    assert not Path("bug.zip").exists()


def _command_counting_runs() -> list[str]:
    """A --check COMMAND that fails on a Sigmoid and logs each run to runs.log (an absolute path)."""
    Path("has_sigmoid.py").write_text(
        "import sys, onnx\n"
        "ops = {n.op_type for n in onnx.load(sys.argv[1], load_external_data=False).graph.node}\n"
        "open(sys.argv[2], 'a').write('run\\n')\n"
        "print('BUG: sigmoid found' if 'Sigmoid' in ops else 'fine')\n"
    )
    return [sys.executable, "has_sigmoid.py", "polygraphy_debug.onnx", str(Path("runs.log").resolve())]


def _runs() -> int:
    return len(Path("runs.log").read_text().splitlines())


def test_the_bundle_takes_the_final_verification_of_the_same_bytes(in_tmp: Path) -> None:
    """min-bad and min-good handed over verified (-o, --min-good): the bundle ships those bytes and
    runs no check of its own; every run of the check is the reduction's (its iterations and its
    final verification), and the README says the bundle ran none."""
    save_branchy("model.onnx")
    command = _command_counting_runs()
    options = ["-o", "bad.onnx", "--min-good", "good.onnx", "--summary-json", "s.json", "--fail-regex", "BUG: .* found"]
    folder = _reduce_with_bundle("model.onnx", *options, "--check", *command)
    summary = json.loads(Path("s.json").read_text())
    final = sum(int(v["checks"]) for v in summary["verified"].values() if v)
    assert _runs() == summary["checks_run"] + final  # nothing more ran for the bundle
    assert (folder / "min_bad.onnx").read_bytes() == Path("bad.onnx").read_bytes()
    readme = (folder / "README.md").read_text()
    assert "Checks the bundle ran itself (repro.py, beyond the reduction's): 0" in readme
    assert "not run again: min_bad.onnx, min_good.onnx" in readme
    assert "the failure reproduces (exit 1)" in readme and "On min_good.onnx: it did NOT reproduce (exit 0)" in readme


def test_a_bundle_without_a_verified_min_good_checks_it_and_says_so(in_tmp: Path) -> None:
    """No --min-good: min-good was never handed over, so the bundle runs repro.py on it once,
    and counts that run."""
    save_branchy("model.onnx")
    command = _command_counting_runs()
    options = ["-o", "bad.onnx", "--summary-json", "s.json", "--fail-regex", "BUG: .* found"]
    folder = _reduce_with_bundle("model.onnx", *options, "--check", *command)
    summary = json.loads(Path("s.json").read_text())
    final = sum(int(v["checks"]) for v in summary["verified"].values() if v)
    assert _runs() == summary["checks_run"] + final + 1  # repro.py on min_good.onnx ran the command
    readme = (folder / "README.md").read_text()
    assert "Checks the bundle ran itself (repro.py, beyond the reduction's): 1" in readme
    assert "not run again: min_bad.onnx" in readme
