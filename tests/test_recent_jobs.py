"""Admission answers "is this the tenant's job?" for a job it just accepted
without a database read (the watch that follows every submission asks), and
never for another tenant."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from quire.admission import tables
from quire.admission.jobs.intake import AcceptedJob
from quire.admission.jobs.views import JobViews
from quire.database import Database
from quire.errors import NotFound

pytestmark = pytest.mark.asyncio

JOB = "jobs/0123456789abcdef0123456789abcdef"


async def test_a_job_accepted_here_is_known_without_a_read_and_only_to_its_tenant(
    tmp_path: Path,
) -> None:
    database = Database(f"sqlite:///{tmp_path / 'admission.db'}", tables.metadata)
    database.create_schema()
    reads = 0
    read = database.read

    async def counted(work):  # type: ignore[no-untyped-def]
        nonlocal reads
        reads += 1
        return await read(work)

    database.read = counted  # type: ignore[method-assign]
    views = JobViews(database, None, None, pages=None)  # type: ignore[arg-type]
    accepted = AcceptedJob(
        JOB, "d" * 64, 2, datetime.now(UTC), dispatched=False, handoff=(b"t", b"e"), bundle_id="b"
    )
    try:
        with pytest.raises(NotFound):
            await views.owned("t1", JOB)  # not accepted here, not stored: read, and not found
        assert reads == 1
        views.accepted("t1", accepted)
        known = await views.owned("t1", JOB)
        assert (known.name, known.bundle_id, known.handoff) == (JOB, "b", None)
        assert reads == 1, "no read"
        with pytest.raises(NotFound):
            await views.owned("t2", JOB)  # another tenant asks: read, and not found
        assert reads == 2
    finally:
        database.close()
