// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/listen_plan.hpp"

#include <algorithm>

namespace pmd {

ListenPlan plan_listen(std::span<const pm::Endpoint> wanted,
                       std::span<const pm::Endpoint> running) {
    ListenPlan plan;
    std::vector<bool> kept(running.size(), false);
    for (const pm::Endpoint& ep : wanted) {
        std::optional<std::size_t> keep;
        for (std::size_t i = 0; i < running.size(); ++i) {
            if (ep.port != 0 && running[i] == ep) {
                keep = i;
            }
        }
        if (keep) {
            kept[*keep] = true;
        }
        plan.items.push_back(ListenPlan::Item{ep, keep});
    }
    for (std::size_t i = 0; i < running.size(); ++i) {
        if (!kept[i]) {
            plan.close.push_back(i);
        }
    }
    return plan;
}

}  // namespace pmd
