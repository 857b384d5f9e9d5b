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
 * Thread safety: a pmc_resolver may be used from several threads at once;
 * concurrent calls share one UDP socket per address family. */
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
    const char* pmsp;            /* "1.2.3.4:3935" / "[::1]:3935"; NULL: env, file, ApIPAddr */
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
} pmc_options;

enum pmc_kind {
    PMC_KIND_ACCEPTED = 0,
    PMC_KIND_DENIED = 1,
    PMC_KIND_TIMEOUT = 2,
    PMC_KIND_ERROR = 3
};

typedef struct pmc_result {
    size_t size;       /* sizeof(pmc_result), set by the caller */
    int kind;          /* enum pmc_kind */
    char sdp_ip[46];   /* accepted: SDP Address IP (text) */
    uint16_t sdp_port; /* accepted: SDP Address port */
    uint8_t pm_time;   /* accepted: PmTime */
    int64_t cache_ms;  /* accepted: cache lifetime in ms; 0 single use; -1 permanent */
    int from_cache;    /* 1 when answered from the cache */
    uint32_t attempts; /* PMReq transmissions */
    uint64_t rtt_us;   /* last PMReq -> reply, microseconds */
    char pmsp[56];     /* PMSP asked, "ip:port" / "[ip]:port" */
    char reason[160];  /* human-readable detail */
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

/* Creates a resolver (one background I/O thread). opts may be NULL. */
PMCLIENT_API int pmc_resolver_new(const pmc_options* opts, pmc_resolver** out);
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

PMCLIENT_API void pmc_cache_flush(pmc_resolver* r);

typedef struct pmc_counters {
    size_t size; /* sizeof(pmc_counters), set by the caller */
    uint64_t requests_started, cache_hits, cache_misses, pmreq_sent, retransmissions;
    uint64_t pmack_sent, reacks, accepted, denied, timeouts, errors, datagrams;
    uint64_t drop_malformed, drop_not_reply, drop_unknown, drop_tuple_mismatch;
    uint64_t drop_wrong_source, drop_duplicate, drop_invalid_accept;
    uint64_t receive_errors, send_errors;
} pmc_counters;

PMCLIENT_API int pmc_get_counters(pmc_resolver* r, pmc_counters* out);

PMCLIENT_API const char* pmc_strerror(int code);
PMCLIENT_API const char* pmc_version(void);
PMCLIENT_API int pmc_abi_version(void);

#ifdef __cplusplus
}
#endif

#endif /* PMCLIENT_PMCLIENT_H */
