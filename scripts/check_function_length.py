#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that no function in a source tree is longer than a limit (issue #56: none in src/policies
over 100 lines).

A function's length is the lines from its opening brace's line to its closing brace's line, both
counted. The scanner is a brace-depth count over the text with comments, string and character
literals and preprocessor lines blanked out (and the #else branches of conditionals); a brace at namespace or class scope opens a function
body when its header (the text since the last ';', '{' or '}') has a parenthesis, and is not a
namespace, class, struct, union, enum or extern "C" block. Lambdas and local classes count as part
of the function that holds them; braces of a constructor's member initializers (a_{1}) are not
bodies. Exit status 1 and one line per long function ("FILE:LINE: NAME is N lines (limit L)"), or
per file whose braces do not balance (it cannot be measured).

Usage: check_function_length.py [--limit N] [--ext .cc,.h] [--list] [DIR ...]
       (default: --limit 100, --ext .cc, the src/policies next to this script's folder; --list
       prints every function's length instead, longest first)
"""
import argparse
import os
import re
import signal
import sys

SCOPE = re.compile(r"^(?:\[\[[^\]]*\]\]\s*)*(?:inline\s+|export\s+|typedef\s+)?(?:namespace|class|struct|union|enum)\b")
EXTERN_BLOCK = re.compile(r'^extern\s*"\s*"\s*$')
TEMPLATE_PREFIX = re.compile(r"^template\s*<")
NAME = re.compile(r"((?:[A-Za-z_~]\w*\s*::\s*)*(?:operator\s*[^\s(]+|~?[A-Za-z_]\w*))\s*(?:<[^()]*>)?\s*$")


def first_branches(text):
    """The text with the #else and #elif branches of each preprocessor conditional blanked (both
    branches of one function's header would open its body twice); newlines kept."""
    lines = text.split("\n")
    depth = 0  # open conditionals
    skip_from = None  # the depth whose #else branch is being skipped
    for k, line in enumerate(lines):
        directive = re.match(r"\s*#\s*(\w+)", line)
        word = directive.group(1) if directive else ""
        if word in ("if", "ifdef", "ifndef"):
            depth += 1
        elif word in ("else", "elif") and skip_from is None:
            skip_from = depth
        elif word == "endif":
            if skip_from == depth:
                skip_from = None
            depth -= 1
        if skip_from is not None and not directive:
            lines[k] = ""
    return "\n".join(lines)


def blank(text):
    """The text with comments, string/char literals and preprocessor lines replaced by spaces, and
    only the first branch of each preprocessor conditional (newlines kept, so offsets and line
    numbers stay those of the file)."""
    text = first_branches(text)
    out = list(text)
    i, n = 0, len(text)
    at_line_start = True

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if at_line_start and c in " \t":
            i += 1
            continue
        if at_line_start and c == "#":  # a preprocessor line, with its continuations
            j = i
            while j < n and not (text[j] == "\n" and text[j - 1] != "\\"):
                j += 1
            wipe(i, j)
            i = j
            continue
        at_line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
        elif c == '"':
            m = re.compile(r'R"([^(\s]{0,16})\(').match(text, i - 1) if i > 0 and text[i - 1] == "R" else None
            if m:  # a raw string: R"delim( ... )delim"
                end = text.find(")" + m.group(1) + '"', m.end())
                j = n if end < 0 else end + len(m.group(1)) + 2
            else:
                j = i + 1
                while j < n and text[j] != '"' and text[j] != "\n":
                    j += 2 if text[j] == "\\" else 1
                j = min(j + 1, n)
            wipe(i + 1, j - 1)  # keep the quotes: extern "C" stays recognisable
            i = j
        elif c == "'":
            # A digit separator (1'000) follows a number's digit; a character literal does not.
            k = i - 1
            while k >= 0 and (text[k].isalnum() or text[k] in "_.'"):
                k -= 1
            if k + 1 < i and text[k + 1].isdigit():
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != "'" and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            wipe(i + 1, j)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def strip_template_prefix(header):
    """'template <class T> void f(T)' -> 'void f(T)' (so the 'class' there is not a class)."""
    while TEMPLATE_PREFIX.match(header):
        depth, k = 0, header.index("<")
        for k in range(k, len(header)):
            if header[k] == "<":
                depth += 1
            elif header[k] == ">":
                depth -= 1
                if depth == 0:
                    break
        header = header[k + 1:].lstrip()
    return header


def function_name(header):
    """The name before the parameter list ('Foo::bar' in 'int Foo::bar(int x) const'); 'lambda'
    for a lambda at namespace scope."""
    op = re.search(r"((?:\w+\s*::\s*)*operator\s*(?:\(\)|[^\s(]+))\s*\(", header)
    if op:
        return re.sub(r"\s*::\s*", "::", re.sub(r"\s+", " ", op.group(1)))
    depth = 0
    for k, c in enumerate(header):
        if c == "(" and depth == 0:
            before = header[:k].rstrip()
            if before.endswith("]"):
                return "lambda"
            m = NAME.search(before)
            return re.sub(r"\s+", "", m.group(1)) if m else "?"
        if c in "<[":
            depth += 1
        elif c in ">]" and depth > 0:
            depth -= 1
    return "?"


def in_initializer_list(header):
    """A constructor's member initializers are being read: ') :' (not '::') at paren depth 0."""
    depth = 0
    for k, c in enumerate(header):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == ":" and depth == 0:
            prev = header[k - 1] if k > 0 else ""
            nxt = header[k + 1] if k + 1 < len(header) else ""
            if prev != ":" and nxt != ":" and ")" in header[:k]:
                return True
    return False


def functions(text):
    """(name, first line, last line) of each function body in a C++ source text."""
    clean = blank(text)
    found = []
    stack = []  # per open brace: 'scope', 'func', 'init' (a member initializer) or 'other'
    header_start = 0
    paren = 0
    func_open = None  # (name, line) of the function whose body is open
    line = 1
    for i, c in enumerate(clean):
        if c == "\n":
            line += 1
        elif c == "(":
            paren += 1
        elif c == ")":
            paren -= 1
        elif c == ";" and paren == 0 and all(k == "scope" for k in stack):
            header_start = i + 1
        elif c == "{":
            if not all(k == "scope" for k in stack) or paren > 0:
                stack.append("other")
                continue
            header = " ".join(clean[header_start:i].split())
            header = strip_template_prefix(header)
            if SCOPE.match(header) or EXTERN_BLOCK.match(header):  # (struct alignas(64) S: a scope too)
                stack.append("scope")
                header_start = i + 1
            elif "(" in header and in_initializer_list(header) and re.search(r"[\w>]$", header):
                stack.append("init")  # a_{1} in 'S() : a_{1} {'
            elif "(" in header:
                stack.append("func")
                func_open = (function_name(header), line)
            else:
                stack.append("other")  # an initializer at namespace scope: kTable = {...}
        elif c == "}":
            if not stack:
                raise ValueError(f"line {line}: a '}}' closes nothing")
            kind = stack.pop()
            if kind == "func" and func_open:
                found.append((func_open[0], func_open[1], line))
                func_open = None
            if kind != "init" and all(k == "scope" for k in stack):
                header_start = i + 1
    if stack:
        raise ValueError(f"{len(stack)} '{{' never closed")
    return found


def sources(dirs, exts):
    """The files under dirs whose names end with one of exts, in a stable order."""
    for top in dirs:
        for root, subdirs, files in os.walk(top):
            subdirs.sort()
            for name in sorted(files):
                if name.endswith(exts):
                    yield os.path.join(root, name)


def measure(dirs, exts):
    """(length, "FILE:LINE: NAME") of every function, and "FILE: why" for each file the scanner
    could not read (braces that do not balance)."""
    rows, unreadable = [], []
    for path in sources(dirs, exts):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        try:
            found = functions(text)
        except ValueError as e:
            unreadable.append(f"{path}: cannot be scanned ({e})")
            continue
        rows += [(last - first + 1, f"{path}:{first}: {name}") for name, first, last in found]
    return rows, unreadable


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.relpath(os.path.join(here, "..", "src", "policies"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=100, help="the most lines a function may have (default 100)")
    ap.add_argument("--ext", default=".cc", help="comma-separated file endings to scan (default .cc)")
    ap.add_argument("--list", action="store_true", help="print every function's length, longest first")
    ap.add_argument("dirs", nargs="*", default=[default], help="folders to scan (default src/policies)")
    args = ap.parse_args()
    exts = tuple(e if e.startswith(".") else "." + e for e in args.ext.split(",") if e)
    dirs = [os.path.normpath(d) for d in args.dirs]
    for d in dirs:
        if not os.path.isdir(d):
            print(f"check_function_length: {d}: not a directory", file=sys.stderr)
            return 2
    rows, unreadable = measure(dirs, exts)
    if args.list:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--list | head` is no error
        for length, where in sorted(rows, key=lambda r: (-r[0], r[1])):
            print(f"{length:5d}  {where}")
        return 0
    bad = [f"{where} is {length} lines (limit {args.limit})" for length, where in rows if length > args.limit]
    for line in bad + unreadable:
        print(line)
    if bad or unreadable:
        print(f"check_function_length: {len(bad)} function(s) over {args.limit} lines, {len(unreadable)} file(s) "
              f"unreadable; split long functions into named stages (see src/policies/budget/stages.h)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
