"""A TCP proxy that delays what it forwards, for latency and jitter where the kernel has no netem.

Each direction of each connection is a queue: a chunk read at time t is
written at t + delay + a random jitter, never before the chunk ahead of it (a
TCP stream keeps its order), so a request and its reply each take one delay:
the round trip grows by twice the delay. Bytes are counted each way, which is
how `ddq bench network` measures what an update costs on the wire. What passes
through is not read: a TLS connection stays end to end. SIGUSR1 turns the delay
off and on again (`--off`: it starts off), on every connection at once: a spell
of latency in a longer run.

    python -m ddq.benchmarks.latency_proxy --listen 10.0.0.1:7000 --to 10.0.0.1:6380 --delay-ms 2 --jitter-ms 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
import time
from dataclasses import dataclass, field

CHUNK = 1 << 16


@dataclass
class Traffic:
    """Bytes forwarded each way, over every connection so far."""

    upstream: int = 0  # client to server
    downstream: int = 0  # server to client
    connections: int = 0
    since: float = field(default_factory=time.time)


class LatencyProxy:
    def __init__(self, target: tuple[str, int], delay_s: float, jitter_s: float = 0.0, seed: int = 0,
                 delaying: bool = True):
        self.target, self.delay_s, self.jitter_s, self.delaying = target, delay_s, jitter_s, delaying
        self.random = random.Random(seed)
        self.traffic = Traffic()

    def toggle(self) -> None:
        self.delaying = not self.delaying
        print(f"latency proxy: delay {'on' if self.delaying else 'off'}", flush=True)

    def _due(self, after: float) -> float:
        """When a chunk read now goes out: a delay with jitter (none while the delay is off), never before the
        one ahead of it."""
        if not self.delaying:
            return max(time.monotonic(), after)
        jitter = self.random.uniform(-self.jitter_s, self.jitter_s) if self.jitter_s else 0.0
        return max(time.monotonic() + max(self.delay_s + jitter, 0.0), after)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: bool) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    break
                await asyncio.sleep(max(due - time.monotonic(), 0.0))
                writer.write(chunk)
                await writer.drain()
            writer.close()

        sender = asyncio.create_task(send())
        last = 0.0
        try:
            while chunk := await reader.read(CHUNK):
                if upstream:
                    self.traffic.upstream += len(chunk)
                else:
                    self.traffic.downstream += len(chunk)
                last = self._due(last)
                queue.put_nowait((last, chunk))
        except (ConnectionError, OSError):
            pass
        queue.put_nowait((last, b""))
        try:
            await sender
        except (ConnectionError, OSError):
            pass

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        self.traffic.connections += 1
        await asyncio.gather(self._pump(client_reader, server_writer, True),
                             self._pump(server_reader, client_writer, False))

    async def run(self, listen: tuple[str, int], stop: asyncio.Event) -> None:
        server = await asyncio.start_server(self._serve, *listen)
        print(f"latency proxy on {listen[0]}:{listen[1]} -> {self.target[0]}:{self.target[1]}, "
              f"{self.delay_s * 1e3:g} ms each way +- {self.jitter_s * 1e3:g} ms"
              f"{'' if self.delaying else ' (off until SIGUSR1)'}", flush=True)
        async with server:
            await stop.wait()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddq.benchmarks.latency_proxy", description=__doc__.split("\n")[0])
    parser.add_argument("--listen", type=_address, required=True, help="HOST:PORT to accept connections on")
    parser.add_argument("--to", type=_address, required=True, help="HOST:PORT to forward them to")
    parser.add_argument("--delay-ms", type=float, default=2.0, help="added to each direction (default 2)")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="uniform +- around the delay (default 0)")
    parser.add_argument("--traffic", help="a file to write the byte counts to (JSON) on SIGTERM or SIGINT")
    parser.add_argument("--off", action="store_true", help="start with the delay off (SIGUSR1 turns it on and off)")
    args = parser.parse_args(argv)
    proxy = LatencyProxy(args.to, args.delay_ms / 1e3, args.jitter_ms / 1e3, delaying=not args.off)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGUSR1, proxy.toggle)
        await proxy.run(args.listen, stop)

    asyncio.run(serve())
    if args.traffic:
        with open(args.traffic, "w") as out:
            json.dump(vars(proxy.traffic), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
