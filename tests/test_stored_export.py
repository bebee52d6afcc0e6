"""A stopped stack's records are exported by each service's own
distribution (``python -m quire.storedexport``): the frames it writes read
back whole and a cut-off stream is refused; a service that never ran says
its database is missing, and the export writes nothing anywhere; a service
that is not installed is named, never guessed at."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from quire.export.v1 import export_service_pb2 as pb
from quire.pipeline import SERVICES
from quire.storedexport import NOT_INSTALLED, read_frames, write_frame


def _export(data_dir: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "quire.storedexport", *args],
        env={"QUIRE_DATA_DIR": str(data_dir)},
        capture_output=True,
        timeout=120,
        check=False,
    )


def test_frames_read_back_whole_and_a_cut_off_stream_is_refused() -> None:
    frames = [
        pb.ExportFrame(database_missing="audit"),
        pb.ExportFrame(
            page=pb.ExportRecordsResponse(
                service="signer",
                collection=pb.COLLECTION_SIGNATURES,
                records=[pb.Record(signature=pb.Signature(job=f"jobs/{n}")) for n in range(300)],
            )
        ),
    ]
    stream = io.BytesIO()
    for frame in frames:
        write_frame(stream, frame)
    data = stream.getvalue()
    assert list(read_frames(data)) == frames
    for cut in (len(data) - 1, 1):
        with pytest.raises(ValueError):
            list(read_frames(data[:cut]))


def test_services_that_never_ran_have_no_database_and_nothing_is_written(tmp_path: Path) -> None:
    done = _export(tmp_path, "--stopped", *SERVICES)
    assert done.returncode == 0, done.stderr
    assert [frame.database_missing for frame in read_frames(done.stdout)] == list(SERVICES)
    assert list(tmp_path.iterdir()) == [], "an export creates nothing"


def test_a_service_that_is_not_installed_is_named(tmp_path: Path) -> None:
    done = _export(tmp_path, "admission", "archivist")
    assert done.returncode == NOT_INSTALLED
    assert b"quire-archivist is not installed" in done.stderr
