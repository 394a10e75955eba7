#!/usr/bin/env python3
"""A fake Kubernetes API server for meshnode's tests: the real kube-apiserver cannot run here.

It speaks the real wire protocol (research/anchors-2026.md §C) so that both meshnode's client and
the real kubectl work against it:
- HTTP/1.1 over TLS (optionally requiring a client certificate or a bearer token) or plain TCP;
- discovery (/version, /api, /api/v1, /apis) so kubectl finds pods and namespaces;
- Pods (namespaced, with the status subresource) and Namespaces: get, list, watch, create, replace,
  JSON merge patch (strategic merge patch is applied as a merge patch), delete (a bound pod with a
  grace period is only marked with deletionTimestamp, as a kubelet would then finish it);
- list pagination with limit/continue tokens and remainingItemCount, consistent at the first
  page's resourceVersion; resourceVersion / resourceVersionMatch semantics;
- watches from a resourceVersion (history replay, then live; chunked), allowWatchBookmarks,
  timeoutSeconds (with a bookmark just before it), field selectors (spec.nodeName, metadata.name,
  metadata.namespace, status.phase) and label selectors, objects entering/leaving a selector
  reported as ADDED/DELETED;
- 410 Expired for a too-old resourceVersion or continue token: on lists as HTTP 410, on watches
  as an ERROR event inside a 200 stream (the watch cache's behaviour) or as HTTP 410 (configurable);
- both encodings chosen by Accept: application/vnd.kubernetes.protobuf (k8s\\0 + runtime.Unknown,
  4-byte length-framed watch events) and application/json (one event per line).

Programmable from tests through /fake/... endpoints (POST, JSON bodies):
  /fake/compact {"resourceVersion": N}   forget history up to N (default: all)
  /fake/drop-watches                     close every watch connection abruptly
  /fake/truncate-watches                 send half of a frame to every watch, then close
  /fake/garbage-watches {"bytes": hex}   send raw bytes (a bad event) to every watch
  /fake/bookmark                         send a BOOKMARK to every watch that allows them
  /fake/load {"template": pod, "count": N, "nodes": M, "namespace": ns}   bulk pods (benchmarks)
  /fake/config {"expiredAs": "event"|"http", "bookmarkIntervalSeconds": N,
                "watchRefusal"/"writeRefusal": HTTP status or 0, "expireContinue": bool}
  /fake/requests (GET)                   the requests seen so far (method, path, query, headers, user)
  /fake/reset-requests
It prints "listening <url>" on stdout once it accepts connections.
"""

import argparse
import base64
import copy
import datetime
import json
import socket
import ssl
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import kube_pb
from kube_errors import ApiError
from kube_selectors import Selector
from kube_views import TABLE_COLUMNS, discovery, table

PROTOBUF = "application/vnd.kubernetes.protobuf"
JSON = "application/json"


def now_rfc3339(offset_seconds=0):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=offset_seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def expired(message):
    return ApiError(410, "Expired", message)


# --- merge patch (RFC 7386) ---------------------------------------------------------------------

def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- the store ------------------------------------------------------------------------------------

class Watcher:
    def __init__(self, kind, namespace, selector, bookmarks):
        self.kind, self.namespace, self.selector, self.bookmarks = kind, namespace, selector, bookmarks
        self.queue = []  # (type, object)
        self.cond = threading.Condition()
        self.closed = False
        self.action = None  # "drop" | "truncate" | "bookmark" (raw garbage goes into queue as "RAW")
        self.sock = None

    def wants(self, obj):
        meta = obj.get("metadata", {})
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        return self.selector.matches(obj)

    def push(self, event_type, obj):
        with self.cond:
            self.queue.append((event_type, obj))
            self.cond.notify()


