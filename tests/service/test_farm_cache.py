"""The farm verdict cache: the scope a verdict is kept under (runtime included), its repository on
PostgreSQL (one verdict per team and candidate, a team reads only its own unless every team is
asked for), and real Celery workers: a second job of a team on the same model and spec runs no
check and lists every verdict as a farm cache hit, another team runs its checks unless the
operator shares verdicts across teams, and a worker with another runtime checks again; the web
page shows a farm-answered job's iterations as cache hits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By

from checks.capabilities import Capabilities
from persistence.db import Database
from persistence.enums import JobStatus
from persistence.repositories import (
    CachedAnswer,
    FarmVerdictRepository,
    IterationRepository,
    JobRepository,
    TeamRepository,
)
from reducer_core.cache import VerdictCache
from tests.service.conftest import Processes, client_for, scrape, start_api
from tests.service.helpers import OP_PRESENT_MUL, chain_model, stored_job, submit, wait_job
from tests.service.web_harness import catalogue, chromium, embedded_service
from worker.context import context_from_settings
from worker.farm_cache import farm_scope, runtime_identity
from worker.run_job import run_job
from worker.settings import WorkerSettings

CPU = Capabilities(onnxruntime="1.20.1", providers=("CPUExecutionProvider",))
H100 = Capabilities(
    gpus=("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),
    onnxruntime="1.20.1",
    providers=("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"),
    tensorrt="10.3.0",
)
FAIL = {"kind": "fail", "signature": "op-present:Mul", "detail": "", "duration_s": 0.5}
PASS = {"kind": "pass", "signature": "", "detail": "", "duration_s": 0.4}


# -- the scope ---------------------------------------------------------------------------------------


def test_the_runtime_identity_names_versions_providers_gpus_and_memory_limit_in_any_order() -> None:
    same = Capabilities(
        gpus=("NVIDIA H100 80GB HBM3",),
        onnxruntime="1.20.1",
        providers=("CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"),
        tensorrt="10.3.0",
    )
    assert runtime_identity(H100, 2**33) == runtime_identity(same, 2**33)
    others = [
        Capabilities(gpus=("NVIDIA A100",), onnxruntime="1.20.1", providers=H100.providers, tensorrt="10.3.0"),
        Capabilities(gpus=H100.gpus, onnxruntime="1.19.2", providers=H100.providers, tensorrt="10.3.0"),
        Capabilities(gpus=H100.gpus, onnxruntime="1.20.1", providers=H100.providers, tensorrt="10.4.0"),
        Capabilities(gpus=H100.gpus, onnxruntime="1.20.1", providers=("CPUExecutionProvider",), tensorrt="10.3.0"),
        CPU,
    ]
    identities = {runtime_identity(H100, 2**33), runtime_identity(H100, 2**32)}
    identities |= {runtime_identity(other, 2**33) for other in others}
    assert len(identities) == 2 + len(others)


def test_the_scope_changes_with_the_model_bytes_the_check_and_the_runtime() -> None:
    cache = VerdictCache("graph-1", "spec:op-present | options")
    runtime = runtime_identity(CPU, None)
    scope = farm_scope("sha-model", cache, runtime)
    assert scope == farm_scope("sha-model", VerdictCache("graph-1", "spec:op-present | options"), runtime)
    assert (
        len(
            {
                scope,
                farm_scope("sha-other-weights", cache, runtime),
                farm_scope("sha-model", VerdictCache("graph-2", cache.check), runtime),
                farm_scope("sha-model", VerdictCache("graph-1", "spec:error | options"), runtime),
                farm_scope("sha-model", cache, runtime_identity(H100, None)),
            }
        )
        == 5
    )


# -- the repositories on PostgreSQL ------------------------------------------------------------------


def _team_and_job(database: Database, team: str) -> tuple[str, str]:
    with database.session() as session:
        team_id = TeamRepository(session).get_or_create(team).id
        return team_id, stored_job(session, team_id, JobStatus.RUNNING).id


def test_a_team_keeps_one_verdict_per_candidate_and_reads_only_its_own(database: Database) -> None:
    team_a, job_a = _team_and_job(database, "team-a")
    team_b, job_b = _team_and_job(database, "team-b")
    with database.session() as session:
        farm = FarmVerdictRepository(session)
        assert farm.add(team_a, "scope-1", "fp-1", FAIL, job_a)
        assert not farm.add(team_a, "scope-1", "fp-1", PASS, job_a)  # a duplicate is ignored: the first stays
        assert farm.add(team_a, "scope-1", "fp-2", PASS, job_a)
        assert farm.add(team_a, "scope-2", "fp-1", PASS, job_a)  # another scope is another key
        assert farm.add(team_b, "scope-1", "fp-1", PASS, job_b)  # so is another team
        assert farm.add(team_b, "scope-1", "fp-3", FAIL, job_b)
    with database.session() as session:
        farm = FarmVerdictRepository(session)
        mine = {v.fingerprint: v.verdict for v in farm.known("scope-1", team_a)}
        assert mine == {"fp-1": FAIL, "fp-2": PASS}
        assert {v.fingerprint: v.verdict for v in farm.known("scope-2", team_a)} == {"fp-1": PASS}
        assert farm.known("scope-2", team_b) == []
        everyone = {v.fingerprint: v.verdict for v in farm.known("scope-1", team_b, every_team=True)}
        assert everyone == {"fp-1": PASS, "fp-2": PASS, "fp-3": FAIL}  # the team's own verdict comes first
        assert {v.fingerprint: v.verdict for v in farm.known("scope-1", team_a, every_team=True)}["fp-1"] == FAIL
        assert farm.counts_by_team() == {"team-a": 3, "team-b": 2}


def test_cached_iterations_are_numbered_in_order_and_are_not_counted_as_checks(database: Database) -> None:
    _, job_a = _team_and_job(database, "team-a")
    with database.session() as session:
        iterations = IterationRepository(session)
        checked = iterations.start(job_a, "original", "fp-0", 5)
        iterations.finish(checked, "fail", True, "op-present:Mul", "")
        answer = CachedAnswer("bisect", "fp-1", 3, "pass", False, "", "", "farm")
        cached = iterations.add_cached(job_a, answer)
        later = iterations.start(job_a, "bisect", "fp-2", 2)
        assert (checked.number, cached.number, later.number) == (1, 2, 3)
        assert cached.cached == "farm" and not cached.pending and cached.duration_s == 0.0
        assert iterations.fingerprints(job_a) == {"fp-0", "fp-1"}  # the pending one has no verdict yet
        job = JobRepository(session).get(job_a)
        assert job is not None
        job.checks_run, job.cache_hits, job.farm_hits = 1, 1, 1
    with database.session() as session:
        moment = checked.created_at.replace(year=2000)
        assert IterationRepository(session).finished_since(moment) == {"team-a": 1}
        totals = JobRepository(session).check_totals()
        assert [(t.team, t.checks, t.cache_hits, t.farm_hits) for t in totals] == [("team-a", 1, 1, 1)]


# -- real workers --------------------------------------------------------------------------------------

MODEL = chain_model(length=10, mul_at=6)


def _run(client: httpx.Client, spec: str = OP_PRESENT_MUL) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    response = submit(client, MODEL.SerializeToString(), spec)
    assert response.status_code == 202, response.text
    job = wait_job(client, response.json()["id"])
    assert job["status"] == "succeeded", job
    items: list[dict[str, Any]] = client.get(f"/v1/jobs/{job['id']}/iterations").json()["items"]
    return job, items


def _metric(text: str, sample: str) -> float | None:
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name == sample:
            return float(value)
    return None


@pytest.mark.slow
def test_a_second_job_of_the_team_runs_no_check_and_another_team_runs_its_own(
    processes: Processes, tokens: dict[str, str]
) -> None:
    api_url = start_api(processes)
    processes.worker()
    with client_for(api_url, tokens["team-a"]) as a, client_for(api_url, tokens["team-b"]) as b:
        first, first_items = _run(a)
        assert first["progress"]["checks_run"] > 0 and first["progress"]["farm_cache_hits"] == 0
        assert not any(item["cached"] == "farm" for item in first_items)

        second, second_items = _run(a)
        assert second["progress"]["checks_run"] == 0
        checked = [item for item in first_items if item["cached"] is None]
        assert second["progress"]["farm_cache_hits"] == len(checked)
        assert second["progress"]["cache_hits"] == len(second_items)
        assert [item["cached"] for item in second_items if item["cached"] != "job"] == ["farm"] * len(checked)
        assert [(i["fingerprint"], i["verdict"]) for i in second_items] == [
            (i["fingerprint"], i["verdict"]) for i in first_items
        ]  # the same flow, every verdict answered from a cache
        assert all(item["artifact"] is None and item["duration_s"] == 0.0 for item in second_items)
        assert second["nodes_after"] == first["nodes_after"] == 1
        assert a.get(f"/v1/jobs/{second['id']}/artifacts/min-bad").status_code == 200

        other, _ = _run(b)  # verdicts are not shared across teams by default
        assert other["progress"]["checks_run"] == first["progress"]["checks_run"]
        assert other["progress"]["farm_cache_hits"] == 0

    text = scrape(api_url)
    assert _metric(text, 'onnx_reducer_checks_total{team="team-a"}') == first["progress"]["checks_run"]
    assert _metric(text, 'onnx_reducer_checks_total{team="team-b"}') == other["progress"]["checks_run"]
    assert _metric(text, 'onnx_reducer_verdict_cache_hits_total{cache="farm",team="team-a"}') == len(checked)
    assert _metric(text, 'onnx_reducer_verdict_cache_hits_total{cache="farm",team="team-b"}') == 0
    assert _metric(text, 'onnx_reducer_farm_verdicts{team="team-a"}') == len({i["fingerprint"] for i in checked})
    farm_ratio = _metric(text, "onnx_reducer_farm_cache_hit_ratio")
    assert farm_ratio is not None and 0 < farm_ratio < 1


@pytest.mark.slow
def test_the_operator_may_share_verdicts_across_teams_but_never_across_runtimes(
    processes: Processes, tokens: dict[str, str]
) -> None:
    api_url = start_api(processes)
    cpu_worker = processes.worker(SHARE_VERDICTS_ACROSS_TEAMS="true", WORKER_GPUS="none")
    with client_for(api_url, tokens["team-a"]) as a, client_for(api_url, tokens["team-b"]) as b:
        first, _ = _run(a)
        assert first["progress"]["checks_run"] > 0
        shared, shared_items = _run(b)
        assert shared["progress"]["checks_run"] == 0
        assert shared["progress"]["farm_cache_hits"] > 0
        assert {item["cached"] for item in shared_items} <= {"farm", "job"}

        cpu_worker.stop()
        processes.worker(SHARE_VERDICTS_ACROSS_TEAMS="true", WORKER_GPUS="Farm Test GPU")
        elsewhere, elsewhere_items = _run(a)  # another runtime (a GPU model): its own checks
        assert elsewhere["progress"]["checks_run"] == first["progress"]["checks_run"]
        assert elsewhere["progress"]["farm_cache_hits"] == 0
        again, _ = _run(b)  # ...which that runtime's later jobs reuse
        assert again["progress"]["checks_run"] == 0
        assert [item["cached"] for item in elsewhere_items].count("farm") == 0


@pytest.mark.slow
def test_the_web_page_shows_a_farm_answered_job_as_cache_hits(tmp_path: Path) -> None:
    """The second job's page, open while it runs, lists every iteration as answered from a cache,
    with no model to download. (The embedded service without its runner: this test runs the jobs,
    as a worker with a known runtime, so that the page is open before the second one starts.)"""
    en = catalogue("en")
    with embedded_service(tmp_path, run_jobs=False) as service, client_for(service.url, service.token) as client:
        settings = WorkerSettings(database_url=f"sqlite:///{tmp_path / 'onnx-reducer.db'}", data_dir=service.data_dir)
        ctx = context_from_settings(settings)
        ctx.runtime = CPU
        first = submit(client, MODEL.SerializeToString()).json()["id"]
        run_job(first, ctx)
        second = submit(client, MODEL.SerializeToString()).json()["id"]
        with chromium() as browser:
            browser.open(f"{service.url}/#/jobs/{second}")
            browser.sign_in(service.token)
            browser.wait(lambda d: browser.text("stream-state") == en["stream.live"], "the live event stream")
            run_job(second, ctx)
            ctx.db.dispose()
            job = wait_job(client, second)
            items = client.get(f"/v1/jobs/{second}/iterations").json()["items"]
            assert job["progress"]["checks_run"] == 0 and items
            rows = "#iterations-body tr[data-number]"
            browser.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, rows)) == len(items), "every iteration")
            cells = [
                [td.text for td in row.find_elements(By.TAG_NAME, "td")]
                for row in browser.driver.find_elements(By.CSS_SELECTOR, rows)
            ]
            shown = {"farm": en["iter.cached.farm"], "job": en["iter.cached.job"]}
            assert [row[4] for row in cells] == [shown[item["cached"]] for item in items]
            assert [row[5] for row in cells] == ["–"] * len(items)  # no model: no check ran
            checks = en["job.checks_cached"].format(n=0, k=job["progress"]["cache_hits"])
            browser.wait(lambda d: browser.text("job-checks") == checks, "the checks run and the cache hits")
