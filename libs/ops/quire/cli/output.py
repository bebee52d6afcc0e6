"""Where a command's result goes: lines for people, or one JSON document.

Every command that prints a result tells this object both: ``line`` for
the text a person reads, ``result`` for the document ``--json`` prints.
With ``--json``, stdout carries exactly one JSON document (the result, or
``{"error": ...}``) and nothing else; notes meant for people go to stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from quire.jobs import state_name
from quire.type import job_pb2

__all__ = ["Output", "message_dict", "job_dict"]


class Output:
    def __init__(self, *, as_json: bool = False) -> None:
        self.as_json = as_json
        self._document: dict[str, Any] | None = None
        self._emitted = False

    def line(self, text: str = "") -> None:
        """A line of the human-readable result (not printed with ``--json``)."""
        if not self.as_json:
            print(text, flush=True)

    def note(self, text: str) -> None:
        """Progress a person wants to see: stdout as text, stderr with ``--json``."""
        print(text, file=sys.stderr if self.as_json else sys.stdout, flush=True)

    def result(self, document: Mapping[str, Any]) -> None:
        """The machine-readable result; a later call adds to (and overrides) it."""
        self._document = {**(self._document or {}), **document}

    def emit(self, document: Mapping[str, Any] | None = None) -> None:
        """With ``--json``: print the result (or ``document``) as the one JSON
        document; only the first call prints."""
        if self.as_json and not self._emitted:
            self._emitted = True
            chosen = document if document is not None else (self._document or {})
            print(json.dumps(chosen, indent=2, sort_keys=True, default=str), flush=True)


def message_dict(message: Message) -> dict[str, Any]:
    """A protobuf message as JSON-ready data, with its fields' proto names."""
    return MessageToDict(message, preserving_proto_field_name=True)


def job_dict(job: job_pb2.Job) -> dict[str, Any]:
    """A job, its state as the CLI prints it (``COMPLETED``, not ``JOB_STATE_COMPLETED``)."""
    data = message_dict(job)
    data["state"] = state_name(job.state)
    return data
