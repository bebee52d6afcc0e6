"""The embedded stack's egress policy, for tests that call receivers on loopback
without a stack: global addresses and loopback, nothing else private."""

from __future__ import annotations

from quire.egress import ALLOW_VARIABLE, EgressPolicy
from quire.stack.supervisor import EMBEDDED_EGRESS_ALLOW

__all__ = ["LOOPBACK_EGRESS"]

LOOPBACK_EGRESS = EgressPolicy.from_env({ALLOW_VARIABLE: EMBEDDED_EGRESS_ALLOW})
