#!/usr/bin/env python3
"""Writes the binary seed files of tests/fuzz/corpus/ from the wire formats (run from anywhere;
the text seeds — YAML, JSON, HTTP heads — are committed as they are). Each seed is a message a real
peer sends: the ZDS packets of an agent's snapshot replay, socks5 greetings of curl's and Python's
clients. Field numbers: proto/zds.proto (Istio ZDS); socks5: RFC 1928.
"""
import base64
import ipaddress
import json
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


# ---- plugin events (research §2.5): byte 0 = endpoint (0 ADD, 1 DEL, 2 CHECK), then the body -----------
def mask(prefix: int, bits: int) -> str:
    net = ipaddress.ip_network(("::" if bits == 128 else "0.0.0.0", prefix))
    return base64.b64encode(net.netmask.packed).decode()


def plugin_event_seeds() -> None:
    add = {"Netns": "/var/run/netns/cni-1f2e3d4c-aaaa-bbbb", "PodName": "reviews-v1-5b5d6f8c9-x2k4q",
           "PodNamespace": "bookinfo",
           "IPs": [{"Interface": 0, "Address": {"IP": "10.244.1.7", "Mask": mask(24, 32)}, "Gateway": "10.244.1.1"}],
           "PodUID": "6f1c2a3b-4d5e-4f60-8a9b-0c1d2e3f4a5b", "ContainerID": "9d2e1b0c7a6f", "IfName": "eth0"}
    dual = {"Netns": "/proc/4242/ns/net", "PodName": "productpage-v1", "PodNamespace": "default",
            "IPs": [{"Interface": None, "Address": {"IP": "fd00:10:244::7", "Mask": mask(64, 128)}, "Gateway": None},
                    {"Interface": 0, "Address": {"IP": "10.244.0.9"}, "Gateway": "10.244.0.1"}],
            "PodServiceAccount": "bookinfo-productpage"}
    delete = {"Netns": "", "PodName": "ratings-v1", "PodNamespace": "bookinfo", "IPs": None, "PodUID": "",
              "ContainerID": "c0ffee", "IfName": "eth0"}
    check = {"Netns": "/var/run/netns/x", "PodName": "a", "PodNamespace": "b", "IPs": [],
             "Extra": {"ignored": [1, 2.5, True]}}
    for name, kind, body in (("add_v4", 0, add), ("add_dual_stack", 0, dual), ("del_no_netns", 1, delete),
                             ("check_unknown_field", 2, check)):
        write("plugin_event", name, bytes([kind]) + json.dumps(body, separators=(",", ":")).encode())


