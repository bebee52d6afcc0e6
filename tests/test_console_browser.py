"""The operator console in a real browser (Debian's Chromium, driven by
Playwright) against a real stack with its gateway (issue 41, "what must be
shown" 1–3).

An operator signs in, opens a parked job (a repaired PDF under a ruleset
that reviews repairs), sees its page images — the original beside the
rewrite — approves it and watches it complete; a dead-lettered job is
retried from its page. A reviewer reviews but cannot open dead letters; a
tenant's token cannot sign in; a form posted without its CSRF secret is
refused; a session ends when its time is up (on a second gateway with a
short session, over the same stack). Every page is checked at 1280×800 and
at a phone's width. The image endpoint sends ``no-store`` and leaves no
plaintext file behind.

Screenshots of the review page, the timeline and the dead-letter page go to
``reports/console/`` (``QUIRE_CONSOLE_SCREENSHOTS`` to choose another
folder); the README's console section shows copies of them.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from quire.admission.v1 import tenant_admin_service_pb2 as admin_pb
from quire.admission.v1 import tenant_admin_service_pb2_grpc as admin_grpc
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.stack.ports import free_port
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.damaged import EVERYDAY
from quire.testing.pdfs import write_text_pdf
from quire.testing.reviews import review_stack_env
from quire.tls import aio_channel
from quire.validator.rulesets import DEFAULT_DIRECTORY

pytestmark = pytest.mark.stack
T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(os.environ.get("QUIRE_CONSOLE_SCREENSHOTS", ROOT / "reports" / "console"))
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
CHROMIUM_ARGS = [
    "--no-sandbox",  # the tests run as root
    "--disable-gpu",
    "--disable-background-networking",  # this machine's network is closed
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, StackInfo, Path]]:
    """One stack with its gateway: the shipped rulesets plus one that sends
    repaired files to review, a checkpoint every second (evidence verifies
    soon after a job ends), and a fault point to make dead letters."""
    folder = tmp_path_factory.mktemp("console")
    stack = Stack(
        folder / "stack",
        gateway=True,
        env={
            **review_stack_env(folder / "rulesets", DEFAULT_DIRECTORY),
            "QUIRE_AUDIT_CHECKPOINT_SECONDS": "1",
            "QUIRE_FAULTS_DIR": str(folder / "faults"),
            "QUIRE_MAX_DELIVER": "2",
            "QUIRE_ACK_WAIT_SECONDS": "1",
            "QUIRE_BACKOFF_BASE_SECONDS": "0.1",
            "QUIRE_DRAIN_SECONDS": "3",
            "QUIRE_CONSOLE_TRACE_URL": "https://traces.example/trace/{trace_id}",
            "QUIRE_TRACE_FILE": str(folder / "spans.jsonl"),
        },
    )
    info = stack.start()
    try:
        yield stack, info, folder
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@contextmanager
def _page(browser: Browser, viewport: dict[str, int] = DESKTOP) -> Iterator[Page]:
    context = browser.new_context(viewport=viewport, java_script_enabled=False)
    try:
        yield context.new_page()
    finally:
        context.close()


def _run(work: Coroutine[Any, Any, T]) -> T:
    """Run async client code from a test whose thread Playwright's sync API
    already runs an event loop in."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, work).result()


def _sign_in(page: Page, base: str, token: str) -> int:
    page.goto(f"{base}/console/")
    assert page.url.endswith("/console/sign-in"), "no session: sent to sign in"
    page.fill("#token", token)
    with page.expect_navigation() as navigation:
        page.click("button[type=submit]")
    response = navigation.value
    return response.status if response else 0


def _fits(page: Page) -> None:
    """Nothing wider than the window: no sideways scrolling of the page."""
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"] + 1, (page.url, width)  # type: ignore[index]


