"""``stack.json``: where a running embedded stack's endpoints and tokens are.

Its own small module, so that a ``quire`` command that only reads it does not
import the supervisor (nats, aiohttp, the services' settings): a command
starts in half the time.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["STACK_FILE", "StackFileError", "StackInfo"]

STACK_FILE = "stack.json"


class StackFileError(ValueError):
    """``stack.json`` is there but is not one this code wrote (cut short,
    edited, or from another version)."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"{path} is not a stack file (cut short or edited?): start the stack again"
        )
        self.path = path


@dataclass(frozen=True)
class StackInfo:
    data_dir: str
    nats_url: str
    endpoints: dict[str, str]
    token_file: str
    health_endpoints: dict[str, str] = field(default_factory=dict)
    """Each service's plaintext ``grpc.health.v1`` port (no credentials needed)."""
    operator_token_file: str = ""
    """Where the operator token is: the configured ``QUIRE_OPERATOR_TOKEN_FILE``,
    or the file admission writes in its directory on first start."""
    metrics_endpoints: dict[str, str] = field(default_factory=dict)
    """Each service's Prometheus ``/metrics`` address, and the gateway's."""
    gateway_url: str = ""
    """The HTTP gateway's base URL (``http://127.0.0.1:<port>``)."""

    def write(self) -> None:
        path = Path(self.data_dir) / STACK_FILE
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def read(cls, data_dir: Path) -> StackInfo:
        """The stack file; ``OSError`` when there is none, ``StackFileError``
        when it cannot be read as one."""
        path = data_dir / STACK_FILE
        try:
            fields = json.loads(path.read_text())
            info = cls(**fields)
        except (ValueError, TypeError):  # not JSON, not UTF-8, not these fields
            raise StackFileError(path) from None
        if not isinstance(info.endpoints, dict) or not isinstance(info.token_file, str):
            raise StackFileError(path)
        return info

    def token(self) -> str:
        """The development tenant's token; empty when there is none (an
        operator token was configured, so no development tenant was made)."""
        path = Path(self.token_file)
        return path.read_text().strip() if path.exists() else ""

    def operator_token(self) -> str:
        """The configured operator token, or the one admission wrote beside the
        development token."""
        path = Path(self.operator_token_file or Path(self.token_file).with_name("operator-token"))
        return path.read_text().strip() if path.exists() else ""
