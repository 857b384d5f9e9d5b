// SPDX-License-Identifier: Apache-2.0
// Fuzz target: SoftSession's direct placement into a reader's buffer, fed
// by a hostile peer. Two Accepting Peers are set up over MPA without CRC
// and get the same input: one lands into zones, the other never does. The
// input is a list of records:
//   0: a DDP untagged Send segment [flags][mo:2][len:2][bytes], framed as an
//      FPDU (MSN tracked; flags bit 0: last segment, bit 1: keep the MSN);
//   1: begin_landing() on a zone of [size:2] bytes (exactly sized, so ASan
//      sees any write past it);
//   2: end_landing();
//   3: read() up to [size:2] bytes.
// After every record both readers take what they can, as SoftChannel would
// (the landing one ends its landing once something is readable), so both
// return credit at the same points.
// Invariants: no crash or sanitizer report; landed() never exceeds the zone;
// end_landing() returns what landed() said; both peers deliver the same
// bytes in the same order and end in the same state with the same counts.
// The engine takes landed, kept and copied payloads through one receive path
// (Connection::on_message with a Placement), so a difference here points at
// SoftSession's landing bookkeeping or a placement-specific branch creeping
// back into the engine.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "sdp/bytes/byte_order.hpp"
#include "sdp/iwarp/ddp_rdmap.hpp"
#include "sdp/iwarp/fpdu.hpp"
#include "sdp/soft/soft_session.hpp"

using namespace sdp;

namespace {

io::SessionConfig config() {
    io::SessionConfig c;
    c.crc = false;
    c.engine.recv_buf_size = 2048;
    c.engine.send_buf_size = 2048;
    c.engine.recv_buf_count = 4;
    return c;
}

void move(io::SoftSession& from, io::SoftSession& to) {
    std::vector<std::uint8_t> out;
    do {
        from.take_output(out);
    } while (from.has_output());
    if (!out.empty()) {
        to.on_bytes(out);
    }
}

// One Accepting Peer and the byte stream it delivered.
struct Peer {
    io::SoftSession s{iwarp::MpaRole::responder, config()};
    std::vector<std::uint8_t> got;
    std::unique_ptr<std::vector<std::uint8_t>> zone;

    void end_landing() {
        const std::size_t before = s.landed();
        const std::size_t n = s.end_landing();
        if (n != before || s.landing() || (n > 0 && (!zone || n > zone->size()))) {
            std::abort();
        }
        if (n > 0) {
            got.insert(got.end(), zone->begin(), zone->begin() + static_cast<std::ptrdiff_t>(n));
        }
        zone.reset();
    }
    void read(std::size_t max) {
        std::vector<std::uint8_t> buf(max);
        const std::size_t n = s.sdp().read(buf);
        got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    }
    // Everything readable now; the landing ends first if anything is (the
    // reader's read_some returns).
    void drain() {
        if (s.landing() && s.sdp().readable() == 0) {
            return;
        }
        if (s.landing()) {
            end_landing();
        }
        while (s.sdp().readable() > 0) {
            read(4096);
        }
    }
    void discard_output() {
        std::vector<std::uint8_t> out;
        do {
            out.clear();
            s.take_output(out);
        } while (s.has_output());
    }
};

bool establish(io::SoftSession& c, io::SoftSession& s) {
    c.set_mss(1460);
    s.set_mss(1460);
    for (int i = 0; i < 8; ++i) {
        move(c, s);
        move(s, c);
    }
    return s.sdp().state() == engine::State::established;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    // Two identical set-ups (the same Hello, the same MSeqs).
    io::SoftSession ca(iwarp::MpaRole::initiator, config());
    io::SoftSession cb(iwarp::MpaRole::initiator, config());
    Peer a, b;
    if (!ca.start() || !cb.start() || !establish(ca, a.s) || !establish(cb, b.s)) {
        std::abort();  // the set-up itself is not under test
    }
    bytes::LeReader r{std::span<const std::uint8_t>(data, size)};
    std::uint32_t msn = 1;
    std::uint8_t op = 0;
    while (r.u8(op)) {
        switch (op % 4) {
            case 0: {
                std::uint8_t flags = 0;
                std::uint16_t mo = 0, len = 0;
                std::span<const std::uint8_t> payload;
                if (!r.u8(flags) || !r.u16(mo) || !r.u16(len) ||
                    !r.take(std::min<std::size_t>(len, r.in.size()), payload)) {
                    break;
                }
                iwarp::DdpHeader h;
                h.opcode = static_cast<std::uint8_t>(iwarp::Opcode::send);
                h.last = (flags & 1) != 0;
                h.qn = 0;
                h.msn = msn;
                h.mo = mo;
                std::vector<std::uint8_t> hdr;
                iwarp::encode_ddp(hdr, h);
                std::vector<std::uint8_t> fpdu;
                iwarp::append_fpdu(fpdu, hdr, payload, false);
                a.s.on_bytes(fpdu);
                b.s.on_bytes(fpdu);
                if (h.last && (flags & 2) == 0) {
                    ++msn;
                }
                break;
            }
            case 1: {
                std::uint16_t n = 0;
                if (!r.u16(n) || a.s.landing() || a.s.sdp().readable() > 0) {
                    break;
                }
                a.zone = std::make_unique<std::vector<std::uint8_t>>(n);
                if (n == 0 || !a.s.begin_landing(*a.zone)) {
                    a.zone.reset();
                }
                break;
            }
            case 2:
                a.end_landing();
                break;
            case 3: {
                std::uint16_t n = 0;
                if (!r.u16(n)) {
                    break;
                }
                if (a.s.landing()) {
                    a.end_landing();
                }
                a.read(n);
                b.read(n);
                break;
            }
        }
        if (a.s.landing() && (!a.zone || a.s.landed() > a.zone->size())) {
            std::abort();
        }
        a.drain();
        b.drain();
        a.discard_output();
        b.discard_output();
    }
    if (a.s.landing()) {
        a.end_landing();
    }
    a.drain();
    b.drain();
    const auto& ea = a.s.sdp();
    const auto& eb = b.s.sdp();
    if (a.got != b.got || ea.state() != eb.state() || ea.error() != eb.error() ||
        ea.stats().bytes_received != eb.stats().bytes_received ||
        ea.stats().messages_received != eb.stats().messages_received ||
        ea.oob_pending() != eb.oob_pending()) {
        std::abort();
    }
    return 0;
}
