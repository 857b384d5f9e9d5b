// SPDX-License-Identifier: Apache-2.0
// A real sdp-pmd on a free loopback UDP port for the SDP API tests (blocking
// and async): start() writes the YAML with {PORT} replaced and waits until
// the daemon is ready (pmtest::start_pmd); the daemon is stopped after the
// test. Needs SDPPM_PMD_BIN (the target's compile definition).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "integration/daemon/harness.hpp"

namespace sdptest {

inline std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (auto pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
        s.replace(pos, from.size(), to);
    }
    return s;
}

class PmdFixture : public ::testing::Test {
  protected:
    void SetUp() override { ASSERT_TRUE(dir_.ok()); }
    void TearDown() override {
        if (daemon_ && daemon_->running()) {
            daemon_->signal(SIGTERM);
            daemon_->wait_exit(std::chrono::milliseconds(5000));
        }
    }
    std::string log() const { return pmtest::read_file(dir_.path() / "pmd.err"); }
    // {PORT} in `yaml` becomes the daemon's UDP port (port_).
    void start(const std::string& yaml) {
        daemon_ = pmtest::start_pmd(
            SDPPM_PMD_BIN, dir_.path(),
            [&](std::uint16_t port) { return replace_all(yaml, "{PORT}", std::to_string(port)); },
            port_);
        ASSERT_TRUE(daemon_) << "sdp-pmd did not start: " << log();
    }

    pmtest::TempDir dir_;
    std::uint16_t port_ = 0;
    std::unique_ptr<pmtest::Process> daemon_;
};

}  // namespace sdptest
