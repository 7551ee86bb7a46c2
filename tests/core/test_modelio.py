"""Weights by reference (ARCHITECTURE.md §2) and safe external data (§4).

Models are built in code in tmp_path; onnxruntime runs the written files, so "loadable" means
loadable by a real runtime, not only by the onnx library."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from reducer_core import modelio
from reducer_core.candidate import Candidate
from reducer_core.errors import InvalidModelError, UnsafeExternalDataError
from reducer_core.extract import extract
from reducer_core.graph import GraphIndex

SIDE = 2560  # one float32 weight of SIDE x SIDE is 26 MB; two of them make ~52 MB of weights
WEIGHT_BYTES = SIDE * SIDE * 4
SMALL_FILE_BYTES = 50 * 1024


def _weights(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((SIDE, SIDE), dtype=np.float32) / SIDE


def two_matmul_model() -> onnx.ModelProto:
    """x -> MatMul(W1) -> Relu -> MatMul(W2) -> y, with ~52 MB of weights."""
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm1"),
            helper.make_node("Relu", ["h"], ["r"], name="relu"),
            helper.make_node("MatMul", ["r", "W2"], ["y"], name="mm2"),
        ],
        "two_matmuls",
        [info("x", TensorProto.FLOAT, [1, SIDE])],
        [info("y", TensorProto.FLOAT, [1, SIDE])],
        [numpy_helper.from_array(_weights(1), "W1"), numpy_helper.from_array(_weights(2), "W2")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model)


def save_external(model: onnx.ModelProto, path: Path, location: str = "model.data") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path), save_as_external_data=True, location=location, size_threshold=1024)


def run_ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, feeds)]


def run_ort_proto(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, feeds)]


@pytest.fixture(scope="module")
def external_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("src") / "model.onnx"
    save_external(two_matmul_model(), path)
    return path


@pytest.fixture(scope="module")
def feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(3).standard_normal((1, SIDE), dtype=np.float32)}


def test_iteration_model_is_tiny_and_its_weights_are_a_hardlink(
    external_model: Path, tmp_path: Path, feeds: dict[str, np.ndarray]
) -> None:
    data_file = external_model.with_name("model.data")
    data_stat = data_file.stat()
    assert data_stat.st_size >= 2 * WEIGHT_BYTES
    model, sources = modelio.load_model(external_model)
    sources = modelio.relocate_external_data(model, sources, prefix="polygraphy_debug.w")
    sources.hardlink = True
    target = tmp_path / "work" / "polygraphy_debug.onnx"

    modelio.write_iteration_model(model, target, sources)

    assert target.stat().st_size < SMALL_FILE_BYTES, "an iteration model costs O(graph), not O(weights)"
    (location,) = modelio.referenced_locations(model)
    link = target.parent / location
    assert not link.is_symlink()
    assert os.path.samefile(link, data_file), "the weights are the original file, hardlinked"
    assert data_file.stat().st_nlink >= 2
    np.testing.assert_allclose(run_ort(target, feeds)[0], run_ort(external_model, feeds)[0], rtol=1e-5, atol=1e-6)

    modelio.write_iteration_model(model, target, sources)  # the next iteration reuses the link
    assert os.path.samefile(target.parent / location, data_file)
    after = data_file.stat()
    assert (after.st_size, after.st_mtime_ns) == (data_stat.st_size, data_stat.st_mtime_ns), "original untouched"


def test_by_default_weights_are_copied_once_and_onnx_load_accepts_them(
    external_model: Path, tmp_path: Path, feeds: dict[str, np.ndarray]
) -> None:
    """onnx.load refuses weight files with several hardlinks ("potential hardlink attack"), and
    checks such as `polygraphy run --onnx-outputs mark all` load iteration models with it: by
    default a folder other than the model's gets one copy, reused by every later iteration."""
    data_file = external_model.with_name("model.data")
    links_before = data_file.stat().st_nlink  # the fixture is shared: another test may have linked it
    model, sources = modelio.load_model(external_model)
    sources = modelio.relocate_external_data(model, sources, prefix="polygraphy_debug.w")
    target = tmp_path / "work" / "polygraphy_debug.onnx"

    modelio.write_iteration_model(model, target, sources)
    (location,) = modelio.referenced_locations(model)
    copy = target.parent / location
    first = copy.stat()
    assert first.st_nlink == 1 and data_file.stat().st_nlink == links_before, "no new hardlink"
    loaded = onnx.load(str(target), load_external_data=True)  # what Polygraphy does
    assert {t.name for t in loaded.graph.initializer} == {"W1", "W2"}
    np.testing.assert_allclose(run_ort(target, feeds)[0], run_ort(external_model, feeds)[0], rtol=1e-5, atol=1e-6)

    modelio.write_iteration_model(model, target, sources)  # the next iteration reuses the copy
    again = copy.stat()
    assert (again.st_ino, again.st_mtime_ns) == (first.st_ino, first.st_mtime_ns), "copied once, not per iteration"
    modelio.remove_links(target.parent, sources)
    assert not copy.exists() and data_file.exists()


