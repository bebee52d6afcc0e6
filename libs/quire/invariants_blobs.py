"""The blob store as the invariant checker sees it: signed artifacts (each
hashed again) and the temporary space.

The signer keys every artifact by its job, ``signed/<tenant>/<job>.pdf``;
anything else under ``signed/`` is not Quire's. Temporary entries live
under ``<blob root>/.tmp``: those whose owner is gone are left over, and
once the stack is stopped there should be none at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from quire.blobstore import sha256_file
from quire.errors import NotFound
from quire.invariants_findings import Finding
from quire.jobs import job_id, job_name
from quire.tempspace import leftover_entries

__all__ = ["Artifact", "ArtifactScan", "scan_artifacts", "temp_findings"]

SIGNED = "signed"


@dataclass(frozen=True)
class Artifact:
    key: str
    """The blob key, ``signed/<tenant>/<job>.pdf``."""
    tenant: str
    job: str
    """``jobs/{job}``."""
    sha256: str


@dataclass(frozen=True)
class ArtifactScan:
    artifacts: list[Artifact]
    unrecognized: int
    """Files under ``signed/`` that are not named like an artifact."""


def _job_of(name: str) -> str | None:
    if not name.endswith(".pdf"):
        return None
    try:
        return job_name(job_id(job_name(name.removesuffix(".pdf"))))
    except NotFound:
        return None


def scan_artifacts(blob_root: Path) -> ArtifactScan:
    """Every signed artifact with its recomputed sha256."""
    artifacts: list[Artifact] = []
    unrecognized = 0
    root = blob_root / SIGNED
    if not root.is_dir():
        return ArtifactScan([], 0)
    for path in sorted(p for p in root.rglob("*") if not p.is_dir()):
        relative = path.relative_to(blob_root)
        job = _job_of(path.name) if len(relative.parts) == 3 and path.is_file() else None
        if job is None:
            unrecognized += 1
            continue
        digest, _size = sha256_file(path)
        artifacts.append(Artifact(relative.as_posix(), relative.parts[1], job, digest))
    return ArtifactScan(artifacts, unrecognized)


def temp_findings(blob_root: Path, *, stopped: bool) -> tuple[list[Finding], int]:
    """Findings about the temporary space, and how many entries it holds."""
    tmp = blob_root / ".tmp"
    try:
        entries = list(tmp.iterdir())
    except FileNotFoundError:
        entries = []
    findings = []
    leftovers = leftover_entries(tmp)
    if leftovers:
        findings.append(Finding("temp_leftover", detail=f"{len(leftovers)} entries"))
    others = len(set(entries) - set(leftovers))
    if stopped and others > 0:
        findings.append(Finding("temp_not_empty", detail=f"{others} entries"))
    return findings, len(entries)
