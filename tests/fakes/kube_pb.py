"""Kubernetes protobuf encoding for the fake API server (tests/fakes/kube_api_server.py).

Written for meshnode from the wire facts in research/anchors-2026.md §C, independently of the C++
decoder under test (which uses protoc-generated code): a schema-driven encoder from the JSON form
of an object to the bytes kube-apiserver sends. It covers more of Pod than meshnode reads
(containers, conditions, container statuses, owner references, managed fields, ...) so that the
client's skipping of unknown fields is exercised on realistic objects. Fields missing from the
schema are dropped from the protobuf form (the JSON form keeps them).
"""

import calendar
import json
import struct
import time

PREFIX = b"k8s\x00"

# --- wire primitives -------------------------------------------------------------------------


def varint(n):
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(number, wire_type):
    return varint(number << 3 | wire_type)


def field_bytes(number, payload):
    return tag(number, 2) + varint(len(payload)) + payload


def field_varint(number, value):
    return tag(number, 0) + varint(value)


def parse_time(text):
    """RFC 3339 -> (seconds, nanos)."""
    base = text[:19]
    seconds = calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S"))
    nanos = 0
    rest = text[19:]
    if rest.startswith("."):
        frac = ""
        rest = rest[1:]
        while rest and rest[0].isdigit():
            frac += rest[0]
            rest = rest[1:]
        nanos = int((frac + "000000000")[:9])
    if rest and rest not in ("Z", "z"):
        sign = -1 if rest[0] == "-" else 1
        hours, minutes = int(rest[1:3]), int(rest[4:6])
        seconds -= sign * (hours * 3600 + minutes * 60)
    return seconds, nanos


# --- schemas: JSON name -> (field number, kind, sub-schema) ------------------------------------
# kinds: s string, b bool, i int (varint), t metav1.Time, m message, map string->string,
# rs/rm repeated string/message, raw JSON bytes (FieldsV1).

TIME = "t"

OWNER_REFERENCE = {"kind": (1, "s"), "name": (3, "s"), "uid": (4, "s"), "apiVersion": (5, "s"),
                   "controller": (6, "b"), "blockOwnerDeletion": (7, "b")}
FIELDS_V1 = "raw"
MANAGED_FIELDS = {"manager": (1, "s"), "operation": (2, "s"), "apiVersion": (3, "s"), "time": (4, TIME),
                  "fieldsType": (6, "s"), "fieldsV1": (7, FIELDS_V1), "subresource": (8, "s")}
OBJECT_META = {
    "name": (1, "s"), "generateName": (2, "s"), "namespace": (3, "s"), "selfLink": (4, "s"), "uid": (5, "s"),
    "resourceVersion": (6, "s"), "generation": (7, "i"), "creationTimestamp": (8, TIME),
    "deletionTimestamp": (9, TIME), "deletionGracePeriodSeconds": (10, "i"), "labels": (11, "map"),
    "annotations": (12, "map"), "ownerReferences": (13, "rm", OWNER_REFERENCE), "finalizers": (14, "rs"),
    "managedFields": (17, "rm", MANAGED_FIELDS),
}
LIST_META = {"selfLink": (1, "s"), "resourceVersion": (2, "s"), "continue": (3, "s"), "remainingItemCount": (4, "i")}

CONTAINER_PORT = {"name": (1, "s"), "hostPort": (2, "i"), "containerPort": (3, "i"), "protocol": (4, "s"),
                  "hostIP": (5, "s")}
ENV_VAR = {"name": (1, "s"), "value": (2, "s")}
VOLUME_MOUNT = {"name": (1, "s"), "readOnly": (2, "b"), "mountPath": (3, "s"), "subPath": (4, "s")}
CONTAINER = {"name": (1, "s"), "image": (2, "s"), "command": (3, "rs"), "args": (4, "rs"), "workingDir": (5, "s"),
             "ports": (6, "rm", CONTAINER_PORT), "env": (7, "rm", ENV_VAR), "volumeMounts": (9, "rm", VOLUME_MOUNT),
             "terminationMessagePath": (13, "s"), "imagePullPolicy": (14, "s"), "terminationMessagePolicy": (20, "s")}
TOLERATION = {"key": (1, "s"), "operator": (2, "s"), "value": (3, "s"), "effect": (4, "s"),
              "tolerationSeconds": (5, "i")}
