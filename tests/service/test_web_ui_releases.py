"""The page of a ``task: bisect-releases`` job: the releases as a strip of pass / fail, the answer
naming the first failing and the last passing release, in English and in Chinese (headless
Chromium, the embedded service whose slot runs two more onnxruntime releases: RUNTIME_ENVS)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from reducer_cli.main import run
from tests.ort_envs import RELEASES, env_pythons_or_skip
from tests.service.conftest import EXAMPLE, client_for
from tests.service.helpers import wait_job
from tests.service.web_harness import Browser, Service, catalogue, embedded_service, module_browser, plain

OLD, MIDDLE, NEW = RELEASES  # NEW: the project's own onnxruntime; OLD and MIDDLE: RUNTIME_ENVS
_SECOND = tuple(int(p) for p in MIDDLE.split(".")[:2])
PROGRAM = (
    "import sys, onnxruntime as o; "
    f"sys.exit(1 if tuple(int(p) for p in o.__version__.split('.')[:2]) >= {_SECOND} else 0)"
)
SPEC = f'{{"kind": "command", "command": ["python", "-c", "{PROGRAM}"]}}'


@pytest.fixture(scope="module")
def releases_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    pythons = env_pythons_or_skip()
    envs = f"{OLD}={pythons[OLD]},{MIDDLE}={pythons[MIDDLE]}"
    with embedded_service(tmp_path_factory.mktemp("releases"), worker_settings={"runtime_envs": envs}) as service:
        yield service


@pytest.fixture(scope="module")
def browser(releases_service: Service) -> Iterator[Browser]:
    with module_browser() as browser:
        yield browser


def cells(browser: Browser) -> list[tuple[str, str]]:
    found = browser.driver.find_elements(By.CSS_SELECTOR, "#job-releases-strip .release-cell")
    return [(cell.get_attribute("data-release"), cell.get_attribute("data-state")) for cell in found]


def test_the_strip_and_the_answer_in_both_languages(releases_service: Service, browser: Browser) -> None:
    with client_for(releases_service.url, releases_service.token) as client:
        data = {"check_spec": SPEC, "task": "bisect-releases", "releases": f"{NEW},{MIDDLE},{OLD}"}
        response = client.post("/v1/jobs", files={"model": ("model.onnx", EXAMPLE)}, data=data)
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        job = wait_job(client, job_id, timeout=300)
    assert job["status"] == "succeeded", job["error"]
    view = job["releases"]
    browser.open(f"{releases_service.url}/#/jobs/{job_id}")
    browser.sign_in(releases_service.token)
    browser.wait(lambda d: len(cells(browser)) == 3, "the release strip")
    assert cells(browser) == [(OLD, "pass"), (MIDDLE, "fail"), (NEW, "fail")]
    en = catalogue("en")
    checks = plain(en["job.releases.checks"], n=view["checks"], max=3, runs=view["runs"])
    assert browser.text("job-releases-answer") == f"{plain(en['job.releases.found'], first=MIDDLE, last=OLD)} {checks}"
    assert browser.find("job-releases-label").is_displayed()
    assert not browser.find("download-min-bad").is_displayed() and not browser.find("download-mixed").is_displayed()
    browser.set_language("zh-CN,zh")
    try:
        browser.js("localStorage.removeItem('onnx-reducer.lang')")
        browser.reload()
        browser.wait(lambda d: len(cells(browser)) == 3, "the release strip in Chinese")
        zh = catalogue("zh-CN")
        found = plain(zh["job.releases.found"], first=MIDDLE, last=OLD)
        assert browser.text("job-releases-answer").startswith(found)
        assert browser.text("job-releases-label") == zh["job.releases"]
        title = browser.find("job-releases-strip").find_element(By.CSS_SELECTOR, "li").get_attribute("title")
        assert title == f"{OLD}: {zh['job.releases.state.pass']}"
    finally:
        browser.set_language("en-US,en")
        browser.js("localStorage.removeItem('onnx-reducer.lang')")


def test_the_new_job_form_sends_the_task_and_its_releases(releases_service: Service, browser: Browser) -> None:
    """The form's task bisect-releases and its releases field reach the job (its default op-present
    check fails on every release: the answer says so, the strip is all fail)."""
    browser.open(f"{releases_service.url}/#/new")
    browser.sign_in(releases_service.token)
    Select(browser.find("task")).select_by_value("bisect-releases")
    browser.find("releases").send_keys(f"{NEW}, {OLD}")
    browser.drop_file("drop-zone", "model.onnx", EXAMPLE)
    browser.find("submit-job").click()
    browser.wait(lambda d: "#/jobs/" in d.current_url, "the job page")
    job_id = browser.driver.current_url.rsplit("/", 1)[1]
    browser.js("document.getElementById('task').value = 'reduce'; document.getElementById('releases').value = ''")
    with client_for(releases_service.url, releases_service.token) as client:
        job = wait_job(client, job_id, timeout=300)
    assert job["status"] == "succeeded", job["error"]
    assert job["task"] == "bisect-releases" and job["options"]["releases"] == [OLD, NEW]
    assert job["releases"]["outcome"] == "all-fail" and job["releases"]["checks"] == 2
    browser.wait(lambda d: cells(browser) == [(OLD, "fail"), (NEW, "fail")], "the all-fail strip")


def test_the_client_submits_and_reports_a_bisect_releases_job(
    releases_service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``onnx-reducer submit --task bisect-releases --releases ... --wait --json``: the answer in the
    summary (no file to download)."""
    monkeypatch.setenv("ONNX_REDUCER_SERVER", releases_service.url)
    monkeypatch.setenv("ONNX_REDUCER_TOKEN", releases_service.token)
    monkeypatch.chdir(tmp_path)
    Path("model.onnx").write_bytes(EXAMPLE)
    Path("spec.json").write_text(SPEC)
    argv = ["submit", "model.onnx", "--check-spec", "spec.json", "--task", "bisect-releases"]
    code = run([*argv, "--releases", f"{OLD},{MIDDLE},{NEW}", "--wait", "--json"])
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("{") :])
    assert code == 0, summary
    assert summary["status"] == "succeeded" and summary["files"] == []
    releases = summary["releases"]
    assert (releases["first_failing"], releases["last_passing"]) == (MIDDLE, OLD)
    assert releases["checks"] <= 3


