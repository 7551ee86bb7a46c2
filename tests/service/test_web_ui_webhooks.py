"""The webhooks page (#/webhooks) in a real headless Chromium, in English and Chinese: a URL added
with the form shows its secret once, "send test event" makes the server's workers deliver a signed
event to a real receiver on 127.0.0.1, and the delivery log shows it delivered; a loopback URL is
refused with the operator's setting named when the operator did not allow it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from standardwebhooks.webhooks import Webhook

from tests.service.conftest import client_for
from tests.service.test_webhooks import FAST, Receiver, receiver  # noqa: F401 - the receiver fixture
from tests.service.web_harness import Browser, Service, catalogue, embedded_service, module_browser, plain

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def allowing_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The embedded service whose operator allows private webhook targets, retrying fast."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in FAST.items():
            patch.setenv(name, value)
        with embedded_service(tmp_path_factory.mktemp("web_ui_webhooks")) as service:
            yield service


@pytest.fixture(scope="module")
def page(allowing_service: Service) -> Iterator[Browser]:
    with module_browser() as browser:
        yield browser


def _open(browser: Browser, service: Service, lang: str) -> dict[str, str]:
    browser.set_language({"en": "en-US,en", "zh-CN": "zh-CN,zh"}[lang])
    browser.open(f"{service.url}/#/webhooks")
    browser.js("localStorage.removeItem('onnx-reducer.lang')")
    browser.reload()
    browser.sign_in(service.token)
    words = catalogue(lang)
    browser.wait(lambda d: browser.text("webhooks-heading") == plain(words["webhooks.heading"]), "the webhooks page")
    return words


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_add_a_webhook_send_a_test_event_and_see_it_delivered(
    allowing_service: Service,
    page: Browser,
    receiver: Receiver,  # noqa: F811 - the fixture imported above
    lang: str,
) -> None:
    words = _open(page, allowing_service, lang)
    page.find("webhook-url").send_keys(receiver.url)
    page.find("webhook-add").click()
    page.wait(lambda d: page.find("webhook-secret").is_displayed(), "the new secret")
    secret = page.text("webhook-secret-value")
    assert secret.startswith("whsec_")
    urls = "li[data-webhook] strong"
    page.wait(lambda d: receiver.url in [e.text for e in d.find_elements(By.CSS_SELECTOR, urls)], "the new webhook")
    item = next(e for e in page.driver.find_elements(By.CSS_SELECTOR, "li[data-webhook]") if receiver.url in e.text)
    hook = item.get_attribute("data-webhook")
    buttons = item.find_elements(By.CSS_SELECTOR, "button")
    test_button = next(b for b in buttons if b.text == plain(words["webhooks.test"]))
    test_button.click()
    (delivery,) = receiver.wait_for(1)
    assert Webhook(secret).verify(delivery.body, delivery.headers)["type"] == "webhook.test"
    delivered = plain(words["webhooks.status.succeeded"])
    status = f'li[data-webhook="{hook}"] td[data-status="succeeded"]'
    page.wait(lambda d: [e.text for e in d.find_elements(By.CSS_SELECTOR, status)] == [delivered], "delivered")
    with client_for(allowing_service.url, allowing_service.token) as client:
        (entry,) = client.get(f"/v1/webhooks/{hook}/deliveries").json()["items"]
        assert entry["id"] == delivery.headers["webhook-id"] and entry["attempts"] == 1
        assert client.delete(f"/v1/webhooks/{hook}").status_code == 204


def test_a_loopback_url_is_refused_without_the_operators_leave(tmp_path: Path) -> None:
    with embedded_service(tmp_path, webhook_allow_private=False) as service, module_browser() as browser:
        _open(browser, service, "en")
        browser.find("webhook-url").send_keys("http://127.0.0.1:9/hook")
        browser.find("webhook-add").click()
        browser.wait(lambda d: browser.find("error").is_displayed(), "the error")
        assert "WEBHOOK_ALLOW_PRIVATE" in browser.text("error-detail")
        assert not browser.find("webhook-secret").is_displayed()


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_a_webhook_whose_receiver_answered_410_shows_it_is_disabled(
    allowing_service: Service,
    page: Browser,
    receiver: Receiver,  # noqa: F811 - the fixture imported above
    lang: str,
) -> None:
    """The receiver answers the test event 410 Gone: the endpoint shows it is disabled, and the
    delivery as failed."""
    receiver.script = [410]
    words = _open(page, allowing_service, lang)
    with client_for(allowing_service.url, allowing_service.token) as client:
        created = client.post("/v1/webhooks", json={"url": receiver.url})
        assert created.status_code == 201, created.text
        hook = created.json()["id"]
        assert client.post(f"/v1/webhooks/{hook}/test").status_code == 202
        receiver.wait_for(1)  # the page's list refreshes itself while it is open
        disabled = f'li[data-webhook="{hook}"] .webhook-disabled'
        prefix = plain(words["webhooks.disabled"]).split("{time}")[0]
        page.wait(
            lambda d: any(e.text.startswith(prefix) for e in d.find_elements(By.CSS_SELECTOR, disabled)),
            "the endpoint shown disabled",
        )
        assert client.delete(f"/v1/webhooks/{hook}").status_code == 204
