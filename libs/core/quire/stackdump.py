"""Where a running process is, on request, written to its standard error
(its log), after which it goes on:

- ``SIGUSR1``: every thread's Python stack (``faulthandler``, answered even
  while the event loop is blocked);
- ``SIGUSR2``: every asyncio task's coroutine stack (answered by the event
  loop), which shows what a service waits on when its loop is idle.

A service that does not become healthy, or seems stuck, is asked with
``kill -USR1 <pid>`` and ``kill -USR2 <pid>``; the supervisor asks by itself
before it gives up on a service that never became healthy. The stacks name
code, never data.
"""

from __future__ import annotations

import asyncio
import faulthandler
import signal
import sys

__all__ = [
    "STACK_DUMP_SIGNAL",
    "TASK_DUMP_SIGNAL",
    "answer_stack_dumps",
    "answer_task_dumps",
    "awaited_frames",
]

STACK_DUMP_SIGNAL = signal.SIGUSR1
TASK_DUMP_SIGNAL = signal.SIGUSR2


def answer_stack_dumps() -> None:
    """From now on, ``STACK_DUMP_SIGNAL`` writes every thread's stack to
    standard error (file descriptor 2 as it is now)."""
    faulthandler.register(STACK_DUMP_SIGNAL, all_threads=True, chain=False)


def answer_task_dumps(loop: asyncio.AbstractEventLoop) -> None:
    """From now on, ``TASK_DUMP_SIGNAL`` writes every task of ``loop`` with
    its coroutine stack to standard error."""
    loop.add_signal_handler(TASK_DUMP_SIGNAL, _dump_tasks, loop)


def _dump_tasks(loop: asyncio.AbstractEventLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    lines = [f"{len(tasks)} asyncio tasks, each down to what it awaits (most recent call last):"]
    for task in tasks:
        lines.append(f"Task {task.get_name()}:")
        lines.extend(awaited_frames(task.get_coro()))
    print("\n".join(lines), file=sys.stderr, flush=True)


def awaited_frames(coroutine: object) -> list[str]:
    """``coroutine``'s frame and, one below another, the frames of what it
    awaits (coroutines, generators, async generators), as a traceback
    prints them; the last line names what the innermost awaits, when that
    is not code (a future, a sleep)."""
    lines = []
    current: object | None = coroutine
    while current is not None:
        frame = next(
            (
                f
                for name in ("cr_frame", "gi_frame", "ag_frame")
                if (f := getattr(current, name, None))
            ),
            None,
        )
        if frame is None:
            lines.append(f"  awaiting {type(current).__name__}")
            break
        code = frame.f_code
        lines.append(f'  File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}')
        current = next(
            (
                a
                for name in ("cr_await", "gi_yieldfrom", "ag_await")
                if (a := getattr(current, name, None)) is not None
            ),
            None,
        )
    return lines
