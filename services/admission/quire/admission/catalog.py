"""Which rulesets exist, asked of the validator (which owns them) and kept
for a few seconds; a manifest's ruleset is pinned to ``name@version`` here."""

from __future__ import annotations

import time

import grpc

from quire.errors import TransientError
from quire.reasons import ReasonCode
from quire.validator.v1 import validator_service_pb2, validator_service_pb2_grpc

__all__ = ["RulesetCatalog", "resolve_ruleset", "DEFAULT_RULESET"]

DEFAULT_RULESET = "default"
TIMEOUT_SECONDS = 5.0


def _version_order(key: str) -> tuple[int, str]:
    version = key.partition("@")[2]
    return (int(version), "") if version.isdigit() else (0, version)


def resolve_ruleset(requested: str, known: frozenset[str]) -> str | None:
    """``name@version`` for a request of "", "name" or "name@version"; None if unknown."""
    if "@" in requested:
        return requested if requested in known else None
    name = requested or DEFAULT_RULESET
    versions = [key for key in known if key.partition("@")[0] == name]
    return max(versions, key=_version_order) if versions else None


class RulesetCatalog:
    """The validator's ruleset keys (``name@version``), asked again once the TTL
    has passed; while the validator is away, the last answer stands."""

    def __init__(
        self,
        validator: validator_service_pb2_grpc.ValidatorServiceStub,
        *,
        ttl_seconds: float = 10.0,
    ) -> None:
        self._validator = validator
        self._ttl = ttl_seconds
        self._keys: frozenset[str] = frozenset()
        self._read_at = float("-inf")

    def fresh(self) -> frozenset[str] | None:
        """The keys read within the TTL, without asking; None when they must be read."""
        if time.monotonic() - self._read_at < self._ttl:
            return self._keys
        return None

    async def keys(self) -> frozenset[str]:
        fresh = self.fresh()
        if fresh is not None:
            return fresh
        keys: set[str] = set()
        token = ""
        try:
            while True:  # every page: a catalog of many versions spans several
                reply = await self._validator.ListRulesets(
                    validator_service_pb2.ListRulesetsRequest(page_size=1000, page_token=token),
                    timeout=TIMEOUT_SECONDS,
                )
                keys.update(r.version for r in reply.rulesets)
                token = reply.next_page_token
                if not token:
                    break
        except grpc.aio.AioRpcError:
            if self._keys:
                return self._keys  # a recent answer is better than refusing work
            raise TransientError(
                ReasonCode.DEPENDENCY_UNAVAILABLE, "validator unavailable"
            ) from None
        self._keys = frozenset(keys)
        self._read_at = time.monotonic()
        return self._keys
