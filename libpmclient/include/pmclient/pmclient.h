/* SPDX-License-Identifier: Apache-2.0 */
/* libpmclient C API: SDP Port Mapper client (draft-pinkerton-iwarp-sdp,
 * section 7).
 *
 * ABI rules: handles are opaque; every struct passed in or out starts with a
 * `size` member that the caller sets to sizeof(the struct) as compiled, so
 * fields appended in later versions are ignored by older callers (the library
 * reads and writes only the first `size` bytes; missing option fields take
 * their defaults). No C++ exception crosses this boundary. Functions return
 * PMC_OK (0), a positive outcome (PMC_DENIED, PMC_TIMEOUT) or a negative
 * PMC_E_* error; pmc_strerror() names each one.
 *
 * A resolver starts no thread. Two ways to resolve:
 *  - blocking (pmc_resolve, pmc_connect): the whole transaction runs on the
 *    calling thread, with a non-blocking UDP socket taken from a pool of the
 *    resolver and poll(2) for the retransmission schedule and the deadline;
 *  - driven by the caller's event loop (pmc_resolve_start and the calls after
 *    it, modelled on c-ares): the loop watches the resolver's sockets
 *    (pmc_fds) and its next timeout (pmc_timeout_ms), and calls pmc_process
 *    or pmc_process_fd; completions come as callbacks from those calls.
 * Both share the resolver's PmTime cache and counters.
 *
 * Thread safety: every function may be called from any thread at any time
 * (pmc_resolver_free: see there). Concurrent blocking calls each use
 * a pooled socket of their own; the loop-driven state is guarded by an
 * internal mutex that is never held while a callback runs. */
#ifndef PMCLIENT_PMCLIENT_H
#define PMCLIENT_PMCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "pmclient/export.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PMC_ABI_VERSION 1

/* Outcomes (>= 0) and errors (< 0). */
enum pmc_status {
    PMC_OK = 0,          /* accepted (resolve) / connected (connect) */
    PMC_DENIED = 1,      /* PMDeny received */
    PMC_TIMEOUT = 2,     /* no reply within the retransmission schedule */
    PMC_E_INVAL = -1,    /* invalid argument: address, zero port, option range */
    PMC_E_CONFIG = -2,   /* SDP_PMSP or pmclient.yaml unusable */
    PMC_E_SOCKET = -3,   /* socket / bind / connect failure (see sys_errno) */
    PMC_E_NOMEM = -4,    /* out of memory */
    PMC_E_BUSY = -5,     /* too many resolutions in flight */
    PMC_E_ABI = -6,      /* struct size too small for this library */
    PMC_E_INTERNAL = -7, /* unexpected failure (a bug) */
    PMC_E_CANCELLED = -8 /* resolver shut down */
};

typedef struct pmc_resolver pmc_resolver;

/* Resolver options. Initialise with pmc_options_init(). */
typedef struct pmc_options {
    size_t size;                 /* sizeof(pmc_options) */
    const char* pmsp;            /* "1.2.3.4:3935" / "[::1]:3935", or a comma-separated list of
                                    at most 16 in order of preference ("10.0.0.1:3935,10.0.0.2,
                                    [fd00::1]:3935"; bare address: port 3935); NULL or "": env,
                                    file, ApIPAddr */
    uint16_t pmsp_port;          /* port of the default PMSP (ApIPAddr); default 3935 */
    uint32_t initial_timeout_ms; /* default 250; 1 .. 60000 */
    uint32_t backoff_percent;    /* timeout multiplier x100; default 200; 100 .. 1600 */
    uint32_t max_retries;        /* retransmissions; default 4; 0 .. 32 */
    uint32_t deadline_ms;        /* whole resolution; default 3000; 1 .. 600000 */
    uint32_t cache_capacity;     /* entries; default 1024; 0 disables the cache */
    int use_cache;               /* default 1 */
    int strict_source;           /* replies only from the PMSP asked; default 1 */
    uint32_t connect_timeout_ms; /* pmc_connect TCP timeout; default 5000 */
    int read_environment;        /* consult SDP_PMSP / pmclient.yaml; default 1 */
    /* Appended (several PMSPs): see RequestOptions in pmclient/types.hpp. */
    uint32_t per_pmsp_timeout_ms; /* longest turn of one PMSP of a list; 0 (default): the
                                     deadline shared out among the PMSPs; 0 .. 600000 */
    uint32_t pmsp_fail_threshold; /* failed turns in a row before a PMSP is skipped; default 3;
                                     0: never */
    uint32_t pmsp_skip_ms;        /* how long a failing PMSP is asked last; default 30000 */
} pmc_options;

enum pmc_kind {
    PMC_KIND_ACCEPTED = 0,
    PMC_KIND_DENIED = 1,
    PMC_KIND_TIMEOUT = 2,
    PMC_KIND_ERROR = 3
};

