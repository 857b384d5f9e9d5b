// SPDX-License-Identifier: Apache-2.0
// A real etcd cluster for integration tests: N members (1 or 3) of
// /usr/bin/etcd on 127.0.0.1 with free ports, data under a temporary
// directory, short raft timings. The constructor waits (bounded) until every
// member is healthy; members can be SIGKILLed and restarted; the destructor
// kills everything and removes the directory.
//
//   SDPPM_REQUIRE_ETCD();              // GTEST_SKIP when etcd is not installed
//   pmtest::EtcdCluster c(3);
//   ASSERT_TRUE(c.ok()) << c.error();
//   c.client_urls(); c.kill(0); c.restart(0); c.compact(rev);
//
// With `tls`, clients talk https to the members and must present a client
// certificate; the fixture makes a throwaway CA (openssl) whose files are
// ca_file(), client_cert_file(), client_key_file().
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "daemon/harness.hpp"

namespace pmtest {

inline constexpr const char* kEtcdBin = "/usr/bin/etcd";
inline constexpr const char* kEtcdctlBin = "/usr/bin/etcdctl";

// Skips the current test when etcd or etcdctl is not installed.
#define SDPPM_REQUIRE_ETCD()                                                                       \
    do {                                                                                           \
        if (::access(::pmtest::kEtcdBin, X_OK) != 0 || ::access(::pmtest::kEtcdctlBin, X_OK) != 0) \
            GTEST_SKIP() << ::pmtest::kEtcdBin << " or " << ::pmtest::kEtcdctlBin                  \
                         << " is not installed (Debian: etcd-server, etcd-client)";                \
    } while (0)

// `n` distinct TCP ports free on 127.0.0.1 a moment ago (all listened on at
// once, then released). Empty on failure.
inline std::vector<std::uint16_t> free_tcp_ports(std::size_t n) {
    std::vector<std::unique_ptr<TcpListener>> held;
    std::vector<std::uint16_t> ports;
    for (std::size_t i = 0; i < n; ++i) {
        held.push_back(std::make_unique<TcpListener>(*pm::Endpoint::parse("127.0.0.1:0")));
        if (!held.back()->ok()) {
            return {};
        }
        ports.push_back(held.back()->port());
    }
    return ports;
}

class EtcdCluster {
  public:
    explicit EtcdCluster(std::size_t members, bool tls = false) : tls_(tls) {
        if (dir_.path().empty()) {
            error_ = "cannot create a temporary directory";
            return;
        }
        if (tls_ && !make_certificates()) {
            return;
        }
        // A busy port (taken between probing and etcd's bind) fails the
        // start: try again with new ports.
        for (int attempt = 0; attempt < 3 && !start(members); ++attempt) {
            stop_all();
        }
    }
    ~EtcdCluster() { stop_all(); }
    EtcdCluster(const EtcdCluster&) = delete;
    EtcdCluster& operator=(const EtcdCluster&) = delete;

    bool ok() const { return error_.empty(); }
    const std::string& error() const { return error_; }
    std::size_t size() const { return members_.size(); }
    const fs::path& dir() const { return dir_.path(); }
    fs::path ca_file() const { return dir_.path() / "ca.crt"; }
    fs::path client_cert_file() const { return dir_.path() / "client.crt"; }
    fs::path client_key_file() const { return dir_.path() / "client.key"; }

    std::vector<std::string> client_urls() const {
        std::vector<std::string> urls;
        for (const auto& m : members_) {
            urls.push_back(m.client_url);
        }
        return urls;
    }

    // SIGKILL member i (and reap it).
    void kill(std::size_t i) { members_.at(i).process.reset(); }

    // Starts member i again on its data directory; true once it is healthy.
    bool restart(std::size_t i) {
        auto& m = members_.at(i);
        m.process.reset();
        launch(i);
        return wait_healthy({m.client_url}, 15000ms);
    }

    // `etcdctl compact rev` through the members that are running.
    bool compact(std::int64_t rev) {
        const auto r = etcdctl({"compact", std::to_string(rev)}, running_urls());
        return r.exit_code && *r.exit_code == 0;
    }

    // Runs etcdctl against `endpoints` (bounded).
    RunResult etcdctl(const std::vector<std::string>& args,
                      const std::vector<std::string>& endpoints,
                      std::chrono::milliseconds timeout = 5000ms) const {
        std::vector<std::string> argv{kEtcdctlBin, "--endpoints=" + join(endpoints, ","),
                                      "--dial-timeout=1s", "--command-timeout=2s"};
        if (tls_) {
            argv.push_back("--cacert=" + ca_file().string());
            argv.push_back("--cert=" + client_cert_file().string());
            argv.push_back("--key=" + client_key_file().string());
        }
        argv.insert(argv.end(), args.begin(), args.end());
        return run(argv, dir_.path(), timeout);
    }

  private:
    struct Member {
        std::string name;
        std::string client_url;
        std::string peer_url;
        std::unique_ptr<Process> process;
    };

    static std::string join(const std::vector<std::string>& v, const char* sep) {
        std::string out;
        for (const auto& s : v) {
            out += (out.empty() ? "" : sep) + s;
        }
        return out;
    }

    std::vector<std::string> running_urls() const {
        std::vector<std::string> urls;
        for (const auto& m : members_) {
            if (m.process && m.process->running()) {
                urls.push_back(m.client_url);
            }
        }
        return urls;
    }

