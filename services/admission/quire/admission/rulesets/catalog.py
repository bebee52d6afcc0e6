"""Which rulesets exist, asked of the validator (which owns them) and kept
for a few seconds; a manifest's ruleset is pinned to ``name@version`` here.

A manifest naming a version gets that version. One naming no version (or
only a name) gets the name's *current* version (``quire.admission.
currentrulesets``), never merely the newest one loaded: a new version
serves such jobs only through a rollout, or once its rollout is promoted."""

from __future__ import annotations

import time
from collections.abc import Mapping

import grpc

from quire.errors import TransientError
from quire.reasons import ReasonCode
from quire.validator.v1 import validator_service_pb2, validator_service_pb2_grpc

__all__ = [
    "RulesetCatalog",
    "newest_versions",
    "resolve_ruleset",
    "ruleset_known",
    "ruleset_name",
    "DEFAULT_RULESET",
]

DEFAULT_RULESET = "default"
TIMEOUT_SECONDS = 5.0


def _version_order(key: str) -> tuple[int, str]:
    version = key.partition("@")[2]
    return (int(version), "") if version.isdigit() else (0, version)


def ruleset_name(requested: str) -> str:
    """The name a request of "", "name" or "name@version" is for."""
    return requested.partition("@")[0] or DEFAULT_RULESET


def ruleset_known(requested: str, known: frozenset[str]) -> bool:
    """Whether a request of "", "name" or "name@version" names a loaded ruleset."""
    if "@" in requested:
        return requested in known
    name = ruleset_name(requested)
    return any(key.partition("@")[0] == name for key in known)


def newest_versions(known: frozenset[str]) -> dict[str, str]:
    """Each name's newest loaded ``name@version``."""
    newest: dict[str, str] = {}
    for key in sorted(known, key=_version_order):
        newest[key.partition("@")[0]] = key
    return newest


def resolve_ruleset(
    requested: str, known: frozenset[str], current: Mapping[str, str]
) -> str | None:
    """``name@version`` for a request of "", "name" or "name@version"; None if
    unknown. Naming no version means the name's current version (``current``:
    name → ``name@version``)."""
    if "@" in requested:
        return requested if requested in known else None
    if not ruleset_known(requested, known):
        return None
    return current.get(ruleset_name(requested))


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

    async def has(self, key: str) -> bool:
        """Whether ``key`` ("name@version") is loaded; a key not among the
        kept ones is asked for again (a version published since)."""
        if key in await self.keys():
            return True
        self._read_at = float("-inf")
        return key in await self.keys()

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
                    # A channel still backing off from a try before the
                    # validator listened waits for it within the deadline.
                    wait_for_ready=True,
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
