// SPDX-License-Identifier: Apache-2.0
#include "sdp/soft/soft_session.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

namespace sdp::io {

namespace {

iwarp::MpaConfig mpa_config(const SessionConfig& cfg) {
    iwarp::MpaConfig m;
    m.enhanced = true;
    m.crc = cfg.crc;
    // SDP's Accepting Peer sends first (HelloAck), so both sides run MPA
    // peer-to-peer mode with a zero-length RDMA Write/Read as RTR (DESIGN).
    m.p2p = true;
    m.ird = cfg.ird;
    m.ord = cfg.ord;
    return m;
}

engine::Role engine_role(iwarp::MpaRole r) {
    return r == iwarp::MpaRole::initiator ? engine::Role::connecting : engine::Role::accepting;
}

}  // namespace

SoftSession::SoftSession(iwarp::MpaRole role, const SessionConfig& cfg)
    : cfg_(cfg), mpa_(role, mpa_config(cfg)), conn_(engine_role(role), cfg.engine, *this) {}

SoftSession::~SoftSession() = default;

bool SoftSession::start() {
    if (mpa_.role() != iwarp::MpaRole::initiator || mpa_.state() != iwarp::MpaState::idle) {
        return false;
    }
    auto hello = conn_.connect();
    // The negotiator copies its config: rebuild it with the Hello.
    iwarp::MpaConfig m = mpa_config(cfg_);
    m.private_data = std::move(hello);
    mpa_ = iwarp::MpaNegotiator(iwarp::MpaRole::initiator, m);
    if (auto e = mpa_.start()) {
        setup_failed_ = true;
        setup_error_ = std::string("MPA: ") + iwarp::to_string(*e);
        return false;
    }
    return true;
}

bool SoftSession::restart(iwarp::MpaRole role) {
    if (!conn_.restart(engine_role(role))) {
        return false;
    }
    mpa_ = iwarp::MpaNegotiator(role, mpa_config(cfg_));
    // Bytes that landed in a waiting reader's buffer were read already
    // (the engine counted them): they stay for its end_landing(). Nothing
    // more lands there (the new connection's messages are in order behind).
    Landing kept;
    if (land_.active) {
        unland_all();
        kept.zone = land_.zone;
        kept.active = true;
        kept.blocked = true;
        kept.used = land_.used;
    }
    land_ = kept;
    order_ = Order{};
    qp_.reset();
    setup_failed_ = false;
    eof_ = false;
    llp_reported_ = false;
    llp_ = LlpRequest::none;
    setup_error_.clear();
    pending_recvs_ = 0;
    pending_sends_.clear();
    send_bufs_.clear();
    send_release_at_.clear();
    out_.clear();
    out_bytes_ = 0;
    out_produced_ = 0;
    out_consumed_ = 0;
    recv_bufs_.clear();
    free_recv_.clear();
    cq_.clear();
    return true;
}

void SoftSession::on_bytes(std::span<const std::uint8_t> in) {
    if (eof_ || setup_failed_) {
        return;
    }
    if (!qp_) {
        const std::size_t n = mpa_.on_bytes(in);
        in = in.subspan(n);
        if (mpa_.state() == iwarp::MpaState::request_received ||
            mpa_.state() == iwarp::MpaState::established ||
            mpa_.state() == iwarp::MpaState::failed) {
            after_mpa();
        }
        if (!qp_ || in.empty()) {
            return;
        }
    }
    auto r = qp_->on_bytes(in);
    poll_completions();
    if (r.entered_error) {
        qp_failed();
    }
}

void SoftSession::after_mpa() {
    if (mpa_.state() == iwarp::MpaState::failed) {
        setup_failed_ = true;
        setup_error_ =
            std::string("MPA: ") + (mpa_.error() ? iwarp::to_string(*mpa_.error()) : "failed");
        // An automatic MPA reject may be queued; the driver writes it, then FIN.
        llp_ = LlpRequest::fin;
        return;
    }
    if (mpa_.state() == iwarp::MpaState::request_received && !mpa_.outcome().p2p) {
        // An initiator that did not negotiate peer-to-peer mode (RFC 6581),
        // e.g. Linux siw built with peer_to_peer off. In client-server mode
        // the responder may send no FPDU before the initiator's first one
        // (RFC 5044 7.1.2), but SDP's Connecting Peer sends nothing before
        // the HelloAck (8.1.1): waiting would only run into the timeout on
        // both ends. Refuse at once with an MPA Reject (RFC 5044 7.1.1),
        // so the initiator sees a rejected connection, not a hang.
        (void)mpa_.reject({});
        setup_failed_ = true;
        setup_error_ =
            "MPA initiator did not negotiate peer-to-peer mode (RFC 6581); SDP needs it "
            "because the Accepting Peer sends the HelloAck first (SDP 8.1.1, RFC 5044 7.1.2): "
            "request rejected (Linux siw must be built with peer_to_peer on, see "
            "docs/rdma.md)";
        llp_ = LlpRequest::fin;
        return;
    }
    if (mpa_.state() == iwarp::MpaState::request_received) {
        // Accepting Peer: the Hello is the Request's private data (8.1.1).
        auto hello = mpa_.outcome().peer_private_data;
        auto err = conn_.accept(hello);
        if (err != engine::Error::none) {
            (void)mpa_.reject({});
            setup_failed_ = true;
            setup_error_ = std::string("SDP Hello rejected: ") + std::string(to_string(err));
            llp_ = LlpRequest::fin;
            return;
        }
        if (auto e = mpa_.accept({})) {
            setup_failed_ = true;
            setup_error_ = std::string("MPA: ") + iwarp::to_string(*e);
            llp_ = LlpRequest::fin;
            return;
        }
    }
    if (mpa_.state() == iwarp::MpaState::established) {
        attach_qp();
    }
}

void SoftSession::attach_qp() {
    auto qc = iwarp::qp_config_from(mpa_, mss_);
    qc.stag_seed = cfg_.stag_seed;
    qc.max_recv_wr = std::max<std::size_t>(qc.max_recv_wr, cfg_.engine.recv_buf_count + 8u);
    qp_ = std::make_unique<iwarp::QpEngine>(qc);
    qp_->set_untagged_placer(this);
    if (pending_recvs_ > 0) {
        const std::uint32_t n = std::exchange(pending_recvs_, 0);
        post_recv(n);
    }
    while (!pending_sends_.empty()) {
        auto [bytes, se] = std::move(pending_sends_.front());
        pending_sends_.pop_front();
        post_send(bytes, se);
    }
    if (qp_->state() == iwarp::QpState::error) {
        qp_failed();
    }
}

void SoftSession::post_send(std::span<const std::uint8_t> message, bool solicited) {
    if (!qp_) {
        pending_sends_.emplace_back(std::vector<std::uint8_t>(message.begin(), message.end()),
                                    solicited);
        return;
    }
    send_bufs_.emplace_back(message.begin(), message.end());
    iwarp::SendWr wr;
    wr.opcode = solicited ? iwarp::WrOpcode::send_se : iwarp::WrOpcode::send;
    wr.data = send_bufs_.back();
    if (qp_->post_send(wr)) {
        // QP in error or queue full: the stream is broken.
        send_bufs_.pop_back();
        qp_failed();
    }
}

void SoftSession::post_send_owned(std::vector<std::uint8_t>&& message, bool solicited) {
    send_owned(std::move(message), solicited, 0);
}

void SoftSession::post_send_invalidate(std::vector<std::uint8_t>&& message, bool solicited,
                                       std::uint32_t stag) {
    send_owned(std::move(message), solicited, stag);
}

void SoftSession::send_owned(std::vector<std::uint8_t>&& message, bool solicited,
                             std::uint32_t invalidate) {
    if (!qp_) {
        // Only the setup messages come this early (no zero copy yet).
        pending_sends_.emplace_back(std::move(message), solicited);
        return;
    }
    send_bufs_.push_back(std::move(message));
    iwarp::SendWr wr;
    wr.opcode = solicited ? iwarp::WrOpcode::send_se : iwarp::WrOpcode::send;
    wr.data = send_bufs_.back();
    wr.invalidate_stag = invalidate;
    if (qp_->post_send(wr)) {
        send_bufs_.pop_back();
        qp_failed();
    }
}

std::optional<engine::Region> SoftSession::register_region(std::span<std::uint8_t> mem,
                                                           engine::Access access) {
    if (!qp_) {
        return std::nullopt;
    }
    // The tagged offset is the buffer's address, as verbs providers do.
    std::uint32_t rights = iwarp::kAccessLocalWrite;
    if (access == engine::Access::remote_read) {
        rights = iwarp::kAccessRemoteRead;
    } else if (access == engine::Access::remote_write) {
        rights = iwarp::kAccessRemoteWrite;  // 9.3: the peer's RDMA Writes land here
    }
    auto mr = qp_->reg_mr(mem, reinterpret_cast<std::uintptr_t>(mem.data()), rights);
    if (!mr) {
        return std::nullopt;
    }
    return engine::Region{mr->stag, mr->base, mr->length};
}

void SoftSession::invalidate_region(std::uint32_t stag) {
    if (qp_) {
        qp_->dereg_mr(stag);  // false if the peer invalidated it already
    }
}

void SoftSession::post_rdma_read(std::uint64_t id, const engine::Region& local,
                                 std::size_t local_off, std::uint32_t remote_stag,
                                 std::uint64_t remote_to, std::uint32_t len) {
    if (!qp_) {
        return;
    }
    iwarp::SendWr wr;
    wr.wr_id = id;
    wr.opcode = iwarp::WrOpcode::rdma_read;
    wr.remote_stag = remote_stag;
    wr.remote_to = remote_to;
    wr.local_stag = local.stag;
    wr.local_to = local.to + local_off;
    wr.read_length = len;
    if (qp_->post_send(wr)) {
        qp_failed();
    }
}

void SoftSession::post_rdma_write(std::span<const std::uint8_t> data, std::uint32_t remote_stag,
                                  std::uint64_t remote_to) {
    post_rdma_write_owned(std::vector<std::uint8_t>(data.begin(), data.end()), 0, remote_stag,
                          remote_to);
}

void SoftSession::post_rdma_write_owned(std::vector<std::uint8_t>&& bytes, std::size_t off,
                                        std::uint32_t remote_stag, std::uint64_t remote_to) {
    if (!qp_) {
        return;
    }
    // Kept with the Send buffers: its completion releases it in order. The
    // peer's QP checks STag, access and bounds (a Terminate otherwise).
    send_bufs_.push_back(std::move(bytes));
    iwarp::SendWr wr;
    wr.opcode = iwarp::WrOpcode::rdma_write;
    wr.data = std::span<const std::uint8_t>(send_bufs_.back()).subspan(off);
    wr.remote_stag = remote_stag;
    wr.remote_to = remote_to;
    if (qp_->post_send(wr)) {
        send_bufs_.pop_back();
        qp_failed();
    }
}

void SoftSession::post_recv(std::uint32_t count) {
    if (!qp_) {
        pending_recvs_ += count;
        return;
    }
    const std::size_t size = conn_.local_recv_size();
    for (std::uint32_t i = 0; i < count; ++i) {
        std::uint64_t id;
        if (!free_recv_.empty()) {
            id = free_recv_.back();
            free_recv_.pop_back();
            // 10.6: the size may have changed; a much smaller one gives the
            // memory back.
            if (size < recv_bufs_[id].capacity() / 4) {
                recv_bufs_[id] = std::vector<std::uint8_t>(size);
            } else {
                recv_bufs_[id].resize(size);
            }
        } else {
            id = recv_bufs_.size();
            recv_bufs_.emplace_back(size);
        }
        iwarp::RecvWr wr;
        wr.wr_id = id;
        wr.buffer = recv_bufs_[id];
        if (qp_->post_recv(wr)) {
            free_recv_.push_back(id);
            qp_failed();
            return;
        }
    }
}

void SoftSession::disconnect(bool graceful) {
    if (graceful) {
        if (llp_ == LlpRequest::none) {
            llp_ = LlpRequest::fin;
        }
    } else {
        llp_ = LlpRequest::rst;
    }
}

void SoftSession::poll_completions() {
    // Not re-entered: a completion handled below may fail the QP, and
    // qp_failed() polls again, which would overwrite cq_ under this loop
    // (duplicated send completions release buffers still being written).
    // The outer loop polls until the CQ is empty anyway.
    if (!qp_ || polling_) {
        return;
    }
    polling_ = true;
    cq_.resize(64);
    while (true) {
        const std::size_t n = qp_->poll_cq(cq_);
        if (n == 0) {
            break;
        }
        for (std::size_t i = 0; i < n; ++i) {
            const auto& c = cq_[i];
            if (c.opcode == iwarp::WcOpcode::recv) {
                const auto id = c.wr_id;
                if (order_.valid && order_.wr_id == id) {
                    order_.valid = false;  // the buffer may come back for another message
                }
                if (!land_.flights.empty() && land_.flights.front().wr_id == id) {
                    const Flight f = land_.flights.front();
                    land_.flights.pop_front();
                    std::optional<std::size_t> took;
                    // Exactly what the BSDH announced, placed in order.
                    // A Send with Invalidate is never a landable Data Message:
                    // back to the private buffer, where the engine checks it.
                    if (c.status == iwarp::WcStatus::success && !llp_reported_ &&
                        c.invalidated_stag == 0 && c.byte_len == wire::kBsdhSize + f.room &&
                        f.placed_end == c.byte_len) {
                        took = conn_.on_recv_landed(f.private_buf, c.byte_len);
                    }
                    if (!took && c.status == iwarp::WcStatus::success && !llp_reported_) {
                        // Refused (e.g. closed meanwhile, or not what its
                        // BSDH said): back into the private buffers, in order.
                        land_.flights.push_front(f);
                        unland_all();
                    }
                    if (took) {
                        if (*took == f.room) {
                            land_.used = f.off + f.room;
                        } else {
                            unland_all();  // the connection broke
                        }
                        free_recv_.push_back(id);
                        continue;
                    }
                }
                if (c.status == iwarp::WcStatus::success && !llp_reported_) {
                    // The engine may keep the buffer (a Data payload is read
                    // from it in place) and give back a spare one. Moved out
                    // first: the call may post receives and grow recv_bufs_.
                    std::vector<std::uint8_t> buf = std::move(recv_bufs_[id]);
                    conn_.on_recv_buffer(buf, c.byte_len, c.solicited, c.invalidated_stag);
                    recv_bufs_[id] = std::move(buf);
                }
                free_recv_.push_back(id);
            } else if (c.opcode == iwarp::WcOpcode::rdma_read) {
                conn_.on_rdma_read_done(c.wr_id, c.status == iwarp::WcStatus::success);
            } else if (c.opcode == iwarp::WcOpcode::send ||
                       c.opcode == iwarp::WcOpcode::rdma_write) {
                // Released once the output framed so far was consumed (the
                // FPDUs may still point into the buffer).
                send_release_at_.push_back(out_produced_);
            }
        }
    }
    polling_ = false;
    release_send_buffers();
}

namespace {

// A Data Message that is only its BSDH (a gratuitous credit update).
bool data_without_payload(std::span<const std::uint8_t> bsdh) {
    auto hv = wire::decode_bsdh(bsdh);
    const auto* h = std::get_if<wire::Bsdh>(&hv);
    return h && h->mid == wire::Mid::data && h->len == wire::kBsdhSize &&
           (h->flags & wire::flag::oob_pres) == 0;
}

}  // namespace

bool SoftSession::begin_landing(std::span<std::uint8_t> zone) {
    if (land_.active || !qp_ || zone.empty()) {
        return false;
    }
    land_ = Landing{};
    land_.zone = zone;
    land_.active = true;
    return true;
}

std::size_t SoftSession::end_landing() {
    if (!land_.active) {
        return 0;
    }
    unland_all();
    const std::size_t n = land_.used;
    land_ = Landing{};
    return n;
}

bool SoftSession::landing_full() const {
    if (!land_.active) {
        return false;
    }
    if (land_.blocked) {
        return true;
    }
    const std::size_t max_payload = conn_.local_recv_size() - wire::kBsdhSize;
    return land_.zone.size() - land_.next_off() < max_payload;
}

void SoftSession::unland_all() {
    // Later segments of these messages, and their completions, take the
    // private-buffer path; so must every message after them.
    for (const Flight& f : land_.flights) {
        if (f.placed_end > wire::kBsdhSize) {
            std::copy_n(land_.zone.data() + f.off, f.placed_end - wire::kBsdhSize,
                        f.private_buf.data() + wire::kBsdhSize);
        }
    }
    land_.flights.clear();
    land_.blocked = true;
}

bool SoftSession::place(const iwarp::RecvWr& wr, std::uint32_t mo,
                        std::span<const std::uint8_t> payload) {
    constexpr std::size_t kHdr = wire::kBsdhSize;
    const std::size_t end = std::size_t{mo} + payload.size();
    const bool same = order_.valid && order_.wr_id == wr.wr_id;
    const bool in_order = same ? order_.contiguous && mo == order_.end : mo == 0;
    order_ = Order{true, wr.wr_id, in_order, in_order ? end : 0};
    if (!land_.active) {
        return false;
    }
    if (land_.flights.empty() || land_.flights.back().wr_id != wr.wr_id) {
        // A new message: it lands only if everything before it did, it is
        // a plain Data Message the engine takes this way, and it fits.
        if (land_.blocked) {
            return false;
        }
        std::size_t room = 0;
        if (in_order && wr.buffer.size() >= kHdr) {
            if (mo == 0 && payload.size() >= kHdr) {
                if (data_without_payload(payload.first(kHdr))) {
                    // A credit update: nothing for the reader, nothing to
                    // keep in order; the private path takes it.
                    return false;
                }
                room = conn_.landable(payload.first(kHdr));
            } else if (mo >= kHdr && land_.flights.empty()) {
                // Begun before the landing, its first segments (BSDH
                // included) in the private buffer in order: it lands from
                // here on, after copying what it has so far (the copy read()
                // would make).
                room = conn_.landable(wr.buffer.first(kHdr));
            }
        }
        const std::size_t off = land_.next_off();
        if (room == 0 || room > wr.buffer.size() - kHdr || room > land_.zone.size() - off ||
            mo > kHdr + room) {
            land_.blocked = true;
            return false;
        }
        land_.flights.push_back(Flight{wr.wr_id, wr.buffer, off, room, mo});
        if (mo > kHdr) {
            std::memcpy(land_.zone.data() + off, wr.buffer.data() + kHdr, mo - kHdr);
        }
    } else if (!in_order || mo < kHdr) {
        // Out of order, or the BSDH again: the private path sorts it out.
        unland_all();
        return false;
    }
    Flight& f = land_.flights.back();
    if (end > kHdr + f.room) {
        // More than the BSDH announced: the engine will reject the message;
        // until then it lives in its private buffer like any other.
        unland_all();
        return false;
    }
    std::size_t pos = mo;
    std::span<const std::uint8_t> rest = payload;
    if (pos < kHdr) {
        const std::size_t k = std::min(kHdr - pos, rest.size());
        std::copy_n(rest.data(), k, wr.buffer.data() + pos);
        rest = rest.subspan(k);
        pos += k;
    }
    if (!rest.empty()) {
        std::memcpy(land_.zone.data() + f.off + (pos - kHdr), rest.data(), rest.size());
    }
    f.placed_end = end;
    return true;
}

void SoftSession::qp_failed() {
    // A Terminate was sent or received: the SDP stream is lost. The Terminate
    // (if ours) is still in take_output(); FIN after it.
    poll_completions();
    if (llp_ == LlpRequest::none) {
        llp_ = LlpRequest::fin;
    }
    if (!llp_reported_) {
        llp_reported_ = true;
        conn_.on_llp_closed();
    }
}

void SoftSession::on_eof() {
    if (eof_) {
        return;
    }
    eof_ = true;
    // Nothing more will be written: drop the queued output.
    out_.clear();
    out_consumed_ += out_bytes_;
    out_bytes_ = 0;
    if (qp_) {
        qp_->on_llp_closed();
        poll_completions();
    } else if (!setup_failed_) {
        setup_failed_ = true;
        setup_error_ = "connection closed during MPA startup";
    }
    if (!llp_reported_) {
        llp_reported_ = true;
        conn_.on_llp_closed();
    }
}

class SoftSession::GatherSink final : public iwarp::FpduSink {
  public:
    explicit GatherSink(SoftSession& s) : s_(s) {}
    void fpdu(std::span<const std::uint8_t> header, std::span<const std::uint8_t> payload,
              bool payload_stable, bool crc) override {
        if (header.size() > iwarp::kFpduMaxFramedHeader) {
            std::vector<std::uint8_t> v;
            iwarp::append_fpdu(v, header, payload, crc);
            s_.push_owned(std::move(v));
            return;
        }
        iwarp::FpduFrame f;
        iwarp::frame_fpdu(f, header, payload, crc);
        s_.push_inline(f.prefix, f.prefix_len);
        if (!payload.empty()) {
            if (payload_stable) {
                s_.push_ext(payload.data(), payload.size());
            } else {
                s_.push_owned(std::vector<std::uint8_t>(payload.begin(), payload.end()));
            }
        }
        s_.push_inline(f.trailer, f.trailer_len);
    }
    void raw(std::vector<std::uint8_t>&& bytes) override { s_.push_owned(std::move(bytes)); }
    [[nodiscard]] std::size_t size() const override {
        return static_cast<std::size_t>(s_.out_produced_);
    }

