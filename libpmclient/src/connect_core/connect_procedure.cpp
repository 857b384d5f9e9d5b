// SPDX-License-Identifier: Apache-2.0
#include "connect_procedure.hpp"

#include <utility>

namespace pmclient {

namespace {

constexpr const char* kFellBack = "; fell back to TCP to the Conventional Address";
constexpr const char* kNoFallback = "; fallback disabled";

std::error_code errno_code(int e) {
    return {e, std::generic_category()};
}

}  // namespace

ConnectProcedure::ConnectProcedure(const pm::Endpoint& conventional, const Options& options)
    : conventional_{conventional.address.unmapped(), conventional.port}, opts_(options) {}

bool ConnectProcedure::falls_back(std::error_code ec) {
    return ec == std::errc::connection_refused || ec == std::errc::connection_reset ||
           ec == std::errc::connection_aborted || ec == std::errc::timed_out ||
           ec == std::errc::host_unreachable || ec == std::errc::network_unreachable;
}

std::error_code ConnectProcedure::resolution_error(const Result& r) {
    if (r.error == Errc::invalid_argument || r.error == Errc::config) {
        return std::make_error_code(std::errc::invalid_argument);
    }
    if (r.error == Errc::cancelled) {
        return std::make_error_code(std::errc::operation_canceled);
    }
    return std::make_error_code(std::errc::host_unreachable);
}

std::string ConnectProcedure::text(std::error_code ec, const std::string& why) {
    return why.empty() ? ec.message() : why;
}

const ConnectProcedure::Action& ConnectProcedure::emit(Step s) {
    act_ = Action{};
    act_.step = s;
    act_.flush_cache = std::exchange(flush_next_, false);
    switch (s) {
        case Step::route:
            act_.address = conventional_.address;
            break;
        case Step::bind:
            act_.address = cp_;
            break;
        case Step::resolve:
            act_.endpoint = conventional_;
            act_.local = local_;
            break;
        case Step::connect:
        case Step::handshake:
            act_.endpoint = sdp_address_;
            break;
        case Step::fallback:
            act_.endpoint = conventional_;
            act_.address = cp_;
            act_.bind_cp = have_cp_;
            break;
        case Step::done:
        case Step::failed:
            break;
    }
    return act_;
}

const ConnectProcedure::Action& ConnectProcedure::fail(std::error_code ec, std::string reason,
                                                       std::optional<Errc> before_asking) {
    failed_at_ = act_.step;
    ec_ = ec;
    reason_ = std::move(reason);
    if (before_asking && !asked_) {
        resolution_ = Result{};
        resolution_.kind = ResultKind::error;
        resolution_.error = *before_asking;
        resolution_.reason = reason_;
    }
    return emit(Step::failed);
}

const ConnectProcedure::Action& ConnectProcedure::fall_back(std::string reason, bool flush,
                                                            bool unusable) {
    flush_next_ = flush;
    if (!opts_.fallback) {
        return fail(std::make_error_code(unusable ? std::errc::no_such_device
                                                  : std::errc::connection_refused),
                    std::move(reason) + kNoFallback);
    }
    reason_ = std::move(reason) + kFellBack;
    return emit(Step::fallback);
}

const ConnectProcedure::Action& ConnectProcedure::start() {
    asked_ = false;
    ec_.clear();
    reason_.clear();
    act_ = Action{};
    if (conventional_.port == 0 || conventional_.address.is_unspecified()) {
        return fail(std::make_error_code(std::errc::invalid_argument),
                    "Conventional Address needs a specified IP address and a non-zero port",
                    Errc::invalid_argument);
    }
    if (opts_.connect_timeout.count() <= 0 || opts_.connect_timeout.count() > 600'000) {
        return fail(std::make_error_code(std::errc::invalid_argument),
                    "connect_timeout must be 1 ms .. 10 min", Errc::invalid_argument);
    }
    if (opts_.unusable) {
        return fall_back(*opts_.unusable, false, true);
    }
    if (opts_.cp && !opts_.cp->is_unspecified()) {
        cp_ = opts_.cp->unmapped();
        if (cp_.family() != conventional_.address.family()) {
            return fail(std::make_error_code(std::errc::invalid_argument),
                        "CpIPAddr and ApIPAddr must be the same IP version",
                        Errc::invalid_argument);
        }
        have_cp_ = true;
        return emit(Step::bind);
    }
    return emit(Step::route);
}

const ConnectProcedure::Action& ConnectProcedure::on_route(int err, const pm::IpAddress& cp) {
    if (err != 0) {
        const auto ec = errno_code(err);
        return fail(ec, "no route to " + conventional_.address.to_string() + ": " + ec.message(),
                    Errc::socket);
    }
    cp_ = cp.unmapped();
    have_cp_ = true;
    return emit(Step::bind);
}

const ConnectProcedure::Action& ConnectProcedure::on_bound(const pm::Endpoint& local) {
    local_ = local;
    return emit(Step::resolve);
}

const ConnectProcedure::Action& ConnectProcedure::on_bind_failed(std::error_code ec,
                                                                 const std::string& why,
                                                                 bool provider_unusable) {
    if (provider_unusable) {
        return fall_back(text(ec, why), false, true);
    }
    return fail(ec, why.empty() ? "cannot bind TCP socket: " + ec.message() : why, Errc::socket);
}

const ConnectProcedure::Action& ConnectProcedure::on_resolved(const Result& r) {
    asked_ = true;
    resolution_ = r;
    if (r.kind == ResultKind::error) {
        return fail(resolution_error(r), r.reason);
    }
    if (r.kind != ResultKind::accepted) {
        return fall_back(r.kind == ResultKind::denied ? "PMDeny" : "PM timeout", false);
    }
    sdp_address_ = r.sdp;
    return emit(Step::connect);
}

const ConnectProcedure::Action& ConnectProcedure::on_connected(std::error_code ec,
                                                               const std::string& why) {
    if (!ec) {
        if (opts_.handshake) {
            return emit(Step::handshake);
        }
        return done(true);
    }
    if (falls_back(ec)) {
        // 7.5.1: the SDP Address refused or reset the connection: as a
        // PMDeny. Forget the cached mapping that does not work.
        return fall_back("SDP Address " + sdp_address_.to_string() + ": " + text(ec, why), true);
    }
    return fail(ec, "connect to SDP Address " + sdp_address_.to_string() + ": " + text(ec, why));
}

const ConnectProcedure::Action& ConnectProcedure::on_handshake(std::error_code ec,
                                                               const std::string& why) {
    if (!ec) {
        return done(true);
    }
    std::string r = "SDP startup failed (" + ec.message() + (why.empty() ? "" : ": " + why) + ")";
    if (falls_back(ec)) {
        return fall_back(std::move(r), true);
    }
    return fail(ec, std::move(r));
}

const ConnectProcedure::Action& ConnectProcedure::on_fallback(std::error_code ec,
                                                              const std::string& why) {
    if (ec) {
        return fail(ec, reason_ + "; connect to Conventional Address " + conventional_.to_string() +
                            ": " + text(ec, why));
    }
    return done(false);
}

const ConnectProcedure::Action& ConnectProcedure::done(bool sdp) {
    peer_ = sdp ? sdp_address_ : conventional_;
    emit(Step::done);
    act_.sdp = sdp;
    return act_;
}

}  // namespace pmclient
