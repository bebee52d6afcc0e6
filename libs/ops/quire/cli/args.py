"""What the CLI's commands share in turning arguments into requests."""

from __future__ import annotations

from quire.cli.config import ClientConfig
from quire.cli.errors import CliError

__all__ = ["job_resource", "bearer_metadata", "operator_metadata"]


def job_resource(job: str) -> str:
    """``jobs/{job}`` whether the user typed the id or the resource name."""
    return job if job.startswith("jobs/") else f"jobs/{job}"


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """Call metadata presenting ``token``."""
    return (("authorization", f"Bearer {token}"),)


def operator_metadata(config: ClientConfig) -> tuple[tuple[str, str], ...]:
    """The operator token, which every call to an internal service needs."""
    if not config.operator_token:
        raise CliError("no operator token: set QUIRE_OPERATOR_TOKEN or run against `quire up`")
    return bearer_metadata(config.operator_token)
