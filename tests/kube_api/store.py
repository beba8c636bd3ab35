"""The fake API server's objects: one resourceVersion counter for everything, a bounded history of watch events
per resource, and the checks and error bodies (Status objects) the real API server gives for the calls Corral
makes."""

from __future__ import annotations

import copy
import re
import threading
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
KINDS = {"nodes": "Node", "namespaces": "Namespace", "pods": "Pod", "secrets": "Secret"}
NAMESPACED = ("pods", "secrets")
HISTORY = 2000  # watch events kept per store (older resourceVersions get 410 Gone)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    """An error the API answers with: its HTTP code and a Status body as the real server writes it."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> Obj:
        body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
        body.update(message=self.message, reason=self.reason, code=self.code)
        if self.details is not None:
            body["details"] = self.details
        return body


def not_found(resource: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource} "{name}" not found', {"name": name, "kind": resource})


def invalid(kind: str, name: str, field: str, problem: str) -> ApiError:
    cause = {"reason": "FieldValueInvalid", "message": problem, "field": field}
    details = {"name": name, "kind": kind, "causes": [cause]}
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {field}: {problem}', details)


def gone(rv: int, oldest: int) -> ApiError:
    return ApiError(410, "Expired", f"too old resource version: {rv} ({oldest})")


def match_labels(selector: str, labels: dict[str, str]) -> bool:
    """`a=b`, `a==b`, `a!=b`, `a`, `!a`, comma-separated (what label selectors say, without set operators)."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def check_metadata(resource: str, obj: Obj) -> None:
    kind, meta = KINDS[resource], obj.get("metadata") or {}
    name = meta.get("name", "")
    if not name:
        raise invalid(kind, "", "metadata.name", "Required value: name or generateName is required")
    pattern = _DNS_LABEL if resource == "namespaces" else _DNS_SUBDOMAIN
    if len(name) > (63 if resource == "namespaces" else 253) or not pattern.fullmatch(name):
        raise invalid(kind, name, "metadata.name", f'Invalid value: "{name}": a lowercase RFC 1123 name')
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, short = key.rpartition("/")
        if (prefix and not _DNS_SUBDOMAIN.fullmatch(prefix)) or not _LABEL_NAME.fullmatch(short) or len(short) > 63:
            raise invalid(kind, name, "metadata.labels", f'Invalid value: "{key}": name part must be valid')
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            raise invalid(kind, name, "metadata.labels", f'Invalid value: "{value}": a valid label must be ...')


class ObjectStore:
    """Every object by (resource, namespace, name); each write takes the next resourceVersion and is recorded as
    a watch event. `changed` is notified on every write (watches and the kubelet wait on it)."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.rv = 0
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.events: list[tuple[int, str, str, Obj]] = []  # (rv, resource, type, object)
        self.oldest = 0  # a watch from a resourceVersion below this one is too old (410)

    def _record(self, resource: str, kind: str, obj: Obj) -> Obj:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, resource, kind, copy.deepcopy(obj)))
        if len(self.events) > HISTORY:
            drop = len(self.events) - HISTORY
            self.oldest = self.events[drop - 1][0]
            del self.events[:drop]
        self.changed.notify_all()
        return copy.deepcopy(obj)

    def compact(self) -> None:
        """Forget the watch history (as etcd compaction past other writes does): a watch from any resourceVersion
        handed out so far gets 410."""
        with self.changed:
            self.rv += 1  # a write Corral does not see (another resource's): every version it holds is now too old
            self.oldest = self.rv
            self.events.clear()

    def create(self, resource: str, namespace: str, obj: Obj) -> Obj:
        check_metadata(resource, obj)
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        name = meta["name"]
        with self.changed:
            if resource in NAMESPACED:
                if ("namespaces", "", namespace) not in self.objects:
                    raise not_found("namespaces", namespace)
                meta["namespace"] = namespace
            key = (resource, namespace if resource in NAMESPACED else "", name)
            if key in self.objects:
                details = {"name": name, "kind": resource}
                raise ApiError(409, "AlreadyExists", f'{resource} "{name}" already exists', details)
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339())
            obj.update(kind=KINDS[resource], apiVersion="v1")
            self.objects[key] = obj
            return self._record(resource, "ADDED", obj)

    def get(self, resource: str, namespace: str, name: str) -> Obj:
        with self.changed:
            obj = self.objects.get((resource, namespace, name))
            if obj is None:
                raise not_found(resource, name)
            return copy.deepcopy(obj)

    def list(self, resource: str, namespace: str | None, selector: str = "") -> tuple[list[Obj], int]:
        with self.changed:
            items = [
                copy.deepcopy(o)
                for (r, ns, _), o in self.objects.items()
                if r == resource
                and (namespace is None or ns == namespace)
                and match_labels(selector, o["metadata"].get("labels") or {})
            ]
            return items, self.rv

    def update(self, resource: str, namespace: str, name: str, change: Callable[[Obj], object]) -> Obj:
        """Apply `change` to the stored object (in place) and record it as MODIFIED."""
        with self.changed:
            obj = self.objects.get((resource, namespace, name))
            if obj is None:
                raise not_found(resource, name)
            change(obj)
            return self._record(resource, "MODIFIED", obj)

    def replace(self, resource: str, namespace: str, name: str, new: Obj) -> Obj:
        check_metadata(resource, new)
        if new["metadata"]["name"] != name:
            raise invalid(KINDS[resource], name, "metadata.name", "the name of the object does not match the URL")

        def swap(obj: Obj) -> None:
            kept = {k: obj["metadata"][k] for k in ("uid", "creationTimestamp", "namespace") if k in obj["metadata"]}
            obj.clear()
            obj.update(copy.deepcopy(new), kind=KINDS[resource], apiVersion="v1")
            obj["metadata"].update(kept)

        return self.update(resource, namespace, name, swap)

    def delete(self, resource: str, namespace: str, name: str) -> Obj:
        with self.changed:
            obj = self.objects.pop((resource, namespace, name), None)
            if obj is None:
                raise not_found(resource, name)
            return self._record(resource, "DELETED", obj)

    def events_after(self, resource: str, rv: int) -> Iterable[tuple[int, str, Obj]]:
        """The watch events of `resource` after `rv` (call holding `changed`); ApiError 410 when rv is too old."""
        if rv < self.oldest:
            raise gone(rv, self.oldest)
        return [(n, t, o) for n, r, t, o in self.events if r == resource and n > rv]
