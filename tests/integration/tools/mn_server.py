#!/usr/bin/env python3
"""TCP app peer for the meshnode integration tests (runs inside a pod netns).

Prints one JSON object per line on stdout: {"event": "ready"} once listening, then per connection
{"event": "accept", ...} and mode-specific events. Modes:
  hash     reads a header "MN1 <seed> <n_down>\\n", then concurrently sends n_down deterministic
           pseudo-random bytes (random.Random(seed)) and hashes everything it receives until EOF;
           after both, sends the trailer "<n_received> <sha256 hex>\\n" and closes (FIN).
  greet    server-first: sends "HELLO meshnode-greeter\\n" before reading, then answers
           "ECHO <line>" to the first line and closes.
  rst      reads one byte, then closes with SO_LINGER 0 (the peer gets a TCP RST).
  observe  reads a line, answers "OK\\n", then reports whether the peer ended with EOF or RST.
"""
import argparse
import asyncio
import hashlib
import json
import random
import socket
import struct
import sys

CHUNK = 256 * 1024


def emit(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def stream(seed, n):
    """Deterministic pseudo-random bytes: the same (seed, n) always yields the same chunks."""
    rng = random.Random(seed)
    left = n
    while left > 0:
        k = min(CHUNK, left)
        yield rng.randbytes(k)
        left -= k


async def handle_hash(reader, writer):
    header = (await reader.readline()).decode().split()
    if len(header) != 3 or header[0] != "MN1":
        emit(event="error", error=f"bad header {header!r}")
        writer.close()
        return
    seed, n_down = int(header[1]), int(header[2])
    emit(event="header", seed=seed, n_down=n_down)

    async def send():
        for chunk in stream(seed, n_down):
            writer.write(chunk)
            await writer.drain()

    async def recv():
        h, n = hashlib.sha256(), 0
        while True:
            data = await reader.read(CHUNK)
            if not data:
                return n, h.hexdigest()
            h.update(data)
            n += len(data)

    _, (n, digest) = await asyncio.gather(send(), recv())
    writer.write(f"{n} {digest}\n".encode())
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    emit(event="done", seed=seed, received=n, sha256=digest, sent=n_down)


async def handle_greet(reader, writer):
    writer.write(b"HELLO meshnode-greeter\n")
    await writer.drain()
    line = await reader.readline()
    writer.write(b"ECHO " + line)
    await writer.drain()
    writer.close()
    emit(event="greeted", line=line.decode(errors="replace").strip())


def abort_with_rst(writer):
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def handle_rst(reader, writer):
    await reader.read(1)
    abort_with_rst(writer)
    emit(event="reset-sent")


async def handle_observe(reader, writer):
    await reader.readline()
    writer.write(b"OK\n")
    await writer.drain()
    try:
        while await reader.read(CHUNK):
            pass
        emit(event="eof")
    except ConnectionResetError:
        emit(event="reset")
    writer.close()


HANDLERS = {"hash": handle_hash, "greet": handle_greet, "rst": handle_rst, "observe": handle_observe}


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", choices=sorted(HANDLERS), default="hash")
    args = ap.parse_args()
    handler = HANDLERS[args.mode]

    async def on_conn(reader, writer):
        emit(event="accept", peer=str(writer.get_extra_info("peername")))
        try:
            await handler(reader, writer)
        except (ConnectionError, OSError) as e:
            emit(event="error", error=repr(e))
            writer.transport.abort()

    server = await asyncio.start_server(on_conn, host="0.0.0.0", port=args.port, backlog=1024,
                                        reuse_address=True)
    emit(event="ready", port=args.port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