class Store:
    def __init__(self):
        self.lock = threading.RLock()
        self.rv = 100  # resourceVersions are opaque to clients; start away from "0"
        self.objects = {"Pod": {}, "Namespace": {}}  # kind -> key -> object
        self.history = []  # (rv, kind, type, old, new) oldest first
        self.oldest = self.rv + 1  # the oldest resourceVersion still in history
        self.watchers = []
        self.snapshots = {}  # (kind, rv) -> sorted items, for consistent pagination
        self.expired_as = "event"
        self.bookmark_interval = 0
        self.watch_refusal = 0  # non-zero: answer watches with this HTTP status (an outage)
        self.write_refusal = 0  # non-zero: answer writes (POST/PUT/PATCH/DELETE) with this status
        self.expire_continue = False  # every continue token is too old

    def next_rv(self):
        self.rv += 1
        return self.rv

    @staticmethod
    def key(obj):
        meta = obj["metadata"]
        return "%s/%s" % (meta["namespace"], meta["name"]) if meta.get("namespace") else meta["name"]

    def record(self, kind, event_type, old, new):
        """Appends to history and fans the change out to watchers (lock held)."""
        rv = int(new["metadata"]["resourceVersion"])
        self.history.append((rv, kind, event_type, old, new))
        self.snapshots = {k: v for k, v in self.snapshots.items() if k[1] >= self.oldest}
        for w in list(self.watchers):
            if w.kind == kind:
                translated = translate(w, event_type, old, new)
                if translated:
                    w.push(*translated)

    def compact(self, upto=None):
        with self.lock:
            upto = self.rv if upto is None else int(upto)
            self.history = [h for h in self.history if h[0] > upto]
            self.oldest = upto + 1
            self.snapshots = {k: v for k, v in self.snapshots.items() if k[1] > upto}

    def items(self, kind):
        return [self.objects[kind][k] for k in sorted(self.objects[kind])]


def translate(watcher, event_type, old, new):
    """What a watcher with a selector sees of a change: entering it is ADDED, leaving DELETED."""
    now_in = watcher.wants(new)
    was_in = old is not None and watcher.wants(old)
    if event_type == "ADDED":
        return ("ADDED", new) if now_in else None
    if event_type == "DELETED":
        return ("DELETED", new) if (now_in or was_in) else None
    if now_in and was_in:
        return ("MODIFIED", new)
    if now_in:
        return ("ADDED", new)
    if was_in:
        return ("DELETED", new)
    return None


STORE = Store()
REQUESTS = []
REQUESTS_LOCK = threading.Lock()
AUTH = {"tokens": set(), "client_ca": False}


def with_kind(kind, obj):
    out = {"kind": kind, "apiVersion": "v1"}
    out.update({k: v for k, v in obj.items() if k not in ("kind", "apiVersion")})
    return out


def without_kind(obj):
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


# --- resources ------------------------------------------------------------------------------------

def check_namespace(ns):
    if ns not in STORE.objects["Namespace"]:
        raise ApiError(404, "NotFound", 'namespaces "%s" not found' % ns,
                       {"name": ns, "kind": "namespaces"})


def not_found(kind, name):
    plural = "pods" if kind == "Pod" else "namespaces"
    return ApiError(404, "NotFound", '%s "%s" not found' % (plural, name), {"name": name, "kind": plural})


def default_object(kind, obj, ns):
    meta = obj.setdefault("metadata", {})
    if not meta.get("name"):
        if meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        else:
            raise ApiError(422, "Invalid", "%s name: Required value" % kind)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now_rfc3339()
    meta.pop("deletionTimestamp", None)
    if kind == "Pod":
        meta["namespace"] = ns
        spec = obj.setdefault("spec", {})
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("enableServiceLinks", True)
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        status.setdefault("qosClass", "BestEffort")
    else:
        meta.pop("namespace", None)
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
    return obj


def create(kind, ns, body):
    with STORE.lock:
        if kind == "Pod":
            check_namespace(ns)
        obj = default_object(kind, without_kind(body), ns)
        key = STORE.key(obj)
        if key in STORE.objects[kind]:
            plural = "pods" if kind == "Pod" else "namespaces"
            raise ApiError(409, "AlreadyExists", '%s "%s" already exists' % (plural, obj["metadata"]["name"]),
                           {"name": obj["metadata"]["name"], "kind": plural})
        obj["metadata"]["resourceVersion"] = str(STORE.next_rv())
        STORE.objects[kind][key] = obj
        STORE.record(kind, "ADDED", None, obj)
        return obj


