"""Artifact rows: what the content-addressed store holds for a job."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from persistence.enums import ArtifactKind
from persistence.models import Artifact, new_id
from persistence.store import StoredBlob


class ArtifactRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def put(
        self, job_id: str, kind: ArtifactKind, name: str, blob: StoredBlob, meta: Mapping[str, Any] | None = None
    ) -> Artifact:
        """Insert or replace the (job, kind, name) artifact."""
        artifact = self.get(job_id, kind, name)
        if artifact is None:
            artifact = Artifact(job_id=job_id, kind=kind.value, name=name)
            self.session.add(artifact)
        artifact.size, artifact.sha256, artifact.storage_key = blob.size, blob.sha256, blob.key
        artifact.meta = dict(meta or {})
        self.session.flush()
        return artifact

    def add(
        self, job_id: str, kind: ArtifactKind, name: str, blob: StoredBlob, meta: Mapping[str, Any] | None = None
    ) -> str:
        """Insert a (job, kind, name) artifact the job does not hold yet, at once (one statement:
        a row inserted next may refer to its id); its id."""
        values: dict[str, Any] = {"id": new_id(), "job_id": job_id, "kind": kind.value, "name": name}
        values |= {"size": blob.size, "sha256": blob.sha256, "storage_key": blob.key, "meta": dict(meta or {})}
        self.session.connection().execute(_ADD, values)
        return str(values["id"])

    def get(self, job_id: str, kind: ArtifactKind, name: str) -> Artifact | None:
        query = select(Artifact).where(Artifact.job_id == job_id, Artifact.kind == kind.value, Artifact.name == name)
        return self.session.scalar(query)

    def of_kind(self, job_id: str, kind: ArtifactKind) -> Sequence[Artifact]:
        query = select(Artifact).where(Artifact.job_id == job_id, Artifact.kind == kind.value).order_by(Artifact.name)
        return self.session.scalars(query).all()

    def inputs(self, job_id: str) -> list[Artifact]:
        """The job's uploaded input files (kind inputs, ``inputs-N``), in the order they were sent."""
        rows = self.of_kind(job_id, ArtifactKind.INPUTS)
        return sorted(rows, key=lambda a: int(a.name.rpartition("-")[2]) if a.name.rpartition("-")[2].isdigit() else 0)

    def keep_fp32(self, job_ids: Collection[str]) -> dict[str, list[str]]:
        """The nodes kept fp32 by each of ``job_ids`` that is a finished precision job (one query)."""
        if not job_ids:
            return {}
        query = select(Artifact.job_id, Artifact.meta).where(
            Artifact.job_id.in_(list(job_ids)), Artifact.kind == ArtifactKind.MIXED.value
        )
        return {job_id: list(meta.get("keep_fp32", [])) for job_id, meta in self.session.execute(query).all()}

    def verification(self, job_id: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """A finished reduce job's ``verified`` (per final model, from its artifact's meta; None
        without final models; with ``bundle``: the checks the bug-report bundle's self-check ran
        and the models it took the final verification's verdict of, ``engine.bundle``) and
        ``suspect`` (the min-bad artifact's; ``worker.final_checks``)."""
        kinds = (ArtifactKind.MIN_BAD.value, ArtifactKind.MIN_GOOD.value)
        wanted = (*kinds, ArtifactKind.BUNDLE.value)
        query = select(Artifact.kind, Artifact.meta).where(Artifact.job_id == job_id, Artifact.kind.in_(wanted))
        metas = {kind: meta for kind, meta in self.session.execute(query).all()}
        if not any("verified" in metas.get(kind, {}) for kind in kinds):
            return None, None
        verified = {kind.replace("-", "_"): metas.get(kind, {}).get("verified") for kind in kinds}
        bundle = metas.get(ArtifactKind.BUNDLE.value, {})
        if "checks_run" in bundle:
            verified["bundle"] = {"checks": bundle["checks_run"], "reused": bundle.get("reused", [])}
        return verified, metas.get(ArtifactKind.MIN_BAD.value, {}).get("suspect")

    def references(self, storage_key: str) -> int:
        return self.session.scalar(select(func.count()).where(Artifact.storage_key == storage_key)) or 0

    def referenced(self, storage_keys: Collection[str]) -> set[str]:
        """Those of ``storage_keys`` that some artifact row refers to."""
        query = select(Artifact.storage_key).where(Artifact.storage_key.in_(list(storage_keys))).distinct()
        return set(self.session.scalars(query).all())


_ADD = insert(Artifact)  # (built once: a worker stores a model at every check)
