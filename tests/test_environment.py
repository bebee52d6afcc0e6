"""Settings at the edge: a wrong value stops a process at start naming the
variable and what it expects; a ``QUIRE_*`` variable no process reads (a
misspelling) is reported with the name it was probably meant to be; the
list of known variables is made from the settings models and covers every
one the code reads; and a model made from values reads no environment."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated

import pytest

from quire.environment import (
    NOT_SETTINGS,
    Reads,
    Settings,
    Variable,
    known,
    readers,
    unknown_settings,
)
from quire.errors import InvalidSetting
from quire.settings import QueueSettings, RetentionSettings, ServiceSettings

ROOT = Path(__file__).resolve().parents[1]
NOT_VARIABLES = {
    "QUIRE_WORK",
    "QUIRE_EVENTS",
    "QUIRE_DEAD",
    "QUIRE_JOB_GATES",
    "QUIRE_BLOBS",
    "QUIRE_KEYRING",
}
"""Stream and bucket names that look like variables (a name ending in ``_``
is a prefix: a settings model's, or that of the variables holding source
systems' credentials)."""


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
    from quire.gateway.config import GatewaySettings
    from quire.runtime import event_loop
    from quire.signer.config import SignerConfig
    from quire.stageservice import StageConfig
    from quire.validator.config import ValidatorConfig

    env = Recording()
    AdmissionConfig.from_env(env)
    ValidatorConfig.from_env(env)
    StageConfig.from_env("assembler", env)
    SignerConfig.from_env(env)
    AuditConfig.from_env(env)
    GatewaySettings.from_env(env)
    RetentionSettings.from_env(env)
    event_loop(env)
    asked = {name for name in env.asked if name.startswith("QUIRE_")}
    assert len(asked) > 60
    assert asked <= known(), sorted(asked - known())


def test_the_known_variables_are_the_settings_models_fields_and_the_few_that_are_not() -> None:
    """Each service's entry point lists the models it reads; a field is a
    variable, named once, with its description."""
    assert known() == frozenset(readers()) | frozenset(NOT_SETTINGS)
    assert readers()["QUIRE_VALIDATOR_CONCURRENCY"][1] == ("validator",)
    assert set(readers()["QUIRE_MAX_DELIVER"][1]) >= {"admission", "validator", "audit"}
    assert "QUIRE_AUDIT_SANDBOX_WORKERS" not in known(), "audit runs no sandbox"
    assert all(about for about, _ in readers().values()), "every setting says what it does"


def test_a_field_added_to_a_model_is_a_known_variable_at_once() -> None:
    class Extra(Settings):
        shiny_seconds: float = 1.0
        """A setting a change adds."""
        other: Annotated[int, Variable("QUIRE_{SERVICE}_OTHER")] = 2
        """Another, per service."""

    assert Reads(Extra).variables("validator") == {
        "QUIRE_SHINY_SECONDS": "A setting a change adds.",
        "QUIRE_VALIDATOR_OTHER": "Another, per service.",
    }
    assert Extra.read({"QUIRE_SHINY_SECONDS": "2.5"}, {"SERVICE": "X"}).shiny_seconds == 2.5


def test_a_model_made_from_values_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUIRE_MAX_DELIVER", "9")
    assert QueueSettings().max_deliver == 5
    assert QueueSettings(max_deliver=3).max_deliver == 3
    assert QueueSettings.from_env().max_deliver == 9, "from_env reads the process's environment"
    assert QueueSettings.from_env({}).max_deliver == 5


def test_settings_are_frozen_and_copied_with_changes() -> None:
    queue = QueueSettings()
    with pytest.raises(ValueError):
        queue.max_deliver = 7  # type: ignore[misc]
    assert queue.model_copy(update={"max_deliver": 7}).max_deliver == 7


def test_worked_out_defaults_follow_the_settings_they_come_from(tmp_path: Path) -> None:
    settings = ServiceSettings.from_env("signer", {"QUIRE_DATA_DIR": str(tmp_path)})
    assert settings.grpc_address == "127.0.0.1:7703"
    assert settings.health_address == "127.0.0.1:7803"
    assert settings.metrics_address == "127.0.0.1:7903"
    assert settings.database_url == f"sqlite:///{tmp_path / 'signer' / 'signer.db'}"
    assert settings.blob_root == tmp_path / "blobs"
    assert settings.identity is not None and settings.identity.trust_dir == tmp_path / "identity"
    off = ServiceSettings.from_env("signer", {"QUIRE_SIGNER_METRICS_ADDR": ""})
    assert off.metrics_address == "", "an empty metrics address turns /metrics off"
    nats = ServiceSettings.from_env("audit", {"QUIRE_NATS_CREDENTIALS_DIR": str(tmp_path)})
    assert (nats.nats_user, nats.nats_password_file) == ("audit", tmp_path / "audit.password")


def test_every_variable_named_in_the_sources_is_known() -> None:
    named = set()
    for folder in ("libs", "services"):
        for path in (ROOT / folder).rglob("*.py"):
            if "build" in path.parts:
                continue
            named |= set(re.findall(r"[\"'](QUIRE_[A-Z0-9_]*[A-Z0-9])[\"']", path.read_text()))
    assert named - NOT_VARIABLES <= known(), sorted(named - NOT_VARIABLES - known())


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
    ("variable", "value", "expected"),
    [
        ("QUIRE_MAX_DELIVER", "many", "a whole number"),
        ("QUIRE_MAX_DELIVER", "2.5", "a whole number"),
        ("QUIRE_ACK_WAIT_SECONDS", "nan", "a number"),
        ("QUIRE_WORKER_HEARTBEAT_SECONDS", "0.25", "a number of at least 0.5"),
        ("QUIRE_ASSEMBLER_STAGE_LIMIT", "1", "at least 2"),
    ],
)
def test_a_value_of_the_wrong_kind_names_the_variable_and_what_it_expects(
    variable: str, value: str, expected: str
) -> None:
    with pytest.raises(InvalidSetting) as raised:
        QueueSettings.from_env({variable: value})
    assert raised.value.variable == variable
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
