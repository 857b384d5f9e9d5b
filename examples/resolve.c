/* SPDX-License-Identifier: Apache-2.0 */
/* pm-resolve: ask an SDP Port Mapper for the SDP Address of a service.
 *
 *   pm-resolve [--pmsp HOST:PORT[,HOST:PORT...]] [--deadline MS]
 *              [--initial-timeout MS] [--retries N] AP_IP AP_PORT [CP_IP CP_PORT]
 *
 * --pmsp takes one PMSP or a comma-separated list of up to 16 (replicas,
 * asked in order within the one deadline, see libpmclient(3)).
 *
 * Prints one line: "accept IP:PORT pm_time=N (LIFETIME) rtt=Xms", "deny" or
 * "timeout". Exit status: 0 accept, 1 deny, 2 timeout, 64 usage error,
 * 70 internal error, 71 socket error, 78 configuration error (SDP_PMSP or
 * pmclient.yaml). Without CP_IP/CP_PORT a TCP socket is bound to an ephemeral
 * port, as a real client would before connecting, and kept open while
 * resolving. Built against the C API only. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pmclient/pmclient.h"

enum { EXIT_ACCEPT = 0, EXIT_DENY = 1, EXIT_TIMEOUT = 2, EXIT_USAGE = 64 };

static void usage(void) {
    fprintf(
        stderr,
        "usage: pm-resolve [--pmsp HOST:PORT[,HOST:PORT...]] [--deadline MS]\n"
        "                  [--initial-timeout MS] [--retries N] AP_IP AP_PORT [CP_IP CP_PORT]\n");
}

static int parse_uint(const char* s, unsigned long max, unsigned long* out) {
    char* end = NULL;
    if (s == NULL || *s == '\0' || *s == '-' || *s == '+') {
        return 0;
    }
    unsigned long v = strtoul(s, &end, 10);
    if (*end != '\0' || v > max) {
        return 0;
    }
    *out = v;
    return 1;
}

static int parse_port(const char* s, uint16_t* out) {
    unsigned long v = 0;
    if (!parse_uint(s, 65535, &v) || v == 0) {
        return 0;
    }
    *out = (uint16_t)v;
    return 1;
}

/* Binds a TCP socket to an ephemeral port; returns the fd (kept open while
 * resolving) and the port, or -1. */
static int bind_ephemeral(const char* ap_ip, uint16_t* port) {
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof ss);
    int family = strchr(ap_ip, ':') != NULL ? AF_INET6 : AF_INET;
    if (family == AF_INET) {
        struct sockaddr_in* sin = (struct sockaddr_in*)&ss;
        sin->sin_family = AF_INET;
        len = sizeof *sin;
    } else {
        struct sockaddr_in6* sin6 = (struct sockaddr_in6*)&ss;
        sin6->sin6_family = AF_INET6;
        len = sizeof *sin6;
    }
    int fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0) {
        return -1;
    }
    if (bind(fd, (struct sockaddr*)&ss, len) != 0 ||
        getsockname(fd, (struct sockaddr*)&ss, &len) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(family == AF_INET ? ((struct sockaddr_in*)&ss)->sin_port
                                    : ((struct sockaddr_in6*)&ss)->sin6_port);
    return fd;
}

static void print_lifetime(const pmc_result* r) {
    if (r->cache_ms == 0) {
        printf("single-use");
    } else if (r->cache_ms < 0) {
        printf("permanent");
    } else if (r->cache_ms % 1000 == 0) {
        printf("%llds", (long long)(r->cache_ms / 1000));
    } else {
        printf("%.2fs", (double)r->cache_ms / 1000.0);
    }
}

