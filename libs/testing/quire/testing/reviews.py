"""Jobs parked for review on a running stack, for tests of the review calls
and of the operator console (issue 41).

Three ways a job waits in NEEDS_REVIEW, each a real document through the
real pipeline:

- ``park_repaired``: a PDF whose stream ``/Length`` is wrong, under the
  ``repair-review`` ruleset (repairs accepted only after review): the
  validator repairs it into a clean rewrite, so the review has an original
  and a rewrite to show, and the damage code ``STREAM_LENGTH_RECOVERED``;
- ``park_lease``: a lease with neither the landlord's signature nor the
  lead-based paint clause, under the shipped ``lease-renewal`` ruleset
  (both rules ask for review when missing);
- ``park_invoice``: a correct invoice over 10,000 under the shipped
  ``logistics-invoice`` ruleset (large invoices need review).

``repair-review`` is no shipped ruleset: a stack that parks repaired
sources loads ``review_rulesets`` (the shipped ones and it) through
``QUIRE_RULESETS_DIR``, as ``review_stack_env`` says.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.testing.damaged import EVERYDAY
from quire.testing.pdfs import write_form_pdf

__all__ = [
    "LEASE_CLAUSES",
    "REPAIR_REVIEW",
    "Parked",
    "park_invoice",
    "park_lease",
    "park_repaired",
    "review_rulesets",
    "review_stack_env",
]

REPAIR_REVIEW = "repair-review"
"""A ruleset of structural checks only, whose damaged PDFs wait for review."""
LEASE_CLAUSES = "The renewal term is twelve months. Monthly rent: 1,200."
"""A lease's text without the lead-based paint clause."""
LEASE_FIELDS = {"property_address": "1 Main St", "tenant_signature": "A. Tenant"}
"""A lease's form without the landlord's signature."""
DAMAGE = "stream-length-wrong"
"""The everyday damage ``park_repaired`` builds (``quire.testing.damaged``)."""
ATTEMPTS = 3


@dataclass(frozen=True)
class Parked:
    """A job waiting in NEEDS_REVIEW, and its one source."""

    job: str
    sha256: str
    """The uploaded source's digest."""
    source: Path
    """The uploaded file, as written here."""
    ruleset: str


def review_rulesets(folder: Path, shipped: Path) -> Path:
    """``folder`` holding the shipped rulesets (the validator's folder of
    them, ``quire.validator.rulesets.DEFAULT_DIRECTORY``) and
    ``repair-review``, for ``QUIRE_RULESETS_DIR``."""
    folder.mkdir(parents=True, exist_ok=True)
    for ruleset in shipped.glob("*.json"):
        shutil.copy(ruleset, folder / ruleset.name)
    body = {
        "name": REPAIR_REVIEW,
        "version": "1",
        "description": "Structural checks only; damaged PDFs: repair after review.",
        "active_content": "refuse",
        "repair": "review",
        "rules": [],
    }
    (folder / f"{REPAIR_REVIEW}-1.json").write_text(json.dumps(body))
    return folder


def review_stack_env(folder: Path, shipped: Path) -> dict[str, str]:
    """The environment of a stack that can park every kind of review here
    (``review_rulesets``)."""
    return {"QUIRE_RULESETS_DIR": str(review_rulesets(folder, shipped))}


async def _parked(client: AdmissionClient, job: str) -> bool:
    """Whether ``job`` parked; False when a loaded machine's sandbox refused
    it (PARSER_LIMIT_EXCEEDED), so the caller tries a fresh one."""
    final = await client.wait(job, timeout=90)
    if final.reason_code == "PARSER_LIMIT_EXCEEDED":
        return False
    assert state_name(final.state) == "NEEDS_REVIEW", (state_name(final.state), final.reason_code)
    return True


async def _park(
    client: AdmissionClient, path: Path, ruleset: str, content_type: str = "application/pdf"
) -> Parked:
    digest = (await client.upload(path, content_type)).sha256
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    job = await client.submit([PacketItem("reviewed", digest)], ruleset=ruleset)
    if not await _parked(client, job.name):
        raise _Refused()
    return Parked(job.name, digest, path, ruleset)


class _Refused(Exception):  # noqa: N818 - a try to repeat, not a failure
    """The sandbox refused the source under load: try a fresh one."""


Make = Callable[[AdmissionClient, Path], Awaitable[Parked]]


async def _attempts(make: Make, client: AdmissionClient, folder: Path) -> Parked:
    for _ in range(ATTEMPTS):
        try:
            return await make(client, folder)
        except _Refused:
            continue
    raise AssertionError("the sandbox kept refusing the source under load")


async def park_repaired(client: AdmissionClient, folder: Path) -> Parked:
    """A damaged PDF repaired by the validator, parked under ``repair-review``.
    The same bytes every call (the builder is deterministic): the rewrite's
    digest is the same too."""

    async def make(client: AdmissionClient, folder: Path) -> Parked:
        builder, _code = EVERYDAY[DAMAGE]
        path = builder(folder / f"{uuid.uuid4().hex}.pdf")
        return await _park(client, path, REPAIR_REVIEW)

    return await _attempts(make, client, folder)


async def park_lease(client: AdmissionClient, folder: Path) -> Parked:
    """A lease missing the landlord's signature and the lead-based paint
    clause, parked under ``lease-renewal`` (its second page unique to it)."""

    async def make(client: AdmissionClient, folder: Path) -> Parked:
        path = write_form_pdf(
            folder / f"{uuid.uuid4().hex}.pdf", [LEASE_CLAUSES, uuid.uuid4().hex], LEASE_FIELDS
        )
        return await _park(client, path, "lease-renewal")

    return await _attempts(make, client, folder)


async def park_invoice(
    client: AdmissionClient, folder: Path, unit_price: str = "20000.00"
) -> Parked:
    """A correct invoice of three lines at ``unit_price`` (60,000.00 by
    default), over the ``logistics-invoice`` ruleset's review threshold (10,000)."""
    total = str(Decimal(unit_price) * 3)

    async def make(client: AdmissionClient, folder: Path) -> Parked:
        body = {
            "invoice_number": f"INV-{uuid.uuid4().hex[:8]}",
            "currency": "EUR",
            "seller": {"name": "Carrier GmbH", "tax_id": "DE123456789"},
            "lines": [{"description": "freight", "quantity": "3", "unit_price": unit_price}],
            "tax_rate": "0",
            "total": total,
        }
        path = folder / f"{uuid.uuid4().hex}.json"
        path.write_text(json.dumps(body))
        return await _park(client, path, "logistics-invoice", "application/json")

    return await _attempts(make, client, folder)
