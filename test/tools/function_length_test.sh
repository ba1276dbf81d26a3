#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/check_function_length.py must pass on the folders given with the limit given (issue #56:
# src/policies, 100 lines), and in a made-up tree must name a long function and only that: braces
# in comments, string and character literals, namespaces, classes, member initializers and an
# #else branch are no function bodies; the limit and the file endings are parameters.
# Usage: function_length_test.sh PYTHON CHECKER LIMIT DIR...
set -euo pipefail
py=$1; checker=$2; limit=$3; shift 3
"$py" "$checker" --limit "$limit" "$@"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# A function of $2 lines in all (header and closing brace on lines of their own) named $1.
body() { echo "int $1(int x) {"; for ((i = 0; i < $2 - 2; ++i)); do echo "  x += $i;"; done; echo "  return x; }"; }

mkdir -p "$tmp/src/a/b"
{
  echo 'namespace n {'
  echo 'namespace {'
  echo 'struct S : Base {'
  echo '  S() : a_{1}, b_(2) { x = 0; }'
  echo '  int a_, b_;'
  body method 20 | sed 's/^/  /'
  echo '};'
  echo 'const int kTable[] = {1, 2, 3};'
  echo 'enum class E { kA, kB };'
  echo '}  // namespace'
  echo 'template <class T> T twice(T t) { return t + t; }'
  echo 'extern "C" {'
  echo 'int c_api(void) { return 1; }'
  echo '}'
  echo '// a { in a comment, /* and } in a block comment */'
  echo 'const char* kText = "{ {";'
  echo "const char kBrace = '{';"
  echo 'const char* kRaw = R"x({ ")" {)x";'
  echo "const long kBig = 1'000'000;"
  echo '#if defined(ONE)'
  echo 'int either(int x) {'
  echo '#else'
  echo 'int either(long x) {'
  echo '#endif'
  echo '  return x; }'
  body short 100
  echo '}  // namespace n'
} > "$tmp/src/a/ok.cc"
"$py" "$checker" "$tmp/src" || fail "a tree with no function over 100 lines failed"
lengths=$("$py" "$checker" --list "$tmp/src")
grep -q '^  100  .*ok.cc:[0-9]*: short$' <<<"$lengths" || fail "short not measured as 100 lines: $lengths"
grep -q '^   20  .*: method$' <<<"$lengths" || fail "a method in a class not measured: $lengths"
grep -q '^    1  .*: S$' <<<"$lengths" || fail "the constructor's initializer braces taken for its body: $lengths"
grep -q ': either$' <<<"$lengths" || fail "the function under #if not found: $lengths"
[[ $(grep -c . <<<"$lengths") == 6 ]] || fail "not 6 functions (S, method, twice, c_api, either, short): $lengths"

body long 101 > "$tmp/src/a/b/long.cc"
body also_long 150 > "$tmp/src/a/b/long.h"
if out=$("$py" "$checker" "$tmp/src" 2>/dev/null); then fail "a function of 101 lines passed"; fi
grep -q 'long.cc:1: long is 101 lines (limit 100)' <<<"$out" || fail "not named: $out"
grep -q 'also_long' <<<"$out" && fail ".h files scanned without --ext: $out"
out=$("$py" "$checker" --ext .cc,.h --limit 200 "$tmp/src") || fail "--limit 200 refused 150 lines: $out"
if out=$("$py" "$checker" --ext .cc,.h --limit 120 "$tmp/src/a/b" 2>/dev/null); then fail "--ext .h missed also_long"; fi
grep -q 'also_long is 150 lines (limit 120)' <<<"$out" || fail "not named: $out"

echo 'int broken() { if (1) {' > "$tmp/src/a/broken.cc"
if out=$("$py" "$checker" --limit 1000 "$tmp/src" 2>/dev/null); then fail "unbalanced braces passed"; fi
grep -q 'broken.cc: cannot be scanned' <<<"$out" || fail "not reported: $out"
echo "function length: ok"
