// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the FPDU / DDP / RDMAP receive path of the QP engine.
// Byte 0: bit 0 CRC, bit 1 role, bits 4-7 split size. The engine has posted
// receive buffers and registered regions so placement paths are reached.
// Invariants: no crash, no write outside the registered buffers (ASan), at
// most one Terminate, and the engine's output is well-formed FPDUs.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "sdp/iwarp/ddp_rdmap.hpp"
#include "sdp/iwarp/fpdu.hpp"
#include "sdp/iwarp/qp.hpp"

using namespace sdp::iwarp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) {
        return 0;
    }
    const std::uint8_t ctl = data[0];
    std::span<const std::uint8_t> in(data + 1, size - 1);
    QpConfig cfg;
    cfg.crc = (ctl & 0x01) != 0;
    cfg.role = (ctl & 0x02) != 0 ? MpaRole::responder : MpaRole::initiator;
    cfg.ird = 4;
    cfg.ord = 4;
    QpEngine qp(cfg);
    std::vector<std::uint8_t> bufs[3] = {std::vector<std::uint8_t>(64),
                                         std::vector<std::uint8_t>(1),
                                         std::vector<std::uint8_t>(4096)};
    for (std::uint64_t i = 0; i < 3; ++i) {
        (void)qp.post_recv(RecvWr{i, bufs[i]});
    }
    std::vector<std::uint8_t> mem_w(256), mem_r(256, 0xAB), mem_l(256);
    (void)qp.reg_mr(mem_w, 0, kAccessRemoteWrite);         // STag 0x15A
    (void)qp.reg_mr(mem_r, 0x1000, kAccessRemoteRead);     // STag 0x25A
    auto l = qp.reg_mr(mem_l, 0x2000, kAccessLocalWrite);  // STag 0x35A
    SendWr rd;
    rd.opcode = WrOpcode::rdma_read;
    rd.remote_stag = 0x100;
    rd.local_stag = l->stag;
    rd.local_to = 0x2000;
    rd.read_length = 256;
    (void)qp.post_send(rd);

    std::vector<std::uint8_t> out = qp.take_output(1 << 20);
    const std::size_t step = 1 + (ctl >> 4) * 7;
    std::size_t off = 0;
    while (off < in.size()) {
        const std::size_t k = std::min(step, in.size() - off);
        qp.on_bytes(in.subspan(off, k));
        auto more = qp.take_output(1 << 20);
        out.insert(out.end(), more.begin(), more.end());
        off += k;
    }
    // Our own output must parse as FPDUs with valid DDP headers.
    FpduReceiver rx(cfg.crc);
    int terminates = 0;
    rx.feed(out, [&](std::span<const std::uint8_t> u) {
        auto seg = decode_ddp(u);
        if (!seg) {
            std::abort();
        }
        if (seg->header.opcode == static_cast<std::uint8_t>(Opcode::terminate)) {
            ++terminates;
            if (!decode_terminate(seg->payload)) {
                std::abort();
            }
        }
        return true;
    });
    if (rx.error() || !rx.at_boundary() || terminates > 1) {
        std::abort();
    }
    (void)qp.poll_all();
    return 0;
}
