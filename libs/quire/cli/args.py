"""What the CLI's commands share in turning arguments into requests."""

from __future__ import annotations

from quire.cli.config import ClientConfig

__all__ = ["job_resource", "operator_metadata"]


def job_resource(job: str) -> str:
    """``jobs/{job}`` whether the user typed the id or the resource name."""
    return job if job.startswith("jobs/") else f"jobs/{job}"


def operator_metadata(config: ClientConfig) -> tuple[tuple[str, str], ...]:
    if not config.operator_token:
        raise SystemExit("no operator token: set QUIRE_OPERATOR_TOKEN or run against `quire up`")
    return (("authorization", f"Bearer {config.operator_token}"),)
