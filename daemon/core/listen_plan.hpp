// SPDX-License-Identifier: Apache-2.0
// The reload diff of the UDP listen addresses, without sockets: which of the
// running listeners a new `listen:` list keeps, which addresses need new
// sockets and which listeners close. io/listen_set.hpp carries it out.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "pmclient/address.hpp"

namespace pmd {

struct ListenPlan {
    struct Item {
        pm::Endpoint endpoint;
        std::optional<std::size_t> keep;  // index of the running listener kept; nullopt: open
    };
    std::vector<Item> items;         // one per wanted address, in the order wanted
    std::vector<std::size_t> close;  // indices of running listeners no item keeps
};

// A running listener is kept for a wanted address equal to its bound one;
// a wanted port 0 ("any port") always gets a new socket.
ListenPlan plan_listen(std::span<const pm::Endpoint> wanted, std::span<const pm::Endpoint> running);

}  // namespace pmd
