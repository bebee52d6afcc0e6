"""Structured logs (issue 16): one JSON object per line, with the service, the
level, the trace and span ids of the span a line is logged in, and the job and
tenant — from the call's ``extra`` or from the span's attributes — so that one
job's lines, filtered by its id, show every service with the job's trace id.
Never an exception's text or traceback."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from quire.client import AdmissionClient, PacketItem
from quire.errors import InvalidSetting
from quire.gateway.config import GatewaySettings
from quire.jobs import state_name
from quire.logs import log_handler
from quire.settings import SERVICES, ServiceSettings
from quire.testing.pdfs import write_text_pdf

SECRET = "Quarterly results: confidential"
"""Stands for document text that an exception's message might quote."""


@pytest.fixture
def tracer() -> Any:
    """An SDK tracer of its own: spans are real (ids, attributes) without
    touching the process's global provider."""
    return TracerProvider().get_tracer("test")


class Captured:
    """A logger whose records go through Quire's handler into a string."""

    def __init__(self, chosen: str) -> None:
        self.stream = io.StringIO()
        self.logger = logging.getLogger(f"quire.test.{uuid.uuid4().hex}")
        self.logger.propagate = False
        self.logger.setLevel(logging.INFO)
        self.logger.addHandler(log_handler("validator", chosen, self.stream))

    def lines(self) -> list[str]:
        return self.stream.getvalue().splitlines()

    def objects(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines()]


@pytest.fixture
def captured() -> Iterator[Captured]:
    capture = Captured("json")
    yield capture
    capture.logger.handlers.clear()


def test_a_line_is_one_json_object_with_the_service_level_logger_and_utc_time(
    captured: Captured,
) -> None:
    captured.logger.info("first\nsecond line of the same record")
    captured.logger.warning("retrying %d times", 3)
    first, second = captured.objects()  # two records, two lines: the newline is escaped
    assert first["message"] == "first\nsecond line of the same record"
    assert (first["level"], second["level"]) == ("INFO", "WARNING")
    assert second["message"] == "retrying 3 times"
    assert first["service"] == "validator" and first["logger"] == captured.logger.name
    assert first["time"].endswith("Z") and first["time"][10] == "T"
    assert list(first)[:5] == ["time", "level", "service", "logger", "message"]
    # Outside any span and without a job: no empty context fields.
    assert not {"trace_id", "span_id", "job", "tenant"} & set(first)


def test_inside_a_span_a_line_carries_its_trace_and_span_ids(
    captured: Captured, tracer: Any
) -> None:
    with tracer.start_as_current_span("validator.process") as span:
        captured.logger.info("inside")
        context = span.get_span_context()
    captured.logger.info("after")
    inside, after = captured.objects()
    assert inside["trace_id"] == f"{context.trace_id:032x}"
    assert inside["span_id"] == f"{context.span_id:016x}"
    assert len(inside["trace_id"]) == 32 and len(inside["span_id"]) == 16
    assert "trace_id" not in after


def test_job_and_tenant_come_from_the_span_attributes_or_the_calls_extra(
    captured: Captured, tracer: Any
) -> None:
    attributes = {"quire.job": "0123abcd", "quire.tenant": "tenant-a"}
    with tracer.start_as_current_span("assembler.process", attributes=attributes):
        captured.logger.info("from the span")
        captured.logger.info("given", extra={"job": "jobs/ffff0000", "tenant": "tenant-b"})
    captured.logger.info("no span", extra={"job": "jobs/beef", "tenant": "tenant-c", "items": 2})
    from_span, given, no_span = captured.objects()
    assert (from_span["job"], from_span["tenant"]) == ("0123abcd", "tenant-a")
    # A task's job name logs as the id the spans carry, so one filter finds both.
    assert (given["job"], given["tenant"]) == ("ffff0000", "tenant-b")
    assert (no_span["job"], no_span["tenant"], no_span["items"]) == ("beef", "tenant-c", 2)
    assert "trace_id" not in no_span


def test_an_exception_is_logged_as_its_type_never_its_text_or_traceback(
    captured: Captured,
) -> None:
    try:
        raise ValueError(SECRET)
    except ValueError:
        captured.logger.exception("parse failed")
        captured.logger.warning("again", exc_info=True, stack_info=True)
    text = captured.stream.getvalue()
    assert SECRET not in text and "Traceback" not in text
    first, second = captured.objects()
    assert first["error"] == second["error"] == "ValueError"
    assert first["level"] == "ERROR" and first["message"] == "parse failed"


