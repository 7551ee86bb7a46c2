"""The team page (#/team, issue 29) in a real headless Chromium against the embedded service: a
team's ordinary token is told it needs an admin token (and the command that makes one); a team
admin token lists the team's tokens, creates one (shown once, and it works), revokes it after a
confirmation (it is then refused), and reads the audit record of those events; in Chinese too."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from selenium.webdriver.common.by import By

from persistence.db import Database
from persistence.repositories import TeamRepository
from tests.service.conftest import client_for
from tests.service.web_harness import OVERFLOW_JS, Browser, Service, catalogue, plain

LANGS = {"en": "en-US,en", "zh-CN": "zh-CN,zh"}
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def admin_token(service: Service) -> Iterator[str]:
    database = Database(f"sqlite:///{service.data_dir.parent / 'onnx-reducer.db'}")
    with database.session() as session:
        teams = TeamRepository(session)
        token = teams.create_token(teams.get_or_create("default"), name="ops", admin=True)
    database.dispose()
    yield token


def open_team(service: Service, browser: Browser, token: str, lang: str) -> dict[str, str]:
    browser.set_language(LANGS[lang])
    browser.open(f"{service.url}/#/team")
    browser.js(
        "localStorage.removeItem('onnx-reducer.lang'); localStorage.setItem('onnx-reducer.token', arguments[0])", token
    )
    browser.reload()
    return catalogue(lang)


def rows(browser: Browser, body: str) -> list[list[str]]:
    script = f"return [...document.querySelectorAll('#{body} tr')].map(r => [...r.cells].map(c => c.textContent))"
    found: list[list[str]] = browser.js(script)
    return found


def refused_soon(service: Service, token: str) -> bool:
    deadline = time.monotonic() + DEADLINE_S
    with client_for(service.url, token) as client:
        while time.monotonic() < deadline:
            if client.get("/v1/jobs").status_code == 401:
                return True
            time.sleep(0.2)
    return False


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_an_ordinary_token_is_told_it_needs_an_admin_one(service: Service, browser: Browser, lang: str) -> None:
    words = open_team(service, browser, service.token, lang)
    assert browser.text("team-heading") == plain(words["team.heading"])
    browser.wait(lambda d: browser.text("team-state") == plain(words["team.not_admin"]), "the admin hint")
    assert "onnx-reducer token create --team NAME --admin" in browser.text("team-state")
    assert not browser.find("team-admin").is_displayed()


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_an_admin_creates_revokes_and_reads_the_audit_record(
    service: Service, browser: Browser, admin_token: str, lang: str
) -> None:
    words = open_team(service, browser, admin_token, lang)
    browser.wait(lambda d: browser.find("team-admin").is_displayed(), "the admin's view")
    before = rows(browser, "tokens-body")
    assert [plain(words["team.role.admin"]) in row for row in before].count(True) == 1

    name = f"ci-{lang}"
    browser.find("team-token-name").send_keys(name)
    browser.find("team-token-create").click()
    browser.wait(lambda d: browser.find("team-token-new").is_displayed(), "the new token")
    token = browser.text("team-token-new-value")
    assert token.startswith("orx_")
    with client_for(service.url, token) as client:
        assert client.get("/v1/jobs").status_code == 200
    browser.wait(lambda d: len(rows(browser, "tokens-body")) == len(before) + 1, "the new token's row")
    new_row = next(row for row in rows(browser, "tokens-body") if row[1] == name)
    assert new_row[0] == f"{token[:12]}…" and new_row[4] == plain(words["team.state.active"])
    audit = rows(browser, "audit-body")
    assert audit[0][1:] == [plain(words["team.audit.token_created"]), f"token {admin_token[:12]}", token[:12]]

    button = browser.driver.find_element(By.CSS_SELECTOR, f"#tokens-body tr:nth-child({len(before) + 1}) button")
    button.click()
    alert = browser.wait(lambda d: d.switch_to.alert, "the confirmation")
    assert token[:12] in alert.text
    alert.accept()
    browser.wait(lambda d: rows(browser, "audit-body")[0][1] == plain(words["team.audit.token_revoked"]), "the revoke")
    revoked = next(row for row in rows(browser, "tokens-body") if row[1] == name)
    assert revoked[4] != plain(words["team.state.active"]) and revoked[5] == ""
    assert refused_soon(service, token)


def test_no_sideways_scroll_at_420_px_and_every_control_is_labelled(
    service: Service, browser: Browser, admin_token: str
) -> None:
    unlabelled = """return [...document.querySelectorAll('#view-team input, #view-team button')]
        .filter((e) => e.getClientRects().length)
        .filter((e) => !(e.labels && e.labels.length) && !(e.textContent || '').trim())
        .map((e) => e.id || e.outerHTML.slice(0, 80))"""
    with browser.narrow():
        open_team(service, browser, admin_token, "en")
        browser.wait(lambda d: browser.find("team-admin").is_displayed(), "the admin's view")
        browser.find("team-token-name").send_keys("a-rather-long-name-for-a-token-that-must-wrap-somewhere")
        browser.find("team-token-create").click()
        browser.wait(lambda d: browser.find("team-token-new").is_displayed(), "the new token")
        assert browser.js(OVERFLOW_JS) == []
        assert browser.js(unlabelled) == []
