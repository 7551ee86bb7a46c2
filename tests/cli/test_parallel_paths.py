"""``--jobs N`` means what ``--jobs 1`` means to the check command: relative paths with ``..``,
paths into subfolders, absolute paths, the user's environment, scratch files the check writes in
its working folder and reads back, and the iteration artifact by its name. Each command reduces to
the same files (byte for byte) with four slots as with one.

The user's working folder is ``proj/run``; the check's files live beside it, in it and below it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path, PurePath

import pytest

from reducer_cli.slots import COPY_BUDGET_BYTES, COPY_LIMIT_BYTES, SLOTS_DIR, SlotFolders
from tests.cli.helpers import ITER, node, node_names, reduce, save_branchy

CULPRITS_ENV = "PATHS_TEST_CULPRITS"
CLOBBERED = "another run's scratch file"
# Fails when every node named in the culprits file is in the iteration model. Without arguments it
# reads polygraphy_debug.onnx and the culprits file the environment names (or culprits.txt). With a
# third argument it writes its finding to that scratch file and reads it back, as many checks do
# with an output file; a file shared by concurrent runs shows another run's finding.
CHECK = f"""import hashlib, os, sys
artifact = sys.argv[1] if len(sys.argv) > 1 else "polygraphy_debug.onnx"
culprits_file = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("{CULPRITS_ENV}", "culprits.txt")
data = open(artifact, "rb").read()
present = all(name.encode() in data for name in open(culprits_file).read().split())
if len(sys.argv) > 3:
    finding = f"{{present}} {{hashlib.sha256(data).hexdigest()}}"
    for _ in range(200):
        with open(sys.argv[3], "w") as f:
            f.write(finding)
        with open(sys.argv[3]) as f:
            if f.read() != finding:
                print("{CLOBBERED}")
                sys.exit(3)
sys.exit(1 if present else 0)
"""
CULPRITS = ("A", "H")  # on two branches: the answer is these two nodes, a broken check's is not
PY = sys.executable


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``proj/`` with the check and its data in ``proj/tools``, ``proj/run`` (the working folder,
    where the test runs), ``proj/run/tools`` and ``proj/run/models``; returns ``proj``."""
    proj = tmp_path / "proj"
    culprits = " ".join(node(c) for c in CULPRITS)
    for folder in (proj / "tools", proj / "run", proj / "run" / "tools", proj / "run" / "models"):
        folder.mkdir(parents=True)
        (folder / "check.py").write_text(CHECK)
        (folder / "culprits.txt").write_text(culprits)
    monkeypatch.chdir(proj / "run")
    return proj


def reduces_alike(check: list[str], *options: str, parallel: tuple[str, ...] = ("--jobs", "4")) -> None:
    """One slot, then four: both exit 0 with the culprits, and the same -o and --min-good bytes."""
    model = save_branchy()
    one = ["-o", "one.onnx", "--min-good", "one-good.onnx", "--summary-json", "one.json", *options]
    assert reduce(model, *one, check=check) == 0
    four = ["-o", "four.onnx", "--min-good", "four-good.onnx", "--summary-json", "four.json", *options, *parallel]
    assert reduce(model, *four, check=check) == 0

    assert sorted(node_names("one.onnx")) == sorted(node(c) for c in CULPRITS), "the check works with one slot"
    assert Path("four.onnx").read_bytes() == Path("one.onnx").read_bytes()
    assert Path("four-good.onnx").read_bytes() == Path("one-good.onnx").read_bytes()
    assert json.loads(Path("four.json").read_text())["jobs"] == 4
    assert not Path(SLOTS_DIR).exists()


def test_a_script_beside_the_working_folder_by_dotdot(project: Path) -> None:
    """The issue's command: ``python ../tools/check.py polygraphy_debug.onnx``."""
    reduces_alike([PY, "../tools/check.py", ITER, "../tools/culprits.txt"])


def test_a_script_in_a_subfolder(project: Path) -> None:
    reduces_alike([PY, "tools/check.py", ITER, "tools/culprits.txt"])


def test_absolute_paths_with_devices(project: Path) -> None:
    tools = project / "tools"
    check = [PY, str(tools / "check.py"), ITER, str(tools / "culprits.txt")]
    reduces_alike(check, parallel=("--devices", "0,1,0,1"))


def test_a_relative_path_in_the_environment(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CULPRITS_ENV, "../tools/culprits.txt")
    reduces_alike([PY, "check.py", ITER])


