#!/usr/bin/env python3
"""TCP client peer for the meshnode integration tests (runs inside a pod netns).

Prints one JSON object per line on stdout; exit status 0 means the expectation held.
  hash          C connections to an mn_server.py `hash` peer: each sends the header, `--up` bytes
                (sha256 checked by the server's trailer) and verifies the `--down` bytes it gets back
                (sha256 of the server's deterministic stream). --half-close sends everything and
                shuts down its write side before reading a single byte. --hold waits, once every
                connection carries bytes both ways, for stdin to close before finishing
                (prints {"event": "holding"}). --stall sends the header and never reads.
  greet         server-first: reads the greeting before sending anything.
  expect-reset  sends a byte and expects the connection to be reset (ECONNRESET).
  send-reset    sends a line, reads "OK", then closes with SO_LINGER 0 (RST).
  plaintext     sends plaintext HTTP/1.1 + random bytes and reports how the server answered.
--mark sets SO_MARK 0x539 so the in-pod redirection lets the socket through untouched.
"""
import argparse
import asyncio
import hashlib
import json
import os
import random
import socket
import struct
import sys
import time

CHUNK = 256 * 1024
SO_MARK = 36


def emit(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def stream(seed, n):
    rng = random.Random(seed)
    left = n
    while left > 0:
        k = min(CHUNK, left)
        yield rng.randbytes(k)
        left -= k


def expected_digest(seed, n):
    h = hashlib.sha256()
    for chunk in stream(seed, n):
        h.update(chunk)
    return h.hexdigest()


async def connect(args):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if args.mark:
        sock.setsockopt(socket.SOL_SOCKET, SO_MARK, 0x539)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (args.host, args.port))
    return await asyncio.open_connection(sock=sock, limit=CHUNK)


async def one_hash(args, hold):
    seed = int.from_bytes(os.urandom(7), "big")
    up_seed = seed ^ 0x5A5A5A
    reader, writer = await connect(args)
    writer.write(f"MN1 {seed} {args.down}\n".encode())
    up_hash = hashlib.sha256()
    first_byte = asyncio.Event()
    sent_all = asyncio.Event()

    async def send():
        for chunk in stream(up_seed, args.up):
            up_hash.update(chunk)
            writer.write(chunk)
            await writer.drain()
        sent_all.set()
        if hold is not None:
            await hold.wait()
        writer.write_eof()

    async def recv():
        buf_hash, got, tail = hashlib.sha256(), 0, b""
        if args.half_close:
            await sent_all.wait()
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            first_byte.set()
            if got < args.down:
                take = min(len(data), args.down - got)
                buf_hash.update(data[:take])
                got += take
                tail += data[take:]
            else:
                tail += data
        return got, buf_hash.hexdigest(), tail

    async def reached_hold_point():
        await sent_all.wait()
        if args.down:
            await first_byte.wait()

    send_task = asyncio.create_task(send())
    recv_task = asyncio.create_task(recv())
    if hold is not None:
        await reached_hold_point()
        hold.arrived()
    await send_task
    got, down_digest, tail = await recv_task
    writer.close()
    errors = []
    if got != args.down:
        errors.append(f"received {got} of {args.down} bytes")
    elif down_digest != expected_digest(seed, args.down):
        errors.append("downstream sha256 mismatch")
    trailer = tail.decode(errors="replace").split()
    if trailer != [str(args.up), up_hash.hexdigest()]:
        errors.append(f"server trailer {trailer!r} != [{args.up}, {up_hash.hexdigest()}]")
    return errors


class Hold:
    """Barrier for --hold: releases every connection once stdin closes."""

    def __init__(self, n):
        self.n, self.count, self.go = n, 0, asyncio.Event()

    def arrived(self):
        self.count += 1
        if self.count == self.n:
            emit(event="holding", connections=self.n)
            loop = asyncio.get_running_loop()
            loop.run_in_executor(None, sys.stdin.read).add_done_callback(
                lambda _: loop.call_soon_threadsafe(self.go.set))

    async def wait(self):
        await self.go.wait()


