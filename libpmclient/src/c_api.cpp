// SPDX-License-Identifier: Apache-2.0
// The C API: a thin, exception-free veneer over BlockingResolver (the
// blocking calls) and LoopDriver (the calls driven by the caller's loop).
#include "pmclient/pmclient.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>

#include "loop_driver.hpp"
#include "pmclient/connect.hpp"
#include "pmclient/resolver.hpp"

#ifndef PMCLIENT_VERSION
#define PMCLIENT_VERSION "0.0.0"
#endif

struct pmc_resolver {
    std::unique_ptr<pmclient::BlockingResolver> resolver;
    // Loop-driven resolutions; shares the cache and configuration of
    // resolver->resolver(), so it is declared (and destroyed) after it.
    std::unique_ptr<pmclient::detail::LoopDriver> loop;
    std::chrono::milliseconds connect_timeout{5000};
};

namespace {

using pmclient::Errc;
using pmclient::ResultKind;

template <std::size_t N>
void copy_text(char (&dst)[N], const std::string& s) {
    std::snprintf(dst, N, "%s", s.c_str());
}

// Copies `full` into the caller's struct, at most caller->size bytes,
// keeping the caller's size field.
template <typename T>
void copy_out(T* caller, const T& full) {
    std::size_t n = std::min(caller->size, sizeof(T));
    std::size_t keep = caller->size;
    std::memcpy(static_cast<void*>(caller), &full, n);
    caller->size = keep;
}

int status_of(const pmclient::Result& r) {
    switch (r.kind) {
        case ResultKind::accepted:
            return PMC_OK;
        case ResultKind::denied:
            return PMC_DENIED;
        case ResultKind::timeout:
            return PMC_TIMEOUT;
        case ResultKind::error:
            break;
    }
    switch (r.error) {
        case Errc::invalid_argument:
            return PMC_E_INVAL;
        case Errc::config:
            return PMC_E_CONFIG;
        case Errc::socket:
            return PMC_E_SOCKET;
        case Errc::busy:
            return PMC_E_BUSY;
        case Errc::cancelled:
            return PMC_E_CANCELLED;
        case Errc::none:
        case Errc::internal:
            break;
    }
    return PMC_E_INTERNAL;
}

pmc_result to_c(const pmclient::Result& r) {
    pmc_result c;
    std::memset(&c, 0, sizeof c);
    c.size = sizeof c;
    c.kind = static_cast<int>(r.kind);
    if (r.kind == ResultKind::accepted) {
        copy_text(c.sdp_ip, r.sdp.address.to_string());
        c.sdp_port = r.sdp.port;
        c.pm_time = r.pm_time;
        switch (r.lifetime.kind) {
            case pm::CacheLifetime::Kind::single_use:
                c.cache_ms = 0;
                break;
            case pm::CacheLifetime::Kind::permanent:
                c.cache_ms = -1;
                break;
            case pm::CacheLifetime::Kind::timed:
                c.cache_ms = r.lifetime.duration.count();
                break;
        }
    }
    c.from_cache = r.from_cache ? 1 : 0;
    c.attempts = r.attempts;
    c.rtt_us = static_cast<std::uint64_t>(std::max<std::int64_t>(0, r.rtt.count()));
    if (r.pmsp.port != 0) {
        copy_text(c.pmsp, r.pmsp.to_string());
    }
    copy_text(c.reason, r.reason);
    c.pmsps_tried = r.pmsps_tried;
    return c;
}

int invalid(pmc_result* out, const std::string& why) {
    if (out != nullptr && out->size >= offsetof(pmc_result, kind) + sizeof(int)) {
        pmclient::Result r;
        r.kind = ResultKind::error;
        r.error = Errc::invalid_argument;
        r.reason = why;
        copy_out(out, to_c(r));
    }
    return PMC_E_INVAL;
}

bool parse_options(const pmc_options* in, pmclient::ResolverOptions& o,
                   std::chrono::milliseconds& connect_timeout, std::string& why) {
    pmc_options c;
    pmc_options_init(&c);
    if (in != nullptr) {
        std::size_t n = std::min(in->size, sizeof c);
        std::memcpy(&c, in, n);
        c.size = sizeof c;
    }
    if (c.pmsp != nullptr && *c.pmsp != '\0') {
        std::string bad;
        auto list = pmclient::parse_pmsp_list(c.pmsp, bad);
        if (!bad.empty()) {
            why = "pmsp: " + bad;
            return false;
        }
        o.defaults.pmsps = std::move(list);
    }
    o.pmsp_port = c.pmsp_port;
    o.defaults.initial_timeout = std::chrono::milliseconds(c.initial_timeout_ms);
    o.defaults.backoff_factor = c.backoff_percent / 100.0;
    o.defaults.max_retries = c.max_retries;
    o.defaults.deadline = std::chrono::milliseconds(c.deadline_ms);
    o.defaults.use_cache = c.use_cache != 0;
    o.cache_capacity = c.cache_capacity;
    o.strict_source = c.strict_source != 0;
    o.read_environment = c.read_environment != 0;
    o.defaults.per_pmsp_timeout = std::chrono::milliseconds(c.per_pmsp_timeout_ms);
    o.pmsp_fail_threshold = c.pmsp_fail_threshold;
    o.pmsp_skip_period = std::chrono::milliseconds(c.pmsp_skip_ms);
    if (c.connect_timeout_ms == 0 || c.connect_timeout_ms > 600'000) {
        why = "connect_timeout_ms must be 1 .. 600000";
        return false;
    }
    connect_timeout = std::chrono::milliseconds(c.connect_timeout_ms);
    why = pmclient::validate(o);
    return why.empty();
}

std::optional<pm::IpAddress> parse_ip(const char* s) {
    if (s == nullptr) {
        return std::nullopt;
    }
    return pm::IpAddress::parse(s);
}

// The request of pmc_resolve / pmc_resolve_start, or why the text arguments
// do not parse (the numbers are checked by the resolver).
std::optional<pmclient::ResolveRequest> make_request(const char* ap_ip, uint16_t ap_port,
                                                     const char* cp_ip, uint16_t cp_port,
                                                     std::string& why) {
    auto ap = parse_ip(ap_ip);
    if (!ap) {
        why = std::string("invalid ApIPAddr '") + (ap_ip ? ap_ip : "(null)") + "'";
        return std::nullopt;
    }
    pm::IpAddress cp = pm::IpAddress::any(ap->unmapped().family());
    if (cp_ip != nullptr && *cp_ip != '\0') {
        auto parsed = parse_ip(cp_ip);
        if (!parsed) {
            why = std::string("invalid CpIPAddr '") + cp_ip + "'";
            return std::nullopt;
        }
        cp = *parsed;
    }
    return pmclient::ResolveRequest{pm::Endpoint{*ap, ap_port}, pm::Endpoint{cp, cp_port}, {}};
}

}  // namespace

