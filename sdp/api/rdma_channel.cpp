// SPDX-License-Identifier: Apache-2.0
#include "rdma_channel.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "sdp/rdma/error.hpp"

namespace sdp::detail {

namespace {

using Clock = std::chrono::steady_clock;

// The rdma provider's codes (sdp::rdma::category) as the std::errc the
// stream API reports; the provider's own text goes into the reason.
std::error_code to_generic(const std::error_code& ec) {
    if (!ec) {
        return ec;
    }
    const std::error_condition c = ec.default_error_condition();
    if (c.category() == std::generic_category()) {
        return {c.value(), std::generic_category()};
    }
    return std::make_error_code(std::errc::io_error);
}

std::string provider_text(const std::error_code& ec, const std::string& why) {
    return ec.message() + (why.empty() ? "" : ": " + why);
}

}  // namespace

rdma::RdmaSessionConfig rdma_config(const StreamOptions& o) {
    rdma::RdmaSessionConfig c;
    c.engine = engine_config(o);
    c.cm.resolve_timeout = o.connect_timeout;
    c.cm.establish_timeout = o.handshake_timeout;
    return c;
}

// --- RdmaChannel ----------------------------------------------------------------

RdmaChannel::RdmaChannel(std::unique_ptr<rdma::RdmaSession> s, const StreamOptions& o)
    : s_(std::move(s)),
      io_timeout_(o.io_timeout),
      zcopy_(o.mechanism == Mechanism::zcopy),
      device_(s_->cm().device_name()) {
    choice_ = engine::WriteChoice(o.mechanism == Mechanism::automatic, s_->sdp().bcopy_threshold());
}

std::unique_ptr<RdmaChannel> RdmaChannel::start(std::unique_ptr<rdma::RdmaSession> s,
                                                const StreamOptions& o, std::error_code& ec,
                                                std::string* why) {
    ec.clear();
    std::unique_ptr<RdmaChannel> c(new RdmaChannel(std::move(s), o));
    c->wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->wake_fd_ < 0) {
        ec = {errno, std::generic_category()};
        if (why != nullptr) {
            *why = std::string("eventfd: ") + std::strerror(errno);
        }
        return nullptr;  // the destructor aborts the session
    }
    try {
        c->th_ = std::thread([p = c.get()] { p->run(); });
    } catch (const std::system_error& e) {
        ec = std::make_error_code(std::errc::resource_unavailable_try_again);
        if (why != nullptr) {
            *why = std::string("cannot start the progress thread: ") + e.what();
        }
        return nullptr;
    }
    return c;
}

RdmaChannel::~RdmaChannel() {
    stop_thread();
    if (!finished_ && s_) {
        s_->abort();
    }
    if (wake_fd_ >= 0) {
        ::close(wake_fd_);
    }
}

void RdmaChannel::stop_thread() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();  // callers waiting without a deadline see stop_
    if (wake_fd_ >= 0) {
        const std::uint64_t one = 1;
        (void)!::write(wake_fd_, &one, sizeof one);
    }
    if (th_.joinable()) {
        th_.join();
    }
}

void RdmaChannel::progress_locked() {
    if (s_->progress()) {
        ++gen_;
        cv_.notify_all();
    }
}

