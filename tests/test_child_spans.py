"""``quire.telemetry.child_span``: a child under a recording span, with any
failure escaping it recorded; nothing made under a span that records nothing
(tracing off or the trace not sampled), where a child would record nothing
either."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from quire.telemetry import child_span


def _tracer(exporter: InMemorySpanExporter, **options: object) -> trace.Tracer:
    provider = TracerProvider(**options)  # type: ignore[arg-type]
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test")


def test_a_child_of_a_recording_span_is_recorded_with_its_failure() -> None:
    exporter = InMemorySpanExporter()
    tracer = _tracer(exporter)
    with tracer.start_as_current_span("delivery") as parent:
        with child_span(tracer, "phase", attributes={"quire.phase": "sign"}) as child:
            assert child is not parent and child.is_recording()
        with pytest.raises(KeyError), child_span(tracer, "failing"):
            raise KeyError("not in the span")
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"delivery", "phase", "failing"}
    assert spans["phase"].parent is not None
    assert spans["phase"].parent.span_id == parent.get_span_context().span_id
    assert spans["phase"].attributes == {"quire.phase": "sign"}
    assert not spans["failing"].status.is_ok
    assert [event.name for event in spans["failing"].events] == ["exception"]


def test_no_child_is_made_under_a_span_that_records_nothing() -> None:
    exporter = InMemorySpanExporter()
    unsampled = _tracer(exporter, sampler=ALWAYS_OFF)
    with unsampled.start_as_current_span("delivery") as parent:
        assert not parent.is_recording()
        with child_span(unsampled, "phase") as child:
            assert child is parent
        with pytest.raises(KeyError), child_span(unsampled, "failing"):
            raise KeyError("still raised")
    assert exporter.get_finished_spans() == ()


def test_with_tracing_off_no_span_is_made_and_outside_any_span_a_trace_begins() -> None:
    # No provider installed (as configure_tracing leaves it where no spans go):
    # the API's tracer, and nothing made.
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    with child_span(trace.get_tracer("test"), "phase") as span:
        assert span is trace.INVALID_SPAN
    # Tracing on, outside any span (a background loop's publish): a trace's
    # first span, as before.
    exporter = InMemorySpanExporter()
    with child_span(_tracer(exporter), "publish") as first:
        assert first.is_recording()
    (finished,) = exporter.get_finished_spans()
    assert finished.name == "publish" and finished.parent is None
