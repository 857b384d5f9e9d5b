// SPDX-License-Identifier: Apache-2.0
#include "sdp/iwarp/ddp_rdmap.hpp"

#include "sdp/bytes/byte_order.hpp"

namespace sdp::iwarp {

const char* to_string(DdpError e) {
    switch (e) {
        case DdpError::too_short:
            return "DDP segment shorter than its headers";
    }
    return "unknown DDP error";
}

std::uint16_t DdpHeader::ctrl() const {
    return static_cast<std::uint16_t>((tagged ? kCtrlTagged : 0) | (last ? kCtrlLast : 0) |
                                      (ddp_version & 3) << 8 | (rdmap_version & 3) << 6 |
                                      (opcode & 0xF));
}

Result<DdpSegment, DdpError> decode_ddp(std::span<const std::uint8_t> ulpdu) {
    if (ulpdu.size() < 2) {
        return unexpected(DdpError::too_short);
    }
    DdpHeader h;
    const std::uint16_t ctrl = bytes::get16(ulpdu.data());
    h.tagged = (ctrl & kCtrlTagged) != 0;
    h.last = (ctrl & kCtrlLast) != 0;
    h.ddp_version = static_cast<std::uint8_t>((ctrl >> 8) & 3);
    h.rdmap_version = static_cast<std::uint8_t>((ctrl >> 6) & 3);
    h.opcode = static_cast<std::uint8_t>(ctrl & 0xF);
    if (ulpdu.size() < h.size()) {
        return unexpected(DdpError::too_short);
    }
    const std::uint8_t* p = ulpdu.data() + 2;
    if (h.tagged) {
        h.stag = bytes::get32(p);
        h.to = bytes::get64(p + 4);
    } else {
        h.inval_stag = bytes::get32(p);
        h.qn = bytes::get32(p + 4);
        h.msn = bytes::get32(p + 8);
        h.mo = bytes::get32(p + 12);
    }
    return DdpSegment{h, ulpdu.subspan(h.size())};
}

void encode_ddp(std::vector<std::uint8_t>& out, const DdpHeader& h) {
    bytes::put16(out, h.ctrl());
    if (h.tagged) {
        bytes::put32(out, h.stag);
        bytes::put64(out, h.to);
    } else {
        bytes::put32(out, h.inval_stag);
        bytes::put32(out, h.qn);
        bytes::put32(out, h.msn);
        bytes::put32(out, h.mo);
    }
}

std::vector<std::uint8_t> encode_ddp(const DdpHeader& h) {
    std::vector<std::uint8_t> out;
    out.reserve(h.size());
    encode_ddp(out, h);
    return out;
}

Result<ReadRequest, DdpError> decode_read_request(std::span<const std::uint8_t> p) {
    if (p.size() < kReadRequestSize) {
        return unexpected(DdpError::too_short);
    }
    ReadRequest r;
    r.sink_stag = bytes::get32(p.data());
    r.sink_to = bytes::get64(p.data() + 4);
    r.size = bytes::get32(p.data() + 12);
    r.src_stag = bytes::get32(p.data() + 16);
    r.src_to = bytes::get64(p.data() + 20);
    return r;
}

void encode_read_request(std::vector<std::uint8_t>& out, const ReadRequest& r) {
    bytes::put32(out, r.sink_stag);
    bytes::put64(out, r.sink_to);
    bytes::put32(out, r.size);
    bytes::put32(out, r.src_stag);
    bytes::put64(out, r.src_to);
}

Result<TerminateHeader, DdpError> decode_terminate(std::span<const std::uint8_t> p) {
    if (p.size() < kTerminateCtrlSize) {
        return unexpected(DdpError::too_short);
    }
    TerminateHeader t;
    t.layer = static_cast<TermLayer>(p[0] >> 4);
    t.etype = p[0] & 0xF;
    t.ecode = p[1];
    t.m = (p[2] & 0x80) != 0;
    t.d = (p[2] & 0x40) != 0;
    t.r = (p[2] & 0x20) != 0;
    std::size_t off = kTerminateCtrlSize;
    if (t.m || t.d) {
        if (p.size() < off + 2) {
            return unexpected(DdpError::too_short);
        }
        t.ddp_segment_length = bytes::get16(p.data() + off);
        off += 2;
    }
    if (t.d) {
        if (p.size() < off + 1) {
            return unexpected(DdpError::too_short);
        }
        const std::size_t n = (p[off] & 0x80) != 0 ? kDdpTaggedHeaderSize : kDdpUntaggedHeaderSize;
        if (p.size() < off + n) {
            return unexpected(DdpError::too_short);
        }
        t.ddp_header.assign(p.begin() + static_cast<std::ptrdiff_t>(off),
                            p.begin() + static_cast<std::ptrdiff_t>(off + n));
        off += n;
    }
    if (t.r) {
        if (p.size() < off + kReadRequestSize) {
            return unexpected(DdpError::too_short);
        }
        t.rdma_header.assign(p.begin() + static_cast<std::ptrdiff_t>(off),
                             p.begin() + static_cast<std::ptrdiff_t>(off + kReadRequestSize));
    }
    return t;
}

void encode_terminate(std::vector<std::uint8_t>& out, const TerminateHeader& t) {
    out.push_back(
        static_cast<std::uint8_t>(static_cast<std::uint8_t>(t.layer) << 4 | (t.etype & 0xF)));
    out.push_back(t.ecode);
    out.push_back(
        static_cast<std::uint8_t>((t.m ? 0x80 : 0) | (t.d ? 0x40 : 0) | (t.r ? 0x20 : 0)));
    out.push_back(0);
    if (t.m || t.d) {
        bytes::put16(out, t.ddp_segment_length);
    }
    if (t.d) {
        out.insert(out.end(), t.ddp_header.begin(), t.ddp_header.end());
    }
    if (t.r) {
        out.insert(out.end(), t.rdma_header.begin(), t.rdma_header.end());
    }
}

}  // namespace sdp::iwarp
