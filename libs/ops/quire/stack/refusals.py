"""A service that refuses its configuration, as the stack reports it.

A service stops with exit status 2 (``quire.runtime.CONFIGURATION_REFUSED``)
and one line on stderr, ``quire-<service>: cannot start: ...``, when its
configuration cannot be used: a setting it cannot read, a published ruleset
changed in place. Starting it again as it is would be refused again, so the
stack does not; it reports the service's own line instead (and ``quire up``
prints it, with no traceback).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ConfigurationRefused", "refusal_line"]

TAIL_BYTES = 64 * 1024
"""How much of the end of a log is searched for the line: the refusal is the
process's last word, and a log may be long."""


class ConfigurationRefused(RuntimeError):
    """A service refused its configuration (exit status 2). The message is the
    service's own line saying why, or where to look when it left none."""

    def __init__(self, service: str, said: str) -> None:
        super().__init__(said or f"{service} refused its configuration; see logs/{service}.log")
        self.service = service


def refusal_line(log: Path, service: str) -> str:
    """The last ``quire-<service>: cannot start:`` line of ``log``, or ""."""
    marker = f"quire-{service}: cannot start: "
    try:
        with open(log, "rb") as output:
            output.seek(0, os.SEEK_END)
            output.seek(max(0, output.tell() - TAIL_BYTES))
            lines = output.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line for line in reversed(lines) if line.startswith(marker)), "")