async def cmd_hash(args):
    if args.stall:
        reader, writer = await connect(args)
        writer.write(f"MN1 {int.from_bytes(os.urandom(7), 'big')} {args.down}\n".encode())
        await writer.drain()
        emit(event="stalled")
        await asyncio.Event().wait()
    hold = Hold(args.connections) if args.hold else None
    start = time.monotonic()

    async def guarded():
        try:
            return await one_hash(args, hold)
        except (OSError, ConnectionError, asyncio.IncompleteReadError) as e:
            if hold is not None:
                hold.arrived()  # never leave the others waiting for a dead connection
            return [repr(e)]

    results = await asyncio.wait_for(asyncio.gather(*(guarded() for _ in range(args.connections))),
                                     args.timeout)
    failed = [e for e in results if e]
    emit(event="result", connections=args.connections, ok=len(results) - len(failed),
         failed=len(failed), errors=[e[0] for e in failed[:5]],
         seconds=round(time.monotonic() - start, 3), up=args.up, down=args.down)
    return 0 if not failed else 1


async def cmd_greet(args):
    reader, writer = await connect(args)
    greeting = await asyncio.wait_for(reader.readline(), args.timeout)
    writer.write(b"ping\n")
    await writer.drain()
    echo = await asyncio.wait_for(reader.readline(), args.timeout)
    emit(event="result", greeting=greeting.decode(errors="replace").strip(),
         echo=echo.decode(errors="replace").strip())
    return 0 if greeting.startswith(b"HELLO") and echo == b"ECHO ping\n" else 1


async def cmd_expect_reset(args):
    reader, writer = await connect(args)
    writer.write(b"x")
    await writer.drain()
    try:
        data = await asyncio.wait_for(reader.read(CHUNK), args.timeout)
        while data:
            data = await asyncio.wait_for(reader.read(CHUNK), args.timeout)
        emit(event="result", outcome="eof")
        return 3
    except ConnectionResetError:
        emit(event="result", outcome="reset")
        return 0


async def cmd_send_reset(args):
    reader, writer = await connect(args)
    writer.write(b"hi\n")
    await writer.drain()
    ok = await asyncio.wait_for(reader.readline(), args.timeout)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
    emit(event="result", got=ok.decode(errors="replace").strip(), outcome="reset-sent")
    return 0 if ok == b"OK\n" else 1


async def cmd_plaintext(args):
    reader, writer = await connect(args)
    writer.write(b"GET / HTTP/1.1\r\nHost: meshnode\r\n\r\n" + os.urandom(4096))
    got, outcome = b"", "eof"
    try:
        while True:
            data = await asyncio.wait_for(reader.read(CHUNK), args.timeout)
            if not data:
                break
            got += data
    except ConnectionResetError:
        outcome = "reset"
    except asyncio.TimeoutError:
        outcome = "timeout"
    emit(event="result", outcome=outcome, bytes=len(got), first=got[:16].hex())
    return 0 if outcome in ("eof", "reset") else 1


def size(text):
    units = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
    t = text.lower().rstrip("ib")
    return int(t[:-1]) * units[t[-1]] if t[-1:] in units else int(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["hash", "greet", "expect-reset", "send-reset", "plaintext"])
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--up", type=size, default=0)
    ap.add_argument("--down", type=size, default=0)
    ap.add_argument("--connections", type=int, default=1)
    ap.add_argument("--half-close", action="store_true")
    ap.add_argument("--hold", action="store_true")
    ap.add_argument("--stall", action="store_true")
    ap.add_argument("--mark", action="store_true")
    ap.add_argument("--timeout", type=float, default=60)
    args = ap.parse_args()
    cmd = {"hash": cmd_hash, "greet": cmd_greet, "expect-reset": cmd_expect_reset,
           "send-reset": cmd_send_reset, "plaintext": cmd_plaintext}[args.command]
    try:
        sys.exit(asyncio.run(cmd(args)))
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
        emit(event="result", error=repr(e))
        sys.exit(2)


if __name__ == "__main__":
    main()
