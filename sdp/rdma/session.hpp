// SPDX-License-Identifier: Apache-2.0
// One SDP connection over the rdma-core provider: rdma_cm (rdma/cm.hpp) sets
// up an ibv QP on an iWARP device, the SDP connection machine runs on it
// through EngineAdapter (rdma/adapter.hpp). The Hello is the MPA Request
// private data (rdma_connect), the HelloAck the Accepting Peer's first Send.
// A DISCONNECTED event or an error completion is the LLP going away
// (Connection::on_llp_closed()). Not thread-safe: one thread drives it
// (progress()/wait() or the blocking helpers).
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>

#include "sdp/engine/connection.hpp"
#include "sdp/rdma/adapter.hpp"
#include "sdp/rdma/cm.hpp"

namespace sdp::rdma {

struct RdmaSessionConfig {
    engine::Config engine;  // its ird/ord are also the rdma_cm IRD/ORD
    CmOptions cm;
};

class RdmaSession {
  public:
    RdmaSession(const RdmaSession&) = delete;
    RdmaSession& operator=(const RdmaSession&) = delete;
    ~RdmaSession();

    // Connecting Peer: resolve, create the QP, post the receive buffers,
    // rdma_connect with the Hello, wait for ESTABLISHED and the HelloAck
    // (each bounded by cfg.cm timeouts). nullptr with ec on failure.
    static std::unique_ptr<RdmaSession> connect(const sockaddr* dst, const RdmaSessionConfig& cfg,
                                                std::error_code& ec, std::string* why = nullptr);
    // Connecting Peer in two steps, for SDP 7.5.1 (the connection must come
    // from the CpIPAddr:CpPort named in the PMReq): bind() binds the rdma_cm
    // id to `src` (port 0: rdma_cm picks one; local_address() tells which),
    // connect_to() resolves `dst` from that address and port and then does
    // what connect() does. nullptr with ec on failure.
    static std::unique_ptr<RdmaSession> bind(const sockaddr* src, const RdmaSessionConfig& cfg,
                                             std::error_code& ec, std::string* why = nullptr);
    std::error_code connect_to(const sockaddr* dst, std::string* why = nullptr);
    [[nodiscard]] sockaddr_storage local_address() const;

    // Accepting Peer: waits up to `timeout` for a request on `l`, checks the
    // Hello (rejects the MPA request if the engine refuses it: hello_rejected),
    // rdma_accept, then sends the HelloAck.
    static std::unique_ptr<RdmaSession> accept(Listener& l, const RdmaSessionConfig& cfg,
                                               std::chrono::milliseconds timeout,
                                               std::error_code& ec, std::string* why = nullptr);

    // Accepting Peer for a request already taken from the listener
    // (Listener::get_request with cm_options(cfg)), so another thread can
    // finish the startup while the listener takes the next request.
    static std::unique_ptr<RdmaSession> accept(std::unique_ptr<Connection> request,
                                               const RdmaSessionConfig& cfg, std::error_code& ec,
                                               std::string* why = nullptr);
    // The rdma_cm options a session with `cfg` uses (IRD/ORD from the
    // engine, a receive queue deep enough for the adapter's slots).
    [[nodiscard]] static CmOptions cm_options(const RdmaSessionConfig& cfg);

    [[nodiscard]] engine::Connection& sdp() { return adapter_.sdp(); }
    [[nodiscard]] const engine::Connection& sdp() const { return adapter_.sdp(); }
    [[nodiscard]] Connection& cm() { return *conn_; }

    // Handles completions, CM events, deferred posts and LLP teardown without
    // blocking. True if anything happened.
    bool progress();
    // Blocks up to `timeout` for a completion or a CM event, then progress().
    // solicited_only arms the receive CQ for solicited (or error) completions
    // only. False on timeout.
    bool wait(std::chrono::milliseconds timeout, bool solicited_only = false);

    // Blocking helpers, each bounded by `timeout` (std::errc::timed_out).
    std::error_code write_all(std::span<const std::uint8_t> bytes,
                              std::chrono::milliseconds timeout);
    // 0 without error: end of stream (the peer's DisConn, all data read).
    std::size_t read_some(std::span<std::uint8_t> out, std::chrono::milliseconds timeout,
                          std::error_code& ec);
    // Graceful close (8.2.1): DisConn after queued data, wait for the peer's
    // DisConn and the LLP teardown; abortive after `timeout`.
    std::error_code close(std::chrono::milliseconds timeout);
    // Abortive close (8.2.2): AbortConn if possible, QP to error, disconnect.
    void abort();

    [[nodiscard]] bool llp_closed() const { return adapter_.llp_reported(); }
    [[nodiscard]] std::string describe_error() const;

  private:
    explicit RdmaSession(engine::Role role, const RdmaSessionConfig& cfg);
    std::error_code start_connect(std::string* why);
    std::error_code await_established(std::string* why);
    // Graceful teardown may start now (see session.cpp).
    bool graceful_teardown_due();

    RdmaSessionConfig cfg_;
    // Declared before conn_: the QP and its regions go before the buffers.
    EngineAdapter adapter_;
    std::unique_ptr<Connection> conn_;
    bool teardown_issued_ = false;
    std::optional<std::chrono::steady_clock::time_point> linger_deadline_;
};

}  // namespace sdp::rdma
