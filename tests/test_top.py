"""``quire top``: parsing the services' expositions, turning two scrapes into
rates, drawing the table, and the command against the real stack: its JSON
while jobs run, and its live view captured from a terminal (tmux)."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest, start_http_server
from rich.console import Console

from quire.cli.main import main
from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.metrics import ServiceMetrics, StageMeter
from quire.stack.ports import free_port
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import QUIRE, ROOT, run_quire
from quire.top.endpoints import Endpoint, endpoint_option, stack_endpoints
from quire.top.model import STAGE_NAMES, Snapshot, figures
from quire.top.scrape import Scrape, parse_exposition, scrape
from quire.top.view import render

TMUX = "/usr/bin/tmux"
VALIDATOR = Endpoint("validator", "127.0.0.1:9101")
AUDIT = Endpoint("audit", "127.0.0.1:9104")
ADMISSION = Endpoint("admission", "127.0.0.1:9100")


def _validator(limit: int = 4) -> tuple[ServiceMetrics, StageMeter]:
    metrics = ServiceMetrics("validator")
    return metrics, StageMeter(metrics, "validate", limit)


def _scrape(endpoint: Endpoint, metrics: ServiceMetrics) -> Scrape:
    samples, declared = parse_exposition(generate_latest(metrics.registry).decode())
    return Scrape(endpoint, samples, declared)


def _queue(metrics: ServiceMetrics, pending: int, age: float, budget: float = 2.0) -> None:
    labels = {"stage": "validate", "class": "interactive"}
    metrics.gauge("quire_queue_pending_messages").labels(**labels).set(pending)
    metrics.gauge("quire_queue_oldest_ready_age_seconds").labels(**labels).set(age)
    metrics.gauge("quire_queue_age_budget_seconds").labels(**labels).set(budget)


def _text(top: Any) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render(top))
    console.file.close()
    return console.export_text()


def test_parsing_keeps_every_series_and_the_families_declared() -> None:
    metrics, meter = _validator(limit=4)
    meter.settled("interactive", "done", attempt=1)
    scraped = _scrape(VALIDATOR, metrics)
    done = frozenset({("stage", "validate"), ("class", "interactive"), ("outcome", "done")})
    assert scraped.samples[("quire_stage_outcomes_total", done)] == 1.0
    assert scraped.samples[("quire_stage_concurrency_limit", frozenset({("stage", "validate")}))]
    # A labelled family with no series yet is still declared (and a counter
    # under its exported name, with the suffix the parser drops).
    assert "quire_queue_pending_messages" in scraped.declared
    assert "quire_stage_retries_total" in scraped.declared
    assert not any(name == "quire_queue_pending_messages" for name, _ in scraped.samples)


def test_two_scrapes_give_rates_and_the_second_gives_the_gauges() -> None:
    metrics, meter = _validator(limit=4)
    for _ in range(3):
        meter.settled("interactive", "done", attempt=1)
    _queue(metrics, pending=7, age=1.0)
    before = Snapshot(100.0, (_scrape(VALIDATOR, metrics),))
    for _ in range(4):
        meter.settled("interactive", "done", attempt=1)
    meter.settled("batch", "ended", attempt=2)
    meter.settled("batch", "retry", attempt=1)
    meter.settled("interactive", "retry", attempt=1)
    _queue(metrics, pending=2, age=3.5)
    with meter.delivery("interactive", 0.0):
        after = Snapshot(102.0, (_scrape(VALIDATOR, metrics),))

    top = figures(before, after)
    validate = {s.stage: s for s in top.stages}["validate"]
    assert top.interval_seconds == 2.0
    assert validate.completed_per_second == pytest.approx(5 / 2)  # 4 done + 1 ended
    assert validate.retries_per_second == pytest.approx(2 / 2)
    assert validate.outcomes["done"] == 7 and validate.retries == 2
    assert validate.pending["interactive"] == 2
    assert validate.oldest_ready_age_seconds["interactive"] == 3.5
    assert validate.over_budget("interactive") and not validate.over_budget("batch")
    assert (validate.in_flight, validate.limit, validate.processes) == (1, 4, 1)
    assert validate.temp_used_bytes is None, "the validator's temp space was never exported here"
    assert figures(None, after).stages[0].completed_per_second is None, "one scrape: no rate"


def test_replicas_add_what_they_hold_and_share_what_they_observe() -> None:
    first, first_meter = _validator(limit=4)
    second, second_meter = _validator(limit=6)
    for metrics in (first, second):  # both sample the same queue
        _queue(metrics, pending=5, age=2.5)
    one, two = Endpoint("validator", "10.0.0.1:7901"), Endpoint("validator", "10.0.0.2:7901")
    before = Snapshot(0.0, (_scrape(one, first), _scrape(two, second)))
    first_meter.settled("interactive", "done", attempt=1)
    for _ in range(3):
        second_meter.settled("interactive", "done", attempt=1)
    with first_meter.delivery("interactive", 0.0), second_meter.delivery("batch", 0.0):
        after = Snapshot(1.0, (_scrape(one, first), _scrape(two, second)))

    validate = figures(before, after).stages[0]
    assert validate.processes == 2
    assert (validate.in_flight, validate.limit) == (2, 10)
    assert validate.pending["interactive"] == 5, "one queue, read twice: not 10"
    assert validate.completed_per_second == pytest.approx(4.0)


def test_a_restarted_process_counts_from_zero_not_backwards() -> None:
    old, old_meter = _validator()
    for _ in range(10):
        old_meter.settled("interactive", "done", attempt=1)
    new, new_meter = _validator()
    for _ in range(2):
        new_meter.settled("interactive", "done", attempt=1)
    top = figures(
        Snapshot(0.0, (_scrape(VALIDATOR, old),)), Snapshot(2.0, (_scrape(VALIDATOR, new),))
    )
    assert top.stages[0].completed_per_second == pytest.approx(1.0)


def test_a_counter_without_series_yet_is_zero_and_its_first_series_counts() -> None:
    admission = ServiceMetrics("admission")
    before = Snapshot(0.0, (_scrape(ADMISSION, admission),))
    assert figures(None, before).totals.accepted == 0
    admission.counter("quire_jobs_accepted_total").labels(**{"class": "batch"}).inc(3)
    after = Snapshot(3.0, (_scrape(ADMISSION, admission),))
    totals = figures(before, after).totals
    assert (totals.accepted, totals.accepted_per_second) == (3, pytest.approx(1.0))
    assert totals.completed is None, "no audit scraped: unknown, not zero"


def test_a_service_that_does_not_answer_is_named_and_its_stage_has_no_figures() -> None:
    audit = ServiceMetrics("audit")
    audit.gauge("quire_dead_letters").labels(stage="validate").set(2)
    down = Scrape(VALIDATOR, error="connection refused")
    snapshot = Snapshot(0.0, (down, _scrape(AUDIT, audit)))
    top = figures(snapshot, snapshot)
    validate = top.stages[0]
    assert validate.processes == 0 and validate.in_flight is None
    assert validate.completed_per_second is None
    assert validate.dead_letters == 2, "audit still answers for the dead letters"
    assert [s.service for s in top.down] == ["validator"]
    shown = _text(top)
    assert "down: validator at 127.0.0.1:9101 (connection refused)" in shown
    assert "services answering: 1 of 2" in shown
    document = top.document()
    assert document["stages"]["validate"]["in_flight"] is None  # type: ignore[index]
    json.dumps(document)  # one JSON document, as --json prints it


def test_the_table_shows_every_stage_and_its_figures() -> None:
    metrics, meter = _validator(limit=4)
    _queue(metrics, pending=3, age=4.0)
    snapshot = Snapshot(0.0, (_scrape(VALIDATOR, metrics),))
    shown = _text(figures(snapshot, snapshot))
    header = next(line for line in shown.splitlines() if "stage" in line)
    for column in ("pending", "oldest ready", "in flight", "done/s", "retries", "dead letters"):
        assert column in header
    row = next(line for line in shown.splitlines() if "validate" in line)
    assert "3 / -" in row and "4.0s / -" in row and "0 / 4" in row
    assert all(stage in shown for stage in STAGE_NAMES)


def test_the_candidate_tracks_backlog_is_shown_per_stage() -> None:
    metrics, _meter = _validator(limit=4)
    metrics.gauge("quire_queue_candidate_pending_messages").labels(stage="validate").set(7)
    for priority, age in (("interactive", 3.5), ("batch", 9.25)):
        metrics.gauge("quire_queue_candidate_oldest_ready_age_seconds").labels(
            stage="validate", **{"class": priority}
        ).set(age)
    snapshot = Snapshot(0.0, (_scrape(VALIDATOR, metrics),))
    top = figures(snapshot, snapshot)
    validate = top.stages[0]
    assert validate.candidate_pending == 7
    assert validate.candidate_oldest_ready_age_seconds == {"interactive": 3.5, "batch": 9.25}
    document = top.document()["stages"]
    assert document["validate"]["candidate"] == {  # type: ignore[index]
        "pending": 7,
        "oldest_ready_age_seconds": {"interactive": 3.5, "batch": 9.25},
    }
    assert document["sign"]["candidate"]["pending"] is None  # type: ignore[index]
    shown = _text(top)
    assert "candidate" in next(line for line in shown.splitlines() if "stage" in line)
    assert "7 (9.2s)" in next(line for line in shown.splitlines() if "validate" in line)

    # With nothing waiting for a candidate the column is left out.
    metrics.gauge("quire_queue_candidate_pending_messages").labels(stage="validate").set(0)
    for priority in ("interactive", "batch"):
        metrics.gauge("quire_queue_candidate_oldest_ready_age_seconds").labels(
            stage="validate", **{"class": priority}
        ).set(0)
    idle = Snapshot(0.0, (_scrape(VALIDATOR, metrics),))
    assert "candidate" not in _text(figures(idle, idle))


def test_endpoints_come_from_the_option_or_stack_json(tmp_path: Path) -> None:
    assert endpoint_option("validator=10.0.0.5:7901").url == "http://10.0.0.5:7901/metrics"
    assert endpoint_option("audit=http://h:1/m").url == "http://h:1/m"
    for bad in ("validator", "validator=", "=h:1", "validator=host", "validator=host:port"):
        with pytest.raises(Exception, match="expected"):
            endpoint_option(bad)
    assert stack_endpoints(tmp_path) == ()
    (tmp_path / "stack.json").write_text(json.dumps({"metrics_endpoints": {"audit": "h:2"}}))
    assert stack_endpoints(tmp_path) == (Endpoint("audit", "h:2"),)


@pytest.fixture
def served() -> Iterator[tuple[Endpoint, StageMeter]]:
    """A real ``/metrics`` server (prometheus-client's own) on a loopback port."""
    metrics, meter = _validator(limit=3)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=metrics.registry)
    yield Endpoint("validator", f"127.0.0.1:{port}"), meter
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_scraping_a_real_endpoint_and_one_that_is_gone(
    served: tuple[Endpoint, StageMeter],
) -> None:
    endpoint, _ = served
    answered = scrape(endpoint)
    assert answered.up and answered.samples
    gone = scrape(Endpoint("signer", f"127.0.0.1:{free_port()}"), timeout=1.0)
    assert not gone.up and gone.error == "connection refused"


