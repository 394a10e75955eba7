#!/usr/bin/env python3
"""Abuse peers for the meshnode integration tests (issue 11). Each command prints one JSON line.

  stall   --host H --port P --count N --hold S [--hello]
          opens N TCP connections that never finish a TLS handshake (nothing sent, or with --hello
          the first 100 bytes of a ClientHello) and holds them up to S seconds; reports how many
          connected, how many the server closed and after how long (max_closed_after).
  tls     --host H --port P [--cert C --key K] [--tls12] [--no-alpn]
          a python ssl client; "accepted" is true when the server sent HTTP/2 bytes after the
          handshake (its SETTINGS), false when it refused (alert, close).
  probe   --host H --port P [--send TEXT]
          connects (3 s), sends TEXT, reads up to 4 KiB for 3 s; reports connect/reply/end.
  smallwin-serve --port P
          an app that sets SO_RCVBUF 4096 on each accepted connection and reads in 1 KiB pieces;
          answers "<bytes>\\n" after EOF.
  smallwin-send  --host H --port P --bytes N
          sends N bytes, half-closes, waits for the count; reports seconds.
"""
import argparse
import json
import os
import socket
import ssl
import sys
import time


def emit(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


# First bytes of a TLS 1.3 ClientHello record: enough for the server to allocate its TLS state
# and wait for the rest.
HELLO_PREFIX = bytes.fromhex("16030100f8010000f40303") + os.urandom(89)


def stall(a):
    import resource
    import selectors
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sel = selectors.DefaultSelector()  # epoll: select() stops at fd 1024
    opened_at, failed = {}, 0
    for _ in range(a.count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect((a.host, a.port))
        except BlockingIOError:
            pass
        except OSError:
            failed += 1
            s.close()
            continue
        opened_at[s] = time.monotonic()
        sel.register(s, selectors.EVENT_WRITE)
    # Each connect completes (writable), then optionally gets the partial hello.
    connecting = set(opened_at)
    deadline = time.monotonic() + 10
    while connecting and time.monotonic() < deadline:
        for key, _ in sel.select(0.5):
            s = key.fileobj
            if s not in connecting:
                continue
            connecting.discard(s)
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                failed += 1
                sel.unregister(s)
                continue
            if a.hello:
                try:
                    s.send(HELLO_PREFIX)
                except OSError:
                    pass
            sel.modify(s, selectors.EVENT_READ)
    closed = {}
    end = time.monotonic() + a.hold
    while len(sel.get_map()) > 0 and time.monotonic() < end:
        for key, _ in sel.select(0.2):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:
                sel.unregister(s)
                closed[s] = time.monotonic() - opened_at[s]
    emit(connected=len(opened_at) - failed, failed=failed, closed_by_server=len(closed),
         closed_within_2s=sum(1 for t in closed.values() if t <= 2.0),
         max_closed_after=round(max(closed.values(), default=0.0), 2), still_open=len(sel.get_map()))
    for s in opened_at:
        s.close()


def tls(a):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if a.tls12:
        ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if not a.no_alpn:
        ctx.set_alpn_protocols(["h2"])
    if a.cert:
        ctx.load_cert_chain(a.cert, a.key)
    raw = socket.create_connection((a.host, a.port), timeout=5)
    try:
        s = ctx.wrap_socket(raw)
    except (ssl.SSLError, OSError) as e:
        emit(accepted=False, handshake=str(e))
        return
    try:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000"))
        data = s.recv(64)
        emit(accepted=len(data) > 0, handshake="ok", got=len(data))
    except (ssl.SSLError, OSError) as e:
        emit(accepted=False, handshake="ok", error=str(e))
    finally:
        s.close()


def probe(a):
    out = {"target": f"{a.host}:{a.port}"}
    try:
        s = socket.create_connection((a.host, a.port), timeout=3)
    except socket.timeout:
        out["connect"] = "timeout"
        emit(**out)
        return
    except OSError as e:
        out["connect"] = "refused" if isinstance(e, ConnectionRefusedError) else str(e)
        emit(**out)
        return
    out["connect"] = "ok"
    reply, end = b"", "timeout"
    try:
        if a.send:
            s.sendall(a.send.encode().decode("unicode_escape").encode("latin-1"))
        s.settimeout(3)
        while len(reply) < 4096:
            chunk = s.recv(4096)
            if not chunk:
                end = "eof"
                break
            reply += chunk
    except ConnectionResetError:
        end = "reset"
    except socket.timeout:
        end = "timeout"
    except OSError as e:
        end = str(e)
    out["reply"] = reply[:80].decode("latin-1")
    out["end"] = end
    emit(**out)
    s.close()


def smallwin_serve(a):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", a.port))
    ls.listen(16)
    emit(event="ready")
    while True:
        c, _ = ls.accept()
        # Set on the established connection (as apps do): the window scale and clamp were chosen
        # for a large buffer, the buffer is now smaller than one loopback MSS.
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        n = 0
        while True:
            chunk = c.recv(1024)
            if not chunk:
                break
            n += len(chunk)
        c.sendall(f"{n}\n".encode())
        c.close()
        emit(event="done", bytes=n)


def smallwin_send(a):
    start = time.monotonic()
    s = socket.create_connection((a.host, a.port), timeout=a.timeout)
    s.settimeout(a.timeout)
    block = b"x" * 65536
    left = a.bytes
    while left > 0:
        k = min(left, len(block))
        s.sendall(block[:k])
        left -= k
    s.shutdown(socket.SHUT_WR)
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = s.recv(64)
        if not chunk:
            break
        reply += chunk
    emit(bytes=a.bytes, received=int(reply or b"-1"), seconds=round(time.monotonic() - start, 3))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["stall", "tls", "probe", "smallwin-serve", "smallwin-send"])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--count", type=int, default=1)
    ap.add_argument("--hold", type=float, default=5)
    ap.add_argument("--hello", action="store_true")
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--tls12", action="store_true")
    ap.add_argument("--no-alpn", action="store_true")
    ap.add_argument("--send", default="")
    ap.add_argument("--bytes", type=int, default=3_200_000)
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    {"stall": stall, "tls": tls, "probe": probe, "smallwin-serve": smallwin_serve,
     "smallwin-send": smallwin_send}[a.command](a)


if __name__ == "__main__":
    main()
