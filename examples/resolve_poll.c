/* SPDX-License-Identifier: Apache-2.0 */
/* pm-resolve-poll: resolve several Conventional Addresses at once from one
 * poll(2) loop, with the loop-driven C API (pmc_resolve_start, pmc_fds,
 * pmc_timeout_ms, pmc_process), the way an event-driven program would.
 *
 *   pm-resolve-poll [--pmsp HOST:PORT[,HOST:PORT...]] [--deadline MS]
 *                   CP_IP AP_IP:AP_PORT...
 *
 * AP_IP:AP_PORT is "192.0.2.1:80" or "[2001:db8::1]:80". Each resolution
 * uses its own CpPort (40000 + its position) from CP_IP. Prints one line per
 * address as its outcome arrives: "AP accept IP:PORT", "AP deny",
 * "AP timeout" or "AP error: REASON". Exit status: 0 when every address was
 * accepted, 1 otherwise, 64 usage error, 70 internal error. Built against
 * the C API only. */
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmclient/pmclient.h"

enum { EXIT_USAGE = 64, EXIT_INTERNAL = 70, MAX_ADDRS = 64 };

struct query {
    char ap_ip[64];
    uint16_t ap_port;
    const char* text; /* as given */
    int status;
    int done;
};

static void usage(void) {
    fprintf(stderr,
            "usage: pm-resolve-poll [--pmsp HOST:PORT[,HOST:PORT...]] [--deadline MS]\n"
            "                       CP_IP AP_IP:AP_PORT...\n");
}

/* Splits "a.b.c.d:port" or "[v6]:port". */
static int split(const char* text, struct query* q) {
    const char* colon = strrchr(text, ':');
    const char* ip = text;
    size_t len;
    if (colon == NULL) {
        return 0;
    }
    len = (size_t)(colon - text);
    if (text[0] == '[') {
        if (len < 2 || text[len - 1] != ']') {
            return 0;
        }
        ip = text + 1;
        len -= 2;
    }
    if (len == 0 || len >= sizeof q->ap_ip) {
        return 0;
    }
    memcpy(q->ap_ip, ip, len);
    q->ap_ip[len] = '\0';
    char* end = NULL;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (*(colon + 1) == '\0' || *end != '\0' || port == 0 || port > 65535) {
        return 0;
    }
    q->ap_port = (uint16_t)port;
    q->text = text;
    return 1;
}

/* Runs inside pmc_process (never inside pmc_resolve_start). */
static void on_resolved(void* arg, uint64_t id, int status, const pmc_result* res) {
    struct query* q = arg;
    (void)id;
    q->status = status;
    q->done = 1;
    switch (status) {
        case PMC_OK:
            printf("%s accept %s%s%s:%u%s\n", q->text, strchr(res->sdp_ip, ':') ? "[" : "",
                   res->sdp_ip, strchr(res->sdp_ip, ':') ? "]" : "", (unsigned)res->sdp_port,
                   res->from_cache ? " cached" : "");
            break;
        case PMC_DENIED:
            printf("%s deny\n", q->text);
            break;
        case PMC_TIMEOUT:
            printf("%s timeout\n", q->text);
            break;
        default:
            printf("%s error: %s: %s\n", q->text, pmc_strerror(status), res->reason);
            break;
    }
}

int main(int argc, char** argv) {
    pmc_options opts;
    pmc_options_init(&opts);
    int i = 1;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (strcmp(argv[i], "--pmsp") == 0) {
            opts.pmsp = argv[i + 1];
        } else if (strcmp(argv[i], "--deadline") == 0) {
            opts.deadline_ms = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        } else {
            usage();
            return EXIT_USAGE;
        }
    }
    if (argc - i < 2 || argc - i - 1 > MAX_ADDRS) {
        usage();
        return EXIT_USAGE;
    }
    const char* cp_ip = argv[i++];
    static struct query queries[MAX_ADDRS];
    int n = 0;
    for (; i < argc; ++i, ++n) {
        if (!split(argv[i], &queries[n])) {
            fprintf(stderr, "pm-resolve-poll: invalid address '%s'\n", argv[i]);
            return EXIT_USAGE;
        }
    }

    pmc_resolver* r = NULL;
    int rc = pmc_resolver_new(&opts, &r);
    if (rc != PMC_OK) {
        fprintf(stderr, "pm-resolve-poll: %s\n", pmc_strerror(rc));
        return rc == PMC_E_INVAL ? EXIT_USAGE : EXIT_INTERNAL;
    }
    for (int k = 0; k < n; ++k) {
        rc = pmc_resolve_start(r, queries[k].ap_ip, queries[k].ap_port, cp_ip,
                               (uint16_t)(40000 + k), on_resolved, &queries[k], NULL);
        if (rc != PMC_OK) {
            fprintf(stderr, "pm-resolve-poll: %s\n", pmc_strerror(rc));
            pmc_resolver_free(r);
            return EXIT_INTERNAL;
        }
    }

    /* The event loop. A real program adds its own descriptors to `fds`;
     * pmc_process ignores the ones that are not the resolver's. */
    while (pmc_pending(r) > 0) {
        struct pollfd fds[PMC_MAX_FDS];
        int nfds = pmc_fds(r, fds, PMC_MAX_FDS);
        if (nfds < 0 || poll(fds, (nfds_t)nfds, pmc_timeout_ms(r)) < 0 ||
            pmc_process(r, fds, (size_t)nfds) != PMC_OK) {
            perror("pm-resolve-poll");
            pmc_resolver_free(r);
            return EXIT_INTERNAL;
        }
    }
    pmc_resolver_free(r);

    int status = 0;
    for (int k = 0; k < n; ++k) {
        if (!queries[k].done || queries[k].status != PMC_OK) {
            status = 1;
        }
    }
    return status;
}
