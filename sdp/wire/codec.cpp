// SPDX-License-Identifier: Apache-2.0
// The one place that knows the byte layout of SDP messages (section 6 of
// draft-pinkerton-iwarp-sdp-01, figures read with IETF conventions: network
// byte order, bit 0 = most significant bit).
#include <algorithm>
#include <iterator>
#include <type_traits>

#include "sdp/bytes/byte_order.hpp"
#include "sdp/wire/message.hpp"

namespace sdp::wire {
namespace {

using bytes::get16;
using bytes::get32;
using bytes::get64;
using bytes::put16;
using bytes::put32;
using bytes::put64;

void put8(std::vector<std::uint8_t>& o, std::uint8_t v) {
    o.push_back(v);
}

// Extended header size for each MID (Figure 3).
std::size_t ext_size(Mid m) {
    switch (m) {
        case Mid::hello:
            return kHelloHeaderSize;
        case Mid::hello_ack:
            return kHelloAckHeaderSize;
        case Mid::rdma_wr_compl:
        case Mid::rdma_rd_compl:
        case Mid::mode_change:
        case Mid::ch_rcv_buf:
        case Mid::ch_rcv_buf_ack:
            return kWordHeaderSize;
        case Mid::susp_comm:
            return kSuspCommHeaderSize;
        case Mid::src_avail:
            return kSrcAvailHeaderSize;
        case Mid::sink_avail:
            return kSinkAvailHeaderSize;
        case Mid::dis_conn:
        case Mid::abort_conn:
        case Mid::send_sm:
        case Mid::src_avail_cancel:
        case Mid::sink_avail_cancel:
        case Mid::sink_cancel_ack:
        case Mid::susp_comm_ack:
        case Mid::data:
            return 0;
    }
    return 0;
}

bool carries_payload(Mid m) {
    return m == Mid::data || m == Mid::src_avail || m == Mid::sink_avail;
}

// Hello / HelloAck first word: MaxAdverts (16) | Rsvd (8) | MinV (4) | MajV (4).
void put_version_word(std::vector<std::uint8_t>& o, std::uint16_t max_adverts, std::uint8_t minor,
                      std::uint8_t major) {
    put16(o, max_adverts);
    put8(o, 0);  // Rsvd
    put8(o, static_cast<std::uint8_t>(((minor & 0x0F) << 4) | (major & 0x0F)));
}

}  // namespace

std::string_view to_string(Mid m) {
    switch (m) {
        case Mid::hello:
            return "Hello";
        case Mid::hello_ack:
            return "HelloAck";
        case Mid::dis_conn:
            return "DisConn";
        case Mid::abort_conn:
            return "AbortConn";
        case Mid::send_sm:
            return "SendSm";
        case Mid::rdma_wr_compl:
            return "RdmaWrCompl";
        case Mid::rdma_rd_compl:
            return "RdmaRdCompl";
        case Mid::mode_change:
            return "ModeChange";
        case Mid::src_avail_cancel:
            return "SrcAvailCancel";
        case Mid::sink_avail_cancel:
            return "SinkAvailCancel";
        case Mid::sink_cancel_ack:
            return "SinkCancelAck";
        case Mid::ch_rcv_buf:
            return "ChRcvBuf";
        case Mid::ch_rcv_buf_ack:
            return "ChRcvBufAck";
        case Mid::susp_comm:
            return "SuspComm";
        case Mid::susp_comm_ack:
            return "SuspCommAck";
        case Mid::sink_avail:
            return "SinkAvail";
        case Mid::src_avail:
            return "SrcAvail";
        case Mid::data:
            return "Data";
    }
    return "?";
}

std::string_view to_string(DecodeError e) {
    switch (e) {
        case DecodeError::too_short:
            return "too_short";
        case DecodeError::reserved_mid:
            return "reserved_mid";
        case DecodeError::experimental_mid:
            return "experimental_mid";
        case DecodeError::length_mismatch:
            return "length_mismatch";
        case DecodeError::bad_length:
            return "bad_length";
        case DecodeError::reserved_mode:
            return "reserved_mode";
    }
    return "?";
}

Mid mid_of(const Body& b) {
    // Indexed by Body's alternatives, which follow Figure 3's order.
    static constexpr Mid kByIndex[] = {Mid::hello,
                                       Mid::hello_ack,
                                       Mid::dis_conn,
                                       Mid::abort_conn,
                                       Mid::send_sm,
                                       Mid::rdma_wr_compl,
                                       Mid::rdma_rd_compl,
                                       Mid::mode_change,
                                       Mid::src_avail_cancel,
                                       Mid::sink_avail_cancel,
                                       Mid::sink_cancel_ack,
                                       Mid::ch_rcv_buf,
                                       Mid::ch_rcv_buf_ack,
                                       Mid::susp_comm,
                                       Mid::susp_comm_ack,
                                       Mid::sink_avail,
                                       Mid::src_avail,
                                       Mid::data};
    static_assert(std::size(kByIndex) == std::variant_size_v<Body>);
    static_assert(std::is_same_v<std::variant_alternative_t<13, Body>, SuspComm>);
    static_assert(std::is_same_v<std::variant_alternative_t<15, Body>, SinkAvail>);
    static_assert(std::is_same_v<std::variant_alternative_t<17, Body>, Data>);
    return kByIndex[b.index()];
}

std::size_t payload_size(const Body& b) {
    if (const auto* d = std::get_if<Data>(&b))
        return d->payload.size();
    if (const auto* s = std::get_if<SrcAvail>(&b))
        return s->payload.size();
    if (const auto* k = std::get_if<SinkAvail>(&b))
        return k->payload.size();
    return 0;
}

std::size_t encoded_size(const Message& m) {
    return kBsdhSize + ext_size(mid_of(m.body)) + payload_size(m.body);
}

bool is_solicited(const Message& m) {
    switch (mid_of(m.body)) {
        case Mid::abort_conn:
        case Mid::susp_comm:
        case Mid::susp_comm_ack:
        case Mid::send_sm:
        case Mid::src_avail_cancel:
        case Mid::sink_avail_cancel:
        case Mid::hello_ack:
        case Mid::rdma_wr_compl:
        case Mid::rdma_rd_compl:
        case Mid::sink_cancel_ack:
            return true;
        case Mid::data:
            return (m.flags & (flag::oob_pres | flag::oob_pend)) != 0;
        default:
            return false;
    }
}

void encode_append(const Message& m, std::vector<std::uint8_t>& out) {
    encode_append(m, {}, out);
}

void encode_append(const Message& m, std::span<const std::uint8_t> extra,
                   std::vector<std::uint8_t>& out) {
    const Mid mid = mid_of(m.body);
    out.reserve(out.size() + encoded_size(m) + extra.size());
    // BSDH, Figure 2.
    put16(out, m.bufs);
    put8(out, static_cast<std::uint8_t>(m.flags & flag::known));
    put8(out, static_cast<std::uint8_t>(mid));
    put32(out, static_cast<std::uint32_t>(encoded_size(m) + extra.size()));
    put32(out, m.mseq);
    put32(out, m.mseq_ack);
    std::visit(
        [&out](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, Hello>) {  // Figure 5
                put_version_word(out, v.max_adverts, v.minor, v.major);
                put32(out, v.des_rem_rcv_sz);
                put32(out, v.local_rcv_sz);
                put16(out, v.loc_ird);
                put16(out, v.loc_ord);
            } else if constexpr (std::is_same_v<T, HelloAck>) {  // Figure 6
                put_version_word(out, v.max_adverts, v.minor, v.major);
                put32(out, v.act_rcv_sz);
                put16(out, v.loc_ird);
                put16(out, v.loc_ord);
            } else if constexpr (std::is_same_v<T, RdmaWrCompl> || std::is_same_v<T, RdmaRdCompl>) {
                put32(out, v.len);                                 // Figures 9, 10
            } else if constexpr (std::is_same_v<T, ModeChange>) {  // Figure 11
                put32(out,
                      (static_cast<std::uint32_t>(v.mode) & 0x7u) << 1 | (v.send_half ? 1u : 0u));
            } else if constexpr (std::is_same_v<T, ChRcvBuf>) {  // Figure 13
                put32(out, v.des_sz);
            } else if constexpr (std::is_same_v<T, ChRcvBufAck>) {  // Figure 14
                put32(out, v.act_sz);
            } else if constexpr (std::is_same_v<T, SuspComm>) {  // Figure 15
                put32(out, 0);                                   // Constant1
                put16(out, v.dest_port);
                put16(out, 1);                                   // Constant2
            } else if constexpr (std::is_same_v<T, SrcAvail>) {  // Figure 7
                put32(out, v.len);
                put32(out, v.stag);
                put64(out, v.va);
                out.insert(out.end(), v.payload.begin(), v.payload.end());
            } else if constexpr (std::is_same_v<T, SinkAvail>) {  // Figure 8
                put32(out, v.len);
                put32(out, v.stag);
                put64(out, v.va);
                put32(out, v.non_discards);
                out.insert(out.end(), v.payload.begin(), v.payload.end());
            } else if constexpr (std::is_same_v<T, Data>) {
                out.insert(out.end(), v.payload.begin(), v.payload.end());
            }
        },
        m.body);
    out.insert(out.end(), extra.begin(), extra.end());
}