typedef struct pmc_result {
    size_t size;          /* sizeof(pmc_result), set by the caller */
    int kind;             /* enum pmc_kind */
    char sdp_ip[46];      /* accepted: SDP Address IP (text) */
    uint16_t sdp_port;    /* accepted: SDP Address port */
    uint8_t pm_time;      /* accepted: PmTime */
    int64_t cache_ms;     /* accepted: cache lifetime in ms; 0 single use; -1 permanent */
    int from_cache;       /* 1 when answered from the cache */
    uint32_t attempts;    /* PMReq transmissions */
    uint64_t rtt_us;      /* last PMReq -> reply, microseconds */
    char pmsp[56];        /* PMSP that answered (else the last asked), "ip:port" / "[ip]:port" */
    char reason[160];     /* human-readable detail */
    uint32_t pmsps_tried; /* appended: PMSPs asked (0 from the cache) */
} pmc_result;

typedef struct pmc_connect_result {
    size_t size;           /* sizeof(pmc_connect_result), set by the caller */
    int fd;                /* connected TCP socket (caller closes) or -1 */
    int used_sdp;          /* 1: SDP Address, 0: Conventional Address */
    char peer[56];         /* connected to */
    char local[56];        /* CpIPAddr:CpPort */
    int sys_errno;         /* errno of the failing call */
    pmc_result resolution; /* resolution.size is set by the library */
} pmc_connect_result;

/* Fills *opts with the defaults and opts->size. */
PMCLIENT_API void pmc_options_init(pmc_options* opts);

/* Creates a resolver from opts (NULL: the defaults). It starts no thread and
 * opens no socket yet: sockets are opened by the first resolution of each
 * address family. Reads SDP_PMSP and pmclient.yaml here (read_environment). */
PMCLIENT_API int pmc_resolver_new(const pmc_options* opts, pmc_resolver** out);
/* Blocking calls in progress on other threads return PMC_E_CANCELLED and are
 * waited for; loop-driven resolutions not yet delivered get their callback,
 * with PMC_E_CANCELLED unless their outcome was already known, before this
 * returns (on the calling thread). Then the resolver and its sockets are
 * released. Must not be called from one of the resolver's own callbacks;
 * once it has begun no other thread may make a new call on the resolver
 * (blocking calls already in progress are fine: they are cancelled). */
PMCLIENT_API void pmc_resolver_free(pmc_resolver* r);

/* Resolves ap_ip:ap_port for the local endpoint cp_ip:cp_port (cp_ip NULL or
 * "" = the source address routed towards ap_ip; cp_port must not be 0).
 * Blocks at most the deadline. Returns PMC_OK, PMC_DENIED, PMC_TIMEOUT or an
 * error; *out (may be NULL) gets the details. */
PMCLIENT_API int pmc_resolve(pmc_resolver* r, const char* ap_ip, uint16_t ap_port,
                             const char* cp_ip, uint16_t cp_port, pmc_result* out);

/* Connect helper: bind a TCP socket, resolve, connect to the SDP Address or
 * fall back to the Conventional Address (on PMDeny, timeout, or a refused,
 * reset or timed-out connect to the SDP Address). Returns PMC_OK with
 * out->fd connected, or an error. */
PMCLIENT_API int pmc_connect(pmc_resolver* r, const char* ap_ip, uint16_t ap_port,
                             const char* cp_ip, pmc_connect_result* out);

/* ---- Resolutions driven by the caller's event loop ----------------------
 *
 *   pmc_resolve_start(r, "192.0.2.10", 80, NULL, cp_port, done, ctx, &id);
 *   while (pmc_pending(r) > 0) {
 *       struct pollfd fds[PMC_MAX_FDS];
 *       int n = pmc_fds(r, fds, PMC_MAX_FDS);
 *       poll(fds, (nfds_t)n, pmc_timeout_ms(r));
 *       pmc_process(r, fds, (size_t)n);   // reads, retransmits, calls done()
 *   }
 *
 * pmc_resolve_start returns PMC_OK when the resolution was taken: its
 * callback is then invoked exactly once, and never from inside
 * pmc_resolve_start; it is invoked from a later pmc_process,
 * pmc_process_fd, pmc_resolve_cancel or pmc_resolver_free call, on the
 * thread making that call. This holds for every outcome: accepted (also from
 * the cache: nothing is sent, and pmc_timeout_ms returns 0 until the next
 * process call delivers it), denied, timeout (retransmission schedule or
 * deadline exhausted), invalid arguments (an unparsable address, a zero
 * port...: PMC_E_INVAL with the reason in result->reason), socket errors,
 * busy, cancelled. pmc_resolve_start itself fails, and then never invokes
 * the callback, only for a NULL resolver or callback (PMC_E_INVAL), when the
 * resolver is being freed (PMC_E_CANCELLED), or for PMC_E_NOMEM /
 * PMC_E_INTERNAL.
 *
 * The callback gets the status that pmc_resolve would have returned and the
 * details; result->size is the library's sizeof(pmc_result) (a caller built
 * against a later, longer pmc_result reads fields beyond it only when
 * result->size covers them). result is valid during the callback only. A
 * callback may call any function of this API on the resolver (start another
 * resolution, cancel one, process) except pmc_resolver_free.
 *
 * The sockets: at most PMC_MAX_FDS UDP sockets (one per address family),
 * opened by pmc_resolve_start on first use of a family and kept until
 * pmc_resolver_free, so the set only changes inside pmc_resolve_start. Watch
 * each for readability (POLLIN), level-triggered; the library only reads from
 * and sends on them (it never blocks: they are non-blocking), the caller must
 * not. A loop re-reads pmc_fds and pmc_timeout_ms after each
 * pmc_resolve_start; when another thread starts a resolution, wake the loop
 * (an eventfd, a pipe) so that it does. */

