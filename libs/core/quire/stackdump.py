"""Where a running process is, on request: ``SIGUSR1`` makes it write every
thread's Python stack to its standard error (its log), and it goes on.

A service that does not become healthy, or seems stuck, is asked with
``kill -USR1 <pid>``; the supervisor asks by itself before it gives up on a
service that never became healthy. The stacks name code, never data.
"""

from __future__ import annotations

import faulthandler
import signal

__all__ = ["STACK_DUMP_SIGNAL", "answer_stack_dumps"]

STACK_DUMP_SIGNAL = signal.SIGUSR1


def answer_stack_dumps() -> None:
    """From now on, ``STACK_DUMP_SIGNAL`` writes every thread's stack to
    standard error (file descriptor 2 as it is now)."""
    faulthandler.register(STACK_DUMP_SIGNAL, all_threads=True, chain=False)
