"""``reduce --bundle``: for every check kind the bundle's repro.py, unpacked and run in a fresh
virtual environment that holds only onnx, onnxruntime and numpy (and their own dependencies),
exits 1 on min_bad.onnx and 0 on min_good.onnx; a model with large external weights ships only
the weights min-bad reads."""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
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

from checks.golden import write_golden
from checks.spec import parse_check_spec
from engine.bundle import BundleCheck, write_bundle
from engine.bundle_env import closure
from engine.workspace import ReduceOptions, load_workspace
from reducer_cli.args import _add_reduce_args
from reducer_cli.main import run
from reducer_core.candidate import Candidate
from reducer_core.records import ReductionResult
from reducer_core.verdict import Verdict, VerdictKind
from tests.checks.models import overflow_model
from tests.cli.helpers import save_branchy
from tests.models import IR_VERSION, OPSET
from tests.precision_models import COMPARE_FP16, one_node_overflows

ALLOWED = ("onnx", "onnxruntime", "numpy")


@pytest.fixture(scope="module")
def repro_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv without system site-packages whose only packages are symlinks to onnx, onnxruntime,
    numpy and their dependencies (a .pth file points at the folder holding the links)."""
    root = tmp_path_factory.mktemp("repro-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    links = root / "links"
    links.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for name in closure(ALLOWED):
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


def _clean_path() -> str:
    """PATH without this venv's bin (where onnx-reducer is installed)."""
    venv_bin = Path(sys.executable).parent.resolve()
    return os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p and Path(p).resolve() != venv_bin)


def _clean_env() -> dict[str, str]:
    return {"PATH": _clean_path(), "HOME": os.environ.get("HOME", "/tmp")}


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


def test_the_bundle_checks_both_models_in_its_clean_environment_even_when_verified(in_tmp: Path) -> None:
    """min-bad and min-good handed over verified (-o, --min-good): the final verification judged
    them in the reduction's environment, so the bundle runs repro.py on both once more in its clean
    one (two runs beyond the reduction's), and the README names both."""
    save_branchy("model.onnx")
    command = _command_counting_runs()
    options = ["-o", "bad.onnx", "--min-good", "good.onnx", "--summary-json", "s.json", "--fail-regex", "BUG: .* found"]
    folder = _reduce_with_bundle("model.onnx", *options, "--check", *command)
    summary = json.loads(Path("s.json").read_text())
    final = sum(int(v["checks"]) for v in summary["verified"].values() if v)
    assert _runs() == summary["checks_run"] + final + 2  # repro.py ran the command on both models
    assert (folder / "min_bad.onnx").read_bytes() == Path("bad.onnx").read_bytes()
    readme = (folder / "README.md").read_text()
    assert "Checks the bundle ran itself (repro.py, beyond the reduction's): 2" in readme
    assert "also judged these exact bytes, in the reduction's own environment: min_bad.onnx, min_good.onnx" in readme
    assert "- `python repro.py min_bad.onnx`: the failure reproduces (exit 1)" in readme
    assert "- `python repro.py min_good.onnx`: it passes (exit 0)" in readme


# --- the self-check: a clean environment, the pinned failure, the README as it is -------------------


def _reduce_data() -> list[str]:
    """``--reduce-data`` where the CLI has it (the data step is opt-in), nothing where it is the default."""
    parser = argparse.ArgumentParser()
    _add_reduce_args(parser)
    _, unknown = parser.parse_known_args(["model.onnx", "--reduce-data"])
    return [] if unknown else ["--reduce-data"]


def _readme_files(folder: Path) -> list[str]:
    """The names the README's "Files" section lists."""
    section = (folder / "README.md").read_text().split("\n## Files\n", 1)[1]
    return sorted(re.findall(r"^- `([^`]+)`", section, flags=re.MULTILINE))