  private:
    SoftSession& s_;
};

void SoftSession::push_inline(const std::uint8_t* p, std::size_t n) {
    if (n == 0) {
        return;
    }
    Piece& pc = out_.emplace_back();
    std::copy_n(p, n, pc.inl);
    pc.len = static_cast<std::uint32_t>(n);
    out_bytes_ += n;
    out_produced_ += n;
}

void SoftSession::push_owned(std::vector<std::uint8_t>&& bytes) {
    if (bytes.empty()) {
        return;
    }
    const std::size_t n = bytes.size();
    Piece& pc = out_.emplace_back();
    pc.owned = std::move(bytes);
    pc.len = static_cast<std::uint32_t>(n);
    out_bytes_ += n;
    out_produced_ += n;
}

void SoftSession::push_ext(const std::uint8_t* p, std::size_t n) {
    Piece& pc = out_.emplace_back();
    pc.ext = p;
    pc.len = static_cast<std::uint32_t>(n);
    out_bytes_ += n;
    out_produced_ += n;
}

void SoftSession::prepare_output(std::size_t max_bytes) {
    push_owned(mpa_.take_output());
    if (qp_ && !eof_) {
        GatherSink sink(*this);
        while (qp_->has_output() && out_bytes_ < max_bytes) {
            if (qp_->take_output_to(sink, max_bytes - out_bytes_) == 0) {
                break;
            }
        }
        // Send completions arrive as FPDUs are framed; their buffers are
        // released once consumed.
        poll_completions();
    }
}

std::size_t SoftSession::peek_output(std::span<std::span<const std::uint8_t>> segs) const {
    std::size_t n = 0;
    for (auto it = out_.begin(); it != out_.end() && n < segs.size(); ++it) {
        segs[n++] = std::span<const std::uint8_t>(it->data() + it->off, it->len - it->off);
    }
    return n;
}

void SoftSession::consume_output(std::size_t n) {
    n = std::min(n, out_bytes_);
    out_bytes_ -= n;
    out_consumed_ += n;
    while (n > 0) {
        Piece& pc = out_.front();
        const std::size_t k = std::min<std::size_t>(n, pc.len - pc.off);
        pc.off += static_cast<std::uint32_t>(k);
        n -= k;
        if (pc.off == pc.len) {
            out_.pop_front();
        }
    }
    release_send_buffers();
}

void SoftSession::release_send_buffers() {
    while (!send_release_at_.empty() && send_release_at_.front() <= out_consumed_) {
        send_release_at_.pop_front();
        if (!send_bufs_.empty()) {
            send_bufs_.pop_front();
        }
    }
}

void SoftSession::take_output(std::vector<std::uint8_t>& out, std::size_t max_bytes) {
    prepare_output(max_bytes);
    out.reserve(out.size() + out_bytes_);
    for (const Piece& pc : out_) {
        const std::uint8_t* p = pc.data() + pc.off;
        out.insert(out.end(), p, p + (pc.len - pc.off));
    }
    consume_output(out_bytes_);
}

bool SoftSession::has_output() const {
    // mpa_ output is taken immediately after each transition; the QP decides.
    return !eof_ && (out_bytes_ > 0 || (qp_ && qp_->has_output()));
}

SessionPhase SoftSession::phase() const {
    if (setup_failed_) {
        return SessionPhase::failed;
    }
    switch (conn_.state()) {
        case engine::State::idle:
            return SessionPhase::mpa;
        case engine::State::connecting:
            return qp_ ? SessionPhase::hello : SessionPhase::mpa;
        case engine::State::failed:
            return SessionPhase::failed;
        default:
            return SessionPhase::established;
    }
}

std::string SoftSession::describe_error() const {
    if (!setup_error_.empty()) {
        return setup_error_;
    }
    std::string s = "SDP ";
    s += to_string(conn_.state());
    if (conn_.error() != engine::Error::none) {
        s += ": ";
        s += to_string(conn_.error());
    }
    if (qp_ && qp_->terminate_received()) {
        s += " (iWARP Terminate received)";
    } else if (qp_ && qp_->terminate_sent()) {
        s += " (iWARP Terminate sent)";
    }
    return s;
}

}  // namespace sdp::io