VOLUME = {"name": (1, "s")}
POD_SPEC = {
    "volumes": (1, "rm", VOLUME), "containers": (2, "rm", CONTAINER), "restartPolicy": (3, "s"),
    "terminationGracePeriodSeconds": (4, "i"), "activeDeadlineSeconds": (5, "i"), "dnsPolicy": (6, "s"),
    "nodeSelector": (7, "map"), "serviceAccountName": (8, "s"), "serviceAccount": (9, "s"), "nodeName": (10, "s"),
    "hostNetwork": (11, "b"), "hostPID": (12, "b"), "hostIPC": (13, "b"), "hostname": (16, "s"),
    "subdomain": (17, "s"), "schedulerName": (19, "s"), "initContainers": (20, "rm", CONTAINER),
    "automountServiceAccountToken": (21, "b"), "tolerations": (22, "rm", TOLERATION),
    "priorityClassName": (24, "s"), "priority": (25, "i"), "enableServiceLinks": (30, "b"),
    "preemptionPolicy": (31, "s"),
}
POD_CONDITION = {"type": (1, "s"), "status": (2, "s"), "lastProbeTime": (3, TIME), "lastTransitionTime": (4, TIME),
                 "reason": (5, "s"), "message": (6, "s")}
CONTAINER_STATUS = {"name": (1, "s"), "ready": (4, "b"), "restartCount": (5, "i"), "image": (6, "s"),
                    "imageID": (7, "s"), "containerID": (8, "s"), "started": (9, "b")}
POD_IP = {"ip": (1, "s")}
POD_STATUS = {
    "phase": (1, "s"), "conditions": (2, "rm", POD_CONDITION), "message": (3, "s"), "reason": (4, "s"),
    "hostIP": (5, "s"), "podIP": (6, "s"), "startTime": (7, TIME), "containerStatuses": (8, "rm", CONTAINER_STATUS),
    "qosClass": (9, "s"), "nominatedNodeName": (11, "s"), "podIPs": (12, "rm", POD_IP), "hostIPs": (16, "rm", POD_IP),
}
POD = {"metadata": (1, "m", OBJECT_META), "spec": (2, "m", POD_SPEC), "status": (3, "m", POD_STATUS)}
NAMESPACE_CONDITION = {"type": (1, "s"), "status": (2, "s"), "lastTransitionTime": (4, TIME), "reason": (5, "s"),
                       "message": (6, "s")}
NAMESPACE = {"metadata": (1, "m", OBJECT_META), "spec": (2, "m", {"finalizers": (1, "rs")}),
             "status": (3, "m", {"phase": (1, "s"), "conditions": (2, "rm", NAMESPACE_CONDITION)})}
STATUS_CAUSE = {"reason": (1, "s"), "message": (2, "s"), "field": (3, "s")}
STATUS_DETAILS = {"name": (1, "s"), "group": (2, "s"), "kind": (3, "s"), "causes": (4, "rm", STATUS_CAUSE),
                  "retryAfterSeconds": (5, "i"), "uid": (6, "s")}
STATUS = {"metadata": (1, "m", LIST_META), "status": (2, "s"), "message": (3, "s"), "reason": (4, "s"),
          "details": (5, "m", STATUS_DETAILS), "code": (6, "i")}

# Messages Kubernetes always writes even when empty (gogo-generated Marshal of non-pointer fields).
ALWAYS = {id(POD): ("metadata", "spec", "status"), id(NAMESPACE): ("metadata", "spec", "status")}

KINDS = {"Pod": POD, "Namespace": NAMESPACE, "Status": STATUS}
LIST_KINDS = {"PodList": POD, "NamespaceList": NAMESPACE}


