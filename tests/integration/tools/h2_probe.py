#!/usr/bin/env python3
"""HBONE probe: TLS 1.3 (ALPN h2, no SNI) to a :15008 listener, then one HTTP/2 CONNECT.

Prints one JSON line {"tls": "ok" | "<error>", "status": <int> | null, ...}; exit 0 only when the
CONNECT was answered with :status 200 (a tunnel was opened). Optional --cert/--key present a client
certificate. The HPACK request is hand-encoded (literal header fields with indexed names).
"""
import argparse
import json
import socket
import ssl
import struct
import sys
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADERS, SETTINGS, RST_STREAM, GOAWAY = 0x1, 0x4, 0x3, 0x7
STATUS_BY_INDEX = {0x88: 200, 0x89: 204, 0x8A: 206, 0x8B: 304, 0x8C: 400, 0x8D: 404, 0x8E: 500}


def frame(ftype, flags, stream_id, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream_id) + payload


def literal(index, value):
    v = value.encode()
    return bytes([index]) + bytes([len(v)]) + v  # literal without indexing, indexed name, no huffman


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the server")
        buf += chunk
    return buf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, default=15008)
    ap.add_argument("--authority", required=True)
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--timeout", type=float, default=5)
    args = ap.parse_args()

    result = {"tls": None, "status": None}
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the probe tests the server's checks, not the server's cert
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.set_alpn_protocols(["h2"])
    if args.cert:
        ctx.load_cert_chain(args.cert, args.key)
    try:
        raw = socket.create_connection((args.host, args.port), timeout=args.timeout)
        sock = ctx.wrap_socket(raw, server_hostname=None)
        result["tls"] = "ok"
        result["alpn"] = sock.selected_alpn_protocol()
        block = literal(0x02, "CONNECT") + literal(0x01, args.authority)
        sock.sendall(PREFACE + frame(SETTINGS, 0, 0) + frame(HEADERS, 0x4, 1, block))
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            head = recv_exact(sock, 9)
            length = int.from_bytes(head[:3], "big")
            ftype, flags, sid = head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
            payload = recv_exact(sock, length)
            if ftype == SETTINGS and not flags & 0x1:
                sock.sendall(frame(SETTINGS, 0x1, 0))
            elif ftype == HEADERS and sid == 1:
                result["status"] = STATUS_BY_INDEX.get(payload[0] if payload else 0, -1)
                result["headers_first_byte"] = payload[:1].hex()
                break
            elif ftype in (RST_STREAM, GOAWAY):
                result["ended_by"] = "RST_STREAM" if ftype == RST_STREAM else "GOAWAY"
                break
    except (OSError, ssl.SSLError, ConnectionError) as e:
        if result["tls"] is None:
            result["tls"] = repr(e)
        else:
            result["error"] = repr(e)
    print(json.dumps(result), flush=True)
    sys.exit(0 if result["status"] == 200 else 1)


if __name__ == "__main__":
    main()