def test_in_the_models_own_folder_weights_are_referenced_in_place(
    external_model: Path, feeds: dict[str, np.ndarray]
) -> None:
    data_file = external_model.with_name("model.data")
    links_before = data_file.stat().st_nlink
    model, sources = modelio.load_model(external_model)  # no relocation: same folder
    target = external_model.with_name("polygraphy_debug.onnx")
    modelio.write_iteration_model(model, target, sources)
    assert data_file.stat().st_nlink == links_before
    assert [p.name for p in target.parent.iterdir() if p.suffix == ".data"] == ["model.data"], "no copy"
    if links_before == 1:
        onnx.load(str(target), load_external_data=True)
    modelio.remove_links(target.parent, sources)
    assert data_file.exists(), "the model's own weights are never removed"
    target.unlink()


def test_extracted_candidate_keeps_original_offsets(
    external_model: Path, tmp_path: Path, feeds: dict[str, np.ndarray]
) -> None:
    model, sources = modelio.load_model(external_model)
    index = GraphIndex.build(model)
    second = {i for i, n in enumerate(index.nodes) if n.name == "mm2"}
    offsets = {t.name: dict(modelio._external_info(t)) for t in model.graph.initializer}

    sub = extract(index, Candidate(frozenset(second)))
    modelio.write_iteration_model(sub, tmp_path / "iter.onnx", sources)

    assert (tmp_path / "iter.onnx").stat().st_size < SMALL_FILE_BYTES
    assert [t.name for t in sub.graph.initializer] == ["W2"]
    assert dict(modelio._external_info(sub.graph.initializer[0])) == offsets["W2"]
    r = np.maximum(feeds["x"] @ _weights(1), 0)
    np.testing.assert_allclose(run_ort(tmp_path / "iter.onnx", {"r": r})[0], r @ _weights(2), rtol=1e-4, atol=1e-5)


def test_inline_weights_are_externalized_once(tmp_path: Path, feeds: dict[str, np.ndarray]) -> None:
    inline = two_matmul_model()
    bias = numpy_helper.from_array(np.arange(4, dtype=np.float32), "tiny")
    inline.graph.initializer.append(bias)  # below the inline limit: stays in the graph
    expected = run_ort_proto(inline, feeds)
    model, sources = onnx.ModelProto(), modelio.WeightSources()
    model.CopyFrom(inline)
    weights = tmp_path / "scratch.weights"

    moved = modelio.externalize_inline_weights(model, sources, weights, location="polygraphy_debug.weights")

    assert moved == 2 * WEIGHT_BYTES
    assert model.ByteSize() < SMALL_FILE_BYTES
    assert {t.name for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL} == {"W1", "W2"}
    assert next(t for t in model.graph.initializer if t.name == "tiny").data_location == TensorProto.DEFAULT
    stamp = weights.stat().st_mtime_ns, weights.stat().st_size
    assert modelio.externalize_inline_weights(model, sources, weights, location="polygraphy_debug.weights") == 0
    beside = tmp_path / "work" / "polygraphy_debug.weights"
    modelio.write_iteration_model(model, tmp_path / "work" / "polygraphy_debug.onnx", sources)
    copied = beside.stat()  # another folder: one copy (the workspace writes it in place instead)
    for _ in range(2):
        modelio.write_iteration_model(model, tmp_path / "work" / "polygraphy_debug.onnx", sources)
    assert (weights.stat().st_mtime_ns, weights.stat().st_size) == stamp, "iterations never rewrite weights"
    assert (beside.stat().st_ino, beside.stat().st_mtime_ns) == (copied.st_ino, copied.st_mtime_ns), "copied once"
    assert (tmp_path / "work" / "polygraphy_debug.onnx").stat().st_size < SMALL_FILE_BYTES
    np.testing.assert_allclose(run_ort(tmp_path / "work" / "polygraphy_debug.onnx", feeds)[0], expected[0], rtol=1e-5)


