// SPDX-License-Identifier: Apache-2.0
#include "sdp/rdma/session.hpp"

#include <poll.h>

#include <algorithm>
#include <string>
#include <vector>

namespace sdp::rdma {

namespace {

using Clock = std::chrono::steady_clock;

void set_why(std::string* why, std::string s) {
    if (why != nullptr) {
        *why = std::move(s);
    }
}

std::chrono::milliseconds left(Clock::time_point deadline) {
    const auto now = Clock::now();
    if (now >= deadline) {
        return std::chrono::milliseconds(0);
    }
    return std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
}

// Registers the adapter's buffers on `qp`; on failure *why also says why
// the device refused them (RLIMIT_MEMLOCK, EINVAL, ...).
std::error_code attach_to(EngineAdapter& adapter, RdmaQueuePair& qp, std::string* why) {
    auto ec = adapter.attach(qp, why);
    if (ec && why != nullptr && !qp.reg_error_text().empty()) {
        *why += ": " + qp.reg_error_text();
    }
    return ec;
}

}  // namespace

CmOptions RdmaSession::cm_options(const RdmaSessionConfig& cfg) {
    CmOptions cm = cfg.cm;
    cm.ird = cfg.engine.ird;
    cm.ord = cfg.engine.ord;
    cm.max_recv_wr = std::max(cm.max_recv_wr, EngineAdapter::recv_slots_for(cfg.engine));
    return cm;
}

RdmaSession::RdmaSession(engine::Role role, const RdmaSessionConfig& cfg)
    : cfg_(cfg), adapter_(role, cfg.engine, cfg.cm.max_send_wr) {
    cfg_.cm = cm_options(cfg);
}

RdmaSession::~RdmaSession() {
    if (conn_ && !adapter_.llp_reported() && !conn_->disconnected()) {
        conn_->abort();
    }
}

std::unique_ptr<RdmaSession> RdmaSession::connect(const sockaddr* dst, const RdmaSessionConfig& cfg,
                                                  std::error_code& ec, std::string* why) {
    // rdma_cm picks the source port from its own port space; siw then binds
    // a kernel TCP socket to it, which fails (EADDRINUSE) when a host socket
    // holds that port (seen in the VM lab after many soft connections).
    // The port is ours to choose here, so try a few fresh ids.
    constexpr int kAttempts = 4;
    for (int attempt = 1;; ++attempt) {
        std::unique_ptr<RdmaSession> s(new RdmaSession(engine::Role::connecting, cfg));
        s->conn_ = Connection::create_active(dst, nullptr, s->cfg_.cm, ec, why);
        if (!s->conn_) {
            return nullptr;
        }
        if (!(ec = s->start_connect(why))) {
            return s;
        }
        if (!s->conn_->port_in_use() || attempt == kAttempts) {
            return nullptr;
        }
    }
}

std::unique_ptr<RdmaSession> RdmaSession::bind(const sockaddr* src, const RdmaSessionConfig& cfg,
                                               std::error_code& ec, std::string* why) {
    std::unique_ptr<RdmaSession> s(new RdmaSession(engine::Role::connecting, cfg));
    s->conn_ = Connection::bind_active(src, s->cfg_.cm, ec, why);
    if (!s->conn_) {
        return nullptr;
    }
    return s;
}

sockaddr_storage RdmaSession::local_address() const {
    if (!conn_) {
        sockaddr_storage ss{};
        ss.ss_family = AF_UNSPEC;
        return ss;
    }
    return conn_->local_address();
}

std::error_code RdmaSession::connect_to(const sockaddr* dst, std::string* why) {
    if (!conn_ || conn_->established() || sdp().state() != engine::State::idle) {
        set_why(why, "connect_to() needs a session from bind()");
        return Errc::bad_argument;
    }
    if (auto ec = conn_->resolve(dst, why)) {
        return ec;
    }
    return start_connect(why);
}

std::error_code RdmaSession::start_connect(std::string* why) {
    if (auto ec = attach_to(adapter_, conn_->qp(), why)) {
        return ec;
    }
    // 8.1.1 step 1c: the receive buffers are posted (QP in INIT) before the
    // Hello leaves, so the HelloAck always finds one.
    const std::vector<std::uint8_t> hello = sdp().connect();
    adapter_.progress();
    if (adapter_.broken()) {
        set_why(why, "posting the receive buffers failed: " + adapter_.error_text());
        return Errc::resources;
    }
    if (auto ec = conn_->connect(hello, why)) {
        return ec;
    }
    adapter_.set_can_send();
    return await_established(why);
}

std::error_code RdmaSession::await_established(std::string* why) {
    const auto deadline = Clock::now() + cfg_.cm.establish_timeout;
    progress();
    while (sdp().state() == engine::State::connecting) {
        const auto l = left(deadline);
        if (l.count() == 0) {
            set_why(why, "no SDP HelloAck within " +
                             std::to_string(cfg_.cm.establish_timeout.count()) + " ms");
            return Errc::timed_out;
        }
        wait(l);
    }
    if (sdp().state() != engine::State::established) {
        set_why(why, describe_error());
        return sdp().error() == engine::Error::llp_lost ? std::error_code(Errc::disconnected)
                                                        : std::error_code(Errc::hello_rejected);
    }
    return {};
}

std::unique_ptr<RdmaSession> RdmaSession::accept(Listener& l, const RdmaSessionConfig& cfg,
                                                 std::chrono::milliseconds timeout,
                                                 std::error_code& ec, std::string* why) {
    auto request = l.get_request(timeout, cm_options(cfg), ec, why);
    if (!request) {
        return nullptr;
    }
    return accept(std::move(request), cfg, ec, why);
}

std::unique_ptr<RdmaSession> RdmaSession::accept(std::unique_ptr<Connection> request,
                                                 const RdmaSessionConfig& cfg, std::error_code& ec,
                                                 std::string* why) {
    ec.clear();
    std::unique_ptr<RdmaSession> s(new RdmaSession(engine::Role::accepting, cfg));
    s->conn_ = std::move(request);
    if (!s->conn_) {
        ec = Errc::bad_argument;
        set_why(why, "no connection request");
        return nullptr;
    }
    if ((ec = attach_to(s->adapter_, s->conn_->qp(), why))) {
        (void)s->conn_->reject();
        return nullptr;
    }
    // Steps 3-5: check the Hello; the receive buffers are posted now, the
    // HelloAck waits in the adapter until the QP is in RTS.
    const engine::Error err = s->sdp().accept(s->conn_->peer_private_data());
    if (err != engine::Error::none) {
        (void)s->conn_->reject();
        ec = Errc::hello_rejected;
        set_why(why, "SDP Hello rejected: " + std::string(engine::to_string(err)));
        return nullptr;
    }
    s->adapter_.progress();
    if ((ec = s->conn_->accept({}, why))) {
        return nullptr;
    }
    s->adapter_.set_can_send();
    s->progress();  // the HelloAck goes out
    return s;
}

bool RdmaSession::progress() {
    if (!conn_) {
        return false;
    }
    bool any = false;
    for (int round = 0; round < 64; ++round) {
        bool moved = adapter_.progress();
        if (conn_->poll_events() && !adapter_.llp_reported()) {
            adapter_.llp_closed();  // DISCONNECTED: the LLP is gone
            moved = true;
        }
        if (adapter_.broken() && !adapter_.llp_reported()) {
            // Error completion (Terminate sent or received, LLP lost).
            conn_->disconnect();
            adapter_.llp_closed();
            moved = true;
        }
        if (!teardown_issued_ && adapter_.teardown() != EngineAdapter::Teardown::none) {
            if (adapter_.teardown() == EngineAdapter::Teardown::abortive &&
                (adapter_.sends_drained() || adapter_.broken())) {
                // The AbortConn has left (its Send completed): QP to error,
                // then disconnect.
                conn_->abort();
                teardown_issued_ = true;
                moved = true;
            } else if (adapter_.teardown() == EngineAdapter::Teardown::graceful &&
                       adapter_.sends_drained() && graceful_teardown_due()) {
                conn_->disconnect();  // FIN after the peer has all our messages
                teardown_issued_ = true;
                moved = true;
            }
        }
        any = any || moved;
        if (!moved) {
            break;
        }
    }
    return any;
}

bool RdmaSession::graceful_teardown_due() {
    // 8.2.1: the DisConn exchange is done and every Send has completed. A
    // Send completion only says the bytes left our QP (siw completes a Send
    // once it is in the kernel socket): tearing down now could reset the TCP
    // connection with our last data and DisConn still queued (seen: 262144 of
    // 300000 bytes, then a reset). So wait until the peer's MSeqAck covers our
    // last message (6.1.6; a first closer gets it in the peer's DisConn), or
    // the peer's own teardown (handled in progress()), or
    // cm.disconnect_timeout (a simultaneous close, where neither DisConn
    // acknowledges the other), whichever comes first.
    if (sdp().all_acked()) {
        return true;
    }
    const auto now = Clock::now();
    if (!linger_deadline_) {
        linger_deadline_ = now + cfg_.cm.disconnect_timeout;
    }
    return now >= *linger_deadline_;
}

bool RdmaSession::wait(std::chrono::milliseconds timeout, bool solicited_only) {
    if (!conn_) {
        return false;
    }
    if (progress()) {
        return true;
    }
    auto& qp = conn_->qp();
    qp.arm(solicited_only);
    // A completion that arrived before the CQs were armed raises no event.
    if (progress()) {
        return true;
    }
    if (linger_deadline_ && !teardown_issued_) {
        timeout = std::min(timeout, left(*linger_deadline_) + std::chrono::milliseconds(1));
    }
    pollfd p[2] = {{qp.fd(), POLLIN, 0}, {conn_->cm_fd(), POLLIN, 0}};
    const int rc = ::poll(p, 2, static_cast<int>(std::min<long long>(timeout.count(), 60'000)));
    qp.consume_events();
    const bool any = progress();
    return rc > 0 || any;
}

std::error_code RdmaSession::write_all(std::span<const std::uint8_t> bytes,
                                       std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    std::size_t off = 0;
    while (off < bytes.size()) {
        const std::size_t n = sdp().write(bytes.subspan(off));
        off += n;
        progress();
        if (n > 0) {
            continue;
        }
        const auto st = sdp().state();
        if (st == engine::State::reset || st == engine::State::failed) {
            return std::make_error_code(std::errc::connection_reset);
        }
        if (st != engine::State::established || sdp().write_shut()) {
            return std::make_error_code(std::errc::broken_pipe);
        }
        const auto l = left(deadline);
        if (l.count() == 0) {
            return std::make_error_code(std::errc::timed_out);
        }
        wait(l);
    }
    progress();
    return {};
}

std::size_t RdmaSession::read_some(std::span<std::uint8_t> out, std::chrono::milliseconds timeout,
                                   std::error_code& ec) {
    ec.clear();
    const auto deadline = Clock::now() + timeout;
    while (true) {
        progress();
        const std::size_t n = sdp().read(out);
        if (n > 0) {
            progress();  // credit updates
            return n;
        }
        if (sdp().eof()) {
            return 0;
        }
        const auto st = sdp().state();
        if (st == engine::State::reset || st == engine::State::failed) {
            ec = std::make_error_code(std::errc::connection_reset);
            return 0;
        }
        if (st == engine::State::closed) {
            return 0;
        }
        const auto l = left(deadline);
        if (l.count() == 0) {
            ec = std::make_error_code(std::errc::timed_out);
            return 0;
        }
        wait(l);
    }
}

std::error_code RdmaSession::close(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    sdp().shutdown_write();
    progress();
    while (sdp().state() == engine::State::established) {
        // Unread incoming data is discarded, as a socket close would.
        std::uint8_t sink[4096];
        while (sdp().read(sink) > 0) {
        }
        const auto l = left(deadline);
        if (l.count() == 0) {
            abort();
            return std::make_error_code(std::errc::timed_out);
        }
        wait(l);
    }
    if (conn_ && !conn_->disconnected()) {
        conn_->close();
    }
    return sdp().state() == engine::State::closed
               ? std::error_code()
               : std::make_error_code(std::errc::connection_reset);
}

void RdmaSession::abort() {
    sdp().abort();
    // Give the AbortConn a moment to leave (8.2.2), then reset regardless.
    const auto deadline = Clock::now() + std::chrono::milliseconds(200);
    progress();
    while (conn_ && !adapter_.sends_drained() && !adapter_.broken() && Clock::now() < deadline) {
        wait(left(deadline));
    }
    if (conn_) {
        conn_->abort();
        adapter_.llp_closed();
    }
}

std::string RdmaSession::describe_error() const {
    std::string s = "SDP ";
    s += engine::to_string(sdp().state());
    if (sdp().error() != engine::Error::none) {
        s += ": ";
        s += engine::to_string(sdp().error());
    }
    if (!adapter_.error_text().empty()) {
        s += " (" + adapter_.error_text() + ")";
    }
    if (conn_ != nullptr && conn_->qp().last_error_status() != nullptr) {
        s += std::string(" [") + ibv_wc_status_str(*conn_->qp().last_error_status()) + "]";
    }
    return s;
}

}  // namespace sdp::rdma
