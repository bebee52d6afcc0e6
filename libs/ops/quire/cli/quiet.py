"""What libraries print on their own stays off a person's terminal.

The command says what went wrong in one line (``quire.cli.errors``); gRPC's
C core (``ssl_transport_security.cc:2563] Handshake failed ...``) and
libraries that log a traceback before they recover (pyHanko reading a
damaged PDF, nats.py retrying a server) would print around it.

- gRPC's C core logs through absl, which reads ``GRPC_VERBOSITY`` once, when
  gRPC starts: it is set (unless the user set it) before anything imports
  ``grpc``. A process that has gRPC loaded already (a test calling ``main``)
  cannot be quieted this way, and its environment is left as it is.
- Python logging: Quire's own warnings (``quire up``'s supervisor) are one
  line each on stderr, without a traceback; other libraries' records are
  dropped.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping

__all__ = ["quiet_grpc_core", "quiet_library_logs"]

GRPC_VERBOSITY = "GRPC_VERBOSITY"


def quiet_grpc_core(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Set ``GRPC_VERBOSITY=NONE`` before gRPC starts; True when it was set
    here (not when the user chose a verbosity, or gRPC was loaded already)."""
    if "grpc" in sys.modules or GRPC_VERBOSITY in environ:
        return False
    environ[GRPC_VERBOSITY] = "NONE"
    return True


class _OneLine(logging.Formatter):
    """``warning: nats-server exited; restarting it``: no traceback, no stack."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {record.getMessage()}"


class _QuireOnly(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.name == "quire" or record.name.startswith("quire.")


def quiet_library_logs() -> None:
    """Route logging to one stderr handler that shows Quire's warnings only
    (once per process: calling it again changes nothing)."""
    root = logging.getLogger()
    if any(isinstance(handler.formatter, _OneLine) for handler in root.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_OneLine())
    handler.addFilter(_QuireOnly())
    root.addHandler(handler)