def test_save_self_contained_inlines_exactly_the_needed_weights(
    external_model: Path, tmp_path: Path, feeds: dict[str, np.ndarray]
) -> None:
    model, sources = modelio.load_model(external_model)
    index = GraphIndex.build(model)
    first = frozenset(i for i, n in enumerate(index.nodes) if n.name in ("mm1", "relu"))

    data = modelio.save_self_contained(extract(index, Candidate(first)), tmp_path / "reduced.onnx", sources)

    assert data is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reduced.onnx"]
    size = (tmp_path / "reduced.onnx").stat().st_size
    assert WEIGHT_BYTES <= size < WEIGHT_BYTES + SMALL_FILE_BYTES, "W1 only, not W2"
    saved = onnx.load(str(tmp_path / "reduced.onnx"))
    assert [t.name for t in saved.graph.initializer] == ["W1"]
    assert all(t.data_location == TensorProto.DEFAULT for t in saved.graph.initializer)
    (out,) = run_ort(tmp_path / "reduced.onnx", feeds)
    np.testing.assert_allclose(out, np.maximum(feeds["x"] @ _weights(1), 0), rtol=1e-4, atol=1e-5)


def test_save_self_contained_writes_a_data_file_above_the_protobuf_limit(
    external_model: Path, tmp_path: Path, feeds: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The > 2 GB branch, exercised here with a lowered limit (the real size is in the slow CLI test)."""
    monkeypatch.setattr(modelio, "PROTOBUF_LIMIT_BYTES", WEIGHT_BYTES)
    monkeypatch.setattr(modelio, "COPY_CHUNK_BYTES", 1 << 20)
    model, sources = modelio.load_model(external_model)
    index = GraphIndex.build(model)
    last = frozenset(i for i, n in enumerate(index.nodes) if n.name in ("relu", "mm2"))

    data = modelio.save_self_contained(extract(index, Candidate(last)), tmp_path / "reduced.onnx", sources)

    assert data == tmp_path / "reduced.onnx.data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reduced.onnx", "reduced.onnx.data"]
    assert (tmp_path / "reduced.onnx").stat().st_size < SMALL_FILE_BYTES
    assert WEIGHT_BYTES <= data.stat().st_size < WEIGHT_BYTES + 4096, "W2 only"
    saved = onnx.load(str(tmp_path / "reduced.onnx"), load_external_data=False)
    assert [(t.name, dict(modelio._external_info(t))["location"]) for t in saved.graph.initializer] == [
        ("W2", "reduced.onnx.data")
    ]
    h = feeds["x"] @ _weights(1)
    (out,) = run_ort(tmp_path / "reduced.onnx", {"h": h})
    np.testing.assert_allclose(out, np.maximum(h, 0) @ _weights(2), rtol=1e-4, atol=1e-5)


def test_saving_over_the_model_being_reduced_keeps_its_weights(
    tmp_path: Path, feeds: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`reduce reduced.onnx -o reduced.onnx`: the new reduced.onnx.data must not truncate its source."""
    monkeypatch.setattr(modelio, "PROTOBUF_LIMIT_BYTES", WEIGHT_BYTES)
    path = tmp_path / "reduced.onnx"
    save_external(two_matmul_model(), path, location="reduced.onnx.data")
    expected = run_ort(path, feeds)
    model, sources = modelio.load_model(path)

    modelio.save_self_contained(model, path, sources)

    np.testing.assert_allclose(run_ort(path, feeds)[0], expected[0], rtol=1e-5)


# ---- security: every external-data location is resolved by us, never trusted ----


def tiny_external_model(location: str, offset: int = 0, length: int | None = 16, dims: tuple[int, ...] = (4,)) -> bytes:
    weight = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=dims, data_location=TensorProto.EXTERNAL)
    entries = {"location": location, "offset": str(offset)} | ({} if length is None else {"length": str(length)})
    for key, value in entries.items():
        weight.external_data.add(key=key, value=value)
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "W"], ["y"])],
        "g",
        [info("x", TensorProto.FLOAT, [4])],
        [info("y", TensorProto.FLOAT, [4])],
        [weight],
    )
    return bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "w.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    (tmp_path / "outside.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    return folder