void encode_bsdh_into(const Message& m, std::size_t extra, std::span<std::uint8_t, kBsdhSize> out) {
    // BSDH, Figure 2 (as encode_append()).
    const auto len = static_cast<std::uint32_t>(encoded_size(m) + extra);
    auto be32 = [&out](std::size_t at, std::uint32_t v) {
        out[at] = static_cast<std::uint8_t>(v >> 24);
        out[at + 1] = static_cast<std::uint8_t>(v >> 16);
        out[at + 2] = static_cast<std::uint8_t>(v >> 8);
        out[at + 3] = static_cast<std::uint8_t>(v);
    };
    out[0] = static_cast<std::uint8_t>(m.bufs >> 8);
    out[1] = static_cast<std::uint8_t>(m.bufs);
    out[2] = static_cast<std::uint8_t>(m.flags & flag::known);
    out[3] = static_cast<std::uint8_t>(mid_of(m.body));
    be32(4, len);
    be32(8, m.mseq);
    be32(12, m.mseq_ack);
}

std::vector<std::uint8_t> encode(const Message& m) {
    std::vector<std::uint8_t> out;
    encode_append(m, out);
    return out;
}

std::variant<Bsdh, DecodeError> decode_bsdh(std::span<const std::uint8_t> b) {
    if (b.size() < kBsdhSize)
        return DecodeError::too_short;
    Bsdh h;
    h.bufs = get16(b.data());
    h.flags = static_cast<std::uint8_t>(b[2] & flag::known);
    h.mid = static_cast<Mid>(b[3]);
    h.len = get32(b.data() + 4);
    h.mseq = get32(b.data() + 8);
    h.mseq_ack = get32(b.data() + 12);
    return h;
}

