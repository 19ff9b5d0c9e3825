"""The Workers screen in a real headless Chromium (Debian's), driven by Playwright.

A real engine and real agents on 127.0.0.1; the page is used as a person would: log in,
watch a worker attach, read why a node waits, mint and revoke a token, see an old agent
listed as needing an upgrade, live through an engine restart. Screenshots go to
``test-output/workers-screen/``.
"""

from __future__ import annotations

import re
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

# A dev dependency (make install): missing, it is an error, never a skip.
from playwright import sync_api as playwright

from tests.support.ci import cannot_run
from tests.support.cli import add_user, fluksio
from tests.support.engine import (
    SUPERUSER,
    SUPERUSER_PASSWORD,
    EngineProcess,
    free_port,
    start_engine,
)
from tests.support.proxy import PausableProxy
from tests.support.runs import code, run_flow
from tests.support.worker import hello_with_protocol, start_worker

pytestmark = pytest.mark.contract

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "test-output" / "workers-screen"
# Live means within two seconds; five leaves room for a loaded CI machine.
LIVE_MS = 5000
# This machine's network is closed: without these Chromium keeps trying Google's hosts.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "Debian's chromium is not installed (make test installs it as root)"
        cannot_run(message)
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright.sync_playwright() as driver:
        chromium = driver.chromium.launch(
            executable_path=_chromium(), headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


@pytest.fixture
def engine_on_port(tmp_path: Path) -> Iterator[tuple[EngineProcess, int]]:
    port = free_port()
    engine = start_engine(tmp_path / "data", tmp_path / "logs", port=port)
    yield engine, port
    engine.stop()


def _log_in(
    browser: Any, engine: EngineProcess, *, fake_clock: bool = False, **context: Any
) -> Any:
    page = browser.new_context(**context).new_page()
    if fake_clock:
        page.clock.install()  # the page's own time, moved by the test; the engine's is real
    page.goto(engine.url + "/")
    assert page.url == engine.url + "/workers"
    page.get_by_label("User name").fill(SUPERUSER)
    page.get_by_label("Password").fill(SUPERUSER_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect = playwright.expect
    expect(page.get_by_role("heading", name=re.compile("^Workers"))).to_be_visible()
    return page


def _shot(page: Any, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def test_log_in_mint_attach_wait_revoke(
    browser: Any, engine_on_port: tuple[EngineProcess, int], tmp_path: Path
) -> None:
    engine, _port = engine_on_port
    expect = playwright.expect
    page = _log_in(browser, engine)
    workers = page.locator("#workers")
    expect(workers).to_contain_text("No workers attached.")
    expect(workers).to_contain_text("fluksio-worker --url")
    expect(page.locator("#provisioners")).to_contain_text("No provisioners configured.")
    expect(page.locator("#queued")).to_contain_text("Nothing is waiting")
    _shot(page, "1-empty")

    # Mint from the page: the token is shown once, never put in the URL.
    page.get_by_label("Token name").fill("gpu-box")
    page.get_by_label("Labels").fill("gpu, cuda")
    page.get_by_role("button", name="Mint token").click()
    minted = page.get_by_label("The new worker token")
    expect(minted).to_have_value(re.compile(r"^eyJ"))
    token = minted.input_value()
    assert token not in page.url
    assert page.evaluate("() => sessionStorage.length") == 1
    row = page.locator('#tokens tr[data-token="gpu-box"]')
    expect(row).to_contain_text("active")
    expect(row).to_contain_text("gpu")
    _shot(page, "2-minted")

    # An agent attaches with it: it appears, live, with its inventory as bars.
    worker = start_worker(
        engine,
        token,
        tmp_path / "worker",
        "--name",
        "gpu-box",
        "--labels",
        "gpu,cuda",
        "--cpus",
        "4",
        "--gpus",
        "2",
        "--ram-mb",
        "8192",
        "--parallel",
        "2",
    )
    try:
        attached = page.locator('#workers tr[data-worker="gpu-box"]')
        expect(attached).to_contain_text("idle", timeout=LIVE_MS)
        expect(attached).to_contain_text("0.2.0 · protocol 2")
        expect(attached).to_contain_text(f"host {socket.gethostname()}")
        expect(attached).to_contain_text("cores: 0 of 4 used")
        expect(attached).to_contain_text("GPUs: 0 of 2 used")
        expect(attached).to_contain_text("memory: 0 MB of 8.0 GB used")
        expect(attached).to_contain_text("0 of 2")
        expect(attached.get_by_role("meter", name="GPUs: 0 of 2 used")).to_be_visible()

        # A node nothing attached can run: it waits, and the page says why.
        admin = engine.login()
        node = {"id": "train", "worker": "tpu", "code": code("def process():\n    return 1\n")}
        run_flow(engine, admin, "needs-tpu", [node])
        waiting = page.locator("#queued tr").filter(has_text="needs-tpu / train")
        expect(waiting).to_contain_text("no attached worker carries label 'tpu'", timeout=LIVE_MS)
        _shot(page, "3-attached-and-waiting")

        # Revoke from the page, after confirming: the worker is cut off at once.
        row.get_by_role("button", name="Revoke").click()
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("gpu-box")
        _shot(page, "4-confirm-revoke")
        dialog.get_by_role("button", name="Revoke").click()
        expect(row).to_contain_text("revoked", timeout=LIVE_MS)
        expect(attached).to_have_count(0, timeout=LIVE_MS)
        listed = engine.client(admin).request("GET", "/workers/tokens").body
        assert [t["status"] for t in listed if t["name"] == "gpu-box"] == ["revoked"]
        _shot(page, "5-revoked")
    finally:
        worker.stop()


def test_cancelling_the_confirmation_revokes_nothing(
    browser: Any, engine_on_port: tuple[EngineProcess, int]
) -> None:
    engine, _port = engine_on_port
    engine.mint(engine.login(), "keep-me", [])
    page = _log_in(browser, engine)
    row = page.locator('#tokens tr[data-token="keep-me"]')
    row.get_by_role("button", name="Revoke").click()
    page.get_by_role("dialog").get_by_role("button", name="Cancel").click()
    playwright.expect(page.get_by_role("dialog")).to_be_hidden()
    playwright.expect(row).to_contain_text("active")
    listed = engine.client(engine.login()).request("GET", "/workers/tokens").body
    assert [t["status"] for t in listed] == ["active"]


def test_an_old_agent_shows_needs_upgrade(
    browser: Any, engine_on_port: tuple[EngineProcess, int]
) -> None:
    engine, _port = engine_on_port
    page = _log_in(browser, engine)
    token = engine.mint(engine.login(), "old-box", ["cpu"])["token"]
    reply = hello_with_protocol(engine, token, "old-box", ["cpu"], protocol=1)
    assert reply["op"] == "refused"
    row = page.locator('#workers tr[data-worker="old-box"]')
    expect = playwright.expect
    expect(row).to_contain_text("needs upgrade", timeout=LIVE_MS)
    expect(row).to_contain_text("protocol 1")
    expect(row).to_contain_text("pip install -U fluksio-worker")
    _shot(page, "6-needs-upgrade")


def test_a_wrong_password_is_shown_in_the_page(
    browser: Any, engine_on_port: tuple[EngineProcess, int]
) -> None:
    engine, _port = engine_on_port
    page = browser.new_context().new_page()
    page.goto(engine.url + "/workers")
    page.get_by_label("User name").fill(SUPERUSER)
    page.get_by_label("Password").fill("not-the-password")
    page.get_by_role("button", name="Log in").click()
    playwright.expect(page.locator("#login-error")).to_contain_text("incorrect")
    assert "not-the-password" not in page.url


def test_a_user_who_is_not_the_superuser_is_told_so(
    browser: Any, engine_on_port: tuple[EngineProcess, int]
) -> None:
    engine, _port = engine_on_port
    add_user(engine.data_dir, "viewer", "viewer-password-1")
    page = browser.new_context().new_page()
    page.goto(engine.url + "/workers")
    page.get_by_label("User name").fill("viewer")
    page.get_by_label("Password").fill("viewer-password-1")
    page.get_by_role("button", name="Log in").click()
    playwright.expect(page.locator("#login-error")).to_contain_text("superuser")
    playwright.expect(page.locator("#screen")).to_be_hidden()


def test_the_page_lives_through_an_engine_restart(
    browser: Any, engine_on_port: tuple[EngineProcess, int], tmp_path: Path
) -> None:
    engine, port = engine_on_port
    page = _log_in(browser, engine)
    expect = playwright.expect
    engine.stop()
    expect(page.get_by_role("alert")).to_contain_text("Cannot reach the engine", timeout=LIVE_MS)
    _shot(page, "7-engine-away")
    restarted = start_engine(tmp_path / "data", tmp_path / "logs2", port=port)
    try:
        restarted.mint(restarted.login(), "after-restart", [])
        expect(page.locator('#tokens tr[data-token="after-restart"]')).to_be_visible(
            timeout=LIVE_MS
        )
        expect(page.locator("#problem")).to_be_hidden()
    finally:
        restarted.stop()


def test_a_key_rotation_ends_the_screens_session_in_seconds(
    browser: Any, engine_on_port: tuple[EngineProcess, int]
) -> None:
    engine, _port = engine_on_port
    page = _log_in(browser, engine)
    rotated = fluksio("keys", "rotate", "--yes", "--data-dir", str(engine.data_dir))
    assert rotated.returncode == 0, rotated.stderr
    # The feed ends with its credential and says why; the page asks to log in again.
    playwright.expect(page.locator("#login-error")).to_contain_text("signing key", timeout=10_000)
    playwright.expect(page.locator("#screen")).to_be_hidden()


def _requests_made(page: Any) -> list[str]:
    """Every request the page makes from now on (method and path), as it makes it."""
    made: list[str] = []
    page.on("request", lambda request: made.append(f"{request.method} {request.url}"))
    return made


def _views_loaded(page: Any) -> Callable[[], None]:
    """Returns a wait until the page has received its three views: a cut before then
    interrupts its first load, which it rightly fetches again. (The browser's events
    arrive while Playwright waits, so the wait is Playwright's.)"""
    received: list[str] = []
    page.on("requestfinished", lambda request: received.append(request.url))
    views = ("/api/v1/workers", "/api/v1/workers/resources", "/api/v1/workers/tokens")

    def wait() -> None:
        deadline = time.monotonic() + LIVE_MS / 1000
        while not all(any(url.endswith(v) for url in received) for v in views):
            assert time.monotonic() < deadline, f"the page did not load its views: {received}"
            page.wait_for_timeout(20)

    return wait


def test_the_screen_follows_the_feed_and_makes_no_polling_requests(
    browser: Any, engine_on_port: tuple[EngineProcess, int], tmp_path: Path
) -> None:
    engine, _port = engine_on_port
    admin = engine.login()
    token = engine.mint(admin, "feed-box", ["cpu"])["token"]
    page = _log_in(browser, engine)
    expect = playwright.expect
    expect(page.locator("#live")).to_have_text("Live", timeout=LIVE_MS)
    expect(page.locator('#tokens tr[data-token="feed-box"]')).to_be_visible()
    # The moment the worker's row appears, by the browser's clock (the engine's is the same).
    page.evaluate(
        """() => new MutationObserver((_changes, observer) => {
            if (document.querySelector('#workers tr[data-worker="feed-box"]')) {
                window.rowAppearedAt = Date.now();
                observer.disconnect();
            }
        }).observe(document.getElementById("workers"), { childList: true, subtree: true })"""
    )
    made = _requests_made(page)
    worker = start_worker(engine, token, tmp_path / "worker", "--name", "feed-box", "--cpus", "2")
    try:
        row = page.locator('#workers tr[data-worker="feed-box"]')
        expect(row).to_contain_text("idle", timeout=LIVE_MS)
        (listed,) = engine.client(admin).request("GET", "/workers").body
        attached_ms = datetime.fromisoformat(listed["attached_at"]).timestamp() * 1000
        shown_after_ms = page.evaluate("() => window.rowAppearedAt") - attached_ms
        assert shown_after_ms < 1000, f"the row appeared {shown_after_ms:.0f} ms after attaching"
        # The old page asked three endpoints every second; nothing may be asked now. (A
        # window of time is the only way to see that nothing happens in it.)
        page.wait_for_timeout(2500)
        assert made == [], f"the page polled: {made[:6]}"
        expect(row).to_contain_text("cores: 0 of 2 used")
    finally:
        worker.stop()
    expect(page.locator('#workers tr[data-worker="feed-box"]')).to_have_count(0, timeout=LIVE_MS)
    assert made == []


def test_a_dropped_feed_says_so_and_resumes_without_a_gap(
    browser: Any, engine_on_port: tuple[EngineProcess, int]
) -> None:
    engine, port = engine_on_port
    proxy = PausableProxy(port)
    try:
        page = browser.new_context().new_page()
        views_loaded = _views_loaded(page)
        page.goto(f"http://127.0.0.1:{proxy.port}/workers")
        page.get_by_label("User name").fill(SUPERUSER)
        page.get_by_label("Password").fill(SUPERUSER_PASSWORD)
        page.get_by_role("button", name="Log in").click()
        expect = playwright.expect
        live = page.locator("#live")
        expect(live).to_have_text("Live", timeout=LIVE_MS)
        # "Live" shows as the views are asked for, before they arrive.
        views_loaded()
        made = _requests_made(page)

        proxy.pause()
        proxy.cut()
        expect(live).to_contain_text("Feed down", timeout=LIVE_MS)
        expect(page.get_by_role("alert")).to_contain_text("live feed is down")
        _shot(page, "9-feed-down")
        # Meanwhile, on the engine (not through the dropped link): a token is minted.
        engine.mint(engine.login(), "while-away", [])
        proxy.resume()
        expect(page.locator('#tokens tr[data-token="while-away"]')).to_be_visible(timeout=LIVE_MS)
        expect(live).to_have_text("Live")
        expect(page.locator("#problem")).to_be_hidden()
        views = [r for r in made if "/api/v1/workers" in r]
        assert views == [], f"a resumed feed needs no refetch: {views}"
        assert any(r.endswith("/api/v1/events") for r in made), made
    finally:
        proxy.close()


def test_a_token_that_expires_is_shown_expired_without_a_request(
    browser: Any, engine_on_port: tuple[EngineProcess, int]
) -> None:
    engine, _port = engine_on_port
    engine.mint(engine.login(), "short-lived", [])
    page = _log_in(browser, engine, fake_clock=True)
    row = page.locator('#tokens tr[data-token="short-lived"]')
    playwright.expect(row).to_contain_text("active", timeout=LIVE_MS)
    made = _requests_made(page)
    page.clock.fast_forward(366 * 24 * 3600 * 1000)  # a year and a day: past its expiry
    playwright.expect(row).to_contain_text("expired", timeout=LIVE_MS)
    assert made == []


def test_a_phone_sees_every_section_without_sideways_scrolling(
    browser: Any, engine_on_port: tuple[EngineProcess, int]
) -> None:
    engine, _port = engine_on_port
    engine.mint(engine.login(), "phone-box", ["gpu"])
    page = _log_in(browser, engine, viewport={"width": 390, "height": 844})
    playwright.expect(page.locator('#tokens tr[data-token="phone-box"]')).to_be_visible()
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    for section in ("Workers", "Waiting node calls", "Provisioners", "Worker tokens"):
        playwright.expect(
            page.get_by_role("heading", name=re.compile(f"^{section}"))
        ).to_be_visible()
    # Keyboard: the mint form is reachable by Tab from the log-out button.
    page.get_by_role("button", name="Log out").focus()
    for _ in range(3):
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.name") == "name":
            break
    assert page.evaluate("() => document.activeElement.name") == "name"
    _shot(page, "8-phone")