def test_a_check_that_writes_a_scratch_file_and_reads_it_back(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``scratch.txt`` in the working folder: the run with one slot leaves it there, yet each slot
    writes and reads its own."""
    reduces_alike([PY, "check.py", ITER, "culprits.txt", "scratch.txt"])
    assert Path("scratch.txt").is_file(), "the file a run with one slot writes stays in the working folder"
    assert CLOBBERED not in capsys.readouterr().err


def test_a_check_that_leaves_its_folder_and_comes_back_by_name(project: Path) -> None:
    """``cd .. && python tools/check.py run/polygraphy_debug.onnx``: the slot's artifact, still."""
    reduces_alike(["sh", "-c", f"cd .. && {PY} tools/check.py run/{ITER} run/culprits.txt"])


def test_the_artifact_by_the_name_the_script_knows(project: Path) -> None:
    """The script opens ``polygraphy_debug.onnx`` and ``culprits.txt`` itself (no arguments)."""
    reduces_alike([PY, "check.py"])


def test_an_iteration_artifact_in_a_subfolder_beside_the_users_files(project: Path) -> None:
    """``--iter-artifact models/under_test.onnx``: the slot writes its own ``models/``, which still
    holds the user's ``models/culprits.txt``."""
    artifact = "models/under_test.onnx"
    reduces_alike([PY, "models/check.py", artifact, "models/culprits.txt"], "--iter-artifact", artifact)
    assert sorted(os.listdir("models")) == ["check.py", "culprits.txt"], "the user's files, untouched"


def test_a_slot_folder_mirrors_the_path_down_to_the_working_folder(project: Path) -> None:
    """Slot folders directly: the working folder's path below each slot's root, every folder on
    the way holding links to its counterpart's entries; small files copied (smallest first, within
    the budget), the rest linked; the slot's own paths kept out."""
    run = project / "run"
    Path("big.bin").write_bytes(b"x" * (COPY_LIMIT_BYTES + 1))
    (project / "sibling.txt").write_text("beside the working folder")
    Path("polygraphy_debug.onnx").write_text("an earlier run's artifact")
    slots = SlotFolders(Path.cwd(), 2, [PurePath(ITER), PurePath("models/under_test.onnx")])
    slots.create()

    here = slots.folder(2)
    assert here == slots.root / "slot2" / run.resolve().relative_to(run.anchor)
    assert (here / ".." / "sibling.txt").read_text() == "beside the working folder"
    assert (here / ".." / "tools" / "check.py").resolve() == (project / "tools" / "check.py").resolve()
    assert (here / "big.bin").is_symlink() and not (here / "check.py").is_symlink()
    assert not (here / ITER).exists() and not (here / SLOTS_DIR).exists()
    assert not (here / "models").is_symlink() and (here / "models" / "culprits.txt").read_text() == " ".join(
        node(c) for c in CULPRITS
    )
    (here / "check.py").write_text("the slot's own")
    assert Path("check.py").read_text() == CHECK, "a slot writes its copy, not the user's file"

    slots.remove()
    assert not slots.root.exists() and (project / "sibling.txt").exists() and Path("big.bin").exists()
    assert (project / "tools" / "check.py").read_text() == CHECK, "removing links never removes their targets"


def test_files_beyond_the_copy_budget_are_linked(tmp_path: Path) -> None:
    for size in range(70):  # 70 files of (almost) 1 MiB
        (tmp_path / f"f{size:02d}").write_bytes(b"x" * (COPY_LIMIT_BYTES - size))
    slots = SlotFolders(tmp_path, 1, [PurePath(ITER)])
    slots.create()
    linked = sorted(entry.name for entry in slots.folder(1).iterdir() if entry.is_symlink())
    sizes = [COPY_LIMIT_BYTES - size for size in range(70)]
    assert sum(sizes[6:]) <= COPY_BUDGET_BYTES < sum(sizes[5:]), "64 fit in the budget, 65 do not"
    assert linked == [f"f{size:02d}" for size in range(6)], "the largest files are linked"


def test_the_artifact_by_its_absolute_path_is_refused_with_slots(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every slot writes its own artifact: a check that names the working folder's by its absolute
    path would read an earlier run's file (or none), so it is refused, before any check, and works
    with one slot."""
    Path(ITER).write_text("an earlier run's artifact")
    check = [PY, "check.py", str(Path.cwd() / ITER), "culprits.txt", "checked.txt"]
    assert reduce(save_branchy(), "-o", "four.onnx", "--jobs", "4", check=check) == 2
    assert f"name it as a relative path ({ITER})" in capsys.readouterr().err
    assert not Path("checked.txt").exists() and not Path("four.onnx").exists()
    assert reduce(save_branchy(), "-o", "one.onnx", check=check) == 0
    assert sorted(node_names("one.onnx")) == sorted(node(c) for c in CULPRITS)
