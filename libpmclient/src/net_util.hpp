// SPDX-License-Identifier: Apache-2.0
// Small socket helpers shared by the resolver and the connect helper
// (internal).
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "pmclient/address.hpp"
#include "pmclient/sockaddr.hpp"

namespace pmclient::detail {

inline int family_of(const pm::IpAddress& a) {
    return a.is_v4() ? AF_INET : AF_INET6;
}

using pm::route_source;

}  // namespace pmclient::detail
