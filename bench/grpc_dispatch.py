"""Server CPU per unary call, with a service's methods registered (as the
generated ``add_*Servicer_to_server`` adds them) and with generic dispatch
only (``quire.grpcserver.generic_dispatch``).

A grpc.aio server with 40 trivial methods answers a client process that
makes 8 concurrent streams of calls; the server's own CPU is divided by the
calls, for each way, alternately ``ROUNDS`` times, so that a drift of the
machine falls on both. Prints one line per round and the ratio of the means.

    .venv/bin/python bench/grpc_dispatch.py
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable

import grpc

from quire.grpcserver import generic_dispatch

METHODS = 40
CALLS = int(os.environ.get("BENCH_CALLS", "2000"))
"""Calls per client stream."""
STREAMS = 8
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "4"))

_CLIENT = """
import asyncio, sys
import grpc
async def main():
    async with grpc.aio.insecure_channel(sys.argv[1]) as channel:
        call = channel.unary_unary("/bench.Dispatch/M0")
        for _ in range(200):
            await call(b"x")
        print("warm", flush=True)
        sys.stdin.readline()
        async def stream():
            for _ in range(int(sys.argv[2])):
                await call(b"x")
        await asyncio.gather(*(stream() for _ in range(int(sys.argv[3]))))
asyncio.run(main())
"""


async def _answer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return b"y"


async def server_cpu_per_call(made: Callable[[grpc.aio.Server], grpc.aio.Server]) -> float:
    """Microseconds of this process's CPU per call, on a server made by ``made``."""
    handlers = {f"M{n}": grpc.unary_unary_rpc_method_handler(_answer) for n in range(METHODS)}
    server = made(grpc.aio.server())
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Dispatch", handlers),)
    )
    server.add_registered_method_handlers("bench.Dispatch", handlers)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = subprocess.Popen(
        [sys.executable, "-c", _CLIENT, f"127.0.0.1:{port}", str(CALLS), str(STREAMS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert client.stdin is not None and client.stdout is not None
        await asyncio.to_thread(client.stdout.readline)
        began = time.process_time()
        client.stdin.write("\n")
        client.stdin.flush()
        await asyncio.to_thread(client.wait, 300)
        return 1e6 * (time.process_time() - began) / (CALLS * STREAMS)
    finally:
        if client.poll() is None:
            client.kill()
        await server.stop(None)


def main() -> None:
    ways: dict[str, Callable[[grpc.aio.Server], grpc.aio.Server]] = {
        "registered": lambda server: server,
        "generic": generic_dispatch,
    }
    spent: dict[str, list[float]] = {name: [] for name in ways}
    for round_ in range(ROUNDS):
        for name, made in ways.items():
            spent[name].append(asyncio.run(server_cpu_per_call(made)))
        print(f"round {round_ + 1}: " + ", ".join(f"{n} {v[-1]:.0f} us" for n, v in spent.items()))
    means = {name: sum(values) / len(values) for name, values in spent.items()}
    print(
        f"server CPU per call: registered {means['registered']:.0f} us, "
        f"generic {means['generic']:.0f} us "
        f"({means['generic'] / means['registered']:.2f} of registered)"
    )


if __name__ == "__main__":
    main()
