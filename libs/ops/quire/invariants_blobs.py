"""The blob store as the invariant checker sees it: signed artifacts (each
hashed again) and the temporary space.

The signer signs with an incremental update, so an artifact begins with the
exact bytes it signed: where the assembler recorded its packet's size, the
artifact's first that many bytes are hashed too (its signed revision) in the
same pass.

The signer keys every artifact by its job, ``signed/<tenant>/<job>.pdf``;
anything else under ``signed/`` is not Quire's. Temporary entries live
in the store's temporary space (``<blob root>/.tmp``): those whose owner is gone are left over, and
once the stack is stopped there should be none at all.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from quire.blobstore import BlobStore
from quire.errors import NotFound, PermanentError
from quire.invariants_findings import Finding
from quire.jobs import job_id, job_name
from quire.reasons import ReasonCode
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
    revision_sha256: str = ""
    """The sha256 of the artifact's first bytes, as many as its job's
    assembled packet has; empty when that size is unknown or the artifact is
    shorter."""
    shredded: bool = False
    """Its tenant's data key was destroyed: present, but no digest can be
    taken (``sha256`` and ``revision_sha256`` are empty)."""


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


def _digests(blobs: BlobStore, key: str, prefix: int) -> tuple[str, str]:
    """The plaintext's sha256 and that of its first ``prefix`` bytes ("" when
    ``prefix`` is 0 or the blob is shorter). A blob that does not open
    (edited, truncated) has digest "", which matches no ledger entry."""
    whole, head = hashlib.sha256(), hashlib.sha256()
    size = 0
    try:
        for chunk in blobs.read_plain(key):
            whole.update(chunk)
            if size < prefix:
                head.update(chunk[: prefix - size])
            size += len(chunk)
    except PermanentError as error:
        if error.reason is ReasonCode.DATA_SHREDDED:
            raise
        return "", ""
    return whole.hexdigest(), head.hexdigest() if 0 < prefix <= size else ""


def scan_artifacts(blobs: BlobStore, packet_sizes: Mapping[str, int] | None = None) -> ArtifactScan:
    """Every signed artifact with its recomputed sha256, and that of its
    signed revision where ``packet_sizes`` (by job) gives its length."""
    sizes = packet_sizes or {}
    artifacts: list[Artifact] = []
    unrecognized = 0
    for key in blobs.list_keys(f"{SIGNED}/"):
        parts = key.split("/")
        job = _job_of(parts[-1]) if len(parts) == 3 else None
        if job is None:
            unrecognized += 1
            continue
        tenant = parts[1]
        try:
            digest, revision = _digests(blobs, key, sizes.get(job, 0))
        except PermanentError:  # DATA_SHREDDED: there, and unreadable by design
            artifacts.append(Artifact(key, tenant, job, "", "", shredded=True))
            continue
        artifacts.append(Artifact(key, tenant, job, digest, revision))
    return ArtifactScan(artifacts, unrecognized)


def temp_findings(tmp: Path, *, stopped: bool) -> tuple[list[Finding], int]:
    """Findings about the temporary space ``tmp``, and how many entries it holds."""
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
