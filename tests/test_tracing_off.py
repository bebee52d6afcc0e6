"""Spans cost nothing when they go nowhere: with no exporter and no trace
file a process makes no spans, and a caller's trace context passes through
it untouched (a traced caller's job stays one trace); with somewhere to go,
spans are made and recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
PROBE = """
import json, sys
from pathlib import Path
from opentelemetry import trace
from quire.telemetry import configure_tracing, extract_context, inject_headers
trace_file = Path(sys.argv[2]) if len(sys.argv) > 2 else None
configure_tracing("probe", "probe-1", trace_file, {})
with trace.get_tracer("probe").start_as_current_span(
    "work", context=extract_context({"traceparent": sys.argv[1]})
) as span:
    print(json.dumps([span.is_recording(), inject_headers({})["traceparent"]]))
"""


def _probe(*args: str) -> tuple[bool, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, PARENT, *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    recording, sent = json.loads(done.stdout)
    return recording, sent


def test_with_nowhere_to_go_no_span_is_made_and_the_context_passes_through() -> None:
    recording, sent = _probe()
    assert not recording
    assert sent == PARENT, "the caller's trace context goes on as it came"


def test_with_a_trace_file_spans_are_recorded_under_the_callers_trace(tmp_path: Path) -> None:
    recording, sent = _probe(str(tmp_path / "traces.jsonl"))
    assert recording
    version, trace_id, span_id, flags = sent.split("-")
    assert trace_id == PARENT.split("-")[1] and span_id != PARENT.split("-")[2]
    assert flags == "01"
