"""/metrics is served from the catalogue's registry; a taken address is
logged and the service runs on without it (a second replica on one host with
the same setting, say) instead of dying over an auxiliary port."""

from __future__ import annotations

import logging
import urllib.request

import pytest

from quire.metrics import ServiceMetrics, metric_names, serve_metrics
from quire.stack.ports import free_port


def test_metrics_are_served_and_a_taken_address_is_logged_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    address = f"127.0.0.1:{free_port()}"
    first = ServiceMetrics("audit")
    first.counter("quire_jobs_completed_total").labels(**{"class": "batch"}).inc(3)
    serve_metrics(first, address)
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as reply:
        body = reply.read().decode()
    assert 'quire_jobs_completed_total{class="batch"} 3.0' in body
    names = {line.split("{")[0].split(" ")[0] for line in body.splitlines() if line[:1] != "#"}
    assert names <= metric_names(), "only catalogued series (no *_created)"

    with caplog.at_level(logging.ERROR, logger="quire.metrics"):
        serve_metrics(ServiceMetrics("audit"), address)  # taken: logged, no exception
    assert any("metrics not served" in r.getMessage() for r in caplog.records)
