#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deb_package.sh BUILD_DIR VERSION CMAKE CPACK [DEBIAN_REVISION]
# Builds the Debian packages from BUILD_DIR with `cpack -G DEB` into a
# scratch directory, lints them with lintian, unpacks them with dpkg-deb -x
# into a staging root (never installs them) and checks what is inside: the
# staged programs run, the staged units verify against the staged files, the
# shipped configuration validates, and a program builds against the staged
# -dev package with pkg-config and with find_package(pmclient).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

build=$(cd "$1" && pwd)
version=$2
cmake=$3
cpack=$4
debversion=$version-${5:-1}

command -v dpkg-deb >/dev/null || skip "dpkg-deb is not installed"
[[ -x $build/bin/sdp-pmd ]] || fail "$build/bin/sdp-pmd is missing: build the project first"
[[ -f $build/CPackConfig.cmake ]] || fail "$build/CPackConfig.cmake is missing"

make_tmp
skipped=()

# --- build -------------------------------------------------------------------
(cd "$build" && "$cpack" -G DEB -B "$TMP/out" --config "$build/CPackConfig.cmake") \
    > "$TMP/cpack.log" 2>&1 || { cat "$TMP/cpack.log" >&2; fail "cpack -G DEB failed"; }
debs=()
for pkg in sdp-pmd libpmclient1 libpmclient-dev sdp-tools; do
    deb=$(ls "$TMP/out/${pkg}_${debversion}_"*.deb 2>/dev/null | head -n1 || true)
    [[ -n $deb ]] || { ls "$TMP/out" >&2; fail "no ${pkg}_${debversion} package"; }
    debs+=("$deb")
    echo "built $(basename "$deb"): $(dpkg-deb -f "$deb" Depends)"
done

# --- lintian -----------------------------------------------------------------
# Warnings we keep, and why:
#   initial-upload-closes-no-bugs    the packages are not uploaded to Debian
#   maintscript-calls-ldconfig       CPack's generated libpmclient1 postinst/postrm
#                                    call ldconfig; the dpkg trigger is there too
#   pkg-config-unavailable-for-cross-compilation
#                                    only when the tree was configured with a
#                                    prefix other than /usr (libdir lib, not the
#                                    multiarch one); release builds use /usr
allowed='initial-upload-closes-no-bugs|maintscript-calls-ldconfig|pkg-config-unavailable-for-cross-compilation'
if command -v lintian >/dev/null; then
    lintian --tag-display-limit 0 "${debs[@]}" > "$TMP/lintian.txt" 2>&1 || true
    grep -v -e 'running with root privileges' "$TMP/lintian.txt" || true
    errors=$(grep -E '^E: ' "$TMP/lintian.txt" || true)
    warnings=$(grep -E '^W: ' "$TMP/lintian.txt" | grep -v -E "^W: [^ ]+ ($allowed)( |$)" || true)
    if grep -q -E '^(internal error|.*[Ee]rror:.*lintian)' "$TMP/lintian.txt"; then
        fail "lintian did not run"
    fi
    [[ -z $errors ]] || fail "lintian errors:"$'\n'"$errors"
    [[ -z $warnings ]] || fail "lintian warnings not on the allowed list:"$'\n'"$warnings"
    echo "lintian: no errors, no unexpected warnings"
else
    skipped+=("lintian is not installed")
fi

# --- contents ----------------------------------------------------------------
stage=$TMP/stage
mkdir -p "$stage" "$TMP/control"
for deb in "${debs[@]}"; do
    dpkg-deb -x "$deb" "$stage"
    dpkg-deb -e "$deb" "$TMP/control/$(dpkg-deb -f "$deb" Package)"
    [[ $(dpkg-deb -f "$deb" Version) == "$debversion" ]] || fail "$deb: version is not $debversion"
