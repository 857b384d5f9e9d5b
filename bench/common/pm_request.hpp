// SPDX-License-Identifier: Apache-2.0
// The PMReq the bench programs send: for `conventional`, from a
// (CpIPAddr, CpPort) that differs for every `seq` (10.x.y.z or fd00::seq,
// the conventional address's family), so that the server keeps one
// transaction per request as many distinct clients would make it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "pmclient/address.hpp"
#include "pmclient/message.hpp"

namespace bench {

inline pm::Message pm_request(const pm::Endpoint& conventional, std::uint64_t seq,
                              std::uint64_t assoc_handle) {
    pm::Message m;
    m.type = pm::MessageType::request;
    m.ipv = conventional.address.family();
    m.ap_addr = conventional.address;
    m.ap_port = conventional.port;
    if (m.ipv == pm::Family::v4) {
        m.cp_addr = pm::IpAddress::v4({10, static_cast<std::uint8_t>(seq >> 16),
                                       static_cast<std::uint8_t>(seq >> 8),
                                       static_cast<std::uint8_t>(seq)});
    } else {
        std::array<std::uint8_t, 16> b{0xfd};
        for (int i = 0; i < 8; ++i) {
            b[static_cast<std::size_t>(15 - i)] = static_cast<std::uint8_t>(seq >> (8 * i));
        }
        m.cp_addr = pm::IpAddress::v6(b);
    }
    m.cp_port = static_cast<std::uint16_t>(1024 + (seq >> 24) % 60000);
    m.assoc_handle = assoc_handle;
    return m;
}

}  // namespace bench
