"""``GET /v1/jobs/{id}/artifacts/{name}/graph``: the graph of a stored model as JSON (nodes, tensor
shapes and dtypes, graph inputs and outputs, op histogram), for the web page's drawings. Over
``max_nodes`` nodes only the summary comes back. Weights are never read. Answers are cached by
file (path, size, modification time) and ``max_nodes``, after the team check: the page draws the
original model (up to 20,000 nodes) each time a job is opened.

``GET /v1/jobs/{id}/node-errors``: a compare/golden job's per-tensor errors from its localisation
step (the layerwise run), which the page overlays on the graphs (a node takes its worst output)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from api.deps import ServicesDep, TeamDep
from api.graph_view import GraphOut, describe_graph, read_graph
from api.problems import ProblemError
from api.routes.artifacts import locate_artifact
from api.routes.jobs import load_job
from api.services import Services
from checks.spec import CheckSpecError
from persistence.enums import ArtifactKind
from persistence.models import Artifact, Job
from persistence.repositories import ArtifactRepository
from persistence.stored_spec import stored_spec

router = APIRouter(prefix="/v1/jobs", tags=["artifacts"])
DEFAULT_MAX_NODES = 400
MAX_NODES_LIMIT = 20_000


@lru_cache(maxsize=16)
def cached_graph(path: str, is_tar: bool, size: int, mtime_ns: int, max_nodes: int) -> GraphOut:
    """The graph of one file version (``size`` and ``mtime_ns`` are part of the key only)."""
    return describe_graph(read_graph(Path(path), is_tar), max_nodes)


def _model_file(services: Services, job: Job, artifact: Artifact) -> tuple[Path, bool]:
    """The file holding the model's graph, and whether it is a tar bundle. An uploaded bundle
    (tar or zip) is read from the job's unpacked model folder."""
    if artifact.kind == ArtifactKind.ORIGINAL.value and artifact.meta.get("bundle"):
        return services.layout.root / job.model_path, False
    return services.layout.store.path(artifact.storage_key), bool(artifact.meta.get("bundle"))


@router.get("/{job_id}/artifacts/{name}/graph", response_model=GraphOut)
def artifact_graph(
    job_id: str,
    name: str,
    services: ServicesDep,
    team: TeamDep,
    max_nodes: Annotated[int, Query(ge=1, le=MAX_NODES_LIMIT, description="past this many nodes, only a summary")] = (
        DEFAULT_MAX_NODES
    ),
) -> GraphOut:
    """The graph of min-bad, min-good, original or iteration-N: nodes, tensors, inputs, outputs."""
    job = load_job(services, team.id, job_id)
    located = locate_artifact(services, job, name)
    path, is_tar = _model_file(services, job, located.artifact)
    stat = path.stat()
    return cached_graph(str(path), is_tar, stat.st_size, stat.st_mtime_ns, max_nodes)


class TensorErrorOut(BaseModel):
    tensor: str = Field(description="the tensor's name (a node output)")
    node: str = Field(description="its producer: the node's name, or `Op:first_output` when unnamed")
    op: str
    max_abs: float | None = Field(description="largest absolute element error; null when not comparable")
    max_rel: float | None = Field(description="largest relative element error; null when not comparable")
    nonfinite: bool = Field(description="inf/NaN on one side only (an overflow): max_abs and max_rel are null")
    beyond: bool = Field(description="beyond the check's tolerance")


class ToleranceOut(BaseModel):
    atol: float = Field(description="absolute tolerance: a tensor within it (or within rtol) is within tolerance")
    rtol: float = Field(description="relative tolerance")
    per_output: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="graph outputs with their own {atol, rtol}"
    )


class NodeErrorsOut(BaseModel):
    sample: int = Field(description="the input sample measured: the first with a tensor beyond tolerance")
    total: int = Field(description="tensors compared")
    truncated: bool = Field(description="more tensors were compared than kept: only the worst are listed")
    tensors: list[TensorErrorOut] = Field(description="in node order; floats rounded to 4 significant digits")
    tolerance: ToleranceOut | None = Field(
        default=None,
        description="the check spec's tolerance, which the page's colour scale is anchored at (errors within it "
        "in neutral tones, beyond it in warm ones); null when the spec has none",
    )


def _tolerance_of(job: Job) -> ToleranceOut | None:
    """The tolerance of the job's check spec (stored parsed at intake; None if it no longer reads)."""
    try:
        tolerance = stored_spec(job.spec).tolerance
    except CheckSpecError:
        return None
    return None if tolerance is None else ToleranceOut.model_validate(tolerance.to_json())


def _no_errors(job: Job) -> ProblemError:
    return ProblemError(
        404,
        "Not Found",
        f"Job '{job.id}' has no per-node errors: only compare and golden jobs measure them, in their "
        "localisation step (the layerwise run), once it has run: wait for it, or submit the model with a "
        "compare or golden check spec to get them.",
    )


@router.get("/{job_id}/node-errors", response_model=NodeErrorsOut)
def node_errors(job_id: str, services: ServicesDep, team: TeamDep) -> NodeErrorsOut:
    """Every tensor's error from the job's localisation step (compare/golden checks): what the
    page's error overlay colours the nodes by. 404 when the job has none (another check kind, or
    its localisation step has not run yet)."""
    job = load_job(services, team.id, job_id)
    with services.db.session() as session:
        artifact = ArtifactRepository(session).get(job.id, ArtifactKind.NODE_ERRORS, ArtifactKind.NODE_ERRORS.value)
    if artifact is None:
        raise _no_errors(job)
    with services.layout.store.open(artifact.storage_key) as stream:
        document = json.loads(stream.read())
    return NodeErrorsOut.model_validate(document | {"tolerance": _tolerance_of(job)})
