"""``make bench``'s file system (``bench/volume.py``): by default a fresh,
journaled ext4 volume of the bench's own holds every temporary file of the
run, the stack's data among them, and is gone afterwards; ``BENCH_FS=tmpdir``
or a machine that cannot mount one keeps them in ``TMPDIR``."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _volume_module() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("volume")
    finally:
        sys.path.remove(str(BENCH))


def _mount_of(path: str) -> tuple[str, str] | None:
    """(device, file system type) of the mount at ``path``, or None."""
    for line in Path("/proc/mounts").read_text().splitlines():
        device, point, kind, *_rest = line.split()
        if point == path:
            return device, kind
    return None


def test_a_run_keeps_its_temporary_files_on_a_fresh_journaled_ext4_removed_afterwards() -> None:
    volume = _volume_module()
    refused = volume.why_not_volume()
    if refused is not None:
        pytest.skip(f"no volume can be made here: {refused}")
    tmpdir_before, module_before = os.environ.get("TMPDIR"), tempfile.tempdir
    with volume.bench_file_system("volume") as where:
        assert "fresh ext4" in where
        folder = tempfile.gettempdir()
        assert os.environ["TMPDIR"] == folder
        mount = _mount_of(folder)
        assert mount is not None and mount[1] == "ext4"
        features = subprocess.run(
            ["dumpe2fs", "-h", mount[0]], capture_output=True, text=True, check=True
        ).stdout
        assert "has_journal" in features
        loop = Path("/sys/block") / Path(mount[0]).name / "loop"
        assert (loop / "dio").read_text().strip() == "1", "the image is written with direct I/O"
        assert "direct I/O" in where
        assert os.listdir(folder) == ["lost+found"]  # fresh: nothing from earlier runs
        with tempfile.TemporaryDirectory() as stack_data:
            assert Path(stack_data).parent == Path(folder)
    assert _mount_of(folder) is None
    assert not Path(folder).exists()
    # The kernel frees a detached loop device once the last opener lets go
    # (udev may hold it a moment).
    deadline = time.monotonic() + 10
    while (loop / "backing_file").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (loop / "backing_file").exists(), "the loop device is let go"
    assert (os.environ.get("TMPDIR"), tempfile.tempdir) == (tmpdir_before, module_before)


def test_bench_fs_tmpdir_keeps_the_temporary_files_where_they_were() -> None:
    volume = _volume_module()
    before = tempfile.gettempdir()
    with volume.bench_file_system("tmpdir") as where:
        assert where == f"TMPDIR {before}"
        assert tempfile.gettempdir() == before


def test_without_root_the_run_says_why_and_uses_tmpdir(monkeypatch: pytest.MonkeyPatch) -> None:
    volume = _volume_module()
    monkeypatch.setattr(volume.os, "geteuid", lambda: 1000)
    before = tempfile.gettempdir()
    with volume.bench_file_system("volume") as where:
        assert where == f"TMPDIR {before} (no volume of its own: not root)"
        assert tempfile.gettempdir() == before


def test_a_volume_still_busy_at_the_end_is_unmounted_all_the_same(tmp_path: Path) -> None:
    """A process that has not let go of the volume yet (a service still
    exiting) does not leave the mount behind or fail the run."""
    volume = _volume_module()
    if volume.why_not_volume() is not None:
        pytest.skip("no volume can be made here")
    with volume.bench_file_system("volume"):
        folder = tempfile.gettempdir()
        holder = subprocess.Popen(["sleep", "30"], cwd=folder)
    try:
        assert _mount_of(folder) is None
        assert not Path(folder).exists()
    finally:
        holder.kill()
        holder.wait()


def test_an_unknown_choice_is_refused() -> None:
    with pytest.raises(SystemExit, match="BENCH_FS must be one of volume, tmpdir"):
        with _volume_module().bench_file_system("ramdisk"):
            pass
