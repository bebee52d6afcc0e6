"""Reading the services' ``/metrics`` pages: every endpoint at once, each
within a timeout, so one process that hangs or is gone costs one timeout,
and shows as down instead of stopping the view."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from quire.top.endpoints import Endpoint

__all__ = ["Labels", "Samples", "Scrape", "parse_exposition", "scrape", "scrape_all"]

SCRAPE_TIMEOUT_SECONDS = 2.0
_MAX_BYTES = 8 * 1024 * 1024  # a /metrics page is a few KiB; never read without bound

Labels = frozenset[tuple[str, str]]
Samples = Mapping[tuple[str, Labels], float]
"""Each sample by its series name (``quire_stage_outcomes_total``, with the
suffix) and label set."""


def parse_exposition(exposition: str) -> tuple[dict[tuple[str, Labels], float], frozenset[str]]:
    """The samples of a Prometheus text exposition, and the series names its
    families declare: a family with labels has no series until its first
    value, and a declared counter with no series yet is zero, not unknown."""
    samples: dict[tuple[str, Labels], float] = {}
    declared: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        declared.add(family.name)
        if family.type == "counter":
            declared.add(f"{family.name}_total")  # the parser drops the suffix
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = float(sample.value)
    return samples, frozenset(declared)


@dataclass(frozen=True)
class Scrape:
    """One endpoint's answer: its samples, or why there are none."""

    endpoint: Endpoint
    samples: Samples = field(default_factory=dict)
    declared: frozenset[str] = frozenset()
    """Series names the endpoint's families declare, with samples or not."""
    error: str = ""

    @property
    def up(self) -> bool:
        return not self.error


def _reason(error: Exception) -> str:
    """Why an endpoint did not answer, in a few words (no response body)."""
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code}"
    if isinstance(error, urllib.error.URLError):
        error = error.reason if isinstance(error.reason, Exception) else error
    if isinstance(error, TimeoutError):
        return "timed out"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, ValueError):
        return "not a metrics page"
    return type(error).__name__


def scrape(endpoint: Endpoint, timeout: float = SCRAPE_TIMEOUT_SECONDS) -> Scrape:
    try:
        with urllib.request.urlopen(endpoint.url, timeout=timeout) as response:  # noqa: S310 - http(s) only
            body = response.read(_MAX_BYTES).decode("utf-8")
        samples, declared = parse_exposition(body)
        return Scrape(endpoint, samples, declared)
    except (OSError, ValueError) as error:  # URLError and timeouts are OSErrors
        return Scrape(endpoint, error=_reason(error))


def scrape_all(
    endpoints: Iterable[Endpoint], timeout: float = SCRAPE_TIMEOUT_SECONDS
) -> tuple[float, tuple[Scrape, ...]]:
    """Every endpoint, concurrently; with the monotonic time of the reading."""
    chosen = tuple(endpoints)
    taken_at = time.monotonic()
    if not chosen:
        return taken_at, ()
    with ThreadPoolExecutor(max_workers=min(16, len(chosen))) as pool:
        scrapes = tuple(pool.map(lambda endpoint: scrape(endpoint, timeout), chosen))
    return taken_at, scrapes
