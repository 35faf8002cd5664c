"""The ops page in a real headless Chromium (Debian's, installed by `setup.sh test`, driven by
Playwright): it asks for the key, shows the models, follows the live feed, reloads."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest
from playwright.sync_api import expect, sync_playwright

from gateway.ops.events_feed import EventsFeed

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
KEY, ADMIN = "sk-ui-test-24681357", "adm-ui-test-13572468"


async def test_a_slow_subscriber_loses_old_lines_and_never_blocks_the_feed():
    feed = EventsFeed(buffer=4, replay=2)
    feed.bind()
    for i in range(3):
        feed.publish(f"early {i}")
    slow = feed.subscribe()
    assert await anext(slow) == ("early 1", 0)  # a new subscriber starts with recent lines
    for i in range(100):  # the subscriber reads nothing meanwhile: publishing never waits
        feed.publish(f"line {i}")
    line, dropped = await anext(slow)
    assert (line, dropped) == ("line 96", 97)  # held: the newest 4; told what it missed
    threaded = asyncio.to_thread(feed.publish, "from a thread")
    await threaded
    rest = [await anext(slow) for _ in range(4)]
    assert [line for line, _ in rest] == ["line 97", "line 98", "line 99", "from a thread"]
    feed.close()
    assert [item async for item in slow] == []
    assert feed.subscribers == 0


@pytest.fixture
def browser():
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: `./setup.sh test` installs it")
        pytest.skip("chromium is not installed (./setup.sh test installs it)")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


def test_the_ops_page_shows_models_and_follows_the_feed(browser, start_gateway, tmp_path):
    gateway = start_gateway(
        """
        server:
          api_keys: ["${TEST_UI_KEY}"]
          admin_key: ${TEST_UI_ADMIN_KEY}
        models:
          - id: echo
            engine: scripted
            aliases: [default, gpt-4o-mini]
          - id: sleeper
            engine: scripted
            residency: {on_demand: true}
        """,
        env={"TEST_UI_KEY": KEY, "TEST_UI_ADMIN_KEY": ADMIN},
    )
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(f"{gateway.url}/ui")
        page.wait_for_selector("#status:has-text('needs a key')")
        # An API key is refused: the page shows every model and every client's events.
        page.fill("#api-key", KEY)
        page.press("#api-key", "Tab")  # the change event takes the key
        page.wait_for_selector("#status:has-text('needs the admin key')")
        page.fill("#api-key", ADMIN)
        page.press("#api-key", "Tab")

        echo = page.locator("tr[data-model=echo]")
        echo.wait_for()
        assert echo.locator("td").nth(1).inner_text() == "loaded"
        assert "default" in echo.inner_text() and "gpt-4o-mini" in echo.inner_text()
        sleeper = page.locator("tr[data-model=sleeper] td").nth(1)
        assert sleeper.inner_text() == "unloaded"
        page.wait_for_selector("#feed-state:has-text('live')")

        answer = gateway.openai(KEY).chat.completions.with_raw_response.create(
            model="default", messages=[{"role": "user", "content": "hello"}]
        )
        request_id = answer.headers["x-request-id"]
        page.wait_for_selector(f"#events li[data-event=generated]:has-text('{request_id}')")
        routed = page.locator(f"#events li[data-event=request_routed]:has-text('{request_id}')")
        assert "requested=default served=echo" in routed.inner_text()
        # Recent tokens/s appears once the model has generated (the page's CSP forbids eval,
        # so this waits through a locator rather than wait_for_function).
        expect(echo.locator("td").last).not_to_have_text("–")

        page.fill("#admin-key", "wrong-admin-key")
        page.click("#reload")
        page.wait_for_selector("#notice:has-text('Reload refused (401)')")
        page.fill("#admin-key", ADMIN)
        page.click("#reload")
        page.wait_for_selector("#notice:has-text('Reloaded')")
        page.wait_for_selector("#events li[data-event=config_reloaded]")
        page.screenshot(path=str(tmp_path / "ops-page.png"), full_page=True)
    finally:
        page.close()
    assert errors == []
    assert KEY not in gateway.log.read_text() and ADMIN not in gateway.log.read_text()