FLAKY_PROGRAM = (
    "import pathlib, sys, onnxruntime as o; c = pathlib.Path(sys.argv[1]); n = int(c.read_text() or 0) + 1 "
    "if c.exists() else 1; c.write_text(str(n)); "
    f"sys.exit(1 if tuple(int(p) for p in o.__version__.split('.')[:2]) >= {_SECOND} and n % 2 == 0 else 0)"
)


def test_a_flaky_job_uses_its_repeats(releases_service: Service, tmp_path: Path) -> None:
    """``flaky=true``: the check fails every second run from the second release on; the newest
    release is run again after its first pass, and the oldest passes only after repeats."""
    spec = json.dumps({"kind": "command", "command": ["python", "-c", FLAKY_PROGRAM, str(tmp_path / "runs.txt")]})
    with client_for(releases_service.url, releases_service.token) as client:
        data = {"check_spec": spec, "task": "bisect-releases", "releases": f"{OLD},{MIDDLE},{NEW}", "flaky": "true"}
        response = client.post("/v1/jobs", files={"model": ("model.onnx", EXAMPLE)}, data=data)
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        job = wait_job(client, job_id, timeout=300)
        iterations = client.get(f"/v1/jobs/{job_id}/iterations").json()["items"]
    assert job["status"] == "succeeded", job["error"]
    answer = job["releases"]
    assert (answer["first_failing"], answer["last_passing"]) == (MIDDLE, OLD)
    assert (
        answer["flaky"] and answer["checks"] <= 3 < answer["runs"] == len(iterations) == job["progress"]["checks_run"]
    )
    newest = [it for it in iterations if it["phase"] == f"release {NEW}"]
    assert [it["verdict"] for it in newest] == ["pass", "fail"]  # run again after its first pass
    oldest = [it for it in iterations if it["phase"] == f"release {OLD}"]
    assert len(oldest) > 1 and {it["verdict"] for it in oldest} == {"pass"}  # a pass after repeats
    assert answer["last_passing_verdict"]["iteration"] == oldest[-1]["number"]


def test_a_release_no_worker_offers_is_waited_for_and_said(releases_service: Service) -> None:
    """The newest release runs; 1.29.0, which no slot offers, leaves the job queued for a worker
    that does, and the job says why; a cancel ends it there."""
    with client_for(releases_service.url, releases_service.token) as client:
        data = {"check_spec": SPEC, "task": "bisect-releases", "releases": f"1.29.0,{NEW}"}
        job_id = client.post("/v1/jobs", files={"model": ("model.onnx", EXAMPLE)}, data=data).json()["id"]
        deadline = time.monotonic() + 120
        job = client.get(f"/v1/jobs/{job_id}").json()
        while not (job["status"] == "queued" and job["progress"]["checks_run"] == 1) and time.monotonic() < deadline:
            time.sleep(0.3)
            job = client.get(f"/v1/jobs/{job_id}").json()
        assert job["status"] == "queued" and job["progress"]["checks_run"] == 1, job
        assert job["waiting_reason"].startswith("no worker offers onnxruntime ==1.29.0"), job["waiting_reason"]
        assert job["releases"]["next"] == "1.29.0"
        assert [item["state"] for item in job["releases"]["strip"]] == ["unknown", "fail"]
        assert job["check_spec"] == SPEC  # the user's, not the one routing the job to a worker with 1.29.0
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200  # a queued job ends at once
        cancelled = wait_job(client, job_id)
        assert cancelled["status"] == "cancelled" and cancelled["check_spec"] == SPEC