def _full_env() -> dict[str, str]:
    """PATH with this venv's bin first: onnx-reducer is installed there."""
    return {"PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]), "HOME": "/tmp"}


def test_the_readme_lists_exactly_the_files_in_the_zip_and_what_repro_printed(in_tmp: Path) -> None:
    """A compare spec with golden values, the data step on: the README's file list is the zip's
    namelist, and it holds what the clean environment's repro.py printed on each model, word for word."""
    onnx.save(overflow_model(), "model.onnx")
    rng = np.random.default_rng(3)
    write_golden(Path("model.onnx"), Path("g.golden"), [{"x": rng.uniform(0.5, 1.0, size=(1, 16)).astype(np.float32)}])
    Path("spec.yaml").write_text(COMPARE_SPEC)
    folder = _reduce_with_bundle("model.onnx", "--check-spec", "spec.yaml", "--golden", "g.golden", *_reduce_data())
    with zipfile.ZipFile("bug.zip") as archive:
        assert _readme_files(folder) == sorted(archive.namelist())
    readme = (folder / "README.md").read_text()
    assert "This bundle is verified." in readme
    assert "`python -S -B repro.py` with PYTHONPATH holding only numpy, onnx, onnxruntime" in readme
    printed = readme.split("What `python repro.py min_bad.onnx` printed, word for word:\n\n```\n", 1)[1]
    printed = printed.split("\n```", 1)[0]
    assert "sample 0: inputs = inputs.npz" in printed
    assert "sample 0: MISMATCH p: non-finite values differ" in printed
    assert printed.endswith("REPRODUCED: the failure reproduces")
    pinned = json.loads((folder / "check.json").read_text())["pinned"]
    assert pinned == {"kind": "fail", "signature": "mismatch:nonfinite", "pinning": "kind", "outputs": ["p"]}


COMPARE_SPEC = (
    "kind: compare\nreference: {runtime: onnxruntime}\ntarget: {runtime: onnxruntime, precision: fp16}\n"
    "tolerance: {atol: 0.01, rtol: 0.01}\n"
)


class _Quiet:
    def info(self, message: str) -> None: ...

    def warning(self, message: str) -> None: ...


def test_a_bundle_of_shrunk_inputs_feeds_them_and_reproduces_the_mismatch(in_tmp: Path, repro_python: Path) -> None:
    """The data step shrank min-bad's input (16 -> 4 wide) while the golden values stay full size:
    the bundle carries the inputs min-bad was judged with, and repro.py, in a venv with only onnx,
    onnxruntime and numpy, feeds those and prints the overflow, exit 1 (fed the full-size golden
    values, onnxruntime raised "invalid dimensions", which read as "reproduces")."""
    onnx.save(overflow_model(), "model.onnx")
    rng = np.random.default_rng(3)
    write_golden(Path("model.onnx"), Path("g.golden"), [{"x": rng.uniform(0.5, 1.0, size=(1, 16)).astype(np.float32)}])
    workspace = load_workspace(ReduceOptions(model=Path("model.onnx").resolve(), work_dir=in_tmp / "work"), _Quiet())
    try:
        names = [n.name for n in workspace.index.nodes]
        min_bad = Candidate(frozenset({names.index("overflow")}), data=frozenset({"dim:16=4"}))
        min_good = Candidate(frozenset({names.index("scale_up")}))
        detail = "sample 0: outputs beyond tolerance: p; worst p: non-finite values differ"
        original = Verdict(VerdictKind.FAIL, "mismatch:nonfinite", detail)
        result = ReductionResult(original, len(names), min_bad, min_good)
        spec = parse_check_spec(COMPARE_SPEC)
        check = BundleCheck.of_spec(spec, Path("g.golden"))
        report = write_bundle(Path("bug.zip"), workspace, result, check, Path("model.onnx"))
    finally:
        workspace.close()
    with zipfile.ZipFile("bug.zip") as archive:
        archive.extractall("unpacked")
    folder = Path("unpacked")
    with np.load(folder / "inputs.npz") as inputs, np.load(folder / "golden.npz") as golden:
        assert inputs["s"].shape == (1, 4) and golden["s"].shape == (1, 16)
        np.testing.assert_array_equal(inputs["s"], golden["s"][:, :4])
    bad = _repro(repro_python, folder)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "sample 0: inputs = inputs.npz" in bad.stdout
    assert "MISMATCH p: non-finite values differ" in bad.stdout and "invalid dimensions" not in bad.stdout
    assert report.verified and report.bad_code == 1 and report.good_code == 0
    # pinned: an overflow; a tolerance miss there is another failure (exit 3), not "reproduces"
    check_json = json.loads((folder / "check.json").read_text())
    check_json["pinned"]["signature"] = "mismatch:tolerance"
    (folder / "check.json").write_text(json.dumps(check_json))
    other = _repro(repro_python, folder)
    assert other.returncode == 3, other.stdout + other.stderr
    assert "another failure: mismatch:nonfinite" in other.stdout


def test_a_command_the_clean_environment_lacks_cannot_run_there_and_the_cli_exits_11(
    in_tmp: Path, repro_python: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's own command check, ``onnx-reducer inspect``: where onnx-reducer is not installed
    repro.py cannot run the check (exit 2, on min-bad and min-good alike), so the bundle's
    self-check does not verify it and the CLI exits 11; where it is installed, 1 and 0."""
    monkeypatch.setenv("PATH", _full_env()["PATH"])  # the reduction runs onnx-reducer from this venv
    save_branchy("model.onnx")
    command = ["onnx-reducer", "inspect", "polygraphy_debug.onnx"]
    options = ["--bundle", "bug.zip", "--no-progress", "-q", "--fail-regex", "Op: Mul"]
    code = run(["reduce", "model.onnx", *options, "--check", *command])
    assert code == 11
    assert "The bundle is NOT verified: repro.py on min_bad.onnx" in capsys.readouterr().err
    with zipfile.ZipFile("bug.zip") as archive:
        archive.extractall("unpacked")
        namelist = sorted(archive.namelist())
    folder = Path("unpacked")
    assert _readme_files(folder) == namelist
    assert "expected.npz" not in namelist and "observed.npz" not in namelist
    readme = (folder / "README.md").read_text()
    assert "This bundle is NOT verified" in readme
    assert "- `python repro.py min_bad.onnx`: it cannot run the check there (exit 2)" in readme
    assert "cannot run the check here: the command 'onnx-reducer' is not installed here" in readme
    assert "the failure reproduces (exit 1)" not in readme
    assert shutil.which("onnx-reducer", path=_clean_path()) is None  # the clean venv's PATH: none anywhere
    for args in ((), ("min_good.onnx",)):
        clean = _repro(repro_python, folder, *args)
        assert clean.returncode == 2, clean.stdout + clean.stderr
        assert "cannot run the check here" in clean.stdout
    full = [
        subprocess.run(
            [sys.executable, "repro.py", *args],
            cwd=folder,
            env=_full_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        for args in ((), ("min_good.onnx",))
    ]
    assert [p.returncode for p in full] == [1, 0], full[0].stdout + full[1].stdout
    assert "matched: Op: Mul" in full[0].stdout


def test_another_exit_code_is_another_failure(in_tmp: Path, repro_python: Path) -> None:
    """A command check pinned on exit code 3: the script dying on an ImportError (exit 1) is
    another failure (exit 3), not the failure the bundle is about."""
    save_branchy("model.onnx")
    Path("has_sigmoid.py").write_text(
        "import sys, onnx\n"
        "ops = {n.op_type for n in onnx.load(sys.argv[1], load_external_data=False).graph.node}\n"
        "sys.exit(3 if 'Sigmoid' in ops else 0)\n"
    )
    folder = _reduce_with_bundle("model.onnx", "--check", sys.executable, "has_sigmoid.py", "polygraphy_debug.onnx")
    assert json.loads((folder / "check.json").read_text())["pinned"]["signature"] == "exit=3"
    assert _repro(repro_python, folder).returncode == 1
    (folder / "check_files" / "has_sigmoid.py").write_text("import not_installed_anywhere\n")
    other = _repro(repro_python, folder)
    assert other.returncode == 3, other.stdout + other.stderr
    assert "another failure: exit=1" in other.stdout and "the reduction pinned exit=3" in other.stdout
