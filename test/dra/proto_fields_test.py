#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""gpuos's own .proto files (src/dra/proto) against the upstream facts recorded in
src/dra/proto/upstream_fields.json: the same package, the same messages with the same fields (name,
number, type, label), the same enum values and the same RPCs. Any difference fails, named.

Usage: proto_fields_test.py PROTO_DIR [TABLE]   (TABLE defaults to PROTO_DIR/upstream_fields.json)
The parser understands the proto3 that these files use (messages, nested enums and messages, maps,
repeated/optional labels, services), and refuses anything else, so that a construct it does not
know cannot slip past the comparison.
"""
import json
import os
import re
import sys

TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|"(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_.]*|\d+|[{}()<>;=,\[\]]', re.S)


def tokens(text):
    out, at = [], 0
    while at < len(text):
        m = TOKEN.match(text, at)
        if not m:
            raise ValueError("unexpected text at offset %d: %r" % (at, text[at:at + 20]))
        t = m.group(0)
        at = m.end()
        if not (t.isspace() or t.startswith("//") or t.startswith("/*")):
            out.append(t)
    return out


class Parser:
    def __init__(self, text):
        self.t = tokens(text)
        self.i = 0
        self.package = ""
        self.messages = {}   # qualified name -> [[name, number, type, label]]
        self.enums = {}      # qualified name -> [[name, number]]
        self.services = {}   # name -> {rpc: [request, response]}
        self.field_types = []  # (message, field index, raw type, scope) resolved at the end

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self, want=None):
        if self.i >= len(self.t):
            raise ValueError("unexpected end of file" + (" (wanted %r)" % want if want else ""))
        t = self.t[self.i]
        if want is not None and t != want:
            raise ValueError("expected %r, found %r (token %d)" % (want, t, self.i))
        self.i += 1
        return t

    def skip_options(self):  # [ ... ] after a field
        if self.peek() == "[":
            while self.take() != "]":
                pass

    def parse(self):
        while self.peek() is not None:
            t = self.take()
            if t == "syntax":
                self.take("=")
                if self.take() != '"proto3"':
                    raise ValueError("not proto3")
                self.take(";")
            elif t == "package":
                self.package = self.take()
                self.take(";")
            elif t == "option":
                while self.take() != ";":
                    pass
            elif t == "import":
                self.take()
                self.take(";")
            elif t == "message":
                self.message("")
            elif t == "enum":
                self.enum("")
            elif t == "service":
                self.service()
            else:
                raise ValueError("unexpected %r at the top level" % t)
        for msg, idx, raw, scope in self.field_types:
            self.messages[msg][idx][2] = self.resolve(raw, scope)
        return self

    def resolve(self, raw, scope):
        if raw.startswith("map<"):
            k, v = raw[4:-1].split(", ")
            return "map<%s, %s>" % (k, self.resolve(v, scope))
        # Innermost scope first, as protoc resolves names.
        parts = scope.split(".") if scope else []
        for n in range(len(parts), -1, -1):
            name = ".".join(parts[:n] + [raw])
            if name in self.messages or name in self.enums:
                return name
        return raw  # a scalar type

    def message(self, outer):
        name = (outer + "." if outer else "") + self.take()
        self.messages[name] = []
        self.take("{")
        while self.peek() != "}":
            t = self.peek()
            if t == "message":
                self.take()
                self.message(name)
            elif t == "enum":
                self.take()
                self.enum(name)
            elif t in ("reserved", "oneof", "extensions", "extend", "group"):
                raise ValueError("%s in message %s: not understood by this test" % (t, name))
            else:
                self.field(name)
        self.take("}")

    def field(self, msg):
        label = ""
        if self.peek() in ("repeated", "optional"):
            label = self.take()
        if self.peek() == "map":
            self.take()
            self.take("<")
            k = self.take()
            self.take(",")
            v = self.take()
            self.take(">")
            raw = "map<%s, %s>" % (k, v)
        else:
            raw = self.take()
        fname = self.take()
        self.take("=")
        number = int(self.take())
        self.skip_options()
        self.take(";")
        self.messages[msg].append([fname, number, raw, label])
        self.field_types.append((msg, len(self.messages[msg]) - 1, raw, msg))

    def enum(self, outer):
        name = (outer + "." if outer else "") + self.take()
        self.enums[name] = []
        self.take("{")
        while self.peek() != "}":
            vname = self.take()
            self.take("=")
            self.enums[name].append([vname, int(self.take())])
            self.skip_options()
            self.take(";")
        self.take("}")

    def service(self):
        name = self.take()
        rpcs = self.services.setdefault(name, {})
        self.take("{")
        while self.peek() != "}":
            self.take("rpc")
            rpc = self.take()
            self.take("(")
            if self.peek() == "stream":
                raise ValueError("streaming RPC %s.%s: not understood by this test" % (name, rpc))
            req = self.take()
            self.take(")")
            self.take("returns")
            self.take("(")
            if self.peek() == "stream":
                raise ValueError("streaming RPC %s.%s: not understood by this test" % (name, rpc))
            resp = self.take()
            self.take(")")
            if self.peek() == "{":
                self.take("{")
                self.take("}")
            else:
                self.take(";")
            rpcs[rpc] = [req, resp]
        self.take("}")


def compare(fname, got, want):
    """Differences between a parsed file and its table entry, as sentences."""
    errs = []
    where = "%s (upstream %s %s@%s)" % (fname, want["source"]["repository"], want["source"]["path"],
                                       want["source"].get("tag") or want["source"]["commit"][:12])
    if got.package != want["package"]:
        errs.append("%s: package %r, upstream %r" % (where, got.package, want["package"]))
    for kind, mine, theirs in (("message", got.messages, want["messages"]), ("enum", got.enums, want["enums"])):
        for name in sorted(set(mine) | set(theirs)):
            if name not in theirs:
                errs.append("%s: %s %s is not in the upstream table" % (where, kind, name))
                continue
            if name not in mine:
                errs.append("%s: %s %s is missing (upstream has it)" % (where, kind, name))
                continue
            a = {f[0]: f for f in mine[name]}
            b = {f[0]: f for f in theirs[name]}
            for f in sorted(set(a) | set(b)):
                if f not in b:
                    errs.append("%s: %s.%s is not upstream's" % (where, name, f))
                elif f not in a:
                    errs.append("%s: %s.%s is missing (upstream: %s)" % (where, name, f, b[f][1:]))
                elif list(a[f]) != list(b[f]):
                    errs.append("%s: %s.%s is %s, upstream %s" % (where, name, f, a[f][1:], b[f][1:]))
            numbers = [f[1] for f in mine[name]]
            if len(numbers) != len(set(numbers)):
                errs.append("%s: %s uses a number twice: %s" % (where, name, numbers))
    for svc in sorted(set(got.services) | set(want["services"])):
        mine, theirs = got.services.get(svc), want["services"].get(svc)
        if mine != theirs:
            errs.append("%s: service %s is %s, upstream %s" % (where, svc, mine, theirs))
    return errs


def main():
    proto_dir = sys.argv[1]
    table_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(proto_dir, "upstream_fields.json")
    with open(table_path) as f:
        table = json.load(f)["files"]
    errs = []
    ours = sorted(p for p in os.listdir(proto_dir) if p.endswith(".proto"))
    for p in sorted(set(ours) | set(table)):
        if p not in table:
            errs.append("%s: no upstream entry in %s" % (p, table_path))
            continue
        if p not in ours:
            errs.append("%s: in %s but not in %s" % (p, table_path, proto_dir))
            continue
        with open(os.path.join(proto_dir, p)) as f:
            try:
                parsed = Parser(f.read()).parse()
            except ValueError as e:
                errs.append("%s: cannot parse: %s" % (p, e))
                continue
        errs += compare(p, parsed, table[p])
    for e in errs:
        print("MISMATCH " + e)
    if errs:
        return 1
    print("%d proto files match their upstream table" % len(ours))
    return 0


if __name__ == "__main__":
    sys.exit(main())