extern "C" {

void pmc_options_init(pmc_options* opts) {
    if (opts == nullptr) {
        return;
    }
    std::memset(opts, 0, sizeof *opts);
    opts->size = sizeof *opts;
    opts->pmsp = nullptr;
    opts->pmsp_port = pm::kDefaultPort;
    opts->initial_timeout_ms = 250;
    opts->backoff_percent = 200;
    opts->max_retries = 4;
    opts->deadline_ms = 3000;
    opts->cache_capacity = 1024;
    opts->use_cache = 1;
    opts->strict_source = 1;
    opts->connect_timeout_ms = 5000;
    opts->read_environment = 1;
    opts->per_pmsp_timeout_ms = 0;
    opts->pmsp_fail_threshold = 3;
    opts->pmsp_skip_ms = 30000;
}

int pmc_resolver_new(const pmc_options* opts, pmc_resolver** out) {
    if (out == nullptr) {
        return PMC_E_INVAL;
    }
    *out = nullptr;
    if (opts != nullptr && opts->size < offsetof(pmc_options, pmsp_port)) {
        return PMC_E_ABI;
    }
    try {
        pmclient::ResolverOptions o;
        std::chrono::milliseconds ct{};
        std::string why;
        if (!parse_options(opts, o, ct, why)) {
            return PMC_E_INVAL;
        }
        auto r = std::make_unique<pmc_resolver>();
        r->connect_timeout = ct;
        try {
            r->resolver = std::make_unique<pmclient::BlockingResolver>(std::move(o));
        } catch (const std::invalid_argument&) {
            return PMC_E_CONFIG;
        }
        r->loop = std::make_unique<pmclient::detail::LoopDriver>(r->resolver->resolver());
        *out = r.release();
        return PMC_OK;
    } catch (const std::bad_alloc&) {
        return PMC_E_NOMEM;
    } catch (...) {
        return PMC_E_INTERNAL;
    }
}

void pmc_resolver_free(pmc_resolver* r) {
    try {
        if (r != nullptr) {
            r->loop->shutdown();  // delivers every loop-driven callback
        }
        delete r;
    } catch (...) {  // destructors do not throw; belt and braces at the ABI edge
    }
}

int pmc_resolve(pmc_resolver* r, const char* ap_ip, uint16_t ap_port, const char* cp_ip,
                uint16_t cp_port, pmc_result* out) {
    if (out != nullptr && out->size < offsetof(pmc_result, kind) + sizeof(int)) {
        return PMC_E_ABI;
    }
    if (r == nullptr) {
        return invalid(out, "resolver is NULL");
    }
    try {
        std::string why;
        auto req = make_request(ap_ip, ap_port, cp_ip, cp_port, why);
        if (!req) {
            return invalid(out, why);
        }
        pmclient::Result res = r->resolver->resolve(*req);
        if (out != nullptr) {
            copy_out(out, to_c(res));
        }
        return status_of(res);
    } catch (const std::bad_alloc&) {
        return PMC_E_NOMEM;
    } catch (...) {
        return PMC_E_INTERNAL;
    }
}

int pmc_connect(pmc_resolver* r, const char* ap_ip, uint16_t ap_port, const char* cp_ip,
                pmc_connect_result* out) {
    if (out == nullptr || out->size < offsetof(pmc_connect_result, fd) + sizeof(int)) {
        return out == nullptr ? PMC_E_INVAL : PMC_E_ABI;
    }
    pmc_connect_result c;
    std::memset(&c, 0, sizeof c);
    c.size = sizeof c;
    c.fd = -1;
    try {
        auto finish = [&](int status) {
            copy_out(out, c);
            return status;
        };
        if (r == nullptr) {
            c.sys_errno = EINVAL;
            return finish(PMC_E_INVAL);
        }
        auto ap = parse_ip(ap_ip);
        std::optional<pm::IpAddress> cp;
        if (cp_ip != nullptr && *cp_ip != '\0') {
            cp = parse_ip(cp_ip);
            if (!cp) {
                c.sys_errno = EINVAL;
                return finish(PMC_E_INVAL);
            }
        }
        if (!ap) {
            c.sys_errno = EINVAL;
            return finish(PMC_E_INVAL);
        }
        pmclient::ConnectOptions co;
        co.connect_timeout = r->connect_timeout;
        pmclient::ConnectResult cr =
            pmclient::connect(*r->resolver, pm::Endpoint{*ap, ap_port}, cp, co);
        c.resolution = to_c(cr.resolution);
        if (!cr.reason.empty()) {
            copy_text(c.resolution.reason, cr.reason);
        }
        c.sys_errno = cr.sys_errno;
        if (cr.ok()) {
            c.fd = cr.fd;
            c.used_sdp = cr.used_sdp ? 1 : 0;
            copy_text(c.peer, cr.peer.to_string());
            copy_text(c.local, cr.local.to_string());
            return finish(PMC_OK);
        }
        int status = status_of(cr.resolution);
        if (status >= 0) {
            status = PMC_E_SOCKET;  // resolution worked, the TCP connects did not
        }
        return finish(status);
    } catch (const std::bad_alloc&) {
        return PMC_E_NOMEM;
    } catch (...) {
        return PMC_E_INTERNAL;
    }
}

int pmc_resolve_start(pmc_resolver* r, const char* ap_ip, uint16_t ap_port, const char* cp_ip,
                      uint16_t cp_port, pmc_resolve_cb cb, void* arg, uint64_t* id) {
    if (id != nullptr) {
        *id = 0;
    }
    if (r == nullptr || cb == nullptr) {
        return PMC_E_INVAL;
    }
    try {
        auto callback = [cb, arg](std::uint64_t qid, pmclient::Result res) {
            const pmc_result c = to_c(res);
            cb(arg, qid, status_of(res), &c);
        };
        std::string why;
        auto req = make_request(ap_ip, ap_port, cp_ip, cp_port, why);
        std::uint64_t qid = 0;
        if (req) {
            qid = r->loop->start(*req, std::move(callback));
        } else {
            pmclient::Result res;
            res.kind = ResultKind::error;
            res.error = Errc::invalid_argument;
            res.reason = why;
            qid = r->loop->start_failed(std::move(res), std::move(callback));
        }
        if (qid == 0) {
            return PMC_E_CANCELLED;
        }
        if (id != nullptr) {
            *id = qid;
        }
        return PMC_OK;
    } catch (const std::bad_alloc&) {
        return PMC_E_NOMEM;
    } catch (...) {
        return PMC_E_INTERNAL;
    }
}

int pmc_fds(pmc_resolver* r, struct pollfd* fds, size_t n) {
    if (r == nullptr || (fds == nullptr && n != 0)) {
        return PMC_E_INVAL;
    }
    try {
        return static_cast<int>(r->loop->fds(fds, n));
    } catch (...) {
        return PMC_E_INTERNAL;
    }
}

int pmc_timeout_ms(pmc_resolver* r) {
    try {
        return r == nullptr ? -1 : r->loop->timeout_ms();
    } catch (...) {
        return 0;  // let the loop call pmc_process, which reports the error
    }
}

int pmc_process(pmc_resolver* r, const struct pollfd* fds, size_t n) {
    if (r == nullptr || (fds == nullptr && n != 0)) {
        return PMC_E_INVAL;
    }
    try {
        r->loop->process(fds, n);
        return PMC_OK;
    } catch (const std::bad_alloc&) {
        return PMC_E_NOMEM;
    } catch (...) {
        return PMC_E_INTERNAL;
    }
}

int pmc_process_fd(pmc_resolver* r, int fd) {
    const pollfd p{fd, POLLIN, POLLIN};
    return pmc_process(r, &p, fd >= 0 ? 1 : 0);
}

int pmc_resolve_cancel(pmc_resolver* r, uint64_t id) {
    if (r == nullptr) {
        return PMC_E_INVAL;
    }
    try {
        return r->loop->cancel(id) ? PMC_OK : PMC_E_INVAL;
    } catch (const std::bad_alloc&) {
        return PMC_E_NOMEM;
    } catch (...) {
        return PMC_E_INTERNAL;
    }
}

size_t pmc_pending(pmc_resolver* r) {
    try {
        return r == nullptr ? 0 : r->loop->pending();
    } catch (...) {
        return 0;
    }
}

void pmc_cache_flush(pmc_resolver* r) {
    if (r == nullptr) {
        return;
    }
    try {
        r->resolver->resolver().flush_cache();
    } catch (...) {
    }
}

int pmc_get_counters(pmc_resolver* r, pmc_counters* out) {
    if (r == nullptr || out == nullptr) {
        return PMC_E_INVAL;
    }
    if (out->size < sizeof(size_t)) {
        return PMC_E_ABI;
    }
    try {
        auto k = r->resolver->resolver().counters();
        pmclient::add(k, r->loop->counters());
        pmc_counters c;
        std::memset(&c, 0, sizeof c);
        c.size = sizeof c;
        c.requests_started = k.requests_started;
        c.cache_hits = k.cache_hits;
        c.cache_misses = k.cache_misses;
        c.pmreq_sent = k.pmreq_sent;
        c.retransmissions = k.retransmissions;
        c.pmack_sent = k.pmack_sent;
        c.reacks = k.reacks;
        c.accepted = k.accepted;
        c.denied = k.denied;
        c.timeouts = k.timeouts;
        c.errors = k.errors;
        c.datagrams = k.datagrams;
        c.drop_malformed = k.drop_malformed;
        c.drop_not_reply = k.drop_not_reply;
        c.drop_unknown = k.drop_unknown;
        c.drop_tuple_mismatch = k.drop_tuple_mismatch;
        c.drop_wrong_source = k.drop_wrong_source;
        c.drop_duplicate = k.drop_duplicate;
        c.drop_invalid_accept = k.drop_invalid_accept;
        c.receive_errors = k.receive_errors;
        c.send_errors = k.send_errors;
        c.pmsp_failovers = k.pmsp_failovers;
        c.pmsp_skipped = k.pmsp_skipped;
        copy_out(out, c);
        return PMC_OK;
    } catch (...) {
        return PMC_E_INTERNAL;
    }
}

int pmc_parse_pmsp_list(const char* text, char* err, size_t errlen) {
    try {
        std::string why;
        auto list = pmclient::parse_pmsp_list(text != nullptr ? text : "", why);
        if (!why.empty()) {
            if (err != nullptr && errlen > 0) {
                std::snprintf(err, errlen, "%s", why.c_str());
            }
            return PMC_E_INVAL;
        }
        return static_cast<int>(list.size());
    } catch (const std::bad_alloc&) {
        return PMC_E_NOMEM;
    } catch (...) {
        return PMC_E_INTERNAL;
    }
}

const char* pmc_strerror(int code) {
    switch (code) {
        case PMC_OK:
            return "success";
        case PMC_DENIED:
            return "denied by the port mapper (PMDeny)";
        case PMC_TIMEOUT:
            return "no reply from the port mapper (timeout)";
        case PMC_E_INVAL:
            return "invalid argument";
        case PMC_E_CONFIG:
            return "invalid port mapper configuration (SDP_PMSP or pmclient.yaml)";
        case PMC_E_SOCKET:
            return "socket error";
        case PMC_E_NOMEM:
            return "out of memory";
        case PMC_E_BUSY:
            return "too many resolutions in flight";
        case PMC_E_ABI:
            return "struct size not supported by this library";
        case PMC_E_INTERNAL:
            return "internal error";
        case PMC_E_CANCELLED:
            return "cancelled";
        default:
            return "unknown error code";
    }
}

const char* pmc_version(void) {
    return PMCLIENT_VERSION;
}

int pmc_abi_version(void) {
    return PMC_ABI_VERSION;
}

}  // extern "C"
