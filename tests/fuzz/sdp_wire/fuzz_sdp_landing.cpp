// Fuzz target: SoftSession's direct placement into a reader's buffer, fed
// by a hostile peer. A session pair is set up over MPA without CRC, then
// the input is a list of records driving the Accepting Peer:
//   0: a DDP untagged Send segment [flags][mo:2][len:2][bytes], framed as an
//      FPDU (MSN tracked; flags bit 0: last segment, bit 1: keep the MSN);
//   1: begin_landing() on a zone of [size:2] bytes (exactly sized, so ASan
//      sees any write past it);
//   2: end_landing();
//   3: read() up to [size:2] bytes.
// Invariants: no crash or sanitizer report; landed() never exceeds the zone;
// end_landing() returns what landed() said.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "iwarp/ddp_rdmap.hpp"
#include "iwarp/fpdu.hpp"
#include "sdp/io/soft_session.hpp"

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

struct Reader {
    std::span<const std::uint8_t> in;
    bool take(std::size_t n, std::span<const std::uint8_t>& out) {
        if (in.size() < n) {
            return false;
        }
        out = in.first(n);
        in = in.subspan(n);
        return true;
    }
    bool u8(std::uint8_t& v) {
        std::span<const std::uint8_t> b;
        if (!take(1, b)) {
            return false;
        }
        v = b[0];
        return true;
    }
    bool u16(std::uint16_t& v) {
        std::span<const std::uint8_t> b;
        if (!take(2, b)) {
            return false;
        }
        v = static_cast<std::uint16_t>(b[0] | b[1] << 8);
        return true;
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    io::SoftSession c(iwarp::MpaRole::initiator, config());
    io::SoftSession s(iwarp::MpaRole::responder, config());
    c.set_mss(1460);
    s.set_mss(1460);
    if (!c.start()) {
        std::abort();
    }
    for (int i = 0; i < 8; ++i) {
        move(c, s);
        move(s, c);
    }
    if (s.sdp().state() != engine::State::established) {
        std::abort();  // the set-up itself is not under test
    }
    Reader r{std::span<const std::uint8_t>(data, size)};
    std::unique_ptr<std::vector<std::uint8_t>> zone;
    std::vector<std::uint8_t> sink;
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
                s.on_bytes(fpdu);
                if (h.last && (flags & 2) == 0) {
                    ++msn;
                }
                break;
            }
            case 1: {
                std::uint16_t n = 0;
                if (!r.u16(n) || s.landing()) {
                    break;
                }
                zone = std::make_unique<std::vector<std::uint8_t>>(n);
                if (n > 0 && !s.begin_landing(*zone)) {
                    zone.reset();
                }
                break;
            }
            case 2: {
                const std::size_t before = s.landed();
                if (s.end_landing() != before || s.landing()) {
                    std::abort();
                }
                zone.reset();
                break;
            }
            case 3: {
                std::uint16_t n = 0;
                if (!r.u16(n)) {
                    break;
                }
                sink.resize(n);
                (void)s.sdp().read(sink);
                break;
            }
        }
        if (s.landing() && (!zone || s.landed() > zone->size())) {
            std::abort();
        }
        move(s, c);  // credit updates, Terminates
    }
    (void)s.end_landing();
    return 0;
}
