"""The file system a benchmark's stack keeps its data on (``BENCH_FS``).

A stack's cost depends on the file system under it, and on a shared one it
also depends on what ran there before. On an ext4 without a journal (this
kind of machine's root), every new file's inode is searched for past every
inode freed in the last minutes: the blobs a job keeps pay for the files
earlier runs deleted, so two runs of the same code an hour apart differ by a
tenth. A data volume of its own is what a deployment gives each service's
data (a Kubernetes persistent volume), and it makes runs comparable.

- ``volume`` (the default): a fresh ext4 with ``mkfs.ext4``'s defaults
  (journaled, as a data volume is made) on a loop device over a sparse image
  file under ``TMPDIR``, for the run only. Where the file system under the
  image takes direct I/O, the loop device uses it, so the volume's pages are
  not cached twice and its fsyncs reach the disk under it as a dedicated
  disk's would. It needs root, ``losetup``, ``mkfs.ext4`` and loop devices;
  without them the run says why and uses ``tmpdir``.
- ``tmpdir``: ``TMPDIR`` as it is.

Within the context, ``TMPDIR`` (for the processes the bench starts) and
``tempfile.tempdir`` (for the bench itself) name the chosen file system.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from quire.testing.smallfs import unmount

__all__ = ["IMAGE_BYTES", "bench_file_system", "why_not_volume"]

IMAGE_BYTES = 8 * 1024**3
"""The volume's size: a run writes a few hundred MiB, and admission stops
taking work with less than 1 GiB free. The image is sparse, so only what the
run writes takes space."""
CHOICES = ("volume", "tmpdir")


class _NoVolume(Exception):
    """The volume could not be made; the message says which step refused."""


def _run(*command: str) -> str:
    try:
        done = subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)
    except subprocess.CalledProcessError as error:
        raise _NoVolume(f"{command[0]}: {error.stderr.strip() or error.returncode}") from None
    except (OSError, subprocess.TimeoutExpired) as error:
        raise _NoVolume(f"{command[0]}: {type(error).__name__}") from None
    return done.stdout.strip()


def why_not_volume() -> str | None:
    """Why a volume of the bench's own cannot be made here, or None."""
    if os.geteuid() != 0:
        return "not root"
    for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"no {tool}"
    return None


def _attach(image: Path) -> tuple[str, bool]:
    """A loop device over ``image``, and whether it reads and writes with
    direct I/O (not every file system under the image takes it)."""
    try:
        device = _run(
            "losetup", "--find", "--show", "--direct-io=on", "--sector-size", "4096", str(image)
        )
    except _NoVolume:
        device = _run("losetup", "--find", "--show", str(image))
    dio = Path("/sys/block") / Path(device).name / "loop" / "dio"
    return device, dio.exists() and dio.read_text().strip() == "1"


@contextlib.contextmanager
def _volume(parent: Path) -> Iterator[tuple[Path, bool]]:
    """A fresh journaled ext4 on a loop device, mounted under ``parent``, and
    whether the device uses direct I/O; unmounted (lazily if still busy) and
    the device let go afterwards. The image is ``parent``'s to remove."""
    image = parent / "volume.img"
    mount_point = parent / "volume"
    mount_point.mkdir()
    with open(image, "wb") as sparse:
        sparse.truncate(IMAGE_BYTES)
    device, direct = _attach(image)
    try:
        # Inode tables and journal written now, not by the kernel's lazy
        # initialization in the background of the measurement.
        _run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", device)
        _run("mount", device, str(mount_point))
        try:
            yield mount_point, direct
        finally:
            unmount(str(mount_point))
    finally:
        subprocess.run(["losetup", "--detach", device], check=False, timeout=120)


@contextlib.contextmanager
def _temp_dir_at(folder: Path) -> Iterator[None]:
    """``TMPDIR`` and ``tempfile.tempdir`` name ``folder`` within."""
    before_env, before_module = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = str(folder)
    try:
        yield
    finally:
        tempfile.tempdir = before_module
        if before_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before_env


@contextlib.contextmanager
def bench_file_system(choice: str | None = None) -> Iterator[str]:
    """Run the block with temporary files on the chosen file system
    (``BENCH_FS`` when ``choice`` is None); yields what it is, for the report."""
    choice = choice or os.environ.get("BENCH_FS") or "volume"
    if choice not in CHOICES:
        raise SystemExit(f"BENCH_FS must be one of {', '.join(CHOICES)}, not {choice!r}")
    refused = why_not_volume() if choice == "volume" else None
    if choice == "volume" and refused is None:
        with tempfile.TemporaryDirectory(prefix="quire-bench-volume-") as parent:
            volume = contextlib.ExitStack()
            try:
                mount_point, direct = volume.enter_context(_volume(Path(parent)))
            except _NoVolume as error:
                refused = str(error)
            else:
                with volume, _temp_dir_at(mount_point):
                    how = "a loop device with direct I/O" if direct else "a loop device"
                    yield f"a fresh ext4 volume of its own (journaled; {how})"
                return
    reason = f" (no volume of its own: {refused})" if refused else ""
    yield f"TMPDIR {tempfile.gettempdir()}{reason}"
