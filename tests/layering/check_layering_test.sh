#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tests scripts/check-layering.sh: the real tree is clean, and a copy of it
# with one violation of each kind planted in the cores fails naming each one.
# usage: check_layering_test.sh SOURCE_DIR
set -euo pipefail
src="$1"
check="$src/scripts/check-layering.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$check" "$src" || fail "the source tree breaks the layering (see above)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The cores as they are, then one planted file per rule.
(cd "$src" && git ls-files -z daemon/core libpmclient sdp/bytes sdp/wire sdp/engine sdp/iwarp sdp/soft sdp/preload/rules.hpp sdp/preload/rules.cpp 2>/dev/null ||
   find daemon/core libpmclient sdp/bytes sdp/wire sdp/engine sdp/iwarp sdp/soft sdp/preload/rules.hpp sdp/preload/rules.cpp -type f -print0) |
  (cd "$src" && xargs -0 cp --parents -t "$tmp")
"$check" "$tmp" >/dev/null || fail "a plain copy of the cores is not clean"

cat > "$tmp/sdp/engine/planted.cpp" <<'CPP'
#include <boost/asio/io_context.hpp>
#include <sys/socket.h>
#include <thread>
#include "sdp/io/channel.hpp"
auto t0 = std::chrono::steady_clock::now();
const char* e = std::getenv("HOME");
int s = ::socket(AF_INET, SOCK_STREAM, 0);
auto b = std::bind(f, 1);  // std::bind is not a socket call
// steady_clock::now() in a comment is not code
CPP
cat > "$tmp/daemon/core/planted.hpp" <<'CPP'
#include "io/worker.hpp"
long t1 = time(nullptr);
CPP
set +e
out=$("$check" "$tmp" 2>&1)
rc=$?
set -e
echo "$out"
[[ $rc -eq 1 ]] || fail "expected exit 1 on planted violations, got $rc"
for want in "sdp/engine/planted.cpp:1: includes Asio" \
            "sdp/engine/planted.cpp:2: includes a socket header" \
            "sdp/engine/planted.cpp:3: includes a thread header" \
            "sdp/engine/planted.cpp:4: includes an SDP driver header" \
            "sdp/engine/planted.cpp:5: reads a clock" \
            "sdp/engine/planted.cpp:6: reads the environment" \
            "sdp/engine/planted.cpp:7: calls a socket function" \
            "daemon/core/planted.hpp:1: includes a daemon I/O header" \
            "daemon/core/planted.hpp:2: reads a clock"; do
  grep -qxF "$want" <<<"$out" || fail "missing: $want"
done
n=$(grep -c '^sdp/engine/planted.cpp:8:\|^sdp/engine/planted.cpp:9:' <<<"$out" || true)
[[ $n -eq 0 ]] || fail "std::bind or a comment was reported"

rm -rf "$tmp/sdp/soft"
set +e
"$check" "$tmp" >/dev/null 2>&1
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "a missing core folder must exit 2, got $rc"
echo "check-layering: OK"
