#!/usr/bin/env python3
"""Connection loop for the meshnode integration tests (runs inside a pod netns).

Opens a new TCP connection to HOST:PORT every --interval seconds, sends "ping <n>\\n" and expects a
reply line (mn_server.py `observe` answers "OK"), each step with a --timeout deadline. Runs until its
stdin is closed, then prints one JSON line {"event": "summary", "ok": N, "fail": M, "failures": [...]}
and exits 0 when no connection failed. After the first success it prints {"event": "first-ok"}.
"""
import argparse
import json
import select
import socket
import sys
import time


def emit(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def once(host, port, n, timeout):
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(b"ping %d\n" % n)
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(64)
            if not chunk:
                raise ConnectionError("EOF before the reply line")
            data += chunk
        return data.decode().strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--timeout", type=float, default=3.0)
    args = ap.parse_args()
    ok, failures, n = 0, [], 0
    while True:
        n += 1
        started = time.time()
        try:
            reply = once(args.host, args.port, n, args.timeout)
            if reply != "OK":
                raise ValueError("unexpected reply %r" % reply)
            ok += 1
            if ok == 1:
                emit(event="first-ok")
        except (OSError, ValueError) as e:
            failures.append({"n": n, "t": started, "error": repr(e)})
            emit(event="fail", n=n, error=repr(e))
        r, _, _ = select.select([sys.stdin], [], [], args.interval)
        if r and not sys.stdin.buffer.read1(4096):
            break
    emit(event="summary", ok=ok, fail=len(failures), failures=failures[:20])
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