int main(int argc, char** argv) {
    pmc_options opts;
    pmc_options_init(&opts);
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; ++i) {
        unsigned long v = 0;
        const char* arg = argv[i];
        if (strcmp(arg, "--") == 0) {
            ++i;
            break;
        }
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage();
            return 0;
        }
        if (i + 1 >= argc) {
            usage();
            return EXIT_USAGE;
        }
        const char* val = argv[++i];
        char why[160];
        if (strcmp(arg, "--pmsp") == 0) {
            if (pmc_parse_pmsp_list(val, why, sizeof why) < 0) {
                fprintf(stderr, "pm-resolve: bad --pmsp: %s\n", why);
                return EXIT_USAGE;
            }
            opts.pmsp = val;
        } else if (strcmp(arg, "--deadline") == 0 && parse_uint(val, 600000, &v) && v > 0) {
            opts.deadline_ms = (uint32_t)v;
        } else if (strcmp(arg, "--initial-timeout") == 0 && parse_uint(val, 60000, &v) && v > 0) {
            opts.initial_timeout_ms = (uint32_t)v;
        } else if (strcmp(arg, "--retries") == 0 && parse_uint(val, 32, &v)) {
            opts.max_retries = (uint32_t)v;
        } else {
            fprintf(stderr, "pm-resolve: bad option %s %s\n", arg, val);
            usage();
            return EXIT_USAGE;
        }
    }
    int rest = argc - i;
    if (rest != 2 && rest != 4) {
        usage();
        return EXIT_USAGE;
    }
    const char* ap_ip = argv[i];
    uint16_t ap_port = 0;
    if (!parse_port(argv[i + 1], &ap_port)) {
        fprintf(stderr, "pm-resolve: invalid AP_PORT '%s'\n", argv[i + 1]);
        return EXIT_USAGE;
    }
    const char* cp_ip = NULL;
    uint16_t cp_port = 0;
    int tcp_fd = -1;
    if (rest == 4) {
        cp_ip = argv[i + 2];
        if (!parse_port(argv[i + 3], &cp_port)) {
            fprintf(stderr, "pm-resolve: invalid CP_PORT '%s'\n", argv[i + 3]);
            return EXIT_USAGE;
        }
    } else {
        tcp_fd = bind_ephemeral(ap_ip, &cp_port);
        if (tcp_fd < 0) {
            perror("pm-resolve: bind");
            return 71;
        }
    }

    pmc_resolver* r = NULL;
    int rc = pmc_resolver_new(&opts, &r);
    if (rc != PMC_OK) {
        fprintf(stderr, "pm-resolve: %s\n", pmc_strerror(rc));
        const char* env = getenv("SDP_PMSP");
        char why[160];
        if (rc == PMC_E_CONFIG && opts.pmsp == NULL && env != NULL && *env != '\0' &&
            pmc_parse_pmsp_list(env, why, sizeof why) < 0) {
            fprintf(stderr, "pm-resolve: SDP_PMSP: %s\n", why);
        }
        if (tcp_fd >= 0) {
            close(tcp_fd);
        }
        return rc == PMC_E_INVAL ? EXIT_USAGE : rc == PMC_E_CONFIG ? 78 : 70;
    }
    pmc_result res;
    memset(&res, 0, sizeof res);
    res.size = sizeof res;
    rc = pmc_resolve(r, ap_ip, ap_port, cp_ip, cp_port, &res);
    int status;
    switch (rc) {
        case PMC_OK:
            printf("accept %s%s%s:%u pm_time=%u (", strchr(res.sdp_ip, ':') ? "[" : "", res.sdp_ip,
                   strchr(res.sdp_ip, ':') ? "]" : "", (unsigned)res.sdp_port,
                   (unsigned)res.pm_time);
            print_lifetime(&res);
            printf(") rtt=%.1fms%s\n", (double)res.rtt_us / 1000.0,
                   res.from_cache ? " cached" : "");
            status = EXIT_ACCEPT;
            break;
        case PMC_DENIED:
            printf("deny\n");
            status = EXIT_DENY;
            break;
        case PMC_TIMEOUT:
            printf("timeout\n");
            status = EXIT_TIMEOUT;
            break;
        default:
            fprintf(stderr, "pm-resolve: %s: %s\n", pmc_strerror(rc), res.reason);
            status = rc == PMC_E_INVAL    ? EXIT_USAGE
                     : rc == PMC_E_CONFIG ? 78
                     : rc == PMC_E_SOCKET ? 71
                                          : 70;
            break;
    }
    pmc_resolver_free(r);
    if (tcp_fd >= 0) {
        close(tcp_fd);
    }
    return status;
}
