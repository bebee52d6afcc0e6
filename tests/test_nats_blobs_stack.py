"""The whole stack with its blobs in NATS (``QUIRE_BLOB_BACKEND=nats``): jobs
complete, artifacts download with their digests, the checker finds nothing,
and no blob or data key lands in the data directory."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from test_faults_common import running_stack, submit_text_jobs, wait_all

from quire.invariants import check
from quire.jobs import state_name
from quire.settings import ServiceSettings
from quire.storage import open_blob_store, tool_kek_settings

JOBS = 4


def _files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []


@pytest.mark.stack
async def test_jobs_complete_with_every_blob_in_nats_and_none_on_disk(tmp_path: Path) -> None:
    env = {"QUIRE_BLOB_BACKEND": "nats"}
    async with running_stack(tmp_path / "stack", env) as running:
        names = await submit_text_jobs(running.client, tmp_path / "pdfs", JOBS)
        jobs = await wait_all(running.client, names, timeout=180)
        assert {state_name(job.state) for job in jobs.values()} == {"COMPLETED"}
        for name, job in jobs.items():
            output = tmp_path / "out" / f"{name.removeprefix('jobs/')}.pdf"
            assert await running.client.download(name, output) == job.output_digest
            assert hashlib.sha256(output.read_bytes()).hexdigest() == job.output_digest

        service_env = running.stack.service_env()
        report = check(running.data_dir, stopped=False, env=service_env)
        assert report.ok, report.findings
        assert report.artifacts == JOBS

        settings = ServiceSettings.from_env("audit", service_env)
        blobs = open_blob_store(settings, kek=tool_kek_settings(running.data_dir, service_env))
        try:
            kinds = {key.split("/")[0] for key in blobs.list_keys("")}
            assert kinds == {"sources", "assembled", "signed"}
            assert [entry["tenant"] for entry in blobs.keys.status()]
        finally:
            blobs.close()

    # Only the (now empty) temporary spaces are on disk: no blob, no wrapped key.
    assert _files_under(running.data_dir / "blobs") == []
    on_disk = {p.name for p in _files_under(running.data_dir)}
    for job in jobs.values():
        assert not any(job.output_digest in name for name in on_disk)