done
need() {
    local f
    for f in "$@"; do
        [[ -e $stage$f || -L $stage$f ]] || fail "missing from the packages: $f"
    done
}
need /usr/bin/sdp-cat /usr/bin/sdp-perf /usr/share/man/man1/sdp-cat.1.gz
need /usr/sbin/sdp-pmd /etc/sdp-pmd/sdp-pmd.yaml \
     /usr/lib/systemd/system/sdp-pmd.service /usr/lib/systemd/system/sdp-pmd.socket \
     /usr/lib/sysusers.d/sdp-pmd.conf /usr/lib/tmpfiles.d/sdp-pmd.conf \
     /usr/share/man/man8/sdp-pmd.8.gz /usr/share/man/man5/sdp-pmd.yaml.5.gz \
     /usr/share/man/man7/sdp-pm.7.gz /usr/share/man/man5/pmclient.yaml.5.gz \
     /usr/share/man/man3/libpmclient.3.gz /usr/include/pmclient/pmclient.h
for pkg in sdp-pmd sdp-tools libpmclient1 libpmclient-dev; do
    need /usr/share/doc/$pkg/copyright /usr/share/doc/$pkg/changelog.Debian.gz
done
# Nothing else rides along in sdp-pmd (an install() rule without a COMPONENT
# lands there, see packaging/CMakeLists.txt).
stray=$(dpkg-deb -c "${debs[0]}" | awk '$1 !~ /^d/ { print $6 }' | sed 's|^\.||' \
    | grep -v -E '^/(etc/sdp-pmd/|usr/sbin/|usr/lib/systemd/system/|usr/lib/(sysusers|tmpfiles)\.d/|usr/share/man/man[578]/|usr/share/doc/sdp-pmd/|usr/share/bash-completion/completions/sdp-pmctl$)' || true)
[[ -z $stray ]] || fail "unexpected files in the sdp-pmd package:"$'\n'"$stray"
grep -qx /etc/sdp-pmd/sdp-pmd.yaml "$TMP/control/sdp-pmd/conffiles" \
    || fail "/etc/sdp-pmd/sdp-pmd.yaml is not a conffile"
for script in postinst prerm postrm; do
    sh -n "$TMP/control/sdp-pmd/$script" || fail "sdp-pmd $script: syntax error"
done
grep -q 'systemd-sysusers' "$TMP/control/sdp-pmd/postinst" || fail "postinst does not create the user"
if grep -v -E '^[[:space:]]*#' "$TMP/control/sdp-pmd/postinst" \
        | grep -E -q 'systemctl +(--system +)?(start|enable|restart)|deb-systemd-invoke +(start|restart)'; then
    fail "postinst starts or enables something"
fi
grep -qx 'activate-noawait ldconfig' "$TMP/control/libpmclient1/triggers" \
    || fail "libpmclient1 has no ldconfig trigger"
echo "contents: OK"

# --- the staged programs -----------------------------------------------------
out=$("$stage/usr/sbin/sdp-pmd" --version)
[[ $out == "sdp-pmd $version" ]] || fail "staged sdp-pmd --version says '$out'"
echo "staged sdp-pmd --version: $out"
"$stage/usr/sbin/sdp-pmd" --config "$stage/etc/sdp-pmd/sdp-pmd.yaml" --check-config \
    || fail "the shipped /etc/sdp-pmd/sdp-pmd.yaml does not validate"
so=$(find "$stage/usr/lib" -name 'libpmclient.so.1' | head -n1)
[[ -n $so ]] || fail "no libpmclient.so.1 in libpmclient1"
libdir=$(dirname "$so")
# sdp-pmctl and the SDP tools use libpmclient1 (a dependency of their packages).
out=$(LD_LIBRARY_PATH=$libdir "$stage/usr/sbin/sdp-pmctl" --version) \
    || fail "staged sdp-pmctl does not run"
echo "staged sdp-pmctl --version: $out"
[[ $out == *"$version"* ]] || fail "staged sdp-pmctl --version says '$out'"
for tool in sdp-cat sdp-perf; do
    LD_LIBRARY_PATH=$libdir "$stage/usr/bin/$tool" --help >/dev/null 2>&1 || true
    LD_LIBRARY_PATH=$libdir ldd "$stage/usr/bin/$tool" | grep -q 'not found' \
        && fail "staged $tool misses a library"