def test_the_command_prints_one_json_document_and_names_what_is_down(
    served: tuple[Endpoint, StageMeter], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    endpoint, meter = served
    meter.settled("interactive", "done", attempt=1)
    gone = f"signer=127.0.0.1:{free_port()}"
    arguments = ["--data-dir", str(tmp_path), "top", "--json", "--interval", "0.2"]
    code = main([*arguments, "--endpoint", f"validator={endpoint.address}", "--endpoint", gone])
    document = json.loads(capsys.readouterr().out)
    assert code == 0
    assert document["stages"]["validate"]["limit"] == 3
    assert document["stages"]["validate"]["outcomes"]["done"] == 1
    assert [s["service"] for s in document["services"] if not s["up"]] == ["signer"]


def test_when_nothing_answers_the_command_says_so_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["--data-dir", str(tmp_path), "top", "--once"])
    assert code == 6  # UNREACHABLE: no stack.json, no --endpoint
    assert capsys.readouterr().err.count("\n") == 1
    gone = f"validator=127.0.0.1:{free_port()}"
    code = main(["--data-dir", str(tmp_path), "top", "--once", "--endpoint", gone])
    error = capsys.readouterr().err
    assert code == 6 and error.startswith("error: no metrics endpoint answers")


# The real stack.


async def _submit(client: AdmissionClient, folder: Path, count: int) -> list[str]:
    """Uploads first, then the submissions back to back: a held queue soon
    passes the session stack's 2-second age budget, and admission sheds."""
    digests = []
    for n in range(count):
        path = write_text_pdf(folder / f"top{n}.pdf", [f"top {uuid.uuid4().hex}"] * 2)
        digests.append((await client.upload(path)).sha256)
    return [(await client.submit([PacketItem("top", d)])).name for d in digests]


