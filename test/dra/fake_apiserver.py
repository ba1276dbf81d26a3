#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A tiny Kubernetes API server for the gpuos-dra tests (#26): Python 3 standard library only.

Serves what gpuos-dra uses of resource.k8s.io/v1, strictly:
  GET    /apis/resource.k8s.io/v1/resourceslices[/NAME]
  POST   /apis/resource.k8s.io/v1/resourceslices                 (409 AlreadyExists)
  PUT    /apis/resource.k8s.io/v1/resourceslices/NAME            (409 Conflict on a stale resourceVersion)
  DELETE /apis/resource.k8s.io/v1/resourceslices/NAME            (404 when absent)
  GET    /apis/resource.k8s.io/v1/namespaces/NS/resourceclaims/NAME
  GET    /api/v1/nodes/NAME                                       (every node exists; see node())
  POST   /api/v1/namespaces/NS/events                             (core/v1 Events; see validate_event)
Every slice written is checked against the v1 rules the plugin must follow (see validate_slice), with
422 Invalid and a message naming the field otherwise; unknown fields are refused (a v1beta1 "basic"
is a mistake here). Like the real server it sets metadata.uid/resourceVersion/generation/
creationTimestamp and writes capacity quantities in canonical form ("80000000000" -> "80G").

Claims come from --claims FILE, re-read on every request so a test can change it: a JSON list of
ResourceClaim objects, or an object with "items". Unknown claim: 404.

Test-only endpoints (never logged):
  GET    /fake/log         the requests received, [{"method", "path", "status"}], oldest first
  DELETE /fake/log         forget them
  GET    /fake/events      the Events posted, as stored (with metadata.name), oldest first
  POST   /fake/conflicts   {"count": N}: the next N slice PUTs find the slice changed by "another
                           writer" (its resourceVersion bumped first), so they get 409 Conflict

