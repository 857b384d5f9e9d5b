#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The layering check: the sans-I/O cores never include Asio, socket or thread
# headers, never include a header of an I/O layer of this project, never read
# a clock and never read the environment (DESIGN.md, "Sans-I/O protocol
# cores"). Drivers around them do all of that.
#
# usage: scripts/check-layering.sh [ROOT]     (ROOT: the source tree, default ..)
# Exits 0 when every core is clean, 1 with one line per violation
# (file:line: what), 2 when a listed core path does not exist (a renamed
# folder must be renamed here too, never silently skipped).
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"

# The cores: folders (every .hpp/.cpp/.h/.c in them) and single files.
cores=(
  daemon/core
  libpmclient/src/machine.hpp
  libpmclient/src/machine.cpp
  libpmclient/src/cache.hpp
  libpmclient/src/cache.cpp
  libpmclient/src/message.cpp
  libpmclient/src/pm_time.cpp
  libpmclient/src/address.cpp
  libpmclient/include/pmclient/message.hpp
  libpmclient/src/connect_core/connect_procedure.hpp
  libpmclient/src/connect_core/connect_procedure.cpp
  sdp/bytes
  sdp/wire
  sdp/engine
  sdp/iwarp
  sdp/soft
  sdp/preload/rules.hpp
  sdp/preload/rules.cpp
)

# What a core must not contain: an extended regex and the reason. (arpa/inet.h
# is allowed: inet_pton / inet_ntop convert text, they do no I/O.)
rules=(
  '#include[[:space:]]*[<"]boost/asio|includes Asio'
  '#include[[:space:]]*[<"](sys/socket|netinet/[a-z_]+|sys/epoll|poll|sys/select|netdb|sys/un)\.h[>"]|includes a socket header'
  '#include[[:space:]]*<(thread|future|condition_variable)>|includes a thread header'
  '#include[[:space:]]*"(daemon/)?io/|includes a daemon I/O header'
  '#include[[:space:]]*"sdp/(io|api|rdma|tools)/|includes an SDP driver header'
  '(steady_clock|system_clock|high_resolution_clock|utc_clock|file_clock)::now|reads a clock'
  '(^|[^_[:alnum:]])(clock_gettime|gettimeofday|time)[[:space:]]*\(|reads a clock'
  '(^|[^_[:alnum:]])(secure_)?getenv[[:space:]]*\(|reads the environment'
  '(^|[^_[:alnum:]])environ([^_[:alnum:]]|$)|reads the environment'
  '(^|[^_[:alnum:]])::(socket|bind|connect|sendto|recvfrom|sendmsg|recvmsg|send|recv|poll|epoll_wait)[[:space:]]*\(|calls a socket function'
)

status=0
files=()
for c in "${cores[@]}"; do
  if [[ -d $c ]]; then
    while IFS= read -r f; do files+=("$f"); done < <(find "$c" -type f \( -name '*.hpp' -o -name '*.cpp' -o -name '*.h' -o -name '*.c' \) | sort)
  elif [[ -f $c ]]; then
    files+=("$c")
  else
    echo "check-layering: core path $c does not exist (renamed? update scripts/check-layering.sh)" >&2
    exit 2
  fi
done

if [[ ${#files[@]} -eq 0 ]]; then
  echo "check-layering: no core files found under $root" >&2
  exit 2
fi

for rule in "${rules[@]}"; do
  re="${rule%|*}"
  why="${rule##*|}"
  # Comments are not code: drop // comments before matching. One awk per
  # rule over every file (a process per file and rule made the check slow).
  while IFS= read -r hit; do
    [[ -z $hit ]] && continue
    echo "$hit: $why"
    status=1
  done < <(RE="$re" awk '{ line = $0; sub(/\/\/.*$/, "", line); if (line ~ ENVIRON["RE"]) print FILENAME ":" FNR }' "${files[@]}")
done

if [[ $status -eq 0 ]]; then
  echo "check-layering: ${#files[@]} core files clean"
fi
exit $status
