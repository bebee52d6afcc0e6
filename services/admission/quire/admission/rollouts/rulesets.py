"""What a rollout's candidate ruleset asks of admission.

- Starting a rollout whose candidate ruleset is not loaded is refused
  (INVALID_ARGUMENT, ``INVALID_ROLLOUT``, field ``rollout.candidate_ruleset``):
  its candidate-track jobs would have nothing to run.
- Promoting one is refused while its candidate ruleset is not loaded
  (FAILED_PRECONDITION, ``RULESET_UNKNOWN``): it would become the version
  every job naming none is pinned to.
- Promoting makes the candidate ruleset its name's current version, in the
  promotion's transaction (``quire.admission.rulesets.currents``); right after,
  intake reads the current versions again and the change is taken to
  audit's ledger (``quire.admission.rulesets.ledger``). A rollback changes no
  current version.
"""

from __future__ import annotations

import logging

from sqlalchemy import Connection

from quire.admission.rollouts.records import CANARY, RolloutRecord
from quire.admission.rulesets.catalog import RulesetCatalog
from quire.admission.rulesets.currents import CurrentRulesets, adopt, promote
from quire.admission.rulesets.ledger import RulesetLedger
from quire.errors import FailedPrecondition, FieldViolation, InvalidInput
from quire.reasons import ReasonCode

__all__ = ["RolloutRulesets"]

log = logging.getLogger(__name__)


class RolloutRulesets:
    """The checks and the promotion step a rollout's candidate ruleset takes
    through admission (the module's list)."""

    def __init__(
        self,
        catalog: RulesetCatalog,
        currents: CurrentRulesets,
        ledger: RulesetLedger,
        *,
        build_version: str,
    ) -> None:
        """``build_version``: admission's, on the ledger entry of a promotion."""
        self._build_version = build_version
        self._catalog = catalog
        self._currents = currents
        self._ledger = ledger

    async def check_start(self, candidate_ruleset: str) -> None:
        """Refuse a rollout whose candidate ruleset is not loaded."""
        if candidate_ruleset and not await self._catalog.has(candidate_ruleset):
            raise InvalidInput(
                ReasonCode.INVALID_ROLLOUT,
                "the rollout is invalid",
                (
                    FieldViolation(
                        "rollout.candidate_ruleset",
                        "no such ruleset version is loaded",
                        "UNKNOWN_RULESET",
                    ),
                ),
            )

    async def check_promotion(self, record: RolloutRecord) -> frozenset[str]:
        """The catalog's keys, once the open rollout's candidate ruleset is
        among them (a closed rollout is refused by the promotion itself)."""
        if record.state != CANARY or not record.candidate_ruleset:
            return frozenset()
        if not await self._catalog.has(record.candidate_ruleset):
            raise FailedPrecondition(
                ReasonCode.RULESET_UNKNOWN,
                "the candidate ruleset is not loaded: it cannot become current; roll back",
            )
        return await self._catalog.keys()

    def promote_in(
        self, connection: Connection, record: RolloutRecord, known: frozenset[str], operator: str
    ) -> None:
        """In the promotion's transaction: the candidate ruleset becomes current
        (every name known adopted first, so the change says what it replaced)."""
        if not record.candidate_ruleset:
            return
        adopt(connection, known)
        promote(connection, record, operator=operator, build_version=self._build_version)

    async def promoted(self) -> None:
        """After the promotion's commit: intake reads the current versions
        again, and the change goes to the ledger (or the ledger's loop takes it)."""
        self._currents.changed()
        try:
            await self._ledger.record_pending()
        except Exception as error:  # noqa: BLE001 - the loop records it within seconds
            log.warning("ruleset change not yet recorded (%s)", type(error).__name__)
