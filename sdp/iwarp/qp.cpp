// SPDX-License-Identifier: Apache-2.0
#include "sdp/iwarp/qp.hpp"

#include <algorithm>
#include <cstring>

namespace sdp::iwarp {

const char* to_string(VerbsError e) {
    switch (e) {
        case VerbsError::qp_error:
            return "queue pair in error state";
        case VerbsError::queue_full:
            return "work queue full";
        case VerbsError::invalid_region:
            return "invalid local memory region";
        case VerbsError::too_long:
            return "message too long";
    }
    return "unknown verbs error";
}

QpConfig qp_config_from(const MpaNegotiator& mpa, std::size_t mss) {
    const MpaOutcome& o = mpa.outcome();
    QpConfig c;
    c.role = mpa.role();
    c.crc = o.crc;
    c.mss = mss;
    c.p2p = o.p2p;
    c.rtr = o.p2p ? o.rtr : RtrMode::none;
    c.ird = o.ird;
    c.ord = o.ord;
    return c;
}

// ---------------------------------------------------------------- MrTable

std::uint32_t MrTable::next_stag() {
    // splitmix64: every STag value equally likely; STags 0 and 1 stay free
    // (RTR uses them) and one in use is never handed out twice.
    while (true) {
        std::uint64_t z = (rng_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        const auto stag = static_cast<std::uint32_t>((z ^ (z >> 31)) >> 16);
        if (stag > 1 && regions_.count(stag) == 0) {
            return stag;
        }
    }
}

MemoryRegion MrTable::add(std::span<std::uint8_t> mem, std::uint64_t base, std::uint32_t access) {
    MemoryRegion mr;
    mr.stag = next_stag();
    mr.base = base;
    mr.length = mem.size();
    mr.access = access;
    regions_[mr.stag] = Entry{mr, mem.data()};
    return mr;
}

bool MrTable::remove(std::uint32_t stag) {
    return regions_.erase(stag) != 0;
}

MrTable::Check MrTable::check(std::uint32_t stag, std::uint64_t to, std::uint64_t len,
                              std::uint32_t access, std::uint8_t** where) const {
    const auto it = regions_.find(stag);
    if (it == regions_.end()) {
        return Check::invalid_stag;
    }
    const MemoryRegion& mr = it->second.mr;
    if ((mr.access & access) != access) {
        return Check::access;
    }
    if (to + len < to) {
        return Check::to_wrap;
    }
    if (to < mr.base || to - mr.base > mr.length || len > mr.length - (to - mr.base)) {
        return Check::bounds;
    }
    *where = it->second.mem + (to - mr.base);
    return Check::ok;
}

// ---------------------------------------------------------------- QpEngine

QpEngine::QpEngine(QpConfig cfg)
    : cfg_(cfg),
      max_ulpdu_(std::max<std::size_t>(max_ulpdu_for_mss(cfg.mss), kDdpUntaggedHeaderSize + 4)),
      hold_tx_(cfg.role == MpaRole::responder),
      rx_(cfg.crc),
      mrs_(cfg.stag_seed) {
    if (cfg_.role == MpaRole::initiator && cfg_.p2p) {
        queue_rtr();
    }
}

void QpEngine::queue_rtr() {
    std::vector<std::uint8_t> ulpdu;
    if (cfg_.rtr == RtrMode::read) {
        DdpHeader h;
        h.opcode = static_cast<std::uint8_t>(Opcode::read_request);
        h.qn = kQnReadRequest;
        h.msn = tx_msn_[kQnReadRequest]++;
        encode_ddp(ulpdu, h);
        ReadRequest rr;
        rr.src_stag = 1;  // as siw and cxgb4: zero size, sink STag 0, source STag 1
        encode_read_request(ulpdu, rr);
        OutstandingRead o;
        o.rtr = true;
        orq_.push_back(o);
    } else {
        // Zero-length RDMA Write (also the default when p2p was agreed
        // without a kind).
        DdpHeader h;
        h.tagged = true;
        h.opcode = static_cast<std::uint8_t>(Opcode::write);
        h.stag = 1;
        encode_ddp(ulpdu, h);
    }
    std::vector<std::uint8_t> fpdu;
    append_fpdu(fpdu, ulpdu, {}, cfg_.crc);
    ctrl_.push_back(std::move(fpdu));
}

Result<MemoryRegion, VerbsError> QpEngine::reg_mr(std::span<std::uint8_t> mem, std::uint64_t base,
                                                  std::uint32_t access) {
    if (mem.size() > std::numeric_limits<std::uint64_t>::max() - base) {
        return unexpected(VerbsError::invalid_region);
    }
    return mrs_.add(mem, base, access);
}

bool QpEngine::dereg_mr(std::uint32_t stag) {
    return mrs_.remove(stag);
}

std::optional<VerbsError> QpEngine::post_send(const SendWr& wr) {
    if (state_ == QpState::error) {
        return VerbsError::qp_error;
    }
    if (sq_.size() >= cfg_.max_send_wr) {
        return VerbsError::queue_full;
    }
    if (wr.data.size() > std::numeric_limits<std::uint32_t>::max()) {
        return VerbsError::too_long;
    }
    if (wr.opcode == WrOpcode::rdma_read && wr.read_length > 0) {
        std::uint8_t* where = nullptr;
        if (mrs_.check(wr.local_stag, wr.local_to, wr.read_length, kAccessLocalWrite, &where) !=
            MrTable::Check::ok) {
            return VerbsError::invalid_region;
        }
    }
    sq_.push_back(wr);
    return std::nullopt;
}

std::optional<VerbsError> QpEngine::post_recv(const RecvWr& wr) {
    if (state_ == QpState::error) {
        return VerbsError::qp_error;
    }
    if (rq_.size() >= cfg_.max_recv_wr) {
        return VerbsError::queue_full;
    }
    rq_.push_back(wr);
    return std::nullopt;
}

std::size_t QpEngine::poll_cq(std::span<Completion> out) {
    std::size_t n = 0;
    while (n < out.size() && !cq_.empty()) {
        out[n++] = cq_.front();
        cq_.pop_front();
    }
    return n;
}

std::vector<Completion> QpEngine::poll_all() {
    std::vector<Completion> v(cq_.begin(), cq_.end());
    cq_.clear();
    return v;
}

void QpEngine::complete(const Completion& c) {
    cq_.push_back(c);
    ++cq_added_;
}

// ---------------------------------------------------------------- transmit

bool QpEngine::has_output() const {
    if (!ctrl_.empty()) {
        return true;
    }
    if (state_ == QpState::error || hold_tx_) {
        return false;
    }
    if (cur_ || !irq_.empty()) {
        return true;
    }
    if (sq_.empty()) {
        return false;
    }
    return sq_.front().opcode != WrOpcode::rdma_read ||
           orq_.size() < std::max<std::size_t>(cfg_.ord, 1);
}

std::vector<std::uint8_t> QpEngine::take_output(std::size_t max_bytes) {
    std::vector<std::uint8_t> out;
    take_output_into(out, max_bytes);
    return out;
}

namespace {

// Copies FPDUs into a byte vector (the contiguous-output API).
class VectorSink final : public FpduSink {
  public:
    explicit VectorSink(std::vector<std::uint8_t>& out) : out_(out), start_(out.size()) {}
    void fpdu(std::span<const std::uint8_t> header, std::span<const std::uint8_t> payload,
              bool /*payload_stable*/, bool crc) override {
        append_fpdu(out_, header, payload, crc);
    }
    void raw(std::vector<std::uint8_t>&& bytes) override {
        out_.insert(out_.end(), bytes.begin(), bytes.end());
    }
    [[nodiscard]] std::size_t size() const override { return out_.size() - start_; }

  private:
    std::vector<std::uint8_t>& out_;
    std::size_t start_;
};

}  // namespace

std::size_t QpEngine::take_output_into(std::vector<std::uint8_t>& out, std::size_t max_bytes) {
    VectorSink sink(out);
    return take_output_to(sink, max_bytes);
}

std::size_t QpEngine::take_output_to(FpduSink& out, std::size_t max_bytes) {
    const std::size_t start = out.size();
    while (out.size() == start || out.size() - start < max_bytes) {
        if (!ctrl_.empty()) {
            out.raw(std::move(ctrl_.front()));
            ctrl_.pop_front();
            continue;
        }
        if (state_ == QpState::error || hold_tx_) {
            break;
        }
        if (!cur_) {
            if (!irq_.empty()) {
                cur_ = irq_.front();
                irq_.pop_front();
            } else if (!sq_.empty()) {
                const SendWr& wr = sq_.front();
                if (wr.opcode == WrOpcode::rdma_read &&
                    orq_.size() >= std::max<std::size_t>(cfg_.ord, 1)) {
                    break;  // ORD reached: wait for a Read Response
                }
                TxMsg m;
                m.wr = wr;
                switch (wr.opcode) {
                    case WrOpcode::send:
                    case WrOpcode::send_se:
                        m.kind = TxKind::send;
                        break;
                    case WrOpcode::rdma_write:
                        m.kind = TxKind::write;
                        break;
                    case WrOpcode::rdma_read:
                        m.kind = TxKind::read_request;
                        break;
                }
                m.total = static_cast<std::uint32_t>(wr.data.size());
                sq_.pop_front();
                cur_ = m;
            } else {
                break;
            }
        }
        emit_segment(out);
    }
    return out.size() - start;
}

void QpEngine::emit_segment(FpduSink& out) {
    TxMsg& m = *cur_;
    DdpHeader h;
    std::vector<std::uint8_t> hdr;
    std::span<const std::uint8_t> payload;
    if (m.kind == TxKind::read_request) {
        h.opcode = static_cast<std::uint8_t>(Opcode::read_request);
        h.qn = kQnReadRequest;
        h.msn = tx_msn_[kQnReadRequest]++;
        encode_ddp(hdr, h);
        ReadRequest rr;
        rr.sink_stag = m.wr.local_stag;
        rr.sink_to = m.wr.local_to;
        rr.size = m.wr.read_length;
        rr.src_stag = m.wr.remote_stag;
        rr.src_to = m.wr.remote_to;
        encode_read_request(hdr, rr);
        out.fpdu(hdr, {}, true, cfg_.crc);
        OutstandingRead o;
        o.wr_id = m.wr.wr_id;
        o.signaled = m.wr.signaled;
        o.sink_stag = rr.sink_stag;
        o.sink_to = rr.sink_to;
        o.length = rr.size;
        orq_.push_back(o);
        cur_.reset();
        return;
    }
    const bool tagged = m.kind == TxKind::write || m.kind == TxKind::read_response;
    const std::size_t room = max_ulpdu_ - (tagged ? kDdpTaggedHeaderSize : kDdpUntaggedHeaderSize);
    const std::uint32_t n =
        static_cast<std::uint32_t>(std::min<std::size_t>(room, m.total - m.offset));
    h.tagged = tagged;
    h.last = m.offset + n == m.total;
    switch (m.kind) {
        case TxKind::send:
            if (m.wr.invalidate_stag != 0) {
                h.opcode = static_cast<std::uint8_t>(
                    m.wr.opcode == WrOpcode::send_se ? Opcode::send_se_inv : Opcode::send_inv);
                h.inval_stag = m.wr.invalidate_stag;
            } else {
                h.opcode = static_cast<std::uint8_t>(
                    m.wr.opcode == WrOpcode::send_se ? Opcode::send_se : Opcode::send);
            }
            h.qn = kQnSend;
            h.msn = tx_msn_[kQnSend];
            h.mo = m.offset;
            payload = m.wr.data.subspan(m.offset, n);
            break;
        case TxKind::write:
            h.opcode = static_cast<std::uint8_t>(Opcode::write);
            h.stag = m.wr.remote_stag;
            h.to = m.wr.remote_to + m.offset;
            payload = m.wr.data.subspan(m.offset, n);
            break;
        case TxKind::read_response: {
            h.opcode = static_cast<std::uint8_t>(Opcode::read_response);
            h.stag = m.sink_stag;
            h.to = m.sink_to + m.offset;
            if (n > 0) {
                std::uint8_t* where = nullptr;
                if (mrs_.check(m.src_stag, m.src_to + m.offset, n, kAccessRemoteRead, &where) !=
                    MrTable::Check::ok) {
                    // The region went away while the response was queued.
                    cur_.reset();
                    terminate(TermLayer::rdmap, term::kRdmapLocalCatastrophic, 0, {}, false);
                    return;
                }
                payload = std::span<const std::uint8_t>(where, n);
            }
            break;
        }
        case TxKind::read_request:
            break;
    }
    encode_ddp(hdr, h);
    out.fpdu(hdr, payload, m.kind != TxKind::read_response, cfg_.crc);
    m.offset += n;
    if (!h.last) {
        return;
    }
    if (m.kind == TxKind::send) {
        ++tx_msn_[kQnSend];
    }
    if ((m.kind == TxKind::send || m.kind == TxKind::write) && m.wr.signaled) {
        Completion c;
        c.wr_id = m.wr.wr_id;
        c.opcode = m.kind == TxKind::send ? WcOpcode::send : WcOpcode::rdma_write;
        c.byte_len = m.total;
        complete(c);
    }
    cur_.reset();
}

// ---------------------------------------------------------------- receive

RxResult QpEngine::on_bytes(std::span<const std::uint8_t> in) {
    const std::size_t before = cq_added_;
    const bool was_error = state_ == QpState::error;
    if (!was_error) {
        rx_.feed(in, [this](std::span<const std::uint8_t> u) { return handle_ulpdu(u); });
        if (rx_.error() && state_ != QpState::error) {
            if (*rx_.error() == FpduError::crc) {
                terminate(TermLayer::llp, term::kLlpMpa, term::kMpaCrc, {}, false);
            } else {
                terminate(TermLayer::rdmap, term::kRdmapRemoteOperation,
                          term::kRdmapCatastrophicStream, {}, false);
            }
        }
    }
    RxResult r;
    r.new_completions = cq_added_ - before;
    r.entered_error = !was_error && state_ == QpState::error;
    return r;
}

bool QpEngine::handle_ulpdu(std::span<const std::uint8_t> u) {
    hold_tx_ = false;  // the initiator's first FPDU has arrived
    auto seg = decode_ddp(u);
    if (!seg) {
        return terminate(TermLayer::rdmap, term::kRdmapRemoteOperation,
                         term::kRdmapCatastrophicStream, u, false);
    }
    const DdpHeader& h = seg->header;
    if (h.ddp_version != kDdpVersion) {
        return terminate(TermLayer::ddp,
                         h.tagged ? term::kDdpTaggedBuffer : term::kDdpUntaggedBuffer,
                         h.tagged ? term::kDdpTInvalidVersion : term::kDdpUInvalidVersion, u, true);
    }
    if (h.rdmap_version != kRdmapVersion) {
        return terminate(TermLayer::rdmap, term::kRdmapRemoteOperation, term::kRdmapInvalidVersion,
                         u, true);
    }
    const auto op = static_cast<Opcode>(h.opcode);
    const bool tagged_op = op == Opcode::write || op == Opcode::read_response;
    if (h.opcode > static_cast<std::uint8_t>(Opcode::terminate) || tagged_op != h.tagged) {
        return terminate(TermLayer::rdmap, term::kRdmapRemoteOperation,
                         term::kRdmapUnexpectedOpcode, u, true);
    }
    return h.tagged ? handle_tagged(h, u, seg->payload) : handle_untagged(h, u, seg->payload);
}

bool QpEngine::handle_untagged(const DdpHeader& h, std::span<const std::uint8_t> u,
                               std::span<const std::uint8_t> payload) {
    const auto op = static_cast<Opcode>(h.opcode);
    const std::uint32_t qn = op == Opcode::read_request ? kQnReadRequest
                             : op == Opcode::terminate  ? kQnTerminate
                                                        : kQnSend;
    if (h.qn != qn) {
        return terminate(TermLayer::ddp, term::kDdpUntaggedBuffer, term::kDdpUInvalidQn, u, true);
    }
    if (op == Opcode::terminate) {
        auto t = decode_terminate(payload);
        term_rx_ = t ? *t : TerminateHeader{};
        if (!t) {
            term_rx_->layer = TermLayer::rdmap;
            term_rx_->etype = term::kRdmapRemoteOperation;
            term_rx_->ecode = term::kRdmapUnspecified;
        }
        const bool protection =
            term_rx_->layer == TermLayer::rdmap
                ? term_rx_->etype == term::kRdmapRemoteProtection
                : term_rx_->layer == TermLayer::ddp && term_rx_->etype == term::kDdpTaggedBuffer;
        enter_error(protection ? WcStatus::remote_access_error : WcStatus::remote_operation_error);
        return false;
    }
    if (h.msn != rx_msn_[qn]) {
        return terminate(TermLayer::ddp, term::kDdpUntaggedBuffer, term::kDdpUInvalidMsnRange, u,
                         true);
    }
    if (op == Opcode::read_request) {
        if (!h.last || h.mo != 0 || payload.size() != kReadRequestSize) {
            return terminate(TermLayer::rdmap, term::kRdmapRemoteOperation,
                             term::kRdmapCatastrophicStream, u, true);
        }
        const ReadRequest rr = *decode_read_request(payload);
        ++rx_msn_[kQnReadRequest];
        if (irq_.size() + (cur_ && cur_->kind == TxKind::read_response ? 1 : 0) >=
            std::max<std::size_t>(cfg_.ird, 1)) {
            return terminate(TermLayer::rdmap, term::kRdmapRemoteOperation,
                             term::kRdmapCatastrophicStream, u, true, payload);
        }
        if (rr.size > 0) {
            std::uint8_t* where = nullptr;
            const auto c = mrs_.check(rr.src_stag, rr.src_to, rr.size, kAccessRemoteRead, &where);
            std::uint8_t ecode = 0;
            switch (c) {
                case MrTable::Check::ok:
                    break;
                case MrTable::Check::invalid_stag:
                    ecode = term::kRdmapInvalidStag;
                    break;
                case MrTable::Check::access:
                    ecode = term::kRdmapAccessRights;
                    break;
                case MrTable::Check::to_wrap:
                    ecode = term::kRdmapToWrap;
                    break;
                case MrTable::Check::bounds:
                    ecode = term::kRdmapBaseBounds;
                    break;
            }
            if (c != MrTable::Check::ok) {
                return terminate(TermLayer::rdmap, term::kRdmapRemoteProtection, ecode, u, true,
                                 payload);
            }
        }
        TxMsg m;
        m.kind = TxKind::read_response;
        m.sink_stag = rr.sink_stag;
        m.sink_to = rr.sink_to;
        m.src_stag = rr.src_stag;
        m.src_to = rr.src_to;
        m.total = rr.size;
        irq_.push_back(m);
        return true;
    }
    // Send, Send with SE, with or without Invalidate.
    if (rq_.empty()) {
        return terminate(TermLayer::ddp, term::kDdpUntaggedBuffer, term::kDdpUNoBuffer, u, true);
    }
    std::span<std::uint8_t> buf = rq_.front().buffer;
    if (h.mo > buf.size()) {
        return terminate(TermLayer::ddp, term::kDdpUntaggedBuffer, term::kDdpUInvalidMo, u, true);
    }
    if (payload.size() > buf.size() - h.mo) {
        return terminate(TermLayer::ddp, term::kDdpUntaggedBuffer, term::kDdpUTooLong, u, true);
    }
    if (!payload.empty() && !(placer_ && placer_->place(rq_.front(), h.mo, payload))) {
        std::memcpy(buf.data() + h.mo, payload.data(), payload.size());
    }
    if (!h.last) {
        return true;
    }
    Completion c;
    c.wr_id = rq_.front().wr_id;
    c.opcode = WcOpcode::recv;
    c.byte_len = static_cast<std::uint32_t>(h.mo + payload.size());
    c.solicited = op == Opcode::send_se || op == Opcode::send_se_inv;
    if (op == Opcode::send_inv || op == Opcode::send_se_inv) {
        if (!mrs_.remove(h.inval_stag)) {
            return terminate(TermLayer::rdmap, term::kRdmapRemoteProtection,
                             term::kRdmapCannotInvalidate, u, true);
        }
        c.invalidated_stag = h.inval_stag;
    }
    rq_.pop_front();
    ++rx_msn_[kQnSend];
    complete(c);
    return true;
}

bool QpEngine::place_tagged(const DdpHeader& h, std::span<const std::uint8_t> u,
                            std::span<const std::uint8_t> payload, std::uint32_t access) {
    std::uint8_t* where = nullptr;
    const auto c = mrs_.check(h.stag, h.to, payload.size(), access, &where);
    switch (c) {
        case MrTable::Check::ok:
            break;
        case MrTable::Check::invalid_stag:
            return terminate(TermLayer::ddp, term::kDdpTaggedBuffer, term::kDdpTInvalidStag, u,
                             true);
        case MrTable::Check::access:
            return terminate(TermLayer::rdmap, term::kRdmapRemoteProtection,
                             term::kRdmapAccessRights, u, true);
        case MrTable::Check::to_wrap:
            return terminate(TermLayer::ddp, term::kDdpTaggedBuffer, term::kDdpTToWrap, u, true);
        case MrTable::Check::bounds:
            return terminate(TermLayer::ddp, term::kDdpTaggedBuffer, term::kDdpTBaseBounds, u,
                             true);
    }
    std::memcpy(where, payload.data(), payload.size());
    return true;
}

bool QpEngine::handle_tagged(const DdpHeader& h, std::span<const std::uint8_t> u,
                             std::span<const std::uint8_t> payload) {
    if (static_cast<Opcode>(h.opcode) == Opcode::write) {
        // Zero-length Writes (the p2p RTR among them) carry no STag to check.
        return payload.empty() || place_tagged(h, u, payload, kAccessRemoteWrite);
    }
    // RDMA Read Response: must answer our oldest outstanding Read Request.
    if (orq_.empty()) {
        return terminate(TermLayer::rdmap, term::kRdmapRemoteOperation,
                         term::kRdmapUnexpectedOpcode, u, true);
    }
    const OutstandingRead& o = orq_.front();
    if (!payload.empty()) {
        if (h.stag != o.sink_stag) {
            return terminate(TermLayer::ddp, term::kDdpTaggedBuffer, term::kDdpTInvalidStag, u,
                             true);
        }
        if (h.to < o.sink_to || h.to - o.sink_to > o.length ||
            payload.size() > o.length - (h.to - o.sink_to)) {
            return terminate(TermLayer::ddp, term::kDdpTaggedBuffer, term::kDdpTBaseBounds, u,
                             true);
        }
        if (!place_tagged(h, u, payload, kAccessLocalWrite)) {
            return false;
        }
    }
    if (h.last) {
        if (!o.rtr && o.signaled) {
            Completion c;
            c.wr_id = o.wr_id;
            c.opcode = WcOpcode::rdma_read;
            c.byte_len = o.length;
            complete(c);
        }
        orq_.pop_front();
    }
    return true;
}

// ---------------------------------------------------------------- errors

bool QpEngine::terminate(TermLayer layer, std::uint8_t etype, std::uint8_t ecode,
                         std::span<const std::uint8_t> ulpdu, bool with_ddp,
                         std::span<const std::uint8_t> rdma_header) {
    if (state_ == QpState::error) {
        return false;
    }
    TerminateHeader t;
    t.layer = layer;
    t.etype = etype;
    t.ecode = ecode;
    if (with_ddp && ulpdu.size() >= 2) {
        const std::size_t n =
            (ulpdu[0] & 0x80) != 0 ? kDdpTaggedHeaderSize : kDdpUntaggedHeaderSize;
        if (ulpdu.size() >= n) {
            t.m = true;
            t.d = true;
            t.ddp_segment_length = static_cast<std::uint16_t>(ulpdu.size());
            t.ddp_header.assign(ulpdu.begin(), ulpdu.begin() + static_cast<std::ptrdiff_t>(n));
        }
    }
    if (rdma_header.size() >= kReadRequestSize) {
        t.r = true;
        t.rdma_header.assign(rdma_header.begin(), rdma_header.begin() + kReadRequestSize);
    }
    DdpHeader h;
    h.opcode = static_cast<std::uint8_t>(Opcode::terminate);
    h.qn = kQnTerminate;
    h.msn = tx_msn_[kQnTerminate]++;
    std::vector<std::uint8_t> ulp;
    encode_ddp(ulp, h);
    encode_terminate(ulp, t);
    std::vector<std::uint8_t> fpdu;
    append_fpdu(fpdu, ulp, {}, cfg_.crc);
    ctrl_.push_back(std::move(fpdu));
    term_tx_ = std::move(t);
    enter_error(WcStatus::fatal_error);
    return false;
}

void QpEngine::on_llp_closed() {
    if (state_ != QpState::error) {
        enter_error(WcStatus::wr_flush_error);
    }
}

void QpEngine::enter_error(WcStatus first_status) {
    state_ = QpState::error;
    hold_tx_ = false;
    // The message in flight or the oldest outstanding work takes the error
    // status; everything behind it is flushed.
    WcStatus st = first_status;
    auto next = [&st] { return std::exchange(st, WcStatus::wr_flush_error); };
    for (const OutstandingRead& o : orq_) {
        if (!o.rtr) {
            Completion c;
            c.wr_id = o.wr_id;
            c.opcode = WcOpcode::rdma_read;
            c.status = next();
            complete(c);
        }
    }
    orq_.clear();
    if (cur_ && cur_->kind != TxKind::read_response) {
        Completion c;
        c.wr_id = cur_->wr.wr_id;
        c.opcode = cur_->kind == TxKind::send ? WcOpcode::send : WcOpcode::rdma_write;
        c.status = next();
        complete(c);
    }
    cur_.reset();
    irq_.clear();
    for (const SendWr& wr : sq_) {
        Completion c;
        c.wr_id = wr.wr_id;
        c.opcode = wr.opcode == WrOpcode::rdma_read    ? WcOpcode::rdma_read
                   : wr.opcode == WrOpcode::rdma_write ? WcOpcode::rdma_write
                                                       : WcOpcode::send;
        c.status = next();
        complete(c);
    }
    sq_.clear();
    for (const RecvWr& wr : rq_) {
        Completion c;
        c.wr_id = wr.wr_id;
        c.opcode = WcOpcode::recv;
        c.status = WcStatus::wr_flush_error;
        complete(c);
    }
    rq_.clear();
}

}  // namespace sdp::iwarp