#define PMC_MAX_FDS 2

struct pollfd; /* <poll.h> */

typedef void (*pmc_resolve_cb)(void* arg, uint64_t id, int status, const pmc_result* result);

/* Starts resolving ap_ip:ap_port for cp_ip:cp_port (as pmc_resolve: cp_ip
 * NULL or "" = the source address routed towards ap_ip; cp_port must not be
 * 0) with the resolver's options. *id (id may be NULL) gets the resolution's
 * identifier, never 0, for pmc_resolve_cancel and the callback. */
PMCLIENT_API int pmc_resolve_start(pmc_resolver* r, const char* ap_ip, uint16_t ap_port,
                                   const char* cp_ip, uint16_t cp_port, pmc_resolve_cb cb,
                                   void* arg, uint64_t* id);

/* Fills fds[0 .. min(n, count)) with the sockets to watch ({fd, POLLIN, 0})
 * and returns count (0 .. PMC_MAX_FDS), or a negative error. */
PMCLIENT_API int pmc_fds(pmc_resolver* r, struct pollfd* fds, size_t n);

/* Milliseconds until the next retransmission or deadline is due (rounded
 * up), 0 when something is due or a completion waits to be delivered, -1
 * when nothing is pending (wait for as long as you like). Suited to poll(2). */
PMCLIENT_API int pmc_timeout_ms(pmc_resolver* r);

/* Does the work that is due and delivers completions: reads every datagram
 * queued on each of fds[0 .. n) that is one of the resolver's sockets and has
 * revents set (other entries are ignored, so a poll array shared with other
 * descriptors may be passed as is), then runs the timers that are due
 * (retransmissions, deadlines), then invokes the callbacks. fds may be NULL
 * (n 0): timers and queued completions only. Returns PMC_OK or a negative
 * error. */
PMCLIENT_API int pmc_process(pmc_resolver* r, const struct pollfd* fds, size_t n);

/* The same for one descriptor reported readable (epoll, libuv...); fd -1:
 * timers and queued completions only (on a timeout). */
PMCLIENT_API int pmc_process_fd(pmc_resolver* r, int fd);

/* Cancels resolution `id`: its callback runs before this returns, with
 * PMC_E_CANCELLED, or with its outcome if that was already known but not
 * yet delivered. Returns PMC_OK, or PMC_E_INVAL when no such resolution
 * awaits its callback (unknown id, or already delivered). */
PMCLIENT_API int pmc_resolve_cancel(pmc_resolver* r, uint64_t id);

/* Loop-driven resolutions started and not yet delivered to their callback. */
PMCLIENT_API size_t pmc_pending(pmc_resolver* r);

/* Drops every cached answer (shared by both ways of resolving). */
PMCLIENT_API void pmc_cache_flush(pmc_resolver* r);

typedef struct pmc_counters {
    size_t size; /* sizeof(pmc_counters), set by the caller */
    uint64_t requests_started, cache_hits, cache_misses, pmreq_sent, retransmissions;
    uint64_t pmack_sent, reacks, accepted, denied, timeouts, errors, datagrams;
    uint64_t drop_malformed, drop_not_reply, drop_unknown, drop_tuple_mismatch;
    uint64_t drop_wrong_source, drop_duplicate, drop_invalid_accept;
    uint64_t receive_errors, send_errors;
    uint64_t pmsp_failovers, pmsp_skipped; /* appended: several PMSPs */
} pmc_counters;

PMCLIENT_API int pmc_get_counters(pmc_resolver* r, pmc_counters* out);

/* Checks a PMSP list as pmc_options.pmsp takes it (one "ip:port" /
 * "[ip]:port" / bare address, or up to 16 of them comma-separated). Returns
 * the number of PMSPs, or PMC_E_INVAL with a message naming the bad entry in
 * err[0 .. errlen) (err may be NULL). */
PMCLIENT_API int pmc_parse_pmsp_list(const char* text, char* err, size_t errlen);

PMCLIENT_API const char* pmc_strerror(int code);
PMCLIENT_API const char* pmc_version(void);
PMCLIENT_API int pmc_abi_version(void);

#ifdef __cplusplus
}
#endif

#endif /* PMCLIENT_PMCLIENT_H */
