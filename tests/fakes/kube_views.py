"""Read-only views of the fake API server (kube_api_server.py): discovery documents and the
meta.k8s.io/v1 Table form kubectl asks for, shaped as kube-apiserver serves them."""

import datetime

import kube_pb


TABLE_COLUMNS = {
    "Pod": [("Name", "string", "name", 0), ("Ready", "string", "", 0), ("Status", "string", "", 0),
            ("Restarts", "string", "", 0), ("Age", "string", "", 0), ("IP", "string", "", 1),
            ("Node", "string", "", 1), ("Nominated Node", "string", "", 1), ("Readiness Gates", "string", "", 1)],
    "Namespace": [("Name", "string", "name", 0), ("Status", "string", "", 0), ("Age", "string", "", 0)],
}


def age(obj):
    created = obj["metadata"].get("creationTimestamp")
    if not created:
        return "<unknown>"
    secs = int(datetime.datetime.now(datetime.timezone.utc).timestamp() - kube_pb.parse_time(created)[0])
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size * 2:
            return "%d%s" % (secs // size, unit)
    return "%ds" % max(secs, 0)


def table_cells(kind, obj):
    meta, status = obj["metadata"], obj.get("status", {})
    if kind == "Namespace":
        return [meta["name"], status.get("phase", ""), age(obj)]
    containers = obj.get("spec", {}).get("containers", [])
    statuses = status.get("containerStatuses", [])
    ready = sum(1 for c in statuses if c.get("ready"))
    phase = "Terminating" if meta.get("deletionTimestamp") else status.get("phase", "")
    return [meta["name"], "%d/%d" % (ready, len(containers)), phase,
            str(sum(c.get("restartCount", 0) for c in statuses)), age(obj), status.get("podIP") or "<none>",
            obj.get("spec", {}).get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>", "<none>"]


def table(kind, items, resource_version, continue_token=None):
    """A meta.k8s.io/v1 Table, the server-side printing kubectl asks for (rows carry the object's
    metadata as PartialObjectMetadata, the default includeObject=Metadata)."""
    meta = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
            "columnDefinitions": [{"name": n, "type": t, "format": f, "description": n, "priority": p}
                                  for n, t, f, p in TABLE_COLUMNS[kind]],
            "rows": [{"cells": table_cells(kind, o),
                      "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                 "metadata": o["metadata"]}} for o in items]}


def discovery():
    def resource(name, kind, namespaced, verbs, short=None):
        r = {"name": name, "singularName": "" if "/" in name else kind.lower(), "namespaced": namespaced,
             "kind": kind, "verbs": verbs}
        if short:
            r["shortNames"] = short
        return r
    all_verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    return {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        resource("namespaces", "Namespace", False, ["create", "delete", "get", "list", "patch", "update", "watch"],
                 ["ns"]),
        resource("pods", "Pod", True, all_verbs, ["po"]),
        resource("pods/status", "Pod", True, ["get", "patch", "update"]),
    ]}