done
[[ -L $libdir/libpmclient.so ]] || fail "no libpmclient.so link in libpmclient-dev"
[[ $(readelf -d "$so" | sed -n 's/.*SONAME.*\[\(.*\)\].*/\1/p') == libpmclient.so.1 ]] \
    || fail "soname of libpmclient is not libpmclient.so.1"
if [[ -e $stage/usr/bin/pm-resolve ]]; then
    LD_LIBRARY_PATH=$libdir "$stage/usr/bin/pm-resolve" --help 2>/dev/null \
        || fail "staged pm-resolve --help failed"
    echo "staged pm-resolve runs against the staged library"
fi

# --- the staged units, against the staged binary and man pages ---------------
if command -v systemd-analyze >/dev/null; then
    populate_root "$stage"
    verify_units "$stage" "$stage/usr/share/man" sdp-pmd.service sdp-pmd.socket
else
    skipped+=("systemd-analyze is not installed")
fi

# --- building against libpmclient-dev ----------------------------------------
cat > "$TMP/use.c" <<'C'
#include <pmclient/pmclient.h>
#include <stdio.h>
int main(void) {
    printf("%s %d\n", pmc_version(), pmc_abi_version());
    return pmc_abi_version() == PMC_ABI_VERSION ? 0 : 1;
}
C
if command -v pkg-config >/dev/null && command -v cc >/dev/null; then
    pcdir=$(dirname "$(find "$stage/usr" -name pmclient.pc | head -n1)")
    export PKG_CONFIG_PATH=$pcdir PKG_CONFIG_LIBDIR=$pcdir
    prefix=$(pkg-config --variable=prefix pmclient)
    if [[ $prefix == /usr ]]; then
        export PKG_CONFIG_SYSROOT_DIR=$stage
    elif [[ $(realpath -m "$prefix") != "$(realpath "$stage")/usr" ]]; then
        fail "pmclient.pc has prefix=$prefix: it must be /usr or relative to \${pcfiledir}"
    fi
    # shellcheck disable=SC2046
    cc -o "$TMP/use-pc" "$TMP/use.c" $(pkg-config --cflags --libs pmclient) \
        || fail "cannot build against libpmclient-dev with pkg-config"
    out=$(LD_LIBRARY_PATH=$libdir "$TMP/use-pc") || fail "the pkg-config build does not run"
    [[ $out == "$version 1" ]] || fail "pmc_version/pmc_abi_version say '$out'"
    unset PKG_CONFIG_PATH PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR
    echo "pkg-config build against the staged -dev package: $out"
else
    skipped+=("pkg-config or cc is not installed")
fi

mkdir -p "$TMP/cmake-use"
cat > "$TMP/cmake-use/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(use-pmclient C CXX)
find_package(pmclient REQUIRED)
add_executable(use-cmake ${CMAKE_CURRENT_SOURCE_DIR}/../use.c)
target_link_libraries(use-cmake PRIVATE pmclient::pmclient)
CM
"$cmake" -S "$TMP/cmake-use" -B "$TMP/cmake-use/build" -DCMAKE_PREFIX_PATH="$stage/usr" \
    -DCMAKE_FIND_ROOT_PATH="$stage" > "$TMP/cmake-use.log" 2>&1 \
    && "$cmake" --build "$TMP/cmake-use/build" >> "$TMP/cmake-use.log" 2>&1 \
    || { cat "$TMP/cmake-use.log" >&2; fail "cannot build against libpmclient-dev with find_package"; }
out=$(LD_LIBRARY_PATH=$libdir "$TMP/cmake-use/build/use-cmake") || fail "the CMake build does not run"
echo "find_package(pmclient) build against the staged -dev package: $out"

if [[ ${#skipped[@]} -gt 0 ]]; then
    skip "$(IFS=';'; echo "${skipped[*]}")"
fi
echo "PASSED"
