// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the SDP wire codec. decode() must be total and encode() its
// exact inverse apart from the reserved bits, which are sent as zero.
#include <cstdint>
#include <cstdlib>
#include <variant>
#include <vector>

#include "sdp/wire/message.hpp"

namespace w = sdp::wire;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    auto r = w::decode({data, size});
    auto* m = std::get_if<w::Message>(&r);
    if (!m)
        return 0;
    std::vector<std::uint8_t> in(data, data + size);
    // Clear what is reserved (and the SuspComm constants) before comparing.
    in[2] &= w::flag::known;
    switch (w::mid_of(m->body)) {
        case w::Mid::hello:
        case w::Mid::hello_ack:
            in[18] = 0;
            break;
        case w::Mid::mode_change:
            in[16] = in[17] = in[18] = 0;
            in[19] &= 0x0F;
            break;
        case w::Mid::susp_comm:
            in[16] = in[17] = in[18] = in[19] = 0;
            in[22] = 0;
            in[23] = 1;
            break;
        default:
            break;
    }
    const auto out = w::encode(*m);
    if (out != in || w::encoded_size(*m) != size)
        std::abort();
    auto again = w::decode(out);
    auto* m2 = std::get_if<w::Message>(&again);
    if (!m2 || !(*m2 == *m))
        std::abort();
    return 0;
}