DecodeResult decode(std::span<const std::uint8_t> b) {
    auto hv = decode_bsdh(b);
    if (const auto* e = std::get_if<DecodeError>(&hv))
        return *e;
    const Bsdh h = std::get<Bsdh>(hv);
    const std::uint8_t raw_mid = b[3];
    if (raw_mid >= 0x40 && raw_mid <= 0x7F)
        return DecodeError::experimental_mid;
    if ((raw_mid >= 0x0F && raw_mid <= 0x3F) || (raw_mid >= 0x80 && raw_mid <= 0xFC)) {
        return DecodeError::reserved_mid;
    }
    if (h.len != b.size())
        return DecodeError::length_mismatch;
    const std::size_t ext = ext_size(h.mid);
    if (b.size() < kBsdhSize + ext)
        return DecodeError::bad_length;
    if (!carries_payload(h.mid) && b.size() != kBsdhSize + ext)
        return DecodeError::bad_length;

    Message m;
    m.bufs = h.bufs;
    m.flags = h.flags;
    m.mseq = h.mseq;
    m.mseq_ack = h.mseq_ack;
    const std::size_t x = kBsdhSize;  // start of the extended header
    auto payload = [&](std::size_t from) {
        return std::vector<std::uint8_t>(b.begin() + static_cast<std::ptrdiff_t>(from), b.end());
    };
    switch (h.mid) {
        case Mid::hello: {
            Hello v;
            v.max_adverts = get16(b.data() + x);
            v.minor = static_cast<std::uint8_t>(b[x + 3] >> 4);
            v.major = static_cast<std::uint8_t>(b[x + 3] & 0x0F);
            v.des_rem_rcv_sz = get32(b.data() + x + 4);
            v.local_rcv_sz = get32(b.data() + x + 8);
            v.loc_ird = get16(b.data() + x + 12);
            v.loc_ord = get16(b.data() + x + 14);
            m.body = v;
            break;
        }
        case Mid::hello_ack: {
            HelloAck v;
            v.max_adverts = get16(b.data() + x);
            v.minor = static_cast<std::uint8_t>(b[x + 3] >> 4);
            v.major = static_cast<std::uint8_t>(b[x + 3] & 0x0F);
            v.act_rcv_sz = get32(b.data() + x + 4);
            v.loc_ird = get16(b.data() + x + 8);
            v.loc_ord = get16(b.data() + x + 10);
            m.body = v;
            break;
        }
        case Mid::dis_conn:
            m.body = DisConn{};
            break;
        case Mid::abort_conn:
            m.body = AbortConn{};
            break;
        case Mid::send_sm:
            m.body = SendSm{};
            break;
        case Mid::rdma_wr_compl:
            m.body = RdmaWrCompl{get32(b.data() + x)};
            break;
        case Mid::rdma_rd_compl:
            m.body = RdmaRdCompl{get32(b.data() + x)};
            break;
        case Mid::mode_change: {
            const std::uint32_t w = get32(b.data() + x);
            const std::uint32_t mode = (w >> 1) & 0x7u;
            if (mode > 2)
                return DecodeError::reserved_mode;
            m.body = ModeChange{(w & 1u) != 0, static_cast<FlowMode>(mode)};
            break;
        }
        case Mid::src_avail_cancel:
            m.body = SrcAvailCancel{};
            break;
        case Mid::sink_avail_cancel:
            m.body = SinkAvailCancel{};
            break;
        case Mid::sink_cancel_ack:
            m.body = SinkCancelAck{};
            break;
        case Mid::ch_rcv_buf:
            m.body = ChRcvBuf{get32(b.data() + x)};
            break;
        case Mid::ch_rcv_buf_ack:
            m.body = ChRcvBufAck{get32(b.data() + x)};
            break;
        case Mid::susp_comm:
            m.body = SuspComm{get16(b.data() + x + 4)};
            break;
        case Mid::susp_comm_ack:
            m.body = SuspCommAck{};
            break;
        case Mid::src_avail: {
            SrcAvail v;
            v.len = get32(b.data() + x);
            v.stag = get32(b.data() + x + 4);
            v.va = get64(b.data() + x + 8);
            v.payload = payload(x + kSrcAvailHeaderSize);
            m.body = std::move(v);
            break;
        }
        case Mid::sink_avail: {
            SinkAvail v;
            v.len = get32(b.data() + x);
            v.stag = get32(b.data() + x + 4);
            v.va = get64(b.data() + x + 8);
            v.non_discards = get32(b.data() + x + 16);
            v.payload = payload(x + kSinkAvailHeaderSize);
            m.body = std::move(v);
            break;
        }
        case Mid::data:
            m.body = Data{payload(x)};
            break;
    }
    return m;
}

}  // namespace sdp::wire
