// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the PM wire codec. decode() must be total, and encode() its
// exact inverse on the bytes that carry meaning.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <variant>

#include "pmclient/message.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    auto r = pm::decode({data, size});
    auto* m = std::get_if<pm::Message>(&r);
    if (!m) {
        return 0;
    }
    auto wire = pm::encode(*m);
    // Byte 0 and 1, the ports, the handle and the meaningful address bytes
    // must survive a round trip; Reserved and the IPv4 padding are zeroed.
    std::size_t addr = m->ipv == pm::Family::v4 ? 4 : 16;
    if (wire[0] != data[0] || wire[1] != data[1] || std::memcmp(&wire[4], &data[4], 12) != 0 ||
        std::memcmp(&wire[16], &data[16], addr) != 0 ||
        std::memcmp(&wire[32], &data[32], addr) != 0 || wire[2] != 0 || wire[3] != 0) {
        std::abort();
    }
    auto again = pm::decode(wire);
    auto* m2 = std::get_if<pm::Message>(&again);
    if (!m2) {
        std::abort();
    }
    m2->iwpm_trailer = m->iwpm_trailer;
    if (!(*m2 == *m)) {
        std::abort();
    }
    return 0;
}
