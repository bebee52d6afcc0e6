"""Settings at the edge: a wrong value stops a process at start naming the
variable and what it expects; a ``QUIRE_*`` variable no process reads (a
misspelling) is reported with the name it was probably meant to be; and the
list of known variables covers every one the code reads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from quire.environment import KNOWN, setting_float, setting_int, unknown_settings
from quire.errors import InvalidSetting
from quire.settings import (
    QueueSettings,
    RetentionSettings,
)

ROOT = Path(__file__).resolve().parents[1]
NOT_VARIABLES = {
    "QUIRE_WORK",
    "QUIRE_EVENTS",
    "QUIRE_DEAD",
    "QUIRE_JOB_GATES",
    "QUIRE_BLOBS",
    "QUIRE_KEYRING",
    "QUIRE_SOURCE_CREDENTIAL_",
}
"""Stream and bucket names that look like variables, and the prefix of the
variables that hold source systems' credentials."""


class Recording(Mapping[str, str]):
    """An empty environment that remembers every name asked for."""

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.asked.add(name)
        raise KeyError(name)

    def get(self, name: str, default: object = None) -> object:  # type: ignore[override]
        self.asked.add(name)
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def test_every_variable_a_settings_class_reads_is_known() -> None:
    """Each service's whole configuration, as its ``main`` reads it, plus the
    operator tools' retention defaults."""
    from quire.admission.config import AdmissionConfig
    from quire.audit.config import AuditConfig
    from quire.signer.config import SignerConfig
    from quire.stageservice import StageConfig
    from quire.validator.config import ValidatorConfig

    env = Recording()
    AdmissionConfig.from_env(env)
    ValidatorConfig.from_env(env)
    StageConfig.from_env("assembler", env)
    SignerConfig.from_env(env)
    AuditConfig.from_env(env)
    RetentionSettings.from_env(env)
    asked = {name for name in env.asked if name.startswith("QUIRE_")}
    assert len(asked) > 60
    assert asked <= KNOWN, sorted(asked - KNOWN)


def test_every_variable_named_in_the_sources_is_known() -> None:
    named = set()
    for folder in ("libs", "services"):
        for path in (ROOT / folder).rglob("*.py"):
            if "build" in path.parts:
                continue
            named |= set(re.findall(r"[\"'](QUIRE_[A-Z0-9_]+)[\"']", path.read_text()))
    assert named - NOT_VARIABLES <= KNOWN, sorted(named - NOT_VARIABLES - KNOWN)


def test_a_misspelt_variable_is_reported_with_its_likely_name_and_never_its_value() -> None:
    lines = unknown_settings(
        {
            "QUIRE_MAX_DELIVR": "secret-ish-7",
            "QUIRE_VALIDATOR_CONCURENCY": "8",
            "QUIRE_SOMETHING_ELSE": "x",
            "QUIRE_MAX_DELIVER": "3",
            "QUIRE_SOURCE_CREDENTIAL_ERP": "a token, never named as unknown",
            "HOME": "/root",
        }
    )
    assert lines == [
        "QUIRE_MAX_DELIVR is not a Quire setting and is ignored; did you mean QUIRE_MAX_DELIVER?",
        "QUIRE_SOMETHING_ELSE is not a Quire setting and is ignored",
        "QUIRE_VALIDATOR_CONCURENCY is not a Quire setting and is ignored; "
        "did you mean QUIRE_VALIDATOR_CONCURRENCY?",
    ]
    assert not any("secret-ish" in line for line in lines)


@pytest.mark.parametrize(
    ("read", "value", "expected"),
    [
        (lambda env: QueueSettings.from_env(env), "many", "a whole number"),
        (lambda env: QueueSettings.from_env(env), "2.5", "a whole number"),
        (lambda env: setting_float(env, "QUIRE_MAX_DELIVER", 1.0), "nan", "a number"),
        (lambda env: setting_int(env, "QUIRE_MAX_DELIVER", 1, minimum=1), "0", "at least 1"),
    ],
)
def test_a_value_of_the_wrong_kind_names_the_variable_and_what_it_expects(
    read: object, value: str, expected: str
) -> None:
    with pytest.raises(InvalidSetting) as raised:
        read({"QUIRE_MAX_DELIVER": value})  # type: ignore[operator]
    assert raised.value.variable == "QUIRE_MAX_DELIVER"
    assert expected in raised.value.message and value not in raised.value.message


def test_a_service_started_with_a_wrong_value_stops_and_says_why(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "quire.validator.main"],
        env={
            **os.environ,
            "QUIRE_DATA_DIR": str(tmp_path),
            "QUIRE_NATS_URL": "nats://127.0.0.1:9",
            "QUIRE_VALIDATOR_CONCURRENCY": "lots",
            "QUIRE_VALIDATOR_CONCURENCY": "8",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert (
        "quire-validator: warning: QUIRE_VALIDATOR_CONCURENCY is not a Quire setting" in done.stderr
    )
    assert (
        "quire-validator: cannot start: QUIRE_VALIDATOR_CONCURRENCY: a whole number" in done.stderr
    )
    assert "Traceback" not in done.stderr
