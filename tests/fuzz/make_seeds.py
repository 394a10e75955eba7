#!/usr/bin/env python3
"""Writes the binary seed files of tests/fuzz/corpus/ from the wire formats (run from anywhere;
the text seeds — YAML, JSON, HTTP heads — are committed as they are). Each seed is a message a real
peer sends: the ZDS packets of an agent's snapshot replay, socks5 greetings of curl's and Python's
clients. Field numbers: proto/zds.proto (Istio ZDS); socks5: RFC 1928.
"""
import pathlib
import struct

CORPUS = pathlib.Path(__file__).resolve().parent / "corpus"


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field_bytes(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3 | 0) + varint(value)


def s(text: str) -> bytes:
    return text.encode()


def write(target: str, name: str, data: bytes) -> None:
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


# ---- ZDS: byte 0 is the fuzz target's envelope (fd count, receive cap), then the packet ---------------
def zds_seeds() -> None:
    uid = s("9b3f5c2e-7d41-4a8e-b6f0-1c2d3e4f5a6b")
    info = field_bytes(1, s("productpage-v1-6b746f74dc-9stvs")) + field_bytes(2, s("bookinfo")) + field_bytes(
        3, s("bookinfo-productpage"))
    add = field_bytes(1, uid) + field_bytes(2, info)
    one_fd, no_fd = b"\x01", b"\x00"
    write("zds", "add", one_fd + field_bytes(1, add))
    write("zds", "add_no_fd", no_fd + field_bytes(1, add))
    # An older agent still sends WorkloadInfo.trust_domain (field 4, now reserved): an unknown field.
    old_info = info + field_bytes(4, s("cluster.local"))
    write("zds", "add_trust_domain", one_fd + field_bytes(1, field_bytes(1, uid) + field_bytes(2, old_info)))
    write("zds", "keep", no_fd + field_bytes(5, field_bytes(1, uid)))
    write("zds", "del", no_fd + field_bytes(2, field_bytes(2, uid)))  # DelWorkload.uid is field 2
    write("zds", "del_two_fds", b"\x02" + field_bytes(2, field_bytes(2, uid)))
    write("zds", "snapshot_sent", no_fd + field_bytes(3, b""))
    write("zds", "ack_error", no_fd + field_bytes(1, field_bytes(1, s("netns of pod gone"))))
    write("zds", "hello_v1", no_fd + field_varint(1, 1))
    write("zds", "add_truncated_cap", b"\x09" + field_bytes(1, add))


# ---- socks5 (RFC 1928): greeting, then the CONNECT request ---------------------------------------------
def socks5_seeds() -> None:
    greeting = b"\x05\x01\x00"  # version 5, one method: no authentication (curl --socks5)
    write("socks5", "greeting", greeting)
    write("socks5", "greeting_two_methods", b"\x05\x02\x00\x02")
    port = struct.pack(">H", 8080)
    write("socks5", "connect_ipv4", b"\x05\x01\x00\x01" + bytes([198, 19, 1, 5]) + port)
    write("socks5", "connect_ipv6", b"\x05\x01\x00\x04" + bytes(15) + b"\x01" + port)
    name = b"reviews.bookinfo.svc.cluster.local"
    write("socks5", "connect_domain", b"\x05\x01\x00\x03" + bytes([len(name)]) + name + port)
    write("socks5", "bind_ipv4", b"\x05\x02\x00\x01" + bytes([127, 0, 0, 1]) + port)


if __name__ == "__main__":
    zds_seeds()
    socks5_seeds()