def test_the_text_format_has_the_same_context_and_no_traceback(tracer: Any) -> None:
    capture = Captured("text")
    with tracer.start_as_current_span("signer.process", attributes={"quire.job": "abc123"}) as span:
        try:
            raise RuntimeError(SECRET)
        except RuntimeError:
            capture.logger.exception("signing failed")
        trace_id = f"{span.get_span_context().trace_id:032x}"
    capture.logger.handlers.clear()
    (line,) = capture.lines()
    assert " validator ERROR " in line and "signing failed" in line
    assert "job=abc123" in line and f"trace={trace_id}" in line and "error=RuntimeError" in line
    assert SECRET not in line


def log_format(env: dict[str, str]) -> str:
    return GatewaySettings.from_env(env).log_format


def test_the_format_setting_is_json_by_default_and_refuses_what_it_does_not_know() -> None:
    assert log_format({}) == "json"
    assert log_format({"QUIRE_LOG_FORMAT": "text"}) == "text"
    assert log_format({"QUIRE_LOG_FORMAT": "JSON"}) == "json"
    assert ServiceSettings.from_env("audit", {"QUIRE_LOG_FORMAT": "Text"}).log_format == "text"
    with pytest.raises(InvalidSetting) as refused:
        log_format({"QUIRE_LOG_FORMAT": "xml-ish"})
    assert refused.value.variable == "QUIRE_LOG_FORMAT"
    assert "xml-ish" not in refused.value.message


def test_a_service_process_logs_json_lines_on_stderr() -> None:
    """What ``start_runtime`` installs, in a process of its own (the test
    runner's root logger already has handlers)."""
    program = (
        "import logging\n"
        "from quire.runtime import configure_logging\n"
        "configure_logging('audit')\n"
        "logging.getLogger('quire.audit.x').info('ready', extra={'job': 'jobs/12ab'})\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "QUIRE_LOG_FORMAT"}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = done.stderr.splitlines()
    record = json.loads(line)
    assert (record["service"], record["level"], record["message"]) == ("audit", "INFO", "ready")
    assert (record["logger"], record["job"]) == ("quire.audit.x", "12ab")


def _job_lines(data_dir: Path, ident: str) -> list[dict[str, Any]]:
    """Every service's JSON log lines of one job (other lines are skipped: a log
    file also holds what libraries write to stderr themselves)."""
    found = []
    for service in SERVICES:
        path = data_dir / "logs" / f"{service}.log"
        for line in path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("job") == ident:
                found.append(record)
    return found


def _trace_ids_of_job(data_dir: Path, ident: str) -> set[str]:
    path = data_dir / "traces.jsonl"
    spans = [json.loads(line) for line in path.read_text().splitlines()]
    return {
        s["trace_id"]
        for s in spans
        if s["attributes"].get("quire.job") == ident
        # A later call about the job (its watch) names it in the caller's trace.
        and not (s["kind"] == "SERVER" and not s["name"].endswith("/SubmitJob"))
    }


@pytest.mark.stack
async def test_one_jobs_log_lines_come_from_every_service_with_one_trace_id(
    stack: Any, client: AdmissionClient, tmp_path: Path
) -> None:
    path = write_text_pdf(tmp_path / "logged.pdf", [f"{SECRET} {uuid.uuid4().hex}"])
    digest = (await client.upload(path)).sha256
    job = await client.submit([PacketItem("logged", digest)])
    job = await client.wait(job.name, timeout=60)
    assert state_name(job.state) == "COMPLETED"
    ident = job.name.removeprefix("jobs/")
    data_dir = Path(stack.data_dir)
    lines: list[dict[str, Any]] = []
    for _ in range(50):  # the last lines follow the completion by moments
        lines = _job_lines(data_dir, ident)
        if {line["service"] for line in lines} >= set(SERVICES):
            break
        await asyncio.sleep(0.2)
    services = {line["service"] for line in lines}
    assert services == set(SERVICES), f"no line of job {ident} from {set(SERVICES) - services}"
    trace_ids = {line.get("trace_id") for line in lines}
    assert len(trace_ids) == 1, f"one trace per job, found {trace_ids}"
    for _ in range(50):  # spans are exported in batches every 200 ms
        if _trace_ids_of_job(data_dir, ident):
            break
        await asyncio.sleep(0.2)
    assert trace_ids == _trace_ids_of_job(data_dir, ident), "the logs join the job's trace"
    assert all(line.get("tenant") for line in lines), "each line names the job's tenant"
    logs = "".join((data_dir / "logs" / f"{s}.log").read_text(errors="replace") for s in SERVICES)
    assert SECRET not in logs and "logged.pdf" not in logs
