"""Safe unpacking of a model bundle (.tar or .zip with external data) into a fresh folder.

Every member is checked before anything is written: no absolute names, no '..', no symlinks,
hardlinks or device files, and a cap on the total unpacked size (archive bombs). Tar extraction
also uses ``filter="data"``."""

from __future__ import annotations

import shutil
import stat
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from api.problems import ProblemError, field_errors


def _bad(detail: str, title: str = "Unsafe bundle") -> ProblemError:
    return ProblemError(422, title, detail)


def _check_name(name: str, label: str = "Bundle", title: str = "Unsafe bundle") -> None:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise _bad(f"{label} member '{name}' has an absolute path; use paths relative to the archive.", title)
    if ".." in path.parts:
        raise _bad(f"{label} member '{name}' contains '..'; keep every file inside the archive.", title)


def check_zip_members(
    archive: zipfile.ZipFile, max_bytes: int, label: str = "Bundle", title: str = "Unsafe bundle"
) -> list[zipfile.ZipInfo]:
    """Every member of a zip, checked before anything is read: relative names without '..', no
    symlinks, and at most ``max_bytes`` unpacked in all (zip bombs; a member never reads back more
    than it declares). ``label`` and ``title`` name the upload in the 422 problem."""
    infos = archive.infolist()
    total = 0
    for info in infos:
        _check_name(info.filename, label, title)
        if stat.S_ISLNK(info.external_attr >> 16):
            raise _bad(f"{label} member '{info.filename}' is a symlink; archives must hold real files.", title)
        total += info.file_size
        if total > max_bytes:
            raise _bad(f"The {label.lower()} unpacks to more than {max_bytes} bytes.", title)
    return infos


def is_bundle(path: Path) -> bool:
    return zipfile.is_zipfile(path) or _is_tar(path)


def _is_tar(path: Path) -> bool:
    try:
        return tarfile.is_tarfile(path)
    except OSError:
        return False


def extract_bundle(archive: Path, dest: Path, max_bytes: int) -> None:
    dest.mkdir(parents=True, exist_ok=False)
    if zipfile.is_zipfile(archive):
        _extract_zip(archive, dest, max_bytes)
    else:
        _extract_tar(archive, dest, max_bytes)


def _extract_tar(archive: Path, dest: Path, max_bytes: int) -> None:
    try:
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
            total = 0
            for member in members:
                _check_name(member.name)
                if member.issym() or member.islnk():
                    kind = "symlink" if member.issym() else "hardlink"
                    raise _bad(f"Bundle member '{member.name}' is a {kind}; bundles must hold real files.")
                if not (member.isfile() or member.isdir()):
                    raise _bad(f"Bundle member '{member.name}' is not a regular file.")
                total += member.size
                if total > max_bytes:
                    raise _bad(f"The bundle unpacks to more than {max_bytes} bytes.")
            tar.extractall(dest, members=members, filter="data")
    except tarfile.TarError as exc:
        raise _bad(f"The tar bundle cannot be read: {exc}") from exc


def _extract_zip(archive: Path, dest: Path, max_bytes: int) -> None:
    try:
        with zipfile.ZipFile(archive) as bundle:
            infos = check_zip_members(bundle, max_bytes)
            for info in infos:
                target = dest / PurePosixPath(info.filename.replace("\\", "/"))
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with bundle.open(info) as source, open(target, "wb") as sink:
                    shutil.copyfileobj(source, sink, 1024 * 1024)
    except (zipfile.BadZipFile, OSError) as exc:
        raise _bad(f"The zip bundle cannot be read: {exc}") from exc


def find_model(root: Path, wanted: str | None) -> Path:
    """The bundle's model: the one .onnx file, or the one named by the ``model_path`` field."""
    if wanted:
        _check_name(wanted)
        path = root / wanted
        if not path.is_file() or path.is_symlink():
            detail = f"model_path '{wanted}' is not a file in the bundle."
            raise ProblemError(422, "Invalid upload", detail, errors=field_errors("model_path", detail))
        return path
    models = sorted(p for p in root.rglob("*.onnx") if p.is_file())
    if len(models) != 1:
        found = ", ".join(str(p.relative_to(root)) for p in models[:5]) or "none"
        detail = f"The bundle must hold exactly one .onnx file (found: {found}); name it with the model_path field."
        raise ProblemError(422, "Invalid upload", detail, errors=field_errors("model_path", detail))
    return models[0]
