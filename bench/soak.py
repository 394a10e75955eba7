#!/usr/bin/env python3
"""Soak peers for bench/soak.sh (issue 11). Both ends derive every byte from a per-connection seed,
so each side checks every byte it receives (length and SHA-256) without trusting the other.

  serve --port P                 the app (server pod). Per connection: reads the header
                                 "SOAK <seed> <up> <down> <mode>\\n", then concurrently sends <down>
                                 bytes and reads until EOF, checking the <up> bytes; mode "sreset"
                                 sends half of <down> then resets. SIGUSR1/exit prints totals.
  run --host H --port P --conns N --seconds S
                                 keeps N connections open at once for S seconds (started over
                                 --ramp seconds, default 30); each task opens
                                 connection after connection with random sizes and modes:
                                 full (both send all, half-close, read to EOF; 75 %), creset
                                 (client sends part, then RST; 15 %), sreset (server resets; 10 %).
                                 Prints one JSON line with the totals; "lost" counts connections
                                 whose bytes did not arrive intact or that failed unexpectedly.
"""
import argparse
import asyncio
import hashlib
import json
import random
import resource
import signal
import socket
import struct
import sys
import time


def payload(seed, n):
    return random.Random(seed).randbytes(n)


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def rst(writer):
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def read_all(reader, limit):
    h = hashlib.sha256()
    n = 0
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            return n, h.hexdigest()
        n += len(chunk)
        h.update(chunk)
        if n > limit:
            return n, h.hexdigest()


class Server:
    def __init__(self):
        self.conns = self.bad = self.resets = self.bytes_in = self.bytes_out = 0

    async def handle(self, reader, writer):
        self.conns += 1
        try:
            header = (await reader.readline()).split()
            if len(header) != 5 or header[0] != b"SOAK":
                self.bad += 1
                writer.close()
                return
            seed, up, down, mode = int(header[1]), int(header[2]), int(header[3]), header[4].decode()
            out = payload(seed + 1, down)

            async def send():
                if mode == "sreset":
                    writer.write(out[: down // 2])
                    await writer.drain()
                    self.bytes_out += down // 2
                    rst(writer)
                    return
                writer.write(out)
                await writer.drain()
                self.bytes_out += down
                writer.write_eof()

            sender = asyncio.ensure_future(send())
            n, digest = await read_all(reader, up)
            self.bytes_in += n
            await sender
            if mode == "full" and (n != up or digest != hashlib.sha256(payload(seed, up)).hexdigest()):
                self.bad += 1
            writer.close()
        except (ConnectionError, OSError):
            self.resets += 1
            writer.transport.abort()

    def totals(self):
        return dict(server_conns=self.conns, server_bad=self.bad, server_resets=self.resets,
                    server_bytes_in=self.bytes_in, server_bytes_out=self.bytes_out)


async def serve(a):
    raise_nofile()
    srv = Server()
    server = await asyncio.start_server(srv.handle, "0.0.0.0", a.port, backlog=4096)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, lambda: print(json.dumps(srv.totals()), flush=True))
    print(json.dumps({"event": "ready"}), flush=True)
    async with server:
        await stop.wait()
    print(json.dumps(srv.totals()), flush=True)


def size(rng):
    # Mostly small, sometimes large: 0 B .. 1 MiB, log-uniform-ish.
    return int(2 ** rng.uniform(0, 20)) if rng.random() < 0.95 else 0


class Client:
    def __init__(self):
        self.conns = self.lost = self.resets_ok = self.bytes_up = self.bytes_down = 0
        self.errors = {}

    def fail(self, why):
        self.lost += 1
        self.errors[why] = self.errors.get(why, 0) + 1

    async def one(self, a, rng):
        seed = rng.getrandbits(48)
        up, down = size(rng), size(rng)
        r = rng.random()
        mode = "full" if r < 0.75 else ("creset" if r < 0.90 else "sreset")
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(a.host, a.port), 120)
        except (OSError, asyncio.TimeoutError) as e:
            self.fail("connect: " + type(e).__name__)
            return
        self.conns += 1
        try:
            writer.write(f"SOAK {seed} {up} {down} {mode}\n".encode())
            data = payload(seed, up)
            if mode == "creset":
                writer.write(data[: up // 2])
                await writer.drain()
                self.bytes_up += up // 2
                rst(writer)
                self.resets_ok += 1
                return

            async def send():
                writer.write(data)
                await writer.drain()
                self.bytes_up += up
                writer.write_eof()

            sender = asyncio.ensure_future(send())
            try:
                n, digest = await asyncio.wait_for(read_all(reader, down), 120)
            except ConnectionResetError:
                sender.cancel()
                if mode == "sreset":
                    self.resets_ok += 1
                else:
                    self.fail("reset")
                writer.transport.abort()
                return
            self.bytes_down += n
            if mode == "sreset":
                # A reset may arrive as EOF after fewer bytes; more bytes than sent would be a loss.
                if n > down // 2:
                    self.fail("sreset: too many bytes")
                else:
                    self.resets_ok += 1
                sender.cancel()
                writer.transport.abort()
                return
            await asyncio.wait_for(sender, 120)
            if n != down or digest != hashlib.sha256(payload(seed + 1, down)).hexdigest():
                self.fail("bytes differ")
            writer.close()
        except (ConnectionError, OSError, asyncio.TimeoutError) as e:
            if mode == "full":
                self.fail(type(e).__name__)
            else:
                self.resets_ok += 1
            writer.transport.abort()

    async def worker(self, a, i, until):
        rng = random.Random(a.seed * 100003 + i)
        # Ramp up over --ramp seconds: 10,000 simultaneous SYNs overflow any listen backlog and
        # measure the kernel's SYN retry timer, not the proxy.
        await asyncio.sleep(a.ramp * i / max(a.conns, 1))
        while time.monotonic() < until:
            await self.one(a, rng)


async def run(a):
    raise_nofile()
    cl = Client()
    start = time.monotonic()
    until = start + a.seconds
    tasks = [asyncio.ensure_future(cl.worker(a, i, until)) for i in range(a.conns)]
    while not all(t.done() for t in tasks):
        await asyncio.sleep(10)
        print(json.dumps(dict(event="progress", t=round(time.monotonic() - start), conns=cl.conns, lost=cl.lost,
                              errors=cl.errors)),
              file=sys.stderr, flush=True)
    print(json.dumps(dict(connections=cl.conns, lost=cl.lost, resets_expected=cl.resets_ok, bytes_up=cl.bytes_up,
                          bytes_down=cl.bytes_down, seconds=round(time.monotonic() - start), errors=cl.errors)),
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["serve", "run"])
    ap.add_argument("--host")
    ap.add_argument("--port", type=int, default=7100)
    ap.add_argument("--conns", type=int, default=10000)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ramp", type=float, default=30, help="seconds over which the connections start")
    a = ap.parse_args()
    asyncio.run(serve(a) if a.command == "serve" else run(a))


if __name__ == "__main__":
    main()
