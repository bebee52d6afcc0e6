"""Settings are read once, at a process's edge, and passed in: nothing deep
inside a call reads the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from quire import faults
from quire.validator.sources.settings import SourceSettings


def test_fault_points_follow_what_the_process_started_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    faults.arm(tmp_path, "test.point")
    monkeypatch.setenv("QUIRE_FAULTS_DIR", str(tmp_path))  # set after the start: not read
    faults.configure({})
    faults.fault_point("test.point")  # would SIGKILL this process if it read the variable
    assert (tmp_path / "test.point.armed").exists() and not faults.fired(tmp_path, "test.point")
    faults.configure({"QUIRE_FAULTS_DIR": str(tmp_path / "elsewhere")})
    faults.fault_point("test.point")  # armed in another directory: inert here
    assert (tmp_path / "test.point.armed").exists()
    faults.configure({})


def test_credential_variables_are_taken_at_the_start_and_never_printed() -> None:
    settings = SourceSettings.from_env(
        {"QUIRE_SOURCE_CREDENTIAL_ERP": "s3cret", "QUIRE_DATA_DIR": "/d", "HOME": "/root"}
    )
    assert dict(settings.credential_variables) == {"QUIRE_SOURCE_CREDENTIAL_ERP": "s3cret"}
    assert "s3cret" not in repr(settings)