def update(kind, key, mutate, subresource=None):
    """Applies mutate(copy) -> new object; keeps immutable fields; bumps rv if it changed."""
    with STORE.lock:
        old = STORE.objects[kind].get(key)
        if old is None:
            raise not_found(kind, key.split("/")[-1])
        new = mutate(copy.deepcopy(old))
        want_rv = new.get("metadata", {}).get("resourceVersion")
        if want_rv and want_rv != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the object has been modified;'
                           ' please apply your changes to the latest version and try again'
                           % ("pods" if kind == "Pod" else "namespaces", old["metadata"]["name"]))
        new = without_kind(new)
        for field in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                      "deletionGracePeriodSeconds"):
            if field in old["metadata"]:
                new.setdefault("metadata", {})[field] = old["metadata"][field]
            else:
                new.setdefault("metadata", {}).pop(field, None)
        if subresource == "status":
            new["spec"] = old.get("spec")  # the status strategy keeps spec
        elif kind == "Pod":
            new["status"] = old.get("status")  # the main resource keeps status
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if new == old:
            return old  # a no-op write does not bump the resourceVersion
        new["metadata"]["resourceVersion"] = str(STORE.next_rv())
        STORE.objects[kind][key] = new
        STORE.record(kind, "MODIFIED", old, new)
        return new


def delete(kind, key, grace=None):
    with STORE.lock:
        old = STORE.objects[kind].get(key)
        if old is None:
            raise not_found(kind, key.split("/")[-1])
        if kind == "Namespace":
            for pod_key in [k for k, p in STORE.objects["Pod"].items() if p["metadata"]["namespace"] == key]:
                delete("Pod", pod_key, 0)
        if kind == "Pod" and old.get("spec", {}).get("nodeName"):
            if grace is None:
                grace = old["spec"].get("terminationGracePeriodSeconds", 30)
            if grace > 0:
                # Graceful: the kubelet of the node stops the containers, then deletes with grace 0.
                if old["metadata"].get("deletionTimestamp"):
                    return old
                new = copy.deepcopy(old)
                new["metadata"]["deletionTimestamp"] = now_rfc3339(grace)
                new["metadata"]["deletionGracePeriodSeconds"] = grace
                new["metadata"]["resourceVersion"] = str(STORE.next_rv())
                STORE.objects[kind][key] = new
                STORE.record(kind, "MODIFIED", old, new)
                return new
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(STORE.next_rv())
        del STORE.objects[kind][key]
        STORE.record(kind, "DELETED", old, gone)
        return gone


def list_objects(kind, ns, query):
    selector = Selector(kind, query)
    limit = int(query.get("limit", "0") or 0)
    token = query.get("continue", "")
    rv_param = query.get("resourceVersion", "")
    match = query.get("resourceVersionMatch", "")
    if token and rv_param not in ("", "0"):
        raise ApiError(400, "BadRequest", "specifying resource version is not allowed when using continue")
    with STORE.lock:
        if token:
            try:
                state = json.loads(base64.urlsafe_b64decode(token.encode()))
                list_rv, start = int(state["rv"]), state["start"]
            except Exception:
                raise ApiError(400, "BadRequest", "continue key is not valid: illegal base64 data")
            items = STORE.snapshots.get((kind, list_rv))
            if list_rv < STORE.oldest - 1 or items is None or STORE.expire_continue:
                raise expired("The provided continue parameter is too old to display a consistent list result. "
                              "You can start a new list without the continue parameter, or use the continue "
                              "token in this response to retrieve the remainder of the results. Continuing with "
                              "the provided token results in an inconsistent list - objects that were created, "
                              "modified, or deleted between the time the first chunk was returned and now may "
                              "show up in the list.")
        else:
            if match == "Exact" and rv_param and int(rv_param) < STORE.oldest - 1:
                raise expired("too old resource version: %s (%d)" % (rv_param, STORE.oldest - 1))
            list_rv, start = STORE.rv, ""
            # Stored objects are replaced on every write, never changed in place: a list of
            # references is a consistent snapshot.
            items = STORE.items(kind)
            if limit:
                STORE.snapshots[(kind, list_rv)] = items
        matching = [o for o in items if (not ns or o["metadata"].get("namespace") == ns) and selector.matches(o)
                    and STORE.key(o) > start]
    page = matching[:limit] if limit else matching
    meta = {"resourceVersion": str(list_rv)}
    if limit and len(matching) > limit:
        last = STORE.key(page[-1])
        meta["continue"] = base64.urlsafe_b64encode(json.dumps({"rv": list_rv, "start": last}).encode()).decode()
        meta["remainingItemCount"] = len(matching) - limit
    return meta, page