async def _completed(client: AdmissionClient, names: list[str]) -> None:
    for name in names:
        assert state_name((await client.wait(name, timeout=60)).state) == "COMPLETED"


def _top_json(data_dir: Path) -> dict[str, Any]:
    result = run_quire(data_dir, "top", "--once", "--json", "--interval", "0.5")
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


@pytest.mark.stack
async def test_top_json_on_the_stack_while_jobs_run(
    stack, client: AdmissionClient, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    data_dir = Path(stack.data_dir)
    first = await asyncio.to_thread(_top_json, data_dir)
    during, names = await asyncio.gather(
        asyncio.to_thread(_top_json, data_dir), _submit(client, tmp_path, 3)
    )
    await _completed(client, names)
    for document in (first, during):
        assert set(document["stages"]) == set(STAGE_NAMES)
        assert all(s["up"] for s in document["services"])
        for stage in document["stages"].values():
            assert stage["limit"] > 0 and 0 <= stage["in_flight"] <= stage["limit"]
            assert stage["completed_per_second"] >= 0 and stage["retries_per_second"] >= 0
            assert min(stage["pending"].values()) >= 0
        assert document["totals"]["completed_per_second"] >= 0
    deadline = time.monotonic() + 15
    while True:  # audit counts a completion just after the job reads COMPLETED
        after = await asyncio.to_thread(_top_json, data_dir)
        if after["totals"]["completed"] >= first["totals"]["completed"] + 3:
            break
        assert time.monotonic() < deadline, (first["totals"], after["totals"])
    for stage in STAGE_NAMES:
        done = [d["stages"][stage]["outcomes"]["done"] for d in (first, after)]
        assert done[1] >= done[0] + 3, stage
    assert after["totals"]["accepted"] >= first["totals"]["accepted"] + 3


def _pending_interactive(screen: str, stage: str) -> int:
    """The interactive half of a stage's ``pending`` cell on the captured screen."""
    for line in screen.splitlines():
        cells = [cell.strip() for cell in line.split("│")]
        if len(cells) > 3 and cells[1] == stage and cells[3][:1].isdigit():
            return int(cells[3].split("/")[0])
    return -1


def _tmux(server: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TMUX, "-L", server, *args], capture_output=True, text=True, timeout=10, check=False
    )


