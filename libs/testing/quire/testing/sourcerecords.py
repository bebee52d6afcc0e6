"""Records a source system serves in tests and benchmarks: each valid under
the validator's shipped schema of its kind (``tax-record@1``,
``carrier-events@1``). Copy one before changing it."""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["TAX_RECORD", "CARRIER_EVENTS", "changed"]

TAX_RECORD: dict[str, Any] = {
    "tax": {
        "breakdown": [{"base": "190.00", "rate": "21", "tax": "39.90"}],
        "exempt": False,
        "exemption_reference": None,
        "jurisdiction": "NL",
        "rates": {"reduced": "9", "standard": "21", "zero": "0"},
        "registration": "NL001234567B01",
        "reverse_charge": False,
    }
}
CARRIER_EVENTS: dict[str, Any] = {
    "shipment": {
        "carrier": "Northbound Freight",
        "events": [
            {"at": "2026-11-01T08:15:00Z", "code": "PICKED_UP", "remark": "dock 4"},
            {"at": "2026-11-01T09:15:00Z", "code": "IN_TRANSIT", "remark": "departed hub"},
            {"at": "2026-11-02T08:15:00Z", "code": "DELIVERED", "remark": "signed for"},
        ],
    }
}


def changed(record: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``record``, to change without touching the shared one."""
    return copy.deepcopy(record)
