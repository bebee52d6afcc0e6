"""Services run on uvloop unless an operator asks for the standard library's
loop; anything else stops the service before it serves."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from quire.errors import InvalidSetting
from quire.runtime import event_loop


def test_services_run_on_uvloop_by_default_and_asyncio_on_request() -> None:
    assert event_loop({}) is uvloop.run
    assert event_loop({"QUIRE_EVENT_LOOP": "asyncio"}) is asyncio.run

    async def loop_kind() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert uvloop.run(loop_kind()).startswith("uvloop")


def test_an_unknown_loop_is_refused_by_name() -> None:
    with pytest.raises(InvalidSetting) as refused:
        event_loop({"QUIRE_EVENT_LOOP": "tokio"})
    assert refused.value.variable == "QUIRE_EVENT_LOOP"