void RdmaChannel::run() {
    std::unique_lock lk(mu_);
    while (!stop_) {
        auto& qp = s_->cm().qp();
        progress_locked();
        qp.arm(false);
        // A completion that arrived before arming raises no event.
        if (s_->progress()) {
            ++gen_;
            cv_.notify_all();
            continue;
        }
        pollfd p[3] = {{qp.fd(), POLLIN, 0}, {s_->cm().cm_fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
        lk.unlock();
        // Bounded, so a missed wake-up costs at most this long.
        (void)::poll(p, 3, 1000);
        if ((p[2].revents & POLLIN) != 0) {
            std::uint64_t v;
            (void)!::read(wake_fd_, &v, sizeof v);
        }
        lk.lock();
        if (stop_) {
            break;
        }
        qp.consume_events();
        progress_locked();
    }
}

std::optional<Clock::time_point> RdmaChannel::io_deadline() const {
    if (io_timeout_.count() <= 0) {
        return std::nullopt;
    }
    return Clock::now() + io_timeout_;
}

bool RdmaChannel::wait_locked(std::unique_lock<std::mutex>& lk,
                              std::optional<Clock::time_point> deadline) {
    const std::uint64_t g = gen_;
    auto moved = [&] { return gen_ != g || stop_; };
    if (!deadline) {
        cv_.wait(lk, moved);
        return true;
    }
    return cv_.wait_until(lk, *deadline, moved);
}

std::size_t RdmaChannel::read_some(std::span<std::uint8_t> out, std::error_code& ec,
                                   bool stop_at_urgent, bool may_lend) {
    ec.clear();
    std::unique_lock lk(mu_);
    const auto deadline = io_deadline();
    while (true) {
        if (finished_ || stop_) {
            ec = std::make_error_code(std::errc::not_connected);
            return 0;
        }
        auto& sdp = s_->sdp();
        if (stop_at_urgent && sdp.at_urgent()) {
            ec = std::make_error_code(std::errc::interrupted);
            return 0;
        }
        // The peer advertised its buffer (Read Zcopy, 9.2): RDMA Read
        // straight into `out`. Too small a buffer: the peer was asked for
        // Bcopy (SendSm) instead, and the bytes come for read().
        if (sdp.zcopy_readable() > 0) {
            if (sdp.read_zcopy(out)) {
                return read_zcopy_locked(lk, deadline, ec);
            }
            progress_locked();
        }
        // Nothing queued and a large buffer: lend it for Write Zcopy.
        if (may_lend && !stop_at_urgent) {
            bool lent = false;
            if (auto z = lend_locked(lk, out, ec, lent)) {
                return *z;
            }
            if (ec) {
                return 0;
            }
            if (lent) {
                // Given back unfilled: what ended it (data, the peer's
                // SrcAvail withdrawing it under 11.3 rule 2a, DisConn, an
                // error) is looked at from the top, without waiting for
                // another event.
                continue;
            }
        }
        // A lone out-of-line urgent byte is not skipped before more data
        // arrives (read_oob() may still take it), as the soft provider.
        const std::size_t n = sdp.readable() > 0 ? sdp.read(out) : 0;
        if (n > 0) {
            progress_locked();  // credit updates
            return n;
        }
        if (out.empty() || sdp.eof()) {
            return 0;
        }
        const auto st = sdp.state();
        if (st == engine::State::reset || st == engine::State::failed) {
            ec = std::make_error_code(std::errc::connection_reset);
            return 0;
        }
        if (st == engine::State::closed) {
            return 0;
        }
        if (!wait_locked(lk, deadline)) {
            ec = std::make_error_code(std::errc::timed_out);
            return 0;
        }
    }
}

std::size_t RdmaChannel::read_zcopy_locked(std::unique_lock<std::mutex>& lk,
                                           std::optional<Clock::time_point> deadline,
                                           std::error_code& ec) {
    auto& sdp = s_->sdp();
    progress_locked();
    // The RDMA Read cannot be called back: a reader that gives up resets
    // the stream (its late Read Responses then meet an invalid STag).
    if (!wait_lent_locked(lk, deadline, [&] { return !sdp.zcopy_read_pending(); })) {
        ec = std::make_error_code(std::errc::timed_out);
        return 0;
    }
    if (auto n = sdp.take_zcopy_read()) {
        progress_locked();  // the RdmaRdCompl
        return *n;
    }
    ec = std::make_error_code(std::errc::connection_reset);
    return 0;
}

std::optional<std::size_t> RdmaChannel::lend_locked(std::unique_lock<std::mutex>& lk,
                                                    std::span<std::uint8_t> out,
                                                    std::error_code& ec, bool& lent) {
    auto& sdp = s_->sdp();
    lent = false;
    // Not with io_timeout: a read that gives up would have to revoke the
    // buffer (SinkAvailCancel, 9.5.5) and wait for the peer's answer, as the
    // soft provider (docs/sdp.md, "Zero copy").
    if (!zcopy_ || io_timeout_.count() != 0 || sdp.bcopy_threshold() == 0 ||
        out.size() <= sdp.bcopy_threshold() || !sdp.post_sink(out)) {
        return std::nullopt;
    }
    lent = true;
    progress_locked();  // the SinkAvail goes out
    if (!wait_lent_locked(lk, std::nullopt, [&] { return !sdp.sink_pending(); })) {
        ec = std::make_error_code(std::errc::connection_reset);
        return 0;
    }
    if (auto n = sdp.take_zcopy_read()) {
        progress_locked();  // credit updates
        return n;
    }
    // Stale (9.5.1: a message with payload came first), DisConn or an
    // error: read() and the state checks report it.
    return std::nullopt;
}

bool RdmaChannel::wait_lent_locked(std::unique_lock<std::mutex>& lk,
                                   std::optional<Clock::time_point> deadline,
                                   const std::function<bool()>& done) {
    while (!done()) {
        if (finished_ || stop_ || !wait_locked(lk, deadline)) {
            if (done()) {
                return true;
            }
            if (!finished_) {
                s_->sdp().abort();  // AbortConn (8.2.2); the region is invalidated
                progress_locked();
            }
            return false;
        }
    }
    return true;
}

std::optional<std::size_t> RdmaChannel::write_zcopy_locked(
    std::unique_lock<std::mutex>& lk, std::span<const std::uint8_t> in, std::error_code& ec,
    const std::function<void()>& started_fn) {
    auto& sdp = s_->sdp();
    // Read Zcopy (9.2) as Data Source: what is queued goes first (11.2),
    // then `in` is advertised and the peer RDMA-Reads it; the call returns
    // after that, or after io_timeout with what the peer took once it
    // answered our SrcAvailCancel (9.5.4; no answer within another
    // io_timeout resets the stream).
    auto deadline = io_deadline();
    std::optional<bool> started;
    while (!(started = sdp.start_zcopy_write(in)).has_value()) {
        if (finished_ || stop_ || !wait_locked(lk, deadline)) {
            return std::nullopt;  // Bcopy (write() reports any error)
        }
    }
    if (!*started) {
        return std::nullopt;
    }
    started_fn();
    progress_locked();
    const auto done = [&] { return !sdp.zcopy_write_pending(); };
    const auto until = io_deadline();
    while (!done() && !finished_ && !stop_ && wait_locked(lk, until)) {
    }
    if (!done() && !finished_ && !stop_) {
        sdp.revoke_zcopy_write();
        progress_locked();
    }
    if (!wait_lent_locked(lk, io_deadline(), done)) {
        ec = std::make_error_code(std::errc::timed_out);
        return 0;
    }
    if (sdp.state() != engine::State::established) {
        ec = std::make_error_code(std::errc::connection_reset);
        return 0;
    }
    const std::size_t n = sdp.take_zcopy_write_count(in.size());
    if (n < in.size()) {
        ec = std::make_error_code(std::errc::timed_out);
    }
    return n;
}

std::size_t RdmaChannel::write(std::span<const std::uint8_t> in, std::error_code& ec, bool wait) {
    ec.clear();
    std::unique_lock lk(mu_);
    if (!wait) {
        if (in.empty()) {
            return 0;
        }
        if (!choice_.bcopy_without_wait(in.size(), s_->sdp().bcopy_threshold())) {
            ec = std::make_error_code(std::errc::operation_not_supported);
            return 0;
        }
    }
    const bool zcopy = wait && choice_.try_zcopy(io::steady_ns(), in.size(), zcopy_);
    if (zcopy && !finished_ && !stop_) {
        // Zero copy starts with an empty queue (11.2): the bytes queued
        // before belong to the Bcopy run, whose sample ends there.
        const auto started = [&] { choice_.zcopy_started(io::steady_ns(), in.size()); };
        if (auto z = write_zcopy_locked(lk, in, ec, started)) {
            choice_.finished(*z, bool(ec));
            return *z;
        }
        choice_.zcopy_refused(io::steady_ns(), in.size());
    }
    auto deadline = io_deadline();
    std::size_t done = 0;
    while (done < in.size()) {
        if (finished_ || stop_) {
            ec = std::make_error_code(std::errc::not_connected);
            break;
        }
        auto& sdp = s_->sdp();
        // wait = false: up to kTryWriteWhole whole or not at all (as the
        // soft provider's).
        const bool short_of_whole = !wait && done == 0 && in.size() <= Stream::kTryWriteWhole &&
                                    !sdp.takes_whole(in.size());
        const std::size_t n = short_of_whole ? 0 : sdp.write(in.subspan(done));
        if (n > 0) {
            done += n;
            progress_locked();
            deadline = io_deadline();
            continue;
        }
        const auto st = sdp.state();
        if (st == engine::State::reset || st == engine::State::failed) {
            ec = std::make_error_code(std::errc::connection_reset);
            break;
        }
        if (st != engine::State::established || sdp.write_shut()) {
            ec = std::make_error_code(std::errc::broken_pipe);
            break;
        }
        if (!wait) {
            if (done == 0) {
                ec = std::make_error_code(std::errc::resource_unavailable_try_again);
            }
            return done;
        }
        if (!wait_locked(lk, deadline)) {
            ec = std::make_error_code(std::errc::timed_out);
            break;
        }
    }
    if (!wait) {
        if (done > 0) {
            ec.clear();  // an error after some bytes is the next call's
        }
        return done;
    }
    choice_.finished(done, bool(ec));
    return done;
}

std::error_code RdmaChannel::send_oob(std::uint8_t byte) {
    std::lock_guard lk(mu_);
    if (finished_ || stop_) {
        return std::make_error_code(std::errc::not_connected);
    }
    auto& sdp = s_->sdp();
    const auto st = sdp.state();
    if (st == engine::State::reset || st == engine::State::failed) {
        return std::make_error_code(std::errc::connection_reset);
    }
    if (!sdp.write_oob(byte)) {
        return std::make_error_code(std::errc::broken_pipe);
    }
    progress_locked();
    return {};
}

std::uint8_t RdmaChannel::read_oob(std::error_code& ec) {
    ec.clear();
    std::lock_guard lk(mu_);
    if (finished_ || stop_) {
        ec = std::make_error_code(std::errc::not_connected);
        return 0;
    }
    auto& sdp = s_->sdp();
    if (auto b = sdp.read_oob()) {
        return *b;
    }
    ec = std::make_error_code(sdp.oob_not_yet() ? std::errc::resource_unavailable_try_again
                                                : std::errc::invalid_argument);
    return 0;
}

bool RdmaChannel::at_mark() {
    std::lock_guard lk(mu_);
    return !finished_ && s_->sdp().at_mark();
}

bool RdmaChannel::send_idle() {
    std::unique_lock lk(mu_, std::try_to_lock);
    return lk && !finished_ && s_->sdp().send_idle();
}

bool RdmaChannel::urgent_pending() {
    std::lock_guard lk(mu_);
    return !finished_ && s_->sdp().urgent_pending();
}

void RdmaChannel::set_oob_inline(bool on) {
    std::lock_guard lk(mu_);
    s_->sdp().set_oob_inline(on);
    ++gen_;
    cv_.notify_all();
}

void RdmaChannel::shutdown_write(std::error_code& ec) {
    ec.clear();
    std::lock_guard lk(mu_);
    if (finished_) {
        ec = std::make_error_code(std::errc::not_connected);
        return;
    }
    const auto st = s_->sdp().state();
    if (st == engine::State::reset || st == engine::State::failed) {
        ec = std::make_error_code(std::errc::connection_reset);
        return;
    }
    s_->sdp().shutdown_write();  // DisConn after the queued data (8.2.1)
    progress_locked();
}

void RdmaChannel::close(std::chrono::milliseconds linger, std::error_code& ec) {
    ec.clear();
    const auto deadline = Clock::now() + linger;
    bool timed_out = false;
    {
        std::unique_lock lk(mu_);
        if (finished_) {
            return;
        }
        s_->sdp().shutdown_write();
        progress_locked();
        // Wait for the peer's DisConn (the progress thread drives);
        // unread input is discarded, as a socket close would.
        while (s_->sdp().state() == engine::State::established) {
            s_->sdp().discard_input();
            progress_locked();
            if (s_->sdp().state() != engine::State::established) {
                break;
            }
            if (!wait_locked(lk, deadline)) {
                timed_out = true;
                break;
            }
        }
    }
    stop_thread();
    std::lock_guard lk(mu_);
    finished_ = true;
    if (timed_out) {
        s_->abort();
        ec = std::make_error_code(std::errc::timed_out);
        return;
    }
    // The LLP teardown (rdma_disconnect, DISCONNECTED), bounded.
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    ec = to_generic(s_->close(std::max(left, std::chrono::milliseconds(1))));
}

void RdmaChannel::abort() {
    stop_thread();
    std::lock_guard lk(mu_);
    if (!finished_) {
        finished_ = true;
        s_->abort();  // AbortConn if possible, QP to error, disconnect (8.2.2)
    }
}

short RdmaChannel::pump() {
    std::lock_guard lk(mu_);
    if (!finished_) {
        progress_locked();
    }
    return POLLIN;
}

engine::Stats RdmaChannel::stats() const {
    std::lock_guard lk(mu_);
    return s_->sdp().stats();
}

std::string RdmaChannel::describe() const {
    std::lock_guard lk(mu_);
    return "rdma-core provider on " + (device_.empty() ? std::string("?") : device_) + ", " +
           s_->describe_error();
}

// --- connect --------------------------------------------------------------------

std::unique_ptr<ProviderChannel> rdma_connect_direct(const pm::Endpoint& sdp_address,
                                                     const StreamOptions& o, std::error_code& ec,
                                                     std::string& why) {
    sockaddr_storage dst;
    (void)to_sockaddr(pm::Endpoint{sdp_address.address.unmapped(), sdp_address.port}, dst);
    std::error_code rec;
    auto s = rdma::RdmaSession::connect(reinterpret_cast<const sockaddr*>(&dst), rdma_config(o),
                                        rec, &why);
    if (!s) {
        ec = to_generic(rec);
        why = "rdma: " + provider_text(rec, why);
        return nullptr;
    }
    auto c = RdmaChannel::start(std::move(s), o, ec, &why);
    return c;
}

namespace {

// The rdma side of Stream::connect's 7.5.1 procedure: an rdma_cm id bound
// to CpIPAddr:0 (rdma_cm picks CpPort), connected from there to the SDP
// Address (rdma_connect includes the MPA/SDP startup).
class RdmaConnectorImpl final : public RdmaConnector {
  public:
    explicit RdmaConnectorImpl(const StreamOptions& o) : o_(o) {}

    bool bind(const pm::IpAddress& cp, pm::Endpoint& local, std::error_code& ec,
              std::string& why) override {
        sockaddr_storage src;
        (void)to_sockaddr(pm::Endpoint{cp, 0}, src);
        std::error_code rec;
        std::string pwhy;
        s_ = rdma::RdmaSession::bind(reinterpret_cast<const sockaddr*>(&src), rdma_config(o_), rec,
                                     &pwhy);
        if (!s_) {
            ec = to_generic(rec);
            why = "rdma: cannot bind an rdma_cm id to CpIPAddr " + cp.to_string() + " (" +
                  provider_text(rec, pwhy) + ")";
            return false;
        }
        local = from_sockaddr(s_->local_address());
        if (local.port == 0) {
            s_.reset();
            ec = std::make_error_code(std::errc::address_not_available);
            why = "rdma: rdma_cm bound " + cp.to_string() + " without a port";
            return false;
        }
        return true;
    }

    std::error_code connect(const pm::Endpoint& sdp_address, std::string& why) override {
        sockaddr_storage dst;
        (void)to_sockaddr(sdp_address, dst);
        std::string pwhy;
        if (auto e = s_->connect_to(reinterpret_cast<const sockaddr*>(&dst), &pwhy)) {
            why = "rdma: " + provider_text(e, pwhy);
            return to_generic(e);
        }
        return {};
    }

    std::unique_ptr<ProviderChannel> start(std::error_code& ec, std::string& why) override {
        return RdmaChannel::start(std::move(s_), o_, ec, &why);
    }

  private:
    StreamOptions o_;
    std::unique_ptr<rdma::RdmaSession> s_;
};

}  // namespace

std::unique_ptr<RdmaConnector> make_rdma_connector(const StreamOptions& o) {
    return std::make_unique<RdmaConnectorImpl>(o);
}

// --- accept -----------------------------------------------------------------------

std::unique_ptr<RdmaListener> RdmaListener::listen(const pm::Endpoint& local, int backlog,
                                                   std::error_code& ec, std::string& why) {
    sockaddr_storage ss;
    (void)to_sockaddr(local, ss);
    std::error_code rec;
    auto l = rdma::Listener::listen(reinterpret_cast<const sockaddr*>(&ss), backlog, rec, &why);
    if (!l) {
        ec = to_generic(rec);
        why = "rdma listen on " + local.to_string() + ": " + provider_text(rec, why);
        return nullptr;
    }
    std::unique_ptr<RdmaListener> out(new RdmaListener());
    out->l_ = std::move(l);
    return out;
}

std::unique_ptr<rdma::Connection> RdmaListener::take(const StreamOptions& o, std::error_code& ec,
                                                     std::string& why) {
    std::error_code rec;
    auto c = l_->get_request(std::chrono::milliseconds(0),
                             rdma::RdmaSession::cm_options(rdma_config(o)), rec, &why);
    ec = to_generic(rec);
    if (!c && rec != rdma::Errc::timed_out) {
        why = provider_text(rec, why);
    }
    return c;
}

pm::Endpoint rdma_peer(const rdma::Connection& c) {
    const sockaddr_storage ss = c.peer_address();
    if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) {
        return {};
    }
    return from_sockaddr(ss);
}

std::unique_ptr<ProviderChannel> rdma_accept(std::unique_ptr<rdma::Connection> request,
                                             const StreamOptions& o, std::error_code& ec,
                                             std::string& why) {
    std::error_code rec;
    auto s = rdma::RdmaSession::accept(std::move(request), rdma_config(o), rec, &why);
    if (!s) {
        ec = to_generic(rec);
        why = provider_text(rec, why);
        return nullptr;
    }
    return RdmaChannel::start(std::move(s), o, ec, &why);
}

}  // namespace sdp::detail
