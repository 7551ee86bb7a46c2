"""The farm's workers: ``GET /v1/workers``. Team-neutral: another team's job shows as ``busy``."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.orm import Session

from api.deps import ServicesDep, TeamDep
from api.farm import WorkerView, load_workers
from api.schemas import RuntimesOut, WorkerCheckOut, WorkerJobOut, WorkerList, WorkerOut, utc
from persistence.models import Team
from persistence.repositories import JobRepository
from persistence.repositories.units import UnitRepository

router = APIRouter(prefix="/v1/workers", tags=["workers"])


@router.get("", response_model=WorkerList)
def list_workers(services: ServicesDep, team: TeamDep) -> WorkerList:
    """Every worker that reported recently: queues, GPUs and runtimes, what it is doing (the job
    and check, for your team's jobs), last heartbeat, busy time. A worker without a heartbeat for
    ``WORKER_OFFLINE_AFTER_S`` is ``offline``; after ``WORKER_FORGET_AFTER_S`` it is left out."""
    with services.db.session() as session:
        views = load_workers(session, services.settings)
        items = [_worker_out(session, view, team) for view in views]
    return WorkerList(
        items=items,
        online=sum(1 for v in views if v.online),
        busy=sum(1 for v in views if v.busy),
    )


def _worker_out(session: Session, view: WorkerView, team: Team) -> WorkerOut:
    row, offered = view.row, view.capabilities
    return WorkerOut(
        name=row.name,
        host=row.host,
        queues=list(row.queues),
        state=view.state,
        gpus=list(offered.gpus),
        runtimes=RuntimesOut(
            onnxruntime=offered.onnxruntime,
            providers=list(offered.providers),
            tensorrt=offered.tensorrt,
            runtime_envs=list(offered.runtime_envs),
        ),
        job=_own_job(session, row.current_job_id, team, row.name) if view.busy else None,
        started_at=utc(row.started_at) or row.started_at,
        last_heartbeat=utc(row.heartbeat_at) or row.heartbeat_at,
        jobs_done=row.jobs_done,
        busy_s=round(view.busy_total_s, 3),
        utilisation=round(view.utilisation, 4),
    )


def _own_job(session: Session, job_id: str | None, team: Team, worker: str) -> WorkerJobOut | None:
    """The job and the check this worker runs (none while it works on the job between checks: never
    another worker's check), only when the job is the caller's team's."""
    if job_id is None or JobRepository(session).for_team(team.id, job_id) is None:
        return None
    running = UnitRepository(session).in_flight(job_id)
    check = next((c for c in running if c.worker == worker), None)
    return WorkerJobOut(
        id=job_id,
        check=WorkerCheckOut(
            iteration=check.iteration, phase=check.phase, nodes=check.nodes, started_at=utc(check.started_at)
        )
        if check is not None
        else None,
    )
