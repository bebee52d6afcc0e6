"""A fresh SoftHSM2 token for a test (Debian's softhsm2 package)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

MODULE = "/usr/lib/softhsm/libsofthsm2.so"
PIN = "pin-Zq-never-an-id"
"""Not digits: a PIN of hex digits could turn up inside a random job id in a log."""
SO_PIN = "13579"


def init_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, label: str) -> None:
    """Initialise an empty token ``label`` (user PIN ``PIN``) in a token
    directory under ``tmp_path``, and point ``SOFTHSM2_CONF`` at it for this
    process and the processes it starts. Skips the test without SoftHSM2."""
    if shutil.which("softhsm2-util") is None or not Path(MODULE).exists():
        pytest.skip("SoftHSM2 (Debian's softhsm2) is not installed; `make test` installs it")
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    config = tmp_path / "softhsm2.conf"
    config.write_text(f"directories.tokendir = {tokens}\nobjectstore.backend = file\n")
    monkeypatch.setenv("SOFTHSM2_CONF", str(config))
    subprocess.run(
        ["softhsm2-util", "--init-token", "--free", "--label", label]
        + ["--pin", PIN, "--so-pin", SO_PIN],
        check=True,
        capture_output=True,
    )