# ---- meshnode-cni: environment NUL stdin NUL the agent's HTTP reply ----------------------------------
def cni_seeds() -> None:
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "3b1f0e9c2d7a4e6f8a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f",
           "CNI_NETNS": "/var/run/netns/cni-6f1c2a3b-4d5e-4f60-8a9b-0c1d2e3f4a5b", "CNI_IFNAME": "eth0",
           "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=bookinfo;K8S_POD_NAME=reviews-v1-5b5d6f8c9-x2k4q;"
                       "K8S_POD_INFRA_CONTAINER_ID=3b1f0e9c;K8S_POD_UID=6f1c2a3b-4d5e-4f60-8a9b-0c1d2e3f4a5b",
           "CNI_PATH": "/opt/cni/bin", "PATH": "/usr/sbin:/usr/bin"}
    # What containerd hands the second plugin of a bridge + meshnode chain (CNI spec 1.0 §Chained).
    prev = {"cniVersion": "1.0.0",
            "interfaces": [{"name": "cni0", "mac": "aa:bb:cc:dd:ee:01"}, {"name": "veth1a2b3c4d", "mac": "aa:bb:cc:dd:ee:02"},
                           {"name": "eth0", "mac": "aa:bb:cc:dd:ee:03", "sandbox": env["CNI_NETNS"]}],
            "ips": [{"interface": 2, "address": "10.244.1.7/24", "gateway": "10.244.1.1"}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.244.1.1"}], "dns": {}}
    conf = {"cniVersion": "1.0.0", "name": "k8s-pod-network", "type": "meshnode-cni",
            "agentSocket": "/var/run/istio-cni/pluginevent.sock", "excludeNamespaces": ["kube-system"],
            "logLevel": "info", "prevResult": prev}

    def seed(name, env_over, config, reply):
        e = dict(env, **env_over)
        text = "\n".join(f"{k}={v}" for k, v in e.items() if v is not None)
        body = config if isinstance(config, str) else json.dumps(config, indent=2)
        write("cni", name, text.encode() + b"\0" + body.encode() + b"\0" + reply)

    ok = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"enrolled\":true}"
    declined = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n12\r\n{\"enrolled\":false}\r\n0\r\n\r\n"
    refused = b"HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n\r\npod bookinfo/reviews not found in the API"
    seed("add_enrolled", {}, conf, ok)
    seed("add_declined_chunked", {}, conf, declined)
    seed("add_refused", {}, conf, refused)
    old = dict(conf, cniVersion="0.4.0", prevResult=dict(prev, cniVersion="0.4.0"))
    seed("check_040", {"CNI_COMMAND": "CHECK"}, old, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    seed("del_no_netns", {"CNI_COMMAND": "DEL", "CNI_NETNS": None}, dict(conf, prevResult=None), refused)
    seed("add_podman_no_pod", {"CNI_ARGS": "IgnoreUnknown=1"}, dict(conf, cniVersion="0.3.1"), ok)
    seed("add_prev_other_version", {}, dict(conf, prevResult=dict(prev, cniVersion="0.3.1")), ok)
    seed("version", {"CNI_COMMAND": "VERSION"}, "", b"")


# ---- CONNECT :authority NUL 24 bytes of trace/parent ids, client NUL service host NUL baggage --------
def hbone_seeds() -> None:
    ids = struct.pack("<QQQ", 0x4bf92f3577b34da6, 0xa3ce929d0e0e4736, 0x00f067aa0ba902b7)
    baggage = b"k8s.cluster.name=Kubernetes,k8s.namespace.name=bookinfo,k8s.deployment.name=productpage-v1," \
              b"service.name=productpage,service.version=v1"
    write("hbone_headers", "v4", b"10.244.1.7:9080\0" + ids + b"10.244.0.9:43512\0reviews.bookinfo.svc.cluster.local\0"
          + baggage)
    write("hbone_headers", "v6", b"[fd00:10:244::7]:9080\0" + ids + b"[fd00:10:244::9]:43512\0\0")
    write("hbone_headers", "mapped_v6", b"[::ffff:10.244.1.7]:80")
    write("hbone_headers", "hostname", b"reviews.bookinfo:9080")


# ---- HTTP/2 (RFC 9113 frames, RFC 7541 HPACK literals) as an HBONE client sends them ------------------
# h2_fuzz: byte 0 is the handler mode (see h2_fuzz.cpp), then the peer's bytes from the preface on.
def h2_frame(ftype: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def hpack_literal(name: bytes, value: bytes, index: bool = False) -> bytes:
    def hint(n: int) -> bytes:  # 7-bit prefix integer (RFC 7541 §5.1)
        if n < 127:
            return bytes([n])
        out, n = bytearray([127]), n - 127
        while n >= 128:
            out.append(n % 128 + 128)
            n //= 128
        return bytes(out + bytes([n]))
    return bytes([0x40 if index else 0x00]) + hint(len(name)) + name + hint(len(value)) + value


def h2_seeds() -> None:
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, struct.pack(">HI", 4, 1 << 20))
    block = hpack_literal(b":method", b"CONNECT") + hpack_literal(b":authority", b"10.244.1.7:9080") + \
        hpack_literal(b"traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
    headers = h2_frame(1, 0x4, 1, block)
    data = h2_frame(0, 0, 1, b"GET / HTTP/1.1\r\nHost: reviews\r\n\r\n")
    end = h2_frame(0, 0x1, 1, b"")
    write("h2", "connect_echo", bytes([0x04 | 0x30]) + preface + headers + data + end)
    write("h2", "connect_refused_early_data", bytes([0x01]) + preface + headers + data)
    write("h2", "rapid_reset", bytes([0x00]) + preface + b"".join(
        h2_frame(1, 0x4, i, block) + h2_frame(3, 0, i, struct.pack(">I", 8)) for i in range(1, 61, 2)))
    write("h2", "bad_trailers", bytes([0x00]) + preface + headers + h2_frame(1, 0x4, 1, hpack_literal(b"x-t", b"1")))
    write("h2", "continuation", bytes([0x00]) + preface + h2_frame(1, 0, 1, block[:10]) + h2_frame(9, 0, 1, block[10:30])
          + h2_frame(9, 0x4, 1, block[30:]))
    bomb = block + hpack_literal(b"x-big", b"a" * 1000, index=True) + bytes([0x80 | 62]) * 200
    write("h2", "hpack_bomb", bytes([0x00]) + preface + h2_frame(1, 0x5, 1, bomb))
    write("h2", "ping_settings_window", bytes([0x0C]) + preface + h2_frame(6, 0, 0, b"\x01" * 8) + h2_frame(4, 0x1, 0)
          + h2_frame(8, 0, 0, struct.pack(">I", 0x7FFFFFFF)) + headers + h2_frame(8, 0, 1, struct.pack(">I", 0x7FFFFFFF))
          + h2_frame(8, 0, 1, struct.pack(">I", 0x7FFFFFFF)))
    write("h2", "data_on_closed_and_even", bytes([0x01]) + preface + headers + end + data + h2_frame(1, 0x4, 2, block)
          + h2_frame(1, 0x4, 1, block))
    write("h2", "goaway_priority_padding", bytes([0x08]) + preface + h2_frame(1, 0x4 | 0x8 | 0x20, 3,
          bytes([4]) + struct.pack(">IB", 1, 15) + block + b"\0" * 4) + h2_frame(2, 0, 3, struct.pack(">IB", 0, 1))
          + h2_frame(0, 0x8, 3, bytes([3]) + b"abc\0\0\0") + h2_frame(7, 0, 0, struct.pack(">II", 3, 0)))


if __name__ == "__main__":
    zds_seeds()
    socks5_seeds()
    plugin_event_seeds()
    cni_seeds()
    hbone_seeds()
    h2_seeds()
