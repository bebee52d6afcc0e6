"""A real Prometheus scrapes the embedded stack with the configuration the
stack writes, and evaluates the shipped alert rules: the series a job
produces come back through Prometheus's HTTP API, and holding a queue makes
the queue-age alert's expression true."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.metrics import CATALOGUE
from quire.stack.scrapeconfig import SCRAPE_FILE
from quire.stack.supervisor import GATEWAY, SERVICES, StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.testing.prometheus import Prometheus
from quire.testing.quirecli import ROOT

pytestmark = pytest.mark.stack

RULES = ROOT / "k8s" / "monitoring" / "quire-alerts.rules.yml"


@pytest.fixture(scope="module")
def prometheus(stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:  # type: ignore[no-untyped-def]
    info = StackInfo.read(stack.data_dir)
    server = Prometheus(
        tmp_path_factory.mktemp("prometheus"), info.metrics_endpoints, rule_files=(RULES,)
    ).start()
    yield server
    server.stop()


async def _until(check: Callable[[], Awaitable[Any]], what: str, timeout: float = 45.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        found = await check()
        if found:
            return found
        assert loop.time() < deadline, f"never: {what}"
        await asyncio.sleep(0.5)


def _total(prometheus: Prometheus, expression: str) -> float:
    result = prometheus.query(f"sum({expression})")
    return float(result[0]["value"][1]) if result else 0.0


def test_the_stack_writes_a_scrape_configuration_for_every_service(stack) -> None:  # type: ignore[no-untyped-def]
    info = StackInfo.read(stack.data_dir)
    written = (Path(stack.data_dir) / SCRAPE_FILE).read_text()
    assert set(info.metrics_endpoints) == {*SERVICES, GATEWAY}
    for address in info.metrics_endpoints.values():
        assert f'"{address}"' in written


async def test_a_jobs_series_come_back_through_prometheus(
    prometheus: Prometheus, client: AdmissionClient, tmp_path: Path
) -> None:
    async def all_up() -> bool:
        up = prometheus.query("up")
        return len(up) == len(SERVICES) + 1 and all(r["value"][1] == "1" for r in up)

    await _until(all_up, "every service's /metrics and the gateway's scraped")
    before = _total(prometheus, "quire_jobs_completed_total")
    signed_before = _total(prometheus, "quire_signatures_total")
    names = []
    for n in range(3):
        path = write_text_pdf(tmp_path / f"m{n}.pdf", [f"metrics {uuid.uuid4().hex}"])
        digest = (await client.upload(path)).sha256
        names.append((await client.submit([PacketItem("m", digest)])).name)
    for name in names:
        assert state_name((await client.wait(name, timeout=60)).state) == "COMPLETED"

    async def counted() -> bool:
        # Each service is scraped on its own schedule: wait for both to show.
        return (
            _total(prometheus, "quire_jobs_completed_total") >= before + 3
            and _total(prometheus, "quire_signatures_total") >= signed_before + 3
        )

    await _until(counted, "three more completions and signatures counted")
    phases = [
        f'quire_stage_phase_seconds_count{{stage="{stage}",phase="{phase}"}}'
        for stage, phase in [
            ("validate", "queue_wait"),
            ("validate", "validate"),
            ("assemble", "render"),
            ("sign", "sign"),
            ("sign", "store"),
        ]
    ]

    async def phases_counted() -> bool:
        # Each series is the scrape of another service: admission's acceptances
        # may come in after the signer's phases, so all are waited for alike.
        return (
            all(_total(prometheus, series) >= 3 for series in phases)
            and _total(prometheus, 'quire_jobs_accepted_total{class="interactive"}') >= 3
            and _total(prometheus, "quire_audit_lag_seconds_count") > 0
            and _total(prometheus, "quire_source_read_bytes_total") > 0
        )

    await _until(phases_counted, "each phase timed, the jobs accepted, read and audited")
    families = {
        r["metric"]["__name__"]
        for r in prometheus.query('{__name__=~"quire_.+"}')
        if "__name__" in r["metric"]
    }
    always = {
        "quire_queue_pending_messages",
        "quire_queue_oldest_ready_age_seconds",
        "quire_queue_age_budget_seconds",
        # Each stage reads its candidate consumer too (its NATS login allows it).
        "quire_queue_candidate_pending_messages",
        "quire_queue_candidate_oldest_ready_age_seconds",
        "quire_stage_in_flight",
        "quire_stage_concurrency_limit",
        "quire_dead_letters",
        "quire_temp_space_used_bytes",
        "quire_temp_space_budget_bytes",
        "quire_stage_outcomes_total",
        "quire_stage_retries_total",
    }
    assert always <= families
    catalogued = {f.name for f in CATALOGUE} | {
        f"{f.name}_{suffix}"
        for f in CATALOGUE
        if f.kind == "histogram"
        for suffix in ("bucket", "sum", "count")
    }
    assert families <= catalogued, "every exported series is in the catalogue"


async def test_a_held_queue_makes_the_queue_age_alert_true(
    prometheus: Prometheus, client: AdmissionClient, validate_queue, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    # The session's stack has a 2-second queue-age budget.
    await validate_queue.pause()
    path = write_text_pdf(tmp_path / "held.pdf", [f"held {uuid.uuid4().hex}"])
    digest = (await client.upload(path)).sha256
    job = await client.submit([PacketItem("held", digest)])

    async def alerting() -> list[dict[str, Any]]:
        return prometheus.query(
            'ALERTS{alertname="QuireQueueAgeOverBudget",stage="validate",class="interactive"}'
        )

    alerts = await _until(alerting, "QuireQueueAgeOverBudget pending or firing for validate")
    assert {a["metric"]["alertstate"] for a in alerts} <= {"pending", "firing"}
    await validate_queue.resume()
    assert state_name((await client.wait(job.name, timeout=60)).state) == "COMPLETED"

    async def cleared() -> bool:
        return not await alerting()

    await _until(cleared, "the alert's expression false again once the queue drains")
