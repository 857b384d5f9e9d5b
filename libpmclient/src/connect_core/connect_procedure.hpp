// SPDX-License-Identifier: Apache-2.0
// The connect-and-fall-back procedure of section 7.5.1, sans-I/O: the one
// place that decides how a Connecting Peer reaches a service through the
// Port Mapper and when it falls back to the Conventional Address.
//
// The procedure never touches a socket, a clock or the environment. It
// emits one Action at a time; the driver performs it and hands the result
// back, which yields the next Action, until `done` or `failed`:
//
//   route      find CpIPAddr: the source address the kernel routes towards
//              `address` (ApIPAddr)                     -> on_route()
//   bind       bind the endpoint that will carry SDP to CpIPAddr:0 to learn
//              CpPort (a TCP socket, an rdma_cm id)     -> on_bound()
//   resolve    ask the Port Mapper: Conventional Address `endpoint`, from
//              CpIPAddr:CpPort `local`                  -> on_resolved()
//   connect    connect the bound endpoint to the SDP Address `endpoint`,
//              bounded by connect_timeout               -> on_connected()
//   handshake  the SDP startup (MPA + Hello/HelloAck) on that connection
//              (only with Options::handshake)           -> on_handshake()
//   fallback   drop the SDP attempt; a fresh TCP socket (bound to `address`
//              = CpIPAddr:0 when `bind_cp`) connects to the Conventional
//              Address `endpoint`                       -> on_fallback()
//   done       connected: `sdp` says SDP Address or Conventional Address
//   failed     error() and reason()
// Before performing `fallback` or `failed`, a driver flushes the PM cache
// entry of the Conventional Address when the action's flush_cache is set.
//
// Which results fall back (the rule, docs/protocol-notes.md 7.5.1):
//   - PMDeny and PM timeout;
//   - the SDP Address did not take the connection: the TCP connect or the
//     SDP startup ended with connection_refused, connection_reset,
//     connection_aborted, timed_out, host_unreachable or network_unreachable
//     (7.5.1: a reset counts as a PMDeny; an rdma_cm "unreachable" is its TCP
//     connect timing out). The PM cache entry is flushed, since the cached
//     mapping did not work;
//   - the provider that would carry SDP cannot be used (Options::unusable,
//     or on_bound() with provider_unusable): nothing is asked.
// Anything else (bad arguments, no route, local socket errors, a peer that
// is not an SDP peer: protocol_error, a resolution error) fails. With
// Options::fallback false every fallback becomes a failure:
// connection_refused (no_such_device for an unusable provider).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>

#include "pmclient/address.hpp"
#include "pmclient/types.hpp"

namespace pmclient {

class ConnectProcedure {
  public:
    enum class Step : std::uint8_t {
        route,
        bind,
        resolve,
        connect,
        handshake,
        fallback,
        done,
        failed
    };

    struct Options {
        // Each TCP connect attempt: 1 ms .. 10 min (checked here; the driver
        // enforces it).
        std::chrono::milliseconds connect_timeout{5000};
        // Run the SDP startup after the connect to the SDP Address (sdp::
        // stream); false: the TCP connection is the result (pmclient::connect,
        // or a provider whose connect includes the startup).
        bool handshake = false;
        // Fall back to the Conventional Address (else connection_refused).
        bool fallback = true;
        // CpIPAddr; unset or unspecified: route towards ApIPAddr.
        std::optional<pm::IpAddress> cp;
        // Set: the provider that would carry SDP cannot be used (why); the
        // Port Mapper is not asked.
        std::optional<std::string> unusable;
    };

    struct Action {
        Step step = Step::route;
        pm::IpAddress address;  // route: ApIPAddr; bind, fallback: CpIPAddr
        pm::Endpoint endpoint;  // resolve, fallback: Conventional; connect: SDP Address
        pm::Endpoint local;     // resolve: CpIPAddr:CpPort
        bool bind_cp = false;   // fallback: bind the new socket to address:0
        // fallback, failed: first flush the PM cache entry of the
        // Conventional Address (its mapping led nowhere).
        bool flush_cache = false;
        bool sdp = false;  // done: connected to the SDP Address
    };

    ConnectProcedure(const pm::Endpoint& conventional, const Options& options);

    // The first action.
    const Action& start();
    // route: 0 or an errno value, and the source address.
    const Action& on_route(int err, const pm::IpAddress& cp);
    // bind: the bound local endpoint, or the error (`why`: the driver's
    // detail). provider_unusable: the SDP provider cannot be used from
    // CpIPAddr (e.g. no RDMA device on that route); plain TCP still can.
    const Action& on_bound(const pm::Endpoint& local);
    const Action& on_bind_failed(std::error_code ec, const std::string& why,
                                 bool provider_unusable = false);
    // resolve: the Port Mapper's answer.
    const Action& on_resolved(const Result& r);
    // connect: the outcome of the connect to the SDP Address (generic
    // category errno values; `why` replaces ec.message() in texts).
    const Action& on_connected(std::error_code ec, const std::string& why = {});
    // handshake: the outcome of the SDP startup.
    const Action& on_handshake(std::error_code ec, const std::string& why = {});
    // fallback: the outcome of the TCP connect to the Conventional Address.
    const Action& on_fallback(std::error_code ec, const std::string& why = {});

    [[nodiscard]] const Action& action() const { return act_; }
    [[nodiscard]] const pm::Endpoint& conventional() const { return conventional_; }
    // Once done: where the connection goes (SDP or Conventional Address).
    [[nodiscard]] const pm::Endpoint& peer() const { return peer_; }
    // The Port Mapper's answer once asked; before that, an error result
    // naming a failure that happened before asking.
    [[nodiscard]] const Result& resolution() const { return resolution_; }
    [[nodiscard]] bool asked() const { return asked_; }
    // failed: the error (generic category).
    [[nodiscard]] std::error_code error() const { return ec_; }
    // failed: the step whose result failed (route for a failure in start()).
    [[nodiscard]] Step failed_at() const { return failed_at_; }
    // Why SDP was not used (done over TCP) or why it failed; empty when
    // connected over SDP.
    [[nodiscard]] const std::string& reason() const { return reason_; }

    // The rule of the header comment: does this error of the connect to the
    // SDP Address (or the SDP startup) mean "the SDP Address did not take
    // the connection"?
    static bool falls_back(std::error_code ec);
    // A resolution error as the connect error: invalid_argument (arguments,
    // configuration), operation_canceled, else host_unreachable.
    static std::error_code resolution_error(const Result& r);

  private:
    const Action& emit(Step s);
    const Action& fail(std::error_code ec, std::string reason,
                       std::optional<Errc> before_asking = std::nullopt);
    const Action& fall_back(std::string reason, bool flush, bool unusable = false);
    const Action& done(bool sdp);
    static std::string text(std::error_code ec, const std::string& why);

    pm::Endpoint conventional_;
    Options opts_;
    Action act_;
    pm::IpAddress cp_;
    bool have_cp_ = false;
    pm::Endpoint local_;
    pm::Endpoint sdp_address_;
    pm::Endpoint peer_;
    Result resolution_;
    bool asked_ = false;
    bool flush_next_ = false;
    Step failed_at_ = Step::route;
    std::error_code ec_;
    std::string reason_;
};

}  // namespace pmclient
