// SPDX-License-Identifier: Apache-2.0
// pmclient::Resolver: asks a Port Mapper Service Provider for the SDP Address
// of a service (draft-pinkerton-iwarp-sdp section 7), on the caller's
// boost::asio::io_context.
//
//   boost::asio::io_context io;
//   pmclient::Resolver r(io);
//   r.async_resolve({conventional, cp}, [](pmclient::Result res) { ... });
//   std::future<pmclient::Result> f = r.async_resolve(req, boost::asio::use_future);
//
// Many concurrent resolutions share one UDP socket per address family,
// demultiplexed by AssocHandle. Thread safety: every member function may be
// called from any thread at any time; the state (protocol machine, cache,
// sockets, timer) is guarded by one internal mutex, so the io_context may be
// run by several threads. A completion handler is never invoked from inside
// async_resolve: it is always posted to its associated executor (default:
// the io_context's). Destroying the Resolver completes the pending
// resolutions with Errc::cancelled (their handlers still run when the
// io_context runs).
#pragma once

#include <boost/asio/async_result.hpp>
#include <boost/asio/io_context.hpp>

#include <memory>
#include <optional>
#include <stop_token>
#include <utility>

#include "pmclient/completion.hpp"
#include "pmclient/export.h"
#include "pmclient/types.hpp"

namespace pmclient {

namespace detail {
struct ResolverAccess;  // libpmclient's other shells (the C API's loop driver)
}  // namespace detail

struct ResolverOptions {
    // Defaults for every request without its own options. defaults.pmsps (or
    // defaults.pmsp, a list of one) set here overrides SDP_PMSP and
    // pmclient.yaml. A list is asked in order, one PMSP at a time, within one
    // deadline (see RequestOptions).
    RequestOptions defaults;
    std::uint16_t pmsp_port = pm::kDefaultPort;  // port of the default PMSP, ApIPAddr
    std::size_t cache_capacity = 1024;           // entries; 0 disables the cache
    bool strict_source = true;                   // replies must come from the PMSP endpoint asked
    std::chrono::milliseconds completed_linger{10'000};  // late replies recognised this long
    std::size_t completed_capacity = 4096;
    std::size_t max_in_flight = 65536;
    // Consult SDP_PMSP and the YAML file (SDP_PMCLIENT_CONFIG or
    // /etc/sdp/pmclient.yaml) when defaults.pmsp and defaults.pmsps are unset.
    bool read_environment = true;
    // A PMSP of a list that failed (no reply within its turn) this many
    // resolutions in a row is asked after all the others for
    // pmsp_skip_period (0: never skipped). Kept per driver (the asynchronous
    // resolver, each blocking lane, the C API's loop).
    unsigned pmsp_fail_threshold = 3;
    std::chrono::milliseconds pmsp_skip_period{30'000};  // 0 .. 1 h
};

// Returns an empty string when valid.
PMCLIENT_API std::string validate(const ResolverOptions& o);

struct ResolveRequest {
    pm::Endpoint conventional;  // ApIPAddr, ApPort: the Conventional Address
    // CpIPAddr and CpPort: the local TCP endpoint that will connect. The port
    // must not be 0. An unspecified address (0.0.0.0 / ::) is replaced by the
    // source address the kernel routes towards ApIPAddr.
    pm::Endpoint cp;
    std::optional<RequestOptions> options;  // unset: ResolverOptions::defaults
};

class PMCLIENT_API Resolver {
  public:
    // Throws std::invalid_argument when the options are out of range or the
    // PMSP configuration (SDP_PMSP, pmclient.yaml) is invalid.
    explicit Resolver(boost::asio::io_context& io, ResolverOptions options = {});
    ~Resolver();
    Resolver(const Resolver&) = delete;
    Resolver& operator=(const Resolver&) = delete;

    // Completion signature: void(pmclient::Result). Never throws for bad
    // input: the Result says ResultKind::error with Errc and a reason.
    template <typename CompletionToken>
    auto async_resolve(ResolveRequest request, CompletionToken&& token) {
        return boost::asio::async_initiate<CompletionToken, void(Result)>(
            [this](auto handler, ResolveRequest req) {
                start(std::move(req), Handler(std::move(handler), io_.get_executor()));
            },
            token, std::move(request));
    }

    // Drops every cached answer, or those of one Conventional Address.
    void flush_cache();
    std::size_t flush_cache(const pm::Endpoint& conventional);
    std::size_t cache_size() const;
    std::size_t in_flight() const;
    Counters counters() const;
    // The PMSP used when neither the request nor ResolverOptions names one
    // (the first of a list); nullopt means ApIPAddr:pmsp_port. `source` says
    // where it came from.
    std::optional<pm::Endpoint> configured_pmsp(std::string* source = nullptr) const;
    // The same, every PMSP of the list in order (empty: ApIPAddr:pmsp_port).
    std::vector<pm::Endpoint> configured_pmsps(std::string* source = nullptr) const;

    boost::asio::io_context& context() { return io_; }

    // The completion handler, type-erased (posts to its executor).
    using Handler = ErasedHandler<void(Result)>;

  private:
    void start(ResolveRequest req, Handler handler);

    // BlockingResolver runs its resolutions on the caller's thread with the
    // state (configuration, cache, counters) of its Resolver.
    friend class BlockingResolver;
    friend struct detail::ResolverAccess;

    struct Impl;
    boost::asio::io_context& io_;
    std::shared_ptr<Impl> impl_;
};

// Blocking resolutions: resolve() runs the transaction on the calling thread
// (its own non-blocking UDP socket, poll(2) for the retransmission schedule
// and the deadline; no I/O thread, no future) and returns when the outcome is
// known, at most the deadline. resolve() may be called from many threads at
// once: each concurrent caller uses a pooled socket of its own, and all share
// the PmTime cache and the counters of resolver(). resolver() is a Resolver
// on an io_context of the BlockingResolver whose one I/O thread starts with
// the first async_resolve() made on it.
class PMCLIENT_API BlockingResolver {
  public:
    explicit BlockingResolver(ResolverOptions options = {});
    ~BlockingResolver();
    BlockingResolver(const BlockingResolver&) = delete;
    BlockingResolver& operator=(const BlockingResolver&) = delete;

    Result resolve(const ResolveRequest& request);
    // The same; a stop requested on `stop` (from another thread) ends the
    // resolution at once: Errc::cancelled, the transaction dropped (a late
    // reply is read as a duplicate by the next call; docs/pmclient.md).
    Result resolve(const ResolveRequest& request, std::stop_token stop);
    Resolver& resolver();

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// One-shot convenience: a temporary BlockingResolver (no cache reuse).
PMCLIENT_API Result resolve(const ResolveRequest& request, const ResolverOptions& options = {});

}  // namespace pmclient