# --- HTTP -------------------------------------------------------------------------------------------

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "meshnode-fake-kube-apiserver"
    tls_context = None

    def setup(self):
        if self.tls_context is not None:
            self.request = self.tls_context.wrap_socket(self.request, server_side=True)
        super().setup()

    def log_message(self, fmt, *args):
        sys.stderr.write("fake-apiserver: %s %s\n" % (self.address_string(), fmt % args))

    # --- plumbing ---
    def wants_table(self):
        """kubectl's human-readable output asks for server-side tables (meta.k8s.io/v1 Table)."""
        for part in self.headers.get("Accept", "").split(","):
            fields = [f.strip() for f in part.split(";")]
            if "as=Table" in fields[1:] and ("g=meta.k8s.io" in fields[1:]) and "v=v1" in fields[1:]:
                return True
        return False

    def encoding(self):
        for part in self.headers.get("Accept", JSON).split(","):
            fields = [f.strip() for f in part.split(";")]
            media, params = fields[0], fields[1:]
            if any(p.startswith("as=") for p in params):
                continue  # conversions (Table) are handled by wants_table
            if media == PROTOBUF:
                return PROTOBUF
            if media in (JSON, "*/*", "application/*"):
                return JSON
        return JSON

    def user(self):
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer ") and auth[7:].strip() in AUTH["tokens"]:
            return "token:" + auth[7:].strip()[:6]
        if AUTH["client_ca"] and hasattr(self.request, "getpeercert"):
            cert = self.request.getpeercert()
            if cert:
                for rdn in cert.get("subject", ()):
                    for key, value in rdn:
                        if key == "commonName":
                            return "cert:" + value
        if not AUTH["tokens"] and not AUTH["client_ca"]:
            return "anonymous"
        return None

    def body_json(self):
        length = int(self.headers.get("Content-Length", "0") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            if self.headers.get("Content-Type", "").split(";")[0].strip() == PROTOBUF:
                return kube_pb.decode_object(raw)
            return json.loads(raw)
        except ValueError as e:
            raise ApiError(400, "BadRequest", "error decoding body: %s" % e)

    def send_bytes(self, code, content_type, payload):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def send_object(self, code, kind, obj):
        if self.wants_table() and kind in TABLE_COLUMNS and code == 200:
            return self.send_json(code, table(kind, [obj], obj["metadata"].get("resourceVersion", "")))
        if self.encoding() == PROTOBUF and kind in kube_pb.KINDS:
            self.send_bytes(code, PROTOBUF, kube_pb.encode_object(with_kind(kind, obj)))
        else:
            self.send_bytes(code, JSON, json.dumps(with_kind(kind, obj)).encode())

    def send_json(self, code, obj):
        self.send_bytes(code, JSON, json.dumps(obj).encode())

    def send_error_status(self, err):
        self.send_object(err.code, "Status", without_kind(err.status()))

    # --- dispatch ---
    def handle_any(self, method):
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        parts = [unquote(p) for p in url.path.strip("/").split("/") if p]
        user = self.user()
        with REQUESTS_LOCK:
            if parts[:1] != ["fake"]:
                REQUESTS.append({"method": method, "path": url.path, "query": query,
                                 "accept": self.headers.get("Accept", ""),
                                 "contentType": self.headers.get("Content-Type", ""), "user": user})
        try:
            if parts[:1] == ["fake"]:
                return self.fake(method, parts[1:])
            if user is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if STORE.write_refusal and method != "GET":
                self.body_json()  # consume the body: the connection stays usable
                raise ApiError(STORE.write_refusal, "ServiceUnavailable", "the server is currently unable to handle the request")
            return self.api(method, parts, query)
        except ApiError as err:
            self.send_error_status(err)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_PATCH(self):
        self.handle_any("PATCH")

    def do_DELETE(self):
        self.handle_any("DELETE")

    def api(self, method, parts, query):
        if parts == ["version"]:
            return self.send_json(200, {"major": "1", "minor": "32", "gitVersion": "v1.32.0-meshnode-fake",
                                        "platform": "linux/amd64"})
        if parts == ["api"]:
            return self.send_json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": self.headers.get("Host", "")}]})
        if parts == ["apis"]:
            return self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        if parts == ["api", "v1"]:
            return self.send_json(200, discovery())
        if parts[:2] != ["api", "v1"]:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        rest = parts[2:]
        # /api/v1/pods | /api/v1/namespaces[/name] | /api/v1/namespaces/ns/pods[/name[/status]]
        if rest == ["pods"]:
            return self.collection(method, "Pod", "", query)
        if rest == ["namespaces"]:
            return self.collection(method, "Namespace", "", query)
        if len(rest) == 2 and rest[0] == "namespaces":
            return self.item(method, "Namespace", rest[1], None, query)
        if len(rest) == 3 and rest[0] == "namespaces" and rest[2] == "pods":
            return self.collection(method, "Pod", rest[1], query)
        if len(rest) in (4, 5) and rest[0] == "namespaces" and rest[2] == "pods":
            sub = rest[4] if len(rest) == 5 else None
            if sub not in (None, "status"):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return self.item(method, "Pod", "%s/%s" % (rest[1], rest[3]), sub, query)
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def collection(self, method, kind, ns, query):
        if method == "GET":
            if query.get("watch") in ("true", "1"):
                return self.watch(kind, ns, query)
            meta, items = list_objects(kind, ns, query)
            list_kind = kind + "List"
            if self.wants_table():
                return self.send_json(200, table(kind, items, meta["resourceVersion"], meta.get("continue")))
            if self.encoding() == PROTOBUF:
                return self.send_bytes(200, PROTOBUF, kube_pb.encode_list(list_kind, meta, items))
            return self.send_json(200, {"kind": list_kind, "apiVersion": "v1", "metadata": meta, "items": items})
        if method == "POST":
            return self.send_object(201, kind, create(kind, ns, self.body_json()))
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def item(self, method, kind, key, sub, query):
        if method == "GET":
            with STORE.lock:
                obj = STORE.objects[kind].get(key)
            if obj is None:
                raise not_found(kind, key.split("/")[-1])
            return self.send_object(200, kind, obj)
        if method == "PATCH":
            ctype = self.headers.get("Content-Type", "").split(";")[0].strip()
            if ctype not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                               "accepted media types include: application/merge-patch+json, "
                               "application/strategic-merge-patch+json")
            patch = self.body_json()
            return self.send_object(200, kind, update(kind, key, lambda o: merge_patch(o, patch), sub))
        if method == "PUT":
            body = without_kind(self.body_json())
            return self.send_object(200, kind, update(kind, key, lambda o: body, sub))
        if method == "DELETE":
            body = self.body_json()
            grace = body.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
            return self.send_object(200, kind, delete(kind, key, None if grace is None else int(grace)))
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    # --- watch ---
    def watch(self, kind, ns, query):
        encoding = self.encoding()
        rv_param = query.get("resourceVersion", "")
        timeout = int(query.get("timeoutSeconds", "0") or 0) or 1800
        if STORE.watch_refusal:
            raise ApiError(STORE.watch_refusal, "ServiceUnavailable", "the watch cache is not ready")
        watcher = Watcher(kind, ns, Selector(kind, query), query.get("allowWatchBookmarks") == "true")
        watcher.sock = self.connection
        with STORE.lock:
            if rv_param not in ("", "0") and int(rv_param) < STORE.oldest - 1:
                err = expired("too old resource version: %s (%d)" % (rv_param, STORE.oldest - 1))
                if STORE.expired_as == "http":
                    raise err
                watcher.queue.append(("ERROR", err.status()))
                watcher.closed = True
            elif rv_param in ("", "0"):
                for obj in STORE.items(kind):  # synthetic ADDED for the current state
                    if watcher.wants(obj):
                        watcher.queue.append(("ADDED", obj))
            else:
                since = int(rv_param)
                for rv, k, event_type, old, new in STORE.history:
                    if k == kind and rv > since:
                        translated = translate(watcher, event_type, old, new)
                        if translated:
                            watcher.queue.append(translated)
            if not watcher.closed:
                STORE.watchers.append(watcher)
        ctype = PROTOBUF + ";stream=watch" if encoding == PROTOBUF else JSON
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        try:
            self.stream_events(watcher, kind, encoding, timeout)
        finally:
            with STORE.lock:
                if watcher in STORE.watchers:
                    STORE.watchers.remove(watcher)
            self.close_connection = True

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")
        self.wfile.flush()

    def frame(self, encoding, event_type, obj):
        if self.wants_table() and obj.get("kind") in TABLE_COLUMNS and event_type != "BOOKMARK":
            obj = table(obj["kind"], [obj], obj["metadata"].get("resourceVersion", ""))
        if encoding == PROTOBUF:
            return kube_pb.encode_watch_frame(event_type, obj)
        return json.dumps({"type": event_type, "object": obj}).encode() + b"\n"

    def bookmark(self, kind):
        with STORE.lock:
            rv = str(STORE.rv)
        return {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": rv}}

    def stream_events(self, watcher, kind, encoding, timeout):
        deadline = threading.Event()
        timer = threading.Timer(timeout, deadline.set)
        timer.daemon = True
        timer.start()
        last_bookmark = datetime.datetime.now()
        try:
            while True:
                with watcher.cond:
                    if not watcher.queue and not watcher.action and not watcher.closed:
                        watcher.cond.wait(0.05)
                    queue, watcher.queue = watcher.queue, []
                    action, watcher.action = watcher.action, None
                for event_type, obj in queue:
                    if event_type == "RAW":  # /fake/garbage-watches: in order with the events
                        self.write_chunk(obj)
                        continue
                    event_kind = "Status" if event_type == "ERROR" else kind
                    self.write_chunk(self.frame(encoding, event_type, with_kind(event_kind, obj)))
                if action == "drop":
                    watcher.sock.shutdown(socket.SHUT_RDWR)
                    return
                if action == "truncate":
                    frame = self.frame(encoding, "MODIFIED", self.bookmark(kind))
                    self.write_chunk(frame[: len(frame) // 2])
                    watcher.sock.shutdown(socket.SHUT_RDWR)
                    return
                if action == "bookmark" and watcher.bookmarks:
                    self.write_chunk(self.frame(encoding, "BOOKMARK", self.bookmark(kind)))
                if watcher.closed:
                    break
                interval = STORE.bookmark_interval
                if interval and watcher.bookmarks and \
                        (datetime.datetime.now() - last_bookmark).total_seconds() >= interval:
                    last_bookmark = datetime.datetime.now()
                    self.write_chunk(self.frame(encoding, "BOOKMARK", self.bookmark(kind)))
                if deadline.is_set():
                    if watcher.bookmarks:  # the watch cache sends one right before the deadline
                        self.write_chunk(self.frame(encoding, "BOOKMARK", self.bookmark(kind)))
                    break
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        finally:
            timer.cancel()

    # --- test control ---
    def fake(self, method, parts):
        name = "/".join(parts)
        if method == "GET" and name == "requests":
            with REQUESTS_LOCK:
                return self.send_json(200, REQUESTS)
        body = self.body_json() if method == "POST" else {}
        if name == "reset-requests":
            with REQUESTS_LOCK:
                REQUESTS.clear()
        elif name == "compact":
            STORE.compact(body.get("resourceVersion"))
        elif name in ("drop-watches", "truncate-watches", "bookmark", "garbage-watches"):
            action = {"drop-watches": "drop", "truncate-watches": "truncate", "bookmark": "bookmark"}.get(name)
            if name == "garbage-watches":
                action = ("garbage", bytes.fromhex(body.get("bytes", "")))
            with STORE.lock:
                watchers = list(STORE.watchers)
                if action in ("drop", "truncate"):  # gone from /fake/state at once
                    STORE.watchers = []
            for w in watchers:
                with w.cond:
                    if isinstance(action, tuple):
                        # Queued like an event: an event pushed after it must not overtake it.
                        w.queue.append(("RAW", action[1]))
                    else:
                        w.action = action
                    w.cond.notify()
            return self.send_json(200, {"watches": len(watchers)})
        elif name == "load":
            load_pods(body)
        elif name == "config":
            STORE.expired_as = body.get("expiredAs", STORE.expired_as)
            STORE.bookmark_interval = body.get("bookmarkIntervalSeconds", STORE.bookmark_interval)
            STORE.watch_refusal = body.get("watchRefusal", STORE.watch_refusal)
            STORE.write_refusal = body.get("writeRefusal", STORE.write_refusal)
            STORE.expire_continue = body.get("expireContinue", STORE.expire_continue)
        elif name == "state":
            with STORE.lock:
                return self.send_json(200, {"resourceVersion": str(STORE.rv), "oldest": STORE.oldest,
                                            "watches": len(STORE.watchers)})
        else:
            raise ApiError(404, "NotFound", "no fake control endpoint " + name)
        with STORE.lock:
            return self.send_json(200, {"resourceVersion": str(STORE.rv)})


def load_pods(body):
    """Bulk creation for benchmarks: `count` copies of `template` in namespace `namespace`, named
    <prefix><i>, spread round-robin over `nodes` nodes node-0..node-N-1, IPs 10.<i/65536>.<..>."""
    template, ns = body["template"], body.get("namespace", "bench")
    count, nodes, prefix = int(body["count"]), int(body.get("nodes", 1)), body.get("prefix", "pod-")
    with STORE.lock:
        if ns not in STORE.objects["Namespace"]:
            create("Namespace", "", {"metadata": {"name": ns}})
        for i in range(count):
            pod = copy.deepcopy(template)
            ip = "10.%d.%d.%d" % (i >> 16 & 255, i >> 8 & 255, i & 255)
            pod.setdefault("metadata", {}).update({"name": "%s%d" % (prefix, i), "namespace": ns})
            pod["metadata"].pop("resourceVersion", None)
            pod.setdefault("spec", {})["nodeName"] = "node-%d" % (i % nodes)
            pod.setdefault("status", {}).update({"podIP": ip, "podIPs": [{"ip": ip}]})
            create("Pod", ns, pod)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls-cert", help="server certificate (PEM); plain HTTP without it")
    parser.add_argument("--tls-key")
    parser.add_argument("--client-ca", help="accept client certificates signed by this CA as users")
    parser.add_argument("--token", action="append", default=[], help="accepted bearer token (repeatable)")
    parser.add_argument("--token-file", help="accepted bearer tokens, one per line, re-read per request")
    args = parser.parse_args()

    AUTH["tokens"] = set(args.token)
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        if args.client_ca:
            ctx.load_verify_locations(args.client_ca)
            ctx.verify_mode = ssl.CERT_OPTIONAL
            AUTH["client_ca"] = True
        Handler.tls_context = ctx
    if args.token_file:
        original = Handler.user

        def user_with_file(self):
            try:
                with open(args.token_file) as f:
                    AUTH["tokens"] = set(args.token) | {line.strip() for line in f if line.strip()}
            except OSError:
                pass
            return original(self)
        Handler.user = user_with_file

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    scheme = "https" if args.tls_cert else "http"
    host = args.host if ":" not in args.host else "[%s]" % args.host
    print("listening %s://%s:%d" % (scheme, host, server.server_address[1]), flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