Usage: fake_apiserver.py [--port 0] [--token T] [--tls-cert F --tls-key F] [--claims FILE]
Prints "listening on PORT" (flushed) once it accepts connections; exits 0 on SIGTERM or SIGINT.
"""
import argparse
import datetime
import json
import re
import signal
import ssl
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
NODE_RE = re.compile(r"^/api/v1/nodes/([^/]+)$")
EVENTS_RE = re.compile(r"^/api/v1/namespaces/([^/]+)/events$")
CLAIM_RE = re.compile(r"^/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims/([^/]+)$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
MAX_DEVICES = 128
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_STRING_VALUE = 64
ATTRIBUTE_TYPES = ("int", "bool", "string", "version")
SPEC_FIELDS = {"driver", "pool", "nodeName", "nodeSelector", "allNodes", "devices", "perDeviceNodeSelection",
               "sharedCounters"}
DEVICE_FIELDS = {"name", "attributes", "capacity", "consumesCounters", "nodeName", "nodeSelector", "allNodes",
                 "taints", "bindsToNode", "bindingConditions", "bindingFailureConditions", "allowMultipleAllocations"}


class Invalid(Exception):
    pass


def is_subdomain(name, max_len=253):
    return isinstance(name, str) and 0 < len(name) <= max_len and all(DNS_LABEL.match(p) for p in name.split("."))


def is_qualified_name(name):
    domain, _, ident = name.rpartition("/")
    if domain and not is_subdomain(domain, 63):
        return False
    return bool(C_IDENTIFIER.match(ident)) and len(ident) <= 32


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def validate_slice(obj, path_name=None):
    """Raises Invalid naming the field when obj is not a ResourceSlice the plugin may write."""
    if not isinstance(obj, dict):
        raise Invalid("body: not a JSON object")
    if obj.get("apiVersion") != "resource.k8s.io/v1":
        raise Invalid("apiVersion: want resource.k8s.io/v1, got %r" % obj.get("apiVersion"))
    if obj.get("kind") != "ResourceSlice":
        raise Invalid("kind: want ResourceSlice, got %r" % obj.get("kind"))
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not is_subdomain(meta.get("name")):
        raise Invalid("metadata.name: must be a DNS subdomain")
    for i, o in enumerate(meta.get("ownerReferences", [])):
        if not isinstance(o, dict) or set(o) - {"apiVersion", "kind", "name", "uid", "controller",
                                                 "blockOwnerDeletion"} or not all(
                isinstance(o.get(k), str) and o[k] for k in ("apiVersion", "kind", "name", "uid")):
            raise Invalid("metadata.ownerReferences[%d]: want {apiVersion, kind, name, uid[, controller]}" % i)
    if path_name is not None and meta["name"] != path_name:
        raise Invalid("metadata.name: %r does not match the name in the path %r" % (meta["name"], path_name))
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise Invalid("spec: required")
    for key in spec:
        if key not in SPEC_FIELDS:
            raise Invalid("spec.%s: unknown field" % key)
    if not is_subdomain(spec.get("driver"), 63):
        raise Invalid("spec.driver: must be a lowercase DNS subdomain of at most 63 characters")
    selection = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)]
    if len(selection) != 1:
        raise Invalid("spec: exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection is required")
    if selection != ["nodeName"] or not is_subdomain(spec["nodeName"]):
        raise Invalid("spec.nodeName: a node-local slice names its node (a DNS subdomain)")
    pool = spec.get("pool")
    if not isinstance(pool, dict) or set(pool) - {"name", "generation", "resourceSliceCount"}:
        raise Invalid("spec.pool: want {name, generation, resourceSliceCount}")
    name = pool.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= 253 or not all(is_subdomain(p) for p in name.split("/")):
        raise Invalid("spec.pool.name: DNS subdomains separated by slashes, at most 253 characters")
    if not is_int(pool.get("generation")) or pool["generation"] < 0:
        raise Invalid("spec.pool.generation: a non-negative integer is required")
    if not is_int(pool.get("resourceSliceCount")) or pool["resourceSliceCount"] <= 0:
        raise Invalid("spec.pool.resourceSliceCount: must be greater than zero")
    devices = spec.get("devices", [])
    if not isinstance(devices, list):
        raise Invalid("spec.devices: must be a list")
    if len(devices) > MAX_DEVICES:
        raise Invalid("spec.devices: must have at most %d items, has %d" % (MAX_DEVICES, len(devices)))
    names = set()
    for i, dev in enumerate(devices):
        where = "spec.devices[%d]" % i
        if not isinstance(dev, dict):
            raise Invalid(where + ": not an object")
        for key in dev:
            if key not in DEVICE_FIELDS:
                raise Invalid("%s.%s: unknown field" % (where, key))
        dname = dev.get("name")
        if not isinstance(dname, str) or len(dname) > 63 or not DNS_LABEL.match(dname):
            raise Invalid(where + ".name: %r is not a DNS label" % (dname,))
        if dname in names:
            raise Invalid(where + ".name: %r is a duplicate" % dname)
        names.add(dname)
        attributes = dev.get("attributes", {})
        capacity = dev.get("capacity", {})
        if not isinstance(attributes, dict) or not isinstance(capacity, dict):
            raise Invalid(where + ": attributes and capacity must be maps")
        if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
            raise Invalid(where + ": more than %d attributes and capacities" % MAX_ATTRIBUTES_AND_CAPACITIES)
        for aname, value in attributes.items():
            awhere = "%s.attributes[%s]" % (where, aname)
            if not is_qualified_name(aname):
                raise Invalid(awhere + ": not a qualified name")
            if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in ATTRIBUTE_TYPES:
                raise Invalid(awhere + ": exactly one of int, bool, string, version is required")
            kind, v = next(iter(value.items()))
            if kind == "int" and not is_int(v):
                raise Invalid(awhere + ".int: not an integer")
            if kind == "bool" and not isinstance(v, bool):
                raise Invalid(awhere + ".bool: not a boolean")
            if kind in ("string", "version") and (not isinstance(v, str) or len(v.encode()) > MAX_STRING_VALUE):
                raise Invalid(awhere + ".%s: a string of at most %d bytes is required" % (kind, MAX_STRING_VALUE))
        for cname, value in capacity.items():
            cwhere = "%s.capacity[%s]" % (where, cname)
            if not is_qualified_name(cname):
                raise Invalid(cwhere + ": not a qualified name")
            if not isinstance(value, dict) or set(value) - {"value", "requestPolicy"}:
                raise Invalid(cwhere + ": want {value[, requestPolicy]}")
            if not isinstance(value.get("value"), str) or not QUANTITY.match(value["value"]):
                raise Invalid(cwhere + ".value: %r is not a quantity string" % (value.get("value"),))


def canonical_quantity(text):
    """The API server's canonical form of a plain integer quantity (DecimalSI): 80000000000 -> 80G."""
    if not re.match(r"^[0-9]+$", text):
        return text
    value, exponent = int(text), 0
    while value and value % 1000 == 0 and exponent < 18:
        value //= 1000
        exponent += 3
    return "%d%s" % (value, {0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}[exponent])


class State:
    def __init__(self, claims_file):
        self.lock = threading.RLock()  # held around reply(), which logs under it
        self.slices = {}
        self.version = 100
        self.log = []
        self.conflicts = 0
        self.claims_file = claims_file
        self.events = []

    def next_version(self):
        self.version += 1
        return str(self.version)


EVENT_FIELDS = {"apiVersion", "kind", "metadata", "involvedObject", "reason", "message", "source", "type",
                "firstTimestamp", "lastTimestamp", "count", "reportingComponent", "reportingInstance",
                "eventTime", "action", "related", "series"}


