"""Field and label selectors of the fake API server (kube_api_server.py), as kube-apiserver
parses them for list and watch requests: fieldSelector terms k=v, k==v, k!=v over the fields it
supports per kind; labelSelector terms k=v, k!=v, k, !k, k in (a,b), k notin (a,b)."""

from kube_errors import ApiError


def field_value(obj, path):
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    return "" if cur is None else str(cur)


SUPPORTED_FIELDS = {"Pod": {"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase",
                            "spec.serviceAccountName", "spec.schedulerName", "status.podIP"},
                    "Namespace": {"metadata.name", "status.phase"}}


def parse_field_selector(kind, text):
    terms = []
    for term in filter(None, (t.strip() for t in (text or "").split(","))):
        if "!=" in term:
            key, value, negate = *term.split("!=", 1), True
        elif "==" in term:
            key, value, negate = *term.split("==", 1), False
        elif "=" in term:
            key, value, negate = *term.split("=", 1), False
        else:
            raise ApiError(400, "BadRequest", 'invalid field selector: "%s"' % term)
        if key not in SUPPORTED_FIELDS[kind]:
            raise ApiError(400, "BadRequest",
                           'field label not supported: %s' % key)
        terms.append((key, value, negate))
    return terms


def split_label_terms(text):
    terms, depth, cur = [], 0, ""
    for ch in text or "":
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        terms.append(cur.strip())
    return terms


def parse_label_selector(text):
    terms = []
    for term in split_label_terms(text):
        for op in (" notin ", " in "):
            if op in term:
                key, values = term.split(op, 1)
                values = {v.strip() for v in values.strip().strip("()").split(",")}
                terms.append((key.strip(), op.strip(), values))
                break
        else:
            if "!=" in term:
                key, value = term.split("!=", 1)
                terms.append((key.strip(), "!=", {value.strip()}))
            elif "==" in term or "=" in term:
                key, value = term.replace("==", "=").split("=", 1)
                terms.append((key.strip(), "=", {value.strip()}))
            elif term.startswith("!"):
                terms.append((term[1:].strip(), "!exists", set()))
            else:
                terms.append((term, "exists", set()))
    return terms


class Selector:
    def __init__(self, kind, query):
        self.fields = parse_field_selector(kind, query.get("fieldSelector", ""))
        self.labels = parse_label_selector(query.get("labelSelector", ""))

    def matches(self, obj):
        for key, value, negate in self.fields:
            if (field_value(obj, key) == value) == negate:
                return False
        labels = obj.get("metadata", {}).get("labels") or {}
        for key, op, values in self.labels:
            present = key in labels
            if op == "exists" and not present:
                return False
            if op == "!exists" and present:
                return False
            if op in ("=", "in") and (not present or labels[key] not in values):
                return False
            if op in ("!=", "notin") and present and labels[key] in values:
                return False
        return True



