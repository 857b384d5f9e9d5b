// SPDX-License-Identifier: Apache-2.0
// Runs one of the built programs (sdp-cat, sdp-perf) for the tools' tests:
// its exit status and output, with a time limit.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace sdptest {

struct Run {
    int exit_code = -1;
    std::string output;  // stdout, and stderr unless left out
};

// Runs `cmd` through the shell (stdin from /dev/null, at most 20 s) and
// collects its output: stdout and stderr, or only stdout with
// `with_stderr` false (for output that is parsed).
inline Run run(const std::string& cmd, bool with_stderr = true) {
    Run r;
    const std::string full =
        "timeout 20 " + cmd + " </dev/null " + (with_stderr ? "2>&1" : "2>/dev/null");
    FILE* p = ::popen(full.c_str(), "r");
    if (p == nullptr) {
        return r;
    }
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) {
        r.output.append(buf, n);
    }
    const int st = ::pclose(p);
    r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

}  // namespace sdptest