def validate_event(ev, namespace):
    """The core/v1 Event rules the plugin's events must meet (a subset of the real validation)."""
    if not isinstance(ev, dict):
        raise Invalid("not an object")
    for k in ev:
        if k not in EVENT_FIELDS:
            raise Invalid("unknown field %r" % k)
    if ev.get("apiVersion") != "v1" or ev.get("kind") != "Event":
        raise Invalid("apiVersion/kind: want v1 Event")
    meta = ev.get("metadata") or {}
    if not (meta.get("name") or meta.get("generateName")):
        raise Invalid("metadata.name or metadata.generateName: required")
    if meta.get("namespace", namespace) != namespace:
        raise Invalid("metadata.namespace does not match the request's")
    obj = ev.get("involvedObject") or {}
    if not obj.get("kind") or not obj.get("name"):
        raise Invalid("involvedObject: kind and name required")
    if ev.get("type") not in ("Normal", "Warning"):
        raise Invalid("type: Normal or Warning")
    if not ev.get("reason") or not re.match(r"^[A-Z][A-Za-z0-9]*$", ev["reason"]):
        raise Invalid("reason: CamelCase required")
    if len(ev.get("message", "")) > 1024:
        raise Invalid("message: longer than 1024")
    if ev.get("reportingComponent") and not ev.get("reportingInstance"):
        raise Invalid("reportingInstance: required with reportingComponent")