def _park(info: StackInfo, folder: Path, name: str) -> str:
    """A job parked for review: a PDF with everyday damage under the ruleset
    that reviews repairs."""
    builder, _code = EVERYDAY["stream-length-wrong"]

    async def go() -> str:
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            digest = (await client.upload(builder(folder / f"{name}.pdf"))).sha256
            clean = (
                await client.upload(write_text_pdf(folder / f"{name}-cover.pdf", [name]))
            ).sha256
            job = await client.submit(
                [PacketItem("cover", clean), PacketItem("damaged", digest)], ruleset="repair-review"
            )
            parked = await client.wait(job.name, timeout=60)
            assert state_name(parked.state) == "NEEDS_REVIEW"
            return job.name

    return _run(go())


def _state(info: StackInfo, job: str) -> str:
    async def go() -> str:
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            return state_name((await client.get_job(job)).state)

    return _run(go())


def _reviewer_token(info: StackInfo) -> str:
    async def go() -> str:
        async with aio_channel(info.endpoints["admission"], None) as channel:
            made = await admin_grpc.TenantAdminServiceStub(channel).CreateToken(
                admin_pb.CreateTokenRequest(tenant="reviewers"),
                metadata=bearer_metadata(info.operator_token()),
                timeout=20,
            )
        assert made.token.name.startswith("reviewers/-/tokens/")
        return made.secret

    return _run(go())


