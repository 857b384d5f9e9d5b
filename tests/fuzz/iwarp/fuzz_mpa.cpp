// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the MPA startup frame parser and both negotiation roles.
// Input byte 0 picks the role and split size; the rest is the peer's stream.
// Invariants: no crash; decode/encode round-trip for every decoded frame; the
// machine never consumes more than one frame.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "sdp/iwarp/mpa.hpp"

using namespace sdp::iwarp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) {
        return 0;
    }
    const std::uint8_t ctl = data[0];
    std::span<const std::uint8_t> in(data + 1, size - 1);

    auto d = decode_mpa_frame(in);
    if (d) {
        auto again = encode_mpa_frame(d->frame);
        if (!again) {
            std::abort();
        }
        auto back = decode_mpa_frame(*again);
        if (!back || !(back->frame == d->frame) || back->consumed != again->size()) {
            std::abort();
        }
    }

    MpaConfig cfg;
    cfg.crc = (ctl & 0x01) != 0;
    cfg.p2p = (ctl & 0x02) != 0;
    cfg.enhanced = (ctl & 0x04) == 0;
    const MpaRole role = (ctl & 0x08) != 0 ? MpaRole::initiator : MpaRole::responder;
    MpaNegotiator n(role, cfg);
    if (role == MpaRole::initiator) {
        (void)n.start();
        (void)n.take_output();
    }
    const std::size_t step = 1 + (ctl >> 4);
    std::size_t off = 0;
    std::size_t used = 0;
    while (off < in.size()) {
        const std::size_t k = std::min(step, in.size() - off);
        used += n.on_bytes(in.subspan(off, k));
        off += k;
    }
    if (used > in.size() || (used > kMpaHeaderSize + kMpaMaxPrivateData)) {
        std::abort();
    }
    if (n.state() == MpaState::request_received) {
        (void)n.accept(n.outcome().peer_private_data);
    }
    (void)n.take_output();
    return 0;
}