def node(name):
    """Every node exists; its uid is derived from its name (tests compute the same)."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name + ".node.fake"))}}


def status_body(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-apiserver"

    def log_message(self, fmt, *args):  # quiet: the tests read /fake/log
        pass

    # --- plumbing ---------------------------------------------------------------------------------
    def reply(self, code, body):
        # Logged before it is answered: the client's next request (on another thread) comes after.
        if not self.path.startswith("/fake/"):
            with self.server.state.lock:
                self.server.state.log.append({"method": self.command, "path": self.path, "status": code})
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def fail(self, code, reason, message):
        self.reply(code, status_body(code, reason, message))

    def read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw.decode() or "null")
        except ValueError as e:
            raise Invalid("body: not JSON (%s)" % e)

    def authorized(self):
        token = self.server.token
        if token is None:
            return True
        if self.headers.get("Authorization") == "Bearer " + token:
            return True
        self.fail(401, "Unauthorized", "Unauthorized")
        return False

    def handle_any(self):
        try:
            if self.path.startswith("/fake/"):
                return self.fake()
            if not self.authorized():
                return
            if self.path == SLICES or self.path.startswith(SLICES + "/"):
                return self.slices()
            m = CLAIM_RE.match(self.path)
            if m and self.command == "GET":
                return self.claim(m.group(1), m.group(2))
            m = NODE_RE.match(self.path)
            if m and self.command == "GET":
                return self.reply(200, node(m.group(1)))
            m = EVENTS_RE.match(self.path)
            if m and self.command == "POST":
                return self.event(m.group(1))
            self.fail(404, "NotFound", "the server could not find the requested resource")
        except Invalid as e:
            self.fail(422, "Invalid", "ResourceSlice is invalid: %s" % e)

    do_GET = do_POST = do_PUT = do_DELETE = handle_any

    # --- test hooks -------------------------------------------------------------------------------
    def fake(self):
        state = self.server.state
        if self.path == "/fake/log" and self.command == "GET":
            with state.lock:
                return self.reply(200, list(state.log))
        if self.path == "/fake/log" and self.command == "DELETE":
            with state.lock:
                state.log.clear()
            return self.reply(200, {})
        if self.path == "/fake/events" and self.command == "GET":
            with state.lock:
                return self.reply(200, list(state.events))
        if self.path == "/fake/conflicts" and self.command == "POST":
            body = self.read_body()
            with state.lock:
                state.conflicts = int(body.get("count", 1))
            return self.reply(200, {})
        self.fail(404, "NotFound", "no such test endpoint")

    # --- resources --------------------------------------------------------------------------------
    def event(self, namespace):
        state = self.server.state
        ev = self.read_body()
        try:
            validate_event(ev, namespace)
        except Invalid as e:
            return self.fail(422, "Invalid", "Event is invalid: %s" % e)
        with state.lock:
            meta = dict(ev["metadata"])
            if not meta.get("name"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            meta.update(namespace=namespace, uid=str(uuid.uuid4()), resourceVersion=state.next_version())
            ev = dict(ev, metadata=meta)
            state.events.append(ev)
            return self.reply(201, ev)

    def claim(self, namespace, name):
        try:
            with open(self.server.state.claims_file or "/nonexistent", encoding="utf-8") as f:
                claims = json.load(f)
        except (OSError, ValueError):
            claims = []
        if isinstance(claims, dict):
            claims = claims.get("items", [])
        for c in claims:
            meta = c.get("metadata", {}) if isinstance(c, dict) else {}
            if meta.get("namespace") == namespace and meta.get("name") == name:
                return self.reply(200, c)
        self.fail(404, "NotFound", 'resourceclaims.resource.k8s.io "%s" not found' % name)

    def slices(self):
        state = self.server.state
        name = self.path[len(SLICES) + 1:] if self.path != SLICES else None
        if name is not None and ("/" in name or "?" in name or not name):
            return self.fail(404, "NotFound", "the server could not find the requested resource")
        not_found = 'resourceslices.resource.k8s.io "%s" not found' % name
        if self.command == "GET":
            with state.lock:
                if name is None:
                    return self.reply(200, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList",
                                            "metadata": {"resourceVersion": str(state.version)},
                                            "items": list(state.slices.values())})
                if name not in state.slices:
                    return self.fail(404, "NotFound", not_found)
                return self.reply(200, state.slices[name])
        if self.command == "DELETE":
            with state.lock:
                if name is None or name not in state.slices:
                    return self.fail(404, "NotFound", not_found)
                gone = state.slices.pop(name)
                return self.reply(200, gone)
        if self.command == "POST":
            if name is not None:
                return self.fail(405, "MethodNotAllowed", "POST to a collection only")
            obj = self.read_body()
            validate_slice(obj)
            with state.lock:
                new_name = obj["metadata"]["name"]
                if new_name in state.slices:
                    return self.fail(409, "AlreadyExists", 'resourceslices.resource.k8s.io "%s" already exists' % new_name)
                if obj["metadata"].get("resourceVersion"):
                    raise Invalid("metadata.resourceVersion: must be unset to create an object")
                stored = self.stored(obj, None)
                state.slices[new_name] = stored
                return self.reply(201, stored)
        if self.command == "PUT":
            if name is None:
                return self.fail(405, "MethodNotAllowed", "PUT to an object only")
            obj = self.read_body()
            validate_slice(obj, name)
            with state.lock:
                old = state.slices.get(name)
                if old is None:
                    return self.fail(404, "NotFound", not_found)
                if state.conflicts > 0:  # another writer got there first
                    state.conflicts -= 1
                    old["metadata"]["resourceVersion"] = state.next_version()
                rv = obj["metadata"].get("resourceVersion")
                if rv and rv != old["metadata"]["resourceVersion"]:
                    return self.fail(409, "Conflict", 'Operation cannot be fulfilled on resourceslices.resource.k8s.io '
                                     '"%s": the object has been modified; please apply your changes to the latest '
                                     'version and try again' % name)
                for field in ("driver", "nodeName"):
                    if obj["spec"].get(field) != old["spec"].get(field):
                        raise Invalid("spec.%s: field is immutable" % field)
                if obj["spec"]["pool"]["name"] != old["spec"]["pool"]["name"]:
                    raise Invalid("spec.pool.name: field is immutable")
                stored = self.stored(obj, old)
                state.slices[name] = stored
                return self.reply(200, stored)
        self.fail(405, "MethodNotAllowed", "method not allowed")

    def stored(self, obj, old):
        """What the server keeps: server-set metadata, canonical quantities, no empty devices list."""
        state = self.server.state
        spec = json.loads(json.dumps(obj["spec"]))
        for dev in spec.get("devices", []):
            for cap in dev.get("capacity", {}).values():
                cap["value"] = canonical_quantity(cap["value"])
        if not spec.get("devices"):
            spec.pop("devices", None)  # omitempty
        meta = {"name": obj["metadata"]["name"], "resourceVersion": state.next_version()}
        if "ownerReferences" in obj["metadata"]:  # (kept as written, as labels would be)
            meta["ownerReferences"] = obj["metadata"]["ownerReferences"]
        if old is None:
            meta.update(uid=str(uuid.uuid4()), generation=1,
                        creationTimestamp=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
        else:
            meta.update(uid=old["metadata"]["uid"], creationTimestamp=old["metadata"]["creationTimestamp"],
                        generation=old["metadata"]["generation"] + (spec != old["spec"]))
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": meta, "spec": spec}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--token", help="require Authorization: Bearer TOKEN")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--claims", help="JSON file of ResourceClaims, re-read per request")
    args = ap.parse_args()
    if bool(args.tls_cert) != bool(args.tls_key):
        ap.error("--tls-cert and --tls-key go together")

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.state = State(args.claims)
    server.token = args.token
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)

    def stop(signum, frame):
        # shutdown() waits for serve_forever, which runs in this very thread: ask from another one.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("listening on %d" % server.server_address[1], flush=True)
    server.serve_forever(poll_interval=0.1)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