    bool start(std::size_t n) {
        members_.clear();
        const auto ports = free_tcp_ports(2 * n);
        if (ports.empty()) {
            error_ = "no free TCP ports";
            return false;
        }
        std::random_device rd;
        token_ = "sdppm-test-" + std::to_string(rd());
        for (std::size_t i = 0; i < n; ++i) {
            Member m;
            m.name = "m" + std::to_string(i);
            m.client_url = std::string(tls_ ? "https" : "http") +
                           "://127.0.0.1:" + std::to_string(ports[2 * i]);
            m.peer_url = "http://127.0.0.1:" + std::to_string(ports[2 * i + 1]);
            initial_cluster_ += (i == 0 ? "" : ",") + m.name + "=" + m.peer_url;
            members_.push_back(std::move(m));
        }
        for (std::size_t i = 0; i < n; ++i) {
            launch(i);
        }
        if (!wait_healthy(client_urls(), 15000ms)) {
            error_ =
                "etcd did not become healthy within 15 s (logs in " + dir_.path().string() + ")";
            return false;
        }
        error_.clear();
        return true;
    }

    void launch(std::size_t i) {
        auto& m = members_[i];
        const fs::path d = dir_.path();
        std::vector<std::string> argv{kEtcdBin,
                                      "--name=" + m.name,
                                      "--data-dir=" + (d / (token_ + "-" + m.name)).string(),
                                      "--listen-client-urls=" + m.client_url,
                                      "--advertise-client-urls=" + m.client_url,
                                      "--listen-peer-urls=" + m.peer_url,
                                      "--initial-advertise-peer-urls=" + m.peer_url,
                                      "--initial-cluster=" + initial_cluster_,
                                      "--initial-cluster-state=new",
                                      "--initial-cluster-token=" + token_,
                                      "--heartbeat-interval=50",
                                      "--election-timeout=500",
                                      "--logger=zap",
                                      "--log-level=warn"};
        if (tls_) {
            argv.insert(argv.end(),
                        {"--cert-file=" + (d / "server.crt").string(),
                         "--key-file=" + (d / "server.key").string(),
                         "--trusted-ca-file=" + ca_file().string(), "--client-cert-auth"});
        }
        // A member must not outlive a test that crashed or was killed by
        // CTest's timeout: setpriv (util-linux) execs etcd with the parent
        // death signal set, keeping the pid.
        if (::access("/usr/bin/setpriv", X_OK) == 0) {
            argv.insert(argv.begin(), {"/usr/bin/setpriv", "--pdeathsig", "KILL", "--"});
        }
        m.process = std::make_unique<Process>(argv, d / (m.name + ".out"), d / (m.name + ".err"));
    }

    // Every URL answers `etcdctl endpoint health` (it needs a leader).
    bool wait_healthy(const std::vector<std::string>& urls, std::chrono::milliseconds bound) {
        const auto end = std::chrono::steady_clock::now() + bound;
        for (const auto& url : urls) {
            while (true) {
                const auto r = etcdctl({"endpoint", "health"}, {url}, 3000ms);
                if (r.exit_code && *r.exit_code == 0) {
                    break;
                }
                if (std::chrono::steady_clock::now() >= end) {
                    return false;
                }
                std::this_thread::sleep_for(100ms);
            }
        }
        return true;
    }

    // A CA, a server certificate for 127.0.0.1 and a client certificate. The
    // server certificate is also good for clientAuth: with --client-cert-auth
    // etcd's JSON gateway presents it to etcd's own gRPC server (else: 503).
    bool make_certificates() {
        const auto d = dir_.path();
        const auto openssl = [&](std::vector<std::string> args) {
            args.insert(args.begin(), "/usr/bin/openssl");
            const auto r = run(args, d, 10000ms);
            if (!r.exit_code || *r.exit_code != 0) {
                error_ = "openssl " + args[1] + " failed: " + r.err;
                return false;
            }
            return true;
        };
        const std::vector<std::string> new_key{"-newkey", "ec", "-pkeyopt",
                                               "ec_paramgen_curve:prime256v1", "-nodes"};
        const auto req = [&](const std::string& name, std::vector<std::string> extra) {
            std::vector<std::string> args{"req"};
            args.insert(args.end(), new_key.begin(), new_key.end());
            args.insert(args.end(), {"-keyout", (d / (name + ".key")).string(), "-subj",
                                     "/CN=sdppm-test-" + name});
            args.insert(args.end(), extra.begin(), extra.end());
            return openssl(args);
        };
        const auto sign = [&](const std::string& name, const std::string& ext) {
            write_file(d / (name + ".ext"), ext);
            return req(name, {"-out", (d / (name + ".csr")).string()}) &&
                   openssl({"x509", "-req", "-in", (d / (name + ".csr")).string(), "-CA",
                            ca_file().string(), "-CAkey", (d / "ca.key").string(),
                            "-CAcreateserial", "-days", "1", "-extfile",
                            (d / (name + ".ext")).string(), "-out",
                            (d / (name + ".crt")).string()});
        };
        return req("ca", {"-x509", "-days", "1", "-out", ca_file().string()}) &&
               sign("server",
                    "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,"
                    "clientAuth\n") &&
               sign("client", "extendedKeyUsage=clientAuth\n");
    }

    void stop_all() {
        for (auto& m : members_) {
            m.process.reset();
        }
        initial_cluster_.clear();
    }

    TempDir dir_;
    bool tls_ = false;
    std::string token_;
    std::string initial_cluster_;
    std::vector<Member> members_;
    std::string error_;
};

}  // namespace pmtest