@pytest.mark.stack
async def test_top_live_in_a_terminal_shows_the_queue_filling(
    stack, client: AdmissionClient, validate_queue, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    server = f"quire-top-{uuid.uuid4().hex[:8]}"  # a tmux server of its own
    command = shlex.join([*QUIRE, "--data-dir", str(stack.data_dir), "top"])
    # If top ends, the pane keeps what it printed for the assertion to show.
    # (pytest's COLUMNS would pin rich to 80 columns: the pane's own width is wanted.)
    shell = f"unset COLUMNS LINES; {command}; echo top exited $?; sleep 60"
    size = ["-x", "160", "-y", "40"]
    started = _tmux(server, "new-session", "-d", *size, "-s", "top", "-c", str(ROOT), shell)
    assert started.returncode == 0, started.stderr
    try:
        await validate_queue.pause()  # the jobs wait on the validate queue
        names = await _submit(client, tmp_path, 3)
        # The stage samples its queue every 5 s; top itself starts and scrapes
        # first, which a loaded machine (the suite's other worker) can slow.
        deadline = time.monotonic() + 40
        while True:
            await asyncio.sleep(1.0)
            screen = _tmux(server, "capture-pane", "-p", "-t", "top").stdout
            if _pending_interactive(screen, "validate") >= len(names):
                break
            assert time.monotonic() < deadline, screen
        print(screen)  # what the README shows
        assert "top exited" not in screen
        header = next(line for line in screen.splitlines() if "stage" in line)
        for column in ("procs", "pending", "oldest ready", "in flight", "done/s", "dead letters"):
            assert column in header
        for stage in STAGE_NAMES:
            assert f"│ {stage}" in screen
        assert "services answering: 6 of 6" in screen  # the five and the gateway
        await validate_queue.resume()
        await _completed(client, names)
    finally:
        _tmux(server, "kill-server")


def _sources_exposition(state: int, fetches: dict[str, int], deferrals: int) -> str:
    lines = [
        "# TYPE quire_source_breaker_state gauge",
        f'quire_source_breaker_state{{system="tax"}} {state}',
        'quire_source_breaker_state{system="orders"} 0',
        "# TYPE quire_source_fetches_total counter",
        *(
            f'quire_source_fetches_total{{system="tax",outcome="{o}"}} {n}'
            for o, n in fetches.items()
        ),
        'quire_source_fetches_total{system="orders",outcome="ok"} 10',
        "# TYPE quire_source_deferrals_total counter",
        f'quire_source_deferrals_total{{system="tax"}} {deferrals}',
    ]
    return "\n".join(lines) + "\n"


def _source_scrape(endpoint: Endpoint, exposition: str) -> Scrape:
    samples, declared = parse_exposition(exposition)
    return Scrape(endpoint, samples, declared)


def test_source_systems_show_the_worst_breaker_and_add_up_calls_across_validators() -> None:
    one, two = Endpoint("validator", "10.0.0.1:7901"), Endpoint("validator", "10.0.0.2:7901")
    before = Snapshot(
        0.0,
        (
            _source_scrape(one, _sources_exposition(0, {"ok": 5, "timeout": 0}, 0)),
            _source_scrape(two, _sources_exposition(0, {"ok": 5, "timeout": 0}, 0)),
        ),
    )
    after = Snapshot(
        2.0,
        (
            _source_scrape(one, _sources_exposition(2, {"ok": 5, "timeout": 4}, 6)),
            _source_scrape(two, _sources_exposition(1, {"ok": 7, "timeout": 2}, 0)),
        ),
    )
    top = figures(before, after)
    tax = {s.system: s for s in top.sources}["tax"]
    assert (tax.breaker, tax.open_in) == ("open", 1), "the worst state any validator holds"
    assert tax.fetches_per_second == pytest.approx(4.0)  # (4 + 2 + 2) calls over 2 s
    assert tax.failures_per_second == pytest.approx(3.0)
    assert tax.deferrals_per_second == pytest.approx(3.0)
    assert [s.system for s in top.sources] == ["orders", "tax"]
    assert top.document()["source_systems"]["orders"]["breaker"] == "closed"  # type: ignore[index]
    shown = _text(top)
    row = next(line for line in shown.splitlines() if "tax" in line)
    assert "open" in row and "3.0" in row
    assert "source systems" in shown


def test_without_source_systems_there_is_no_source_table() -> None:
    metrics, _ = _validator()
    snapshot = Snapshot(0.0, (_scrape(VALIDATOR, metrics),))
    top = figures(snapshot, snapshot)
    assert top.sources == () and "source systems" not in _text(top)
