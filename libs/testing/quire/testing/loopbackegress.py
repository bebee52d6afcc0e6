"""The embedded stack's egress policy, for tests that call receivers on loopback
without a stack: global addresses and loopback, nothing else private."""

from __future__ import annotations

from quire.egress import EgressPolicy
from quire.stack.supervisor import EMBEDDED_EGRESS_ALLOW

__all__ = ["LOOPBACK_EGRESS"]

LOOPBACK_EGRESS = EgressPolicy.from_env({"QUIRE_EGRESS_ALLOW": EMBEDDED_EGRESS_ALLOW})
