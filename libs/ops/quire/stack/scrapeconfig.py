"""A Prometheus configuration that scrapes an embedded stack.

``quire up`` writes it beside the stack's other files (``prometheus.yml`` in
the data directory): one job per service and one for the HTTP gateway, each
target its ``/metrics`` address, labelled with the service. Point a Prometheus at it
(``prometheus --config.file=.quire/prometheus.yml``) and every series of
``quire.metrics`` is there. It is JSON, which Prometheus reads as YAML.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["SCRAPE_FILE", "scrape_config", "write_scrape_config"]

SCRAPE_FILE = "prometheus.yml"


def scrape_config(
    metrics_endpoints: Mapping[str, str],
    *,
    interval_seconds: float = 5.0,
    rule_files: Sequence[str] = (),
) -> dict[str, object]:
    """Prometheus's configuration: a scrape job per Quire service."""
    interval = f"{interval_seconds:g}s"
    config: dict[str, object] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {
                "job_name": f"quire-{service}",
                "static_configs": [{"targets": [address], "labels": {"service": service}}],
            }
            for service, address in sorted(metrics_endpoints.items())
        ],
    }
    if rule_files:
        config["rule_files"] = list(rule_files)
    return config


def write_scrape_config(
    path: Path,
    metrics_endpoints: Mapping[str, str],
    *,
    interval_seconds: float = 5.0,
    rule_files: Sequence[str] = (),
) -> Path:
    config = scrape_config(
        metrics_endpoints, interval_seconds=interval_seconds, rule_files=rule_files
    )
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path
