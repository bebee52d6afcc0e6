"""The embedded NATS server's logins: bcrypt hashes at a cost fit for the password.

Quire generates 256-bit passwords, which no bcrypt cost makes harder to
guess, while nats-server pays the cost at every connection; a password
someone wrote in by hand keeps the usual cost."""

from __future__ import annotations

import re
from pathlib import Path

import bcrypt

from quire.natsauth import (
    BCRYPT_ROUNDS,
    GENERATED_ROUNDS,
    authorization_config,
    provision_nats_passwords,
)


def _hashes(config: str) -> dict[str, str]:
    return dict(re.findall(r'user: "([^"]+)", password: "([^"]+)"', config))


def test_generated_passwords_are_hashed_at_the_least_cost_and_still_check(tmp_path: Path) -> None:
    passwords = provision_nats_passwords(tmp_path, ["validator", "operator"])
    hashes = _hashes(authorization_config(passwords))
    assert set(hashes) == {"validator", "operator"}, hashes
    for user, hashed in hashes.items():
        assert hashed.startswith(f"$2b${GENERATED_ROUNDS:02d}$"), user
        assert bcrypt.checkpw(passwords[user].encode(), hashed.encode())
        assert not bcrypt.checkpw(b"not-" + passwords[user].encode(), hashed.encode())


def test_a_short_password_written_by_hand_keeps_the_usual_cost(tmp_path: Path) -> None:
    (tmp_path / "operator.password").write_text("hunter2\n")
    passwords = provision_nats_passwords(tmp_path, ["operator"])
    assert passwords == {"operator": "hunter2"}
    (hashed,) = _hashes(authorization_config(passwords)).values()
    assert hashed.startswith(f"$2b${BCRYPT_ROUNDS:02d}$")
    assert BCRYPT_ROUNDS > GENERATED_ROUNDS
