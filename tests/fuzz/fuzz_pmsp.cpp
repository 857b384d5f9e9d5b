// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the PMSP core's packet path. The input is a sequence of
// datagrams, each prefixed by one length byte and one control byte (source
// port selector and clock step). Invariants: no crash, the table stays within
// max_transactions, a reply is never larger than its request and only a
// PMReq is ever answered. An on-demand service's opens are answered (a
// port, or a deny) one step later, or never; the waiting transactions
// stay within max_pending_opens.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <vector>

#include "daemon/core/pmsp.hpp"

namespace {

std::shared_ptr<const pmd::Registry> registry() {
    static auto r = [] {
        std::vector<pmd::Service> v;
        pmd::Service a;
        a.name = "exact";
        a.conventional_address = *pm::IpAddress::parse("192.0.2.10");
        a.conventional_port = 80;
        a.sdp = {*pm::Endpoint::parse("198.51.100.1:8080"),
                 *pm::Endpoint::parse("[2001:db8::1]:8080")};
        a.policy = pmd::Policy::round_robin;
        a.pm_time = 120;
        v.push_back(a);
        pmd::Service b;
        b.name = "any";
        b.conventional_port = 0x0050;
        b.sdp = {*pm::Endpoint::parse("0.0.0.0:9000")};
        b.policy = pmd::Policy::hash;
        b.allow = {*pm::Prefix::parse("10.0.0.0/8"), *pm::Prefix::parse("::/0")};
        v.push_back(b);
        pmd::Service c;
        c.name = "on-demand";
        c.conventional_address = *pm::IpAddress::parse("192.0.2.10");
        c.conventional_port = 90;
        c.sdp = {*pm::Endpoint::parse("0.0.0.0:7001")};
        c.on_demand = pmd::OnDemand{{7001, 7002}, false};
        v.push_back(c);
        return std::make_shared<const pmd::Registry>(std::move(v));
    }();
    return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    pmd::Limits limits;
    limits.max_transactions = 16;
    limits.ack_timeout = std::chrono::milliseconds(100);
    limits.max_pending_opens = 4;
    pmd::Pmsp core(limits, registry(), 1);
    std::vector<pm::Message> opens;  // waiting for the fuzzer's "pool" answer
    pmd::TimePoint now{};
    auto local = *pm::IpAddress::parse("192.0.2.10");
    std::size_t i = 0;
    while (i + 2 <= size) {
        std::size_t len = data[i];
        std::uint8_t ctl = data[i + 1];
        i += 2;
        if (len > size - i) {
            len = size - i;
        }
        pm::Endpoint src{*pm::IpAddress::parse(ctl & 0x80 ? "10.1.2.3" : "203.0.113.9"),
                         static_cast<std::uint16_t>(40000 + (ctl & 0x7))};
        auto r = core.on_datagram({data + i, len}, src, local, now);
        if (r.reply &&
            (r.reply->size() > len || len < pm::kMessageSize || ((data[i] >> 4) & 3) != 0)) {
            std::abort();
        }
        if (core.transactions() > limits.max_transactions ||
            core.pending() > limits.max_pending_opens) {
            std::abort();
        }
        // The "pool" answers the oldest open: a port, a deny, or not yet.
        if (!opens.empty() && (ctl & 0x40) != 0) {
            const bool give = (ctl & 0x01) != 0;
            auto done = core.on_port(opens.front(),
                                     give ? std::optional<std::uint16_t>(7001) : std::nullopt,
                                     pmd::Outcome::denied_open_failed, now);
            if (!done.orphan && !done.reply) {
                std::abort();  // a live transaction always gets its answer
            }
            opens.erase(opens.begin());
        }
        if (r.pool && r.pool->kind == pmd::PoolNote::Kind::open && opens.size() < 64) {
            opens.push_back(r.pool->request);
        }
        now += std::chrono::milliseconds((ctl >> 3) & 0x0f);
        core.on_timer(now);
        i += len;
    }
    return 0;
}
