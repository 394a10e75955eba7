#!/usr/bin/env python3
"""Line-echo peers for the meshnode authorization integration tests (run inside a pod/node netns).

Prints one JSON object per line on stdout.
  server --port P   echoes every line back; {"event": "ready"} once listening, {"event": "accept"} per
                    connection.
  probe             connects, sends "ping\\n" and expects "ping\\n" back. Exit 0 and
                    {"outcome": "echoed"} when it came back; exit 1 with outcome reset / eof /
                    refused / timeout otherwise (a denied connection is reset or closed).
  hold              connects and checks one echo round trip ({"event": "open"}), then stays idle and
                    watches the socket: if the peer closes it, prints {"event": "closed", "how":
                    "eof"|"reset", "mono": <CLOCK_MONOTONIC seconds>} and exits 3. When stdin closes
                    it checks one more round trip ({"event": "echo", "ok": ...}) and exits 0 if it
                    worked. --timeout bounds the whole run (exit 2).
--mark sets SO_MARK 0x539 so the in-pod redirection lets the socket through (bypasses the mesh).
"""
import argparse
import json
import select
import socket
import sys
import time

SO_MARK = 36


def emit(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def serve(args):
    import socketserver

    class Echo(socketserver.StreamRequestHandler):
        def handle(self):
            emit(event="accept", peer=str(self.client_address))
            try:
                for line in self.rfile:
                    self.wfile.write(line)
                    self.wfile.flush()
            except OSError as e:
                emit(event="error", error=repr(e))

    class Server(socketserver.ThreadingTCPServer):
        allow_reuse_address = True
        daemon_threads = True

    with Server(("0.0.0.0", args.port), Echo) as srv:
        emit(event="ready", port=args.port)
        srv.serve_forever()


def connect(args):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if args.mark:
        sock.setsockopt(socket.SOL_SOCKET, SO_MARK, 0x539)
    sock.settimeout(args.timeout)
    sock.connect((args.host, args.port))
    return sock


def round_trip(sock):
    """Sends a line and reads the echo. Returns "echoed" or how it failed."""
    try:
        sock.sendall(b"ping\n")
        got = b""
        while not got.endswith(b"\n"):
            data = sock.recv(4096)
            if not data:
                return "eof"
            got += data
        return "echoed" if got == b"ping\n" else "garbled"
    except ConnectionResetError:
        return "reset"
    except BrokenPipeError:
        return "reset"
    except socket.timeout:
        return "timeout"


def probe(args):
    try:
        sock = connect(args)
    except ConnectionRefusedError:
        emit(event="result", outcome="refused")
        return 1
    except ConnectionResetError:
        # The proxy accepted and reset before connect() returned (a denied connection, fast).
        emit(event="result", outcome="reset")
        return 1
    except socket.timeout:
        emit(event="result", outcome="timeout")
        return 1
    outcome = round_trip(sock)
    sock.close()
    emit(event="result", outcome=outcome)
    return 0 if outcome == "echoed" else 1


def hold(args):
    sock = connect(args)
    first = round_trip(sock)
    if first != "echoed":
        emit(event="result", outcome=first)
        return 1
    emit(event="open")
    sock.setblocking(False)
    deadline = time.monotonic() + args.timeout
    stdin_open = True
    while time.monotonic() < deadline:
        watched = [sock] + ([sys.stdin] if stdin_open else [])
        readable, _, _ = select.select(watched, [], [], max(0.0, deadline - time.monotonic()))
        if sock in readable:
            try:
                data = sock.recv(4096)
                how = "eof" if not data else "data"
            except ConnectionResetError:
                how = "reset"
            emit(event="closed", how=how, mono=time.monotonic())
            return 3
        if stdin_open and sys.stdin in readable:
            if sys.stdin.readline() == "":
                stdin_open = False
                sock.setblocking(True)
                sock.settimeout(10)
                outcome = round_trip(sock)
                emit(event="echo", ok=outcome == "echoed", outcome=outcome)
                return 0 if outcome == "echoed" else 1
    emit(event="result", outcome="timeout")
    return 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["server", "probe", "hold"])
    ap.add_argument("--host")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mark", action="store_true")
    ap.add_argument("--timeout", type=float, default=10)
    args = ap.parse_args()
    if args.command == "server":
        serve(args)
        return 0
    try:
        return probe(args) if args.command == "probe" else hold(args)
    except OSError as e:
        emit(event="result", outcome="error", error=repr(e))
        return 2


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        pass