def encode(obj, schema):
    out = bytearray()
    always = ALWAYS.get(id(schema), ())
    for name, spec in sorted(schema.items(), key=lambda kv: kv[1][0]):
        number, kind = spec[0], spec[1]
        if name not in obj or obj[name] is None:
            if name in always:
                out += field_bytes(number, b"")
            continue
        value = obj[name]
        if kind == "s":
            out += field_bytes(number, value.encode())
        elif kind == "b":
            out += field_varint(number, 1 if value else 0)
        elif kind == "i":
            out += field_varint(number, int(value))
        elif kind == TIME:
            seconds, nanos = parse_time(value)
            payload = field_varint(1, seconds) + (field_varint(2, nanos) if nanos else b"")
            out += field_bytes(number, payload)
        elif kind == "m":
            out += field_bytes(number, encode(value, spec[2]))
        elif kind == "map":
            for k in sorted(value):  # Go's marshaller sorts map keys
                out += field_bytes(number, field_bytes(1, k.encode()) + field_bytes(2, str(value[k]).encode()))
        elif kind == "rs":
            for item in value:
                out += field_bytes(number, item.encode())
        elif kind == "rm":
            for item in value:
                out += field_bytes(number, encode(item, spec[2]))
        elif kind == FIELDS_V1:
            out += field_bytes(number, field_bytes(1, json.dumps(value, separators=(",", ":")).encode()))
    return bytes(out)


def unknown(api_version, kind, raw):
    """k8s\\0 + runtime.Unknown{typeMeta, raw, contentEncoding "", contentType ""}, as the
    apiserver's serializer writes it (empty strings included)."""
    type_meta = field_bytes(1, api_version.encode()) + field_bytes(2, kind.encode())
    return PREFIX + field_bytes(1, type_meta) + field_bytes(2, raw) + field_bytes(3, b"") + field_bytes(4, b"")


def encode_object(obj):
    kind = obj.get("kind")
    return unknown(obj.get("apiVersion", "v1"), kind, encode(obj, KINDS[kind]))


def encode_list(kind, metadata, items):
    item_schema = LIST_KINDS[kind]
    raw = field_bytes(1, encode(metadata, LIST_META))
    for item in items:
        raw += field_bytes(2, encode(item, item_schema))
    return unknown("v1", kind, raw)


def encode_watch_frame(event_type, obj):
    """4-byte big-endian length + WatchEvent{type, RawExtension{raw = enveloped object}}."""
    event = field_bytes(1, event_type.encode()) + field_bytes(2, field_bytes(1, encode_object(obj)))
    return struct.pack(">I", len(event)) + event


# --- decoding (request bodies: kubectl create sends protobuf for built-in kinds) ----------------

def read_varint(data, pos):
    result, shift = 0, 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def fields(data):
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = read_varint(data, pos)
        elif wire_type == 2:
            length, pos = read_varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated field %d" % number)
            value, pos = data[pos:pos + length], pos + length
        elif wire_type == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire_type == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported wire type %d" % wire_type)
        yield number, wire_type, value


def format_time(payload):
    seconds = 0
    for number, _, value in fields(payload):
        if number == 1:
            seconds = value
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def decode(data, schema):
    by_number = {spec[0]: (name, spec) for name, spec in schema.items()}
    out = {}
    for number, _, value in fields(data):
        if number not in by_number:
            continue  # unknown to the fake: dropped
        name, spec = by_number[number]
        kind = spec[1]
        if kind == "s":
            out[name] = value.decode()
        elif kind == "b":
            out[name] = bool(value)
        elif kind == "i":
            out[name] = value - (1 << 64) if value >= 1 << 63 else value
        elif kind == TIME:
            out[name] = format_time(value)
        elif kind == "m":
            out[name] = decode(value, spec[2])
        elif kind == "map":
            entry = {n: v for n, _, v in fields(value)}
            out.setdefault(name, {})[entry.get(1, b"").decode()] = entry.get(2, b"").decode()
        elif kind == "rs":
            out.setdefault(name, []).append(value.decode())
        elif kind == "rm":
            out.setdefault(name, []).append(decode(value, spec[2]))
        elif kind == FIELDS_V1:
            raw = {n: v for n, _, v in fields(value)}.get(1, b"{}")
            out[name] = json.loads(raw)
    return out


def decode_object(body):
    """k8s\\0 + Unknown -> JSON-form dict with kind/apiVersion. ValueError when malformed."""
    if not body.startswith(PREFIX):
        raise ValueError("body does not start with the k8s\\0 prefix")
    unknown_fields = {n: v for n, _, v in fields(body[len(PREFIX):])}
    type_meta = {n: v.decode() for n, _, v in fields(unknown_fields.get(1, b""))}
    kind = type_meta.get(2, "")
    if kind not in KINDS:
        raise ValueError("unsupported kind %r" % kind)
    obj = decode(unknown_fields.get(2, b""), KINDS[kind])
    obj["kind"], obj["apiVersion"] = kind, type_meta.get(1, "v1")
    return obj
