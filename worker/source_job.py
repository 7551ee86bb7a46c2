"""A bisection job started from a finished reduce job of its team (the upload's ``source_job_id``,
issue 28): a ``bisect-passes`` or ``bisect-releases`` job runs on that job's min-bad by default
(``on: min-bad``, the command line's ``--min-bad``; ``on: original`` runs the uploaded model, as
without a source), and a ``bisect-passes`` or ``bisect-releases`` job's answer goes into a copy of that job's bug-report
bundle (``passes.json`` / ``releases.json``, which its ``repro.py`` prints, as the command
line's ``--bundle`` does), stored as the job's own ``bundle`` artifact
(``GET /v1/jobs/{id}/bundle``).

The api checked the source at the upload (same team, a succeeded reduce job with a min-bad);
the worker reads it again by the job's team, so a source deleted since is an error of the job
that names it, never another team's model."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
from sqlalchemy.orm import Session

from engine.report_bundle import put_answer
from persistence.enums import ArtifactKind
from persistence.models import Job
from persistence.repositories import ArtifactRepository
from persistence.store import ArtifactStore, StoredBlob
from reducer_core.errors import UsageError
from worker.prepared import PreparedJob, unpack_original

ON_MIN_BAD = "min-bad"
ON_ORIGINAL = "original"


@dataclass(frozen=True)
class SourceJob:
    """The reduce job a bisection was started from: what it runs on and the stored files it uses."""

    job_id: str
    on: str  # min-bad | original
    min_bad: tuple[str, bool]  # the min-bad's (storage key, stored as a tar with its data files)
    bundle_key: str | None  # the source's bug-report bundle, when it has one

    @property
    def runs_min_bad(self) -> bool:
        return self.on == ON_MIN_BAD


def source_of(session: Session, job: Job) -> SourceJob | None:
    """``job``'s source reduce job (its options' ``source_job_id``), read within ``job``'s team;
    None when it names none. Raises ``UsageError`` when the source or its min-bad is gone."""
    source_id = job.options.get("source_job_id")
    if not source_id:
        return None
    source = session.get(Job, str(source_id))
    if source is None or source.team_id != job.team_id:
        raise UsageError(f"source job '{source_id}' is gone (deleted since this job was submitted)")
    artifacts = ArtifactRepository(session)
    min_bad = artifacts.get(source.id, ArtifactKind.MIN_BAD, ArtifactKind.MIN_BAD.value)
    if min_bad is None:
        raise UsageError(f"source job '{source_id}' has no min-bad any more")
    bundle = artifacts.get(source.id, ArtifactKind.BUNDLE, ArtifactKind.BUNDLE.value)
    on = str(job.options.get("on") or ON_MIN_BAD)
    return SourceJob(
        source.id, on, (min_bad.storage_key, bool(min_bad.meta.get("bundle"))), bundle.storage_key if bundle else None
    )


def bisected_model(store: ArtifactStore, source: SourceJob | None, prepared: PreparedJob) -> tuple[Path, int]:
    """The model a bisection job's checks run (the source's min-bad, or the job's own model) and
    its node count."""
    if source is None or not source.runs_min_bad:
        return prepared.workspace.options.model, len(prepared.workspace.index)
    model = place_min_bad(store, source, prepared.work_dir)
    return model, len(onnx.load(str(model), load_external_data=False).graph.node)


def place_min_bad(store: ArtifactStore, source: SourceJob, work_dir: Path) -> Path:
    """The source's min-bad as a model file under ``work_dir`` (unpacked with its data files)."""
    folder = work_dir / "source-min-bad"
    shutil.rmtree(folder, ignore_errors=True)
    key, packed = source.min_bad
    unpack_original(store, folder, key, packed, "min_bad.onnx")
    models = sorted(folder.rglob("*.onnx"))
    if len(models) != 1:
        raise UsageError(f"source job '{source.job_id}': its min-bad holds {len(models)} .onnx files, not one")
    return models[0]


def answer_bundle(
    store: ArtifactStore, source: SourceJob | None, work_dir: Path, name: str, answer: dict[str, Any]
) -> tuple[StoredBlob, dict[str, Any]] | None:
    """A copy of the source's bundle with the answer in it as ``name``, stored, with the meta of
    its artifact; None without a source or when the source has no bundle."""
    if source is None or source.bundle_key is None:
        return None
    copy = work_dir / "answer-bundle" / "bundle.zip"
    copy.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copyfile(store.path(source.bundle_key), copy)
        put_answer(copy, name, answer)
        blob = store.put_file(copy)
    finally:
        shutil.rmtree(copy.parent, ignore_errors=True)
    return blob, {"source_job_id": source.job_id, "answer": name}


def keep_bundle(session: Session, job_id: str, bundle: tuple[StoredBlob, dict[str, Any]] | None) -> None:
    """The job's ``bundle`` artifact (``GET /v1/jobs/{id}/bundle``), when there is one."""
    if bundle is not None:
        blob, meta = bundle
        ArtifactRepository(session).put(job_id, ArtifactKind.BUNDLE, ArtifactKind.BUNDLE.value, blob, meta)
