/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol visibility for libpmclient. The shared library is built with
 * -fvisibility=hidden; only declarations marked PMCLIENT_API are exported. */
#ifndef PMCLIENT_EXPORT_H
#define PMCLIENT_EXPORT_H

#if defined(__GNUC__)
#define PMCLIENT_API __attribute__((visibility("default")))
#else
#define PMCLIENT_API
#endif

#endif /* PMCLIENT_EXPORT_H */