def _until(check: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def test_an_operator_approves_a_parked_job_seeing_its_pages_and_watches_it_complete(
    console: tuple[Stack, StackInfo, Path], browser: Browser
) -> None:
    _stack, info, folder = console
    job = _park(info, folder, "approve")
    ident = job.removeprefix("jobs/")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with _page(browser) as page:
        assert _sign_in(page, info.gateway_url, info.operator_token()) == 200
        assert page.url.endswith("/console/reviews")
        page.click(f"a[href='/console/reviews/{ident}']")
        assert page.inner_text("h1") == f"Review of {job}"
        assert "repair-review@1" in page.inner_text("dl.facts")
        images = page.locator("img")
        sources = {img.get_attribute("alt") for img in images.all()}
        assert "source 1, page 1, original" in sources and "source 1, page 1, rewrite" in sources
        for img in images.all():
            answer = page.request.get(f"{info.gateway_url}{img.get_attribute('src')}")
            assert answer.status == 200, (img.get_attribute("alt"), answer.text()[:300])
            img.scroll_into_view_if_needed()
            drawn = img.evaluate("i => i.complete && i.naturalWidth")
            assert drawn and drawn > 100, img.get_attribute("alt")
        assert "STREAM_LENGTH" in page.inner_text("main")
        _fits(page)
        page.screenshot(path=str(SHOTS / "review.png"), full_page=True)

        page.fill("#note", "rewrite matches the original page")
        with page.expect_navigation():
            page.click("button.approve")
        assert page.url.endswith(f"/console/jobs/{ident}")

        def completed() -> bool:
            page.reload()
            return page.inner_text("dd.status") == "COMPLETED" and "verifies" in page.inner_text(
                "dd.evidence"
            )

        _until(completed)
        states = page.locator("ol.timeline strong").all_inner_texts()
        assert states[0] == "ACCEPTED" and "NEEDS_REVIEW" in states and states[-1] == "COMPLETED"
        assert "operator" in page.inner_text("ol.timeline"), "the decision's actor is shown"
        widths = {
            state: float(bar.get_attribute("width") or 0)
            for state, bar in zip(states, page.locator("svg.track rect.bar").all(), strict=True)
        }
        assert widths["NEEDS_REVIEW"] > widths["ACCEPTED"], "bars are drawn to their durations"
        trace = page.locator("a[href^='https://traces.example/trace/']")
        assert trace.count() == 1 and len(trace.inner_text()) == 32, "the trace is linked"
        assert page.locator("[style]").count() == 0, "no inline style: the CSP forbids it"
        _fits(page)
        page.screenshot(path=str(SHOTS / "timeline.png"), full_page=True)
    assert _state(info, job) == "COMPLETED"


def test_every_page_fits_a_phone(console: tuple[Stack, StackInfo, Path], browser: Browser) -> None:
    _stack, info, folder = console
    ident = _park(info, folder, "phone").removeprefix("jobs/")
    with _page(browser, PHONE) as page:
        _sign_in(page, info.gateway_url, info.operator_token())
        for path in ("reviews", f"reviews/{ident}", f"jobs/{ident}", "dead-letters", "batches"):
            page.goto(f"{info.gateway_url}/console/{path}")
            assert page.locator("h1").count() == 1, path
            _fits(page)


def test_a_dead_lettered_job_is_retried_from_its_page(
    console: tuple[Stack, StackInfo, Path], browser: Browser, tmp_path: Path
) -> None:
    from test_faults_common import kept_armed

    _stack, info, folder = console

    async def fail() -> str:
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            digest = (await client.upload(write_text_pdf(tmp_path / "d.pdf", ["retry"]))).sha256
            async with kept_armed(folder / "faults", "signer.before_commit"):
                name = (await client.submit([PacketItem("d", digest)])).name
                failed = await client.wait(name, timeout=90)
            assert state_name(failed.state) == "FAILED"
            return name

    job = _run(fail())
    ident = job.removeprefix("jobs/")
    with _page(browser) as page:
        _sign_in(page, info.gateway_url, info.operator_token())

        def listed() -> bool:
            page.goto(f"{info.gateway_url}/console/dead-letters")
            return job in page.inner_text("main")

        _until(listed, timeout=30)
        row = page.locator("tr", has_text=job)
        assert "RETRY_LIMIT_REACHED" in row.inner_text()
        assert page.locator("table.list").nth(1).locator("tbody tr").count() >= 3, "stage queues"
        _fits(page)
        page.screenshot(path=str(SHOTS / "dead-letters.png"), full_page=True)
        row.locator("input[name=budget_seconds]").fill("120")
        with page.expect_navigation():
            row.locator("button").click()
        assert page.url.endswith(f"/console/jobs/{ident}")
        _until(lambda: _state(info, job) == "COMPLETED")
        page.goto(f"{info.gateway_url}/console/jobs/{ident}/diagnostics")
        assert "Read by" in page.inner_text("main") and "operators/-/tokens/" in page.inner_text(
            "main"
        )


def test_a_reviewer_reviews_but_cannot_open_operators_pages(
    console: tuple[Stack, StackInfo, Path], browser: Browser
) -> None:
    _stack, info, folder = console
    job = _park(info, folder, "reviewer")
    ident = job.removeprefix("jobs/")
    with _page(browser) as page:
        assert _sign_in(page, info.gateway_url, _reviewer_token(info)) == 200
        assert "Dead letters" not in page.inner_text("header")
        for path in ("dead-letters", f"jobs/{ident}", "batches", f"jobs/{ident}/diagnostics"):
            response = page.goto(f"{info.gateway_url}/console/{path}")
            assert response is not None and response.status == 403, path
            assert "REVIEWER_NOT_ALLOWED" in page.inner_text("main")
        page.goto(f"{info.gateway_url}/console/reviews/{ident}")
        page.fill("#note", "missing page confirmed with the sender")
        with page.expect_navigation():
            page.click("button.reject")
        assert page.inner_text("dd.status") == "REJECTED"
        assert "reviewers/-/tokens/" in page.inner_text("dl.facts"), "the reviewer is the actor"
    _until(lambda: _state(info, job) == "REJECTED")


def test_a_tenant_token_cannot_sign_in(
    console: tuple[Stack, StackInfo, Path], browser: Browser
) -> None:
    _stack, info, _folder = console
    with _page(browser) as page:
        assert _sign_in(page, info.gateway_url, info.token()) == 401
        assert "not a staff token" in page.inner_text("main")
        assert not [c for c in page.context.cookies() if c["name"] == "quire_console"]
        page.goto(f"{info.gateway_url}/console/reviews")
        assert page.url.endswith("/console/sign-in")


def test_a_form_without_its_csrf_secret_is_refused(
    console: tuple[Stack, StackInfo, Path], browser: Browser
) -> None:
    _stack, info, folder = console
    job = _park(info, folder, "csrf")
    ident = job.removeprefix("jobs/")
    with _page(browser) as page:
        _sign_in(page, info.gateway_url, info.operator_token())
        url = f"{info.gateway_url}/console/reviews/{ident}"
        forged = page.request.post(url, form={"decision": "approve", "note": "forged"})
        assert forged.status == 403 and "CSRF_TOKEN_INVALID" in forged.text()
        wrong = page.request.post(
            url, form={"decision": "approve", "note": "forged", "csrf": "not-the-secret"}
        )
        assert wrong.status == 403
        signed_out = page.request.post(f"{info.gateway_url}/console/sign-out", form={})
        assert signed_out.status == 403, "even signing out needs the secret"
    assert _state(info, job) == "NEEDS_REVIEW", "nothing was decided"


@contextmanager
def _second_gateway(info: StackInfo, session_seconds: int, folder: Path) -> Iterator[str]:
    """Another gateway process over the same stack, with its own session length."""
    port = free_port()
    env = {
        **os.environ,
        "QUIRE_GATEWAY_ADDR": f"127.0.0.1:{port}",
        "QUIRE_GATEWAY_METRICS_ADDR": "",
        "QUIRE_CONSOLE_SESSION_SECONDS": str(session_seconds),
        **{f"QUIRE_{s.upper()}_ADDR": a for s, a in info.endpoints.items()},
    }
    log = (folder / "gateway-2.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "quire.gateway.main"], env=env, stdout=log, stderr=log
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


def test_a_session_ends_when_its_time_is_up(
    console: tuple[Stack, StackInfo, Path], browser: Browser, tmp_path: Path
) -> None:
    _stack, info, _folder = console
    with _second_gateway(info, 3, tmp_path) as base, _page(browser) as page:
        assert _sign_in(page, base, info.operator_token()) == 200
        assert page.url.endswith("/console/reviews")
        time.sleep(4)
        page.goto(f"{base}/console/reviews")
        assert page.url.endswith("/console/sign-in"), "the session expired"


def test_page_images_are_not_kept_and_leave_no_plaintext_behind(
    console: tuple[Stack, StackInfo, Path], tmp_path: Path
) -> None:
    stack, info, folder = console
    job = _park(info, folder, "no-store")
    ident = job.removeprefix("jobs/")
    original = (folder / "no-store.pdf").read_bytes()
    marker = b"damaged but readable"
    watched = [stack.data_dir, Path("/dev/shm")]  # the stack keeps its temp files here
    before = _files(watched)
    with httpx.Client(base_url=info.gateway_url) as client:
        form = client.get("/console/sign-in")
        csrf = form.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        client.post("/console/sign-in", data={"token": info.operator_token(), "csrf": csrf})
        for variant in ("original", "rewrite"):
            image = client.get(
                f"/console/jobs/{ident}/sources/1/pages/1.png", params={"variant": variant}
            )
            assert image.status_code == 200 and image.content.startswith(b"\x89PNG")
            assert image.headers["cache-control"] == "no-store"
    after = _files(watched)
    for path in sorted(set(after) - set(before)) + [
        p for p in before if after.get(p, 0) != before[p]
    ]:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        assert original not in data and marker not in data, f"plaintext in {path}"


def _files(roots: list[Path]) -> dict[Path, float]:
    found: dict[Path, float] = {}
    for root in roots:
        for path in root.rglob("*"):
            try:
                if path.is_file():
                    found[path] = path.stat().st_mtime
            except OSError:
                continue
    return found