def test_a_safe_location_loads(model_dir: Path) -> None:
    (model_dir / "m.onnx").write_bytes(tiny_external_model("w.bin"))
    _, sources = modelio.load_model(model_dir / "m.onnx")
    assert sources.files == {"w.bin": (model_dir / "w.bin").resolve()}


@pytest.mark.parametrize(
    ("make_location", "fix_hint"),
    [
        (lambda d: str((d.parent / "outside.bin").resolve()), "must be relative to the model's folder"),
        (lambda d: "../outside.bin", "keep weight files inside the model's folder"),
        (lambda d: "../models/w.bin", "keep weight files inside the model's folder"),
        (lambda d: "link.bin", "copy the real file instead"),
        (lambda d: "linkdir/w.bin", "copy the real file instead"),
    ],
    ids=["absolute", "dotdot", "nested-dotdot", "symlinked-file", "symlinked-folder"],
)
def test_unsafe_locations_are_rejected_with_a_fix(model_dir: Path, make_location: object, fix_hint: str) -> None:
    (model_dir / "link.bin").symlink_to(model_dir.parent / "outside.bin")
    (model_dir / "linkdir").symlink_to(model_dir.parent)
    (model_dir.parent / "w.bin").write_bytes(b"\0" * 16)
    assert callable(make_location)
    location = make_location(model_dir)
    assert os.path.exists(model_dir / location), "the file exists: only the location's form is wrong"
    (model_dir / "m.onnx").write_bytes(tiny_external_model(location))

    with pytest.raises(UnsafeExternalDataError, match=fix_hint):
        modelio.load_model(model_dir / "m.onnx")


@pytest.mark.parametrize(
    ("offset", "length", "dims", "fix_hint"),
    [
        (0, 32, (4,), "claims bytes 0..32 of 'w.bin', but that file has 16 bytes"),
        (12, 16, (4,), "claims bytes 12..28"),
        (20, None, (4,), "claims bytes 20..16"),
        (0, None, (1_000_000_000,), r"shape \[1000000000\] \(4000000000 bytes\) but only 16 bytes"),
        (0, 8, (4,), r"shape \[4\] \(16 bytes\) but only 8 bytes"),
        (-4, 16, (4,), "claims bytes -4..12"),
    ],
    ids=["length-past-end", "offset-plus-length-past-end", "offset-past-end", "tensor-bomb", "short", "negative"],
)
def test_bytes_beyond_the_file_are_rejected(
    model_dir: Path, offset: int, length: int | None, dims: tuple[int, ...], fix_hint: str
) -> None:
    (model_dir / "m.onnx").write_bytes(tiny_external_model("w.bin", offset, length, dims))
    with pytest.raises(InvalidModelError, match=fix_hint) as caught:
        modelio.load_model(model_dir / "m.onnx")
    assert "re-export" in str(caught.value)


def test_a_missing_weight_file_says_where_it_looked(model_dir: Path) -> None:
    (model_dir / "m.onnx").write_bytes(tiny_external_model("missing.bin"))
    with pytest.raises(InvalidModelError, match="--external-data-dir"):
        modelio.load_model(model_dir / "m.onnx")


def test_external_data_dir_is_where_weights_are_looked_up(model_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "m.onnx").write_bytes(tiny_external_model("w.bin"))
    _, sources = modelio.load_model(elsewhere / "m.onnx", external_data_dir=model_dir)
    assert sources.files["w.bin"] == (model_dir / "w.bin").resolve()


def test_every_truncation_of_a_model_is_an_invalid_model(tmp_path: Path) -> None:
    full = tiny_external_model("w.bin", length=None)
    (tmp_path / "w.bin").write_bytes(b"\0" * 16)
    (tmp_path / "full.onnx").write_bytes(full)
    modelio.load_model(tmp_path / "full.onnx")
    for cut in range(len(full)):
        (tmp_path / "cut.onnx").write_bytes(full[:cut])
        with pytest.raises(InvalidModelError, match="truncated"):
            modelio.load_model(tmp_path / "cut.onnx")


@pytest.mark.parametrize("content", [b"", b"hello, this is not a model\n", b"\x08\x07", bytes(range(256)) * 4])
def test_non_protobuf_files_are_invalid_models(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "bad.onnx").write_bytes(content)
    with pytest.raises(InvalidModelError, match="Export or copy it again"):
        modelio.load_model(tmp_path / "bad.onnx")
