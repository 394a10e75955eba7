#!/usr/bin/env python3
"""Long-running TCP peers for the ZDS lifecycle tests (run inside pod netns).

Prints one JSON object per line on stdout. Times are time.monotonic() (CLOCK_MONOTONIC, the clock
of C++ std::chrono::steady_clock on Linux), so a test can compare them with its own timestamps.
  server  line echo server on --port: prints {"event": "ready"}, then echoes every line back on
          every connection until the peer closes.
  loop    until stdin closes (or --count connections): starts a NEW connection every --interval seconds to --host:--port
          (each sends one line and expects it echoed within --timeout, then closes). Prints
          {"event": "progress", ...} every 0.2 s, {"event": "fail", ...} for each failed connection
          and {"event": "summary", "attempted": A, "ok": O, "failed": F} at the end (exit 0 iff F == 0).
  hold    one connection to --host:--port: prints {"event": "open"} once the first echo came back,
          then sends a ping line every --interval seconds and prints {"event": "pong", "n": N} for
          each echo; when the connection breaks (EOF, reset, echo timeout) prints
          {"event": "closed", "mono": T, "error": ...} and exits 0.
"""
import argparse
import asyncio
import json
import sys
import time


def emit(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


async def serve(args):
    async def handle(reader, writer):
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                writer.write(line)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "0.0.0.0", args.port, backlog=1024, reuse_address=True)
    emit(event="ready", port=args.port)
    async with server:
        await server.serve_forever()


async def one_round_trip(args, n):
    reader, writer = await asyncio.open_connection(args.host, args.port)
    try:
        payload = f"ping {n}\n".encode()
        writer.write(payload)
        await writer.drain()
        got = await reader.readline()
        if got != payload:
            raise RuntimeError(f"bad echo {got!r}")
    finally:
        writer.close()


async def loop(args):
    counts = {"attempted": 0, "ok": 0, "failed": 0}
    stop = asyncio.Event()
    loop_ = asyncio.get_running_loop()

    async def watch_stdin():
        # A thread blocks on stdin until EOF (works for pipes and /dev/null alike).
        await loop_.run_in_executor(None, sys.stdin.buffer.read)
        stop.set()

    if args.count <= 0:
        asyncio.ensure_future(watch_stdin())

    async def attempt(n):
        t0 = time.monotonic()
        try:
            await asyncio.wait_for(one_round_trip(args, n), args.timeout)
            counts["ok"] += 1
        except Exception as e:  # noqa: BLE001 - every failure is reported
            counts["failed"] += 1
            emit(event="fail", n=n, mono=t0, error=f"{type(e).__name__}: {e}")

    async def progress():
        while not stop.is_set():
            emit(event="progress", **counts)
            await asyncio.sleep(0.2)

    reporter = asyncio.ensure_future(progress())
    tasks = set()
    start = time.monotonic()
    n = 0
    while not stop.is_set() and (args.count <= 0 or n < args.count):
        counts["attempted"] += 1
        t = asyncio.ensure_future(attempt(n))
        tasks.add(t)
        t.add_done_callback(tasks.discard)
        n += 1
        next_at = start + n * args.interval
        delay = next_at - time.monotonic()
        if delay > 0:
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except asyncio.TimeoutError:
                pass
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    stop.set()
    await reporter
    emit(event="summary", **counts)
    return 0 if counts["failed"] == 0 else 1


async def hold(args):
    n = 0
    error = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(args.host, args.port), args.timeout)
        while True:
            payload = f"hold {n}\n".encode()
            writer.write(payload)
            await writer.drain()
            got = await asyncio.wait_for(reader.readline(), args.timeout)
            if not got:
                error = "eof"
                break
            if got != payload:
                error = f"bad echo {got!r}"
                break
            if n == 0:
                emit(event="open")
            emit(event="pong", n=n)
            n += 1
            # Sleep, but notice a close (EOF/RST) at once rather than at the next ping.
            try:
                extra = await asyncio.wait_for(reader.read(1), args.interval)
                error = "eof" if not extra else f"unexpected byte {extra!r}"
                break
            except asyncio.TimeoutError:
                pass
    except asyncio.TimeoutError:
        error = "echo timeout"
    except (ConnectionError, OSError) as e:
        error = f"{type(e).__name__}: {e}"
    emit(event="closed", mono=time.monotonic(), error=error, pongs=n)
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["server", "loop", "hold"])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--interval", type=float, default=0.01)
    p.add_argument("--timeout", type=float, default=5.0)
    p.add_argument("--count", type=int, default=0, help="loop: stop after this many connections (0: at stdin EOF)")
    args = p.parse_args()
    fn = {"server": serve, "loop": loop, "hold": hold}[args.mode]
    sys.exit(asyncio.run(fn(args)) or 0)


if __name__ == "__main__":
    main()
