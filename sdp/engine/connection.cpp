// SPDX-License-Identifier: Apache-2.0
#include "sdp/engine/connection.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <variant>

namespace sdp::engine {
namespace w = sdp::wire;

namespace {

constexpr std::uint32_t kMaxBufferSize = 0x80000000u;  // 2^31 (6.2.1.5)
constexpr std::uint64_t kMaxOobDistance = 65535;       // 9.5.3
// ULP bytes a Combined-Mode SrcAvail carries (11.2: more than zero).
constexpr std::size_t kSrcAvailInline = 64;
// MaxAdverts we announce (6.2.1.3): one SrcAvail and one SinkAvail
// outstanding per direction, the most the engine keeps track of; a peer that
// sends more within Pipelined Mode breaks our limit (11.3).
constexpr std::uint16_t kMaxAdverts = 1;

}  // namespace

std::string_view to_string(State s) {
    switch (s) {
        case State::idle:
            return "idle";
        case State::connecting:
            return "connecting";
        case State::established:
            return "established";
        case State::closed:
            return "closed";
        case State::reset:
            return "reset";
        case State::failed:
            return "failed";
    }
    return "?";
}

std::string_view to_string(Error e) {
    switch (e) {
        case Error::none:
            return "none";
        case Error::version_mismatch:
            return "version_mismatch";
        case Error::bad_hello:
            return "bad_hello";
        case Error::bad_hello_ack:
            return "bad_hello_ack";
        case Error::bad_message:
            return "bad_message";
        case Error::unexpected_message:
            return "unexpected_message";
        case Error::mseq_mismatch:
            return "mseq_mismatch";
        case Error::bad_mseq_ack:
            return "bad_mseq_ack";
        case Error::oversize:
            return "oversize";
        case Error::credit_overrun:
            return "credit_overrun";
        case Error::llp_lost:
            return "llp_lost";
        case Error::local_abort:
            return "local_abort";
        case Error::peer_abort:
            return "peer_abort";
        case Error::rdma_failed:
            return "rdma_failed";
        case Error::bad_susp_comm:
            return "bad_susp_comm";
        case Error::suspended_message:
            return "suspended_message";
        case Error::duplication_unsupported:
            return "duplication_unsupported";
        case Error::resume_failed:
            return "resume_failed";
        case Error::handed_off:
            return "handed_off";
        case Error::bad_mode_change:
            return "bad_mode_change";
        case Error::mode_violation:
            return "mode_violation";
    }
    return "?";
}

Connection::Connection(Role role, const Config& cfg, QueuePair& qp)
    : role_(role), cfg_(cfg), qp_(qp) {
    // Section 10 constraints 2 and 4. We post at least 4 buffers, not 3: with
    // 3, an idle pair leaves whichever side sent last with 2 credits, too few
    // for payload (10.5), and nothing in the protocol lets it ask for more.
    cfg_.recv_buf_count = std::max<std::uint16_t>(cfg_.recv_buf_count, 4);
    cfg_.recv_buf_size = std::clamp<std::uint32_t>(
        cfg_.recv_buf_size, static_cast<std::uint32_t>(w::kMinPrivateBufferSize), kMaxBufferSize);
    cfg_.send_buf_size = std::clamp<std::uint32_t>(
        cfg_.send_buf_size, static_cast<std::uint32_t>(w::kMinPrivateBufferSize), kMaxBufferSize);
    cfg_.ird = std::max<std::uint16_t>(cfg_.ird, 1);
    cfg_.ord = std::max<std::uint16_t>(cfg_.ord, 1);
    cfg_.major &= 0x0F;
    cfg_.minor &= 0x0F;
    ird_ = cfg_.ird;
    ord_ = cfg_.ord;
    minor_ = cfg_.minor;
    oob_inline_ = cfg_.oob_inline;
}

// ---------------------------------------------------------------- setup ---

std::vector<std::uint8_t> Connection::connect() {
    if (role_ != Role::connecting || state_ != State::idle)
        return {};
    repost(cfg_.recv_buf_count);  // 8.1.1 step 1c
    w::Message m;
    m.bufs = static_cast<std::uint16_t>(local_bufs());
    m.body = w::Hello{.major = cfg_.major,
                      .minor = cfg_.minor,
                      .max_adverts = kMaxAdverts,
                      .des_rem_rcv_sz = cfg_.send_buf_size,
                      .local_rcv_sz = cfg_.recv_buf_size,
                      .loc_ird = ird_,
                      .loc_ord = ord_};
    last_adv_bufs_ = m.bufs;
    consumed_at_last_send_ = consumed_;
    state_ = State::connecting;
    return w::encode(m);
}

Error Connection::accept(std::span<const std::uint8_t> hello) {
    if (role_ != Role::accepting || state_ != State::idle)
        return Error::unexpected_message;
    auto r = w::decode(hello);
    auto* m = std::get_if<w::Message>(&r);
    const auto* h = m ? std::get_if<w::Hello>(&m->body) : nullptr;
    if (!h) {
        fail_setup(Error::bad_hello);
        return error_;
    }
    // 8.1.1 step 3a (and 10.3 for Bufs, section 10 rule 4 for the size).
    if (h->major != cfg_.major) {
        fail_setup(Error::version_mismatch);
        return error_;
    }
    if (h->max_adverts == 0 || h->loc_ird == 0 || h->loc_ord == 0 || m->bufs < 3 ||
        h->local_rcv_sz < w::kMinPrivateBufferSize) {
        fail_setup(Error::bad_hello);
        return error_;
    }
    minor_ = std::min(cfg_.minor, h->minor);  // step 3b
    ird_ = std::min(ird_, h->loc_ord);        // step 4d (MAY: we do)
    ord_ = std::min(ord_, h->loc_ird);        // step 4e (MUST)
    peer_max_adverts_ = h->max_adverts;
    peer_recv_size_ = std::min(h->local_rcv_sz, kMaxBufferSize);
    // The HelloAck travels as an iWARP Send and consumes one of the
    // Connecting Peer's buffers, which its Hello could not yet account for.
    peer_bufs_ = static_cast<std::uint32_t>(m->bufs) - 1;
    peer_ack_ = 0;

    repost(cfg_.recv_buf_count);  // step 4b
    w::Message ack;
    ack.bufs = static_cast<std::uint16_t>(local_bufs());
    ack.body = w::HelloAck{.major = cfg_.major,
                           .minor = cfg_.minor,
                           .max_adverts = kMaxAdverts,
                           .act_rcv_sz = cfg_.recv_buf_size,
                           .loc_ird = ird_,
                           .loc_ord = ord_};
    qp_.post_send(w::encode(ack), true);  // step 5: Send with SE
    ++stats_.messages_sent;
    last_adv_bufs_ = ack.bufs;
    consumed_at_last_send_ = consumed_;
    established();
    return Error::none;
}

void Connection::handle_hello_ack(std::span<const std::uint8_t> bytes) {
    // on_message() took one of our posted buffers for it.
    auto r = w::decode(bytes);
    auto* m = std::get_if<w::Message>(&r);
    const auto* a = m ? std::get_if<w::HelloAck>(&m->body) : nullptr;
    if (!a) {
        fail_setup(Error::bad_hello_ack);
        return;
    }
    // 8.1.1 step 7a.
    if (a->major != cfg_.major) {
        fail_setup(Error::version_mismatch);
        return;
    }
    if (a->max_adverts == 0 || a->loc_ird == 0 || a->loc_ord == 0 || m->bufs < 3 ||
        a->act_rcv_sz < w::kMinPrivateBufferSize) {
        fail_setup(Error::bad_hello_ack);
        return;
    }
    minor_ = std::min(cfg_.minor, a->minor);  // 7b
    ird_ = std::min(ird_, a->loc_ord);        // 7c (MAY: we do)
    ord_ = std::min(ord_, a->loc_ird);        // 7d (MUST)
    peer_max_adverts_ = a->max_adverts;
    peer_recv_size_ = std::min(a->act_rcv_sz, kMaxBufferSize);
    peer_bufs_ = m->bufs;
    peer_ack_ = 0;
    established();
    repost(1);  // the buffer the HelloAck used
    pump();
}

void Connection::established() {
    state_ = State::established;
    arm();
    next_mseq_ = 1;  // Hello/HelloAck carried 0 (6.1.5)
    last_rx_mseq_ = 0;
    if (std::exchange(resumed_, false)) {
        ++stats_.resumes;  // 13.1.1 step 8
        // 13.1.2: the Connecting Peer sends its disregarded SuspComm again.
        if (auto port = std::exchange(resend_port_, std::nullopt))
            suspend(*port);
    }
    pump();
}

void Connection::fail_setup(Error e) {
    error_ = e;
    state_ = State::failed;
    drop_queues();
    // The Connecting Peer terminates the attempt (8.1.1 step 7a); the
    // Accepting Peer has sent nothing and lets the CM reject the request.
    if (role_ == Role::connecting && !llp_closed())
        qp_.disconnect(false);
}

// ---------------------------------------------------------- receive path ---
//
// One path for every incoming message, as in siw_qp_rx.c: the entry points
// only say where the payload is (Placement); on_message() admits the message
// (connection state, credit), validates it once (Len, MSeq, MSeqAck) and
// dispatch() handles it by MID; deliver() puts any payload where it goes.

void Connection::on_recv(std::span<const std::uint8_t> bytes, bool /*solicited*/,
                         std::uint32_t invalidated_stag) {
    on_message(bytes, bytes.size(), Placement{Placement::Kind::copy, nullptr, invalidated_stag});
}

void Connection::on_recv_buffer(std::vector<std::uint8_t>& buf, std::size_t len, bool /*solicited*/,
                                std::uint32_t invalidated_stag) {
    const std::span<const std::uint8_t> bytes(buf.data(), std::min(len, buf.size()));
    // The payload may keep the buffer only if it is a whole private buffer
    // holding the whole message.
    const bool own = len <= buf.size() && buf.size() == cfg_.recv_buf_size;
    on_message(bytes, bytes.size(),
               own ? Placement{Placement::Kind::own, &buf, invalidated_stag}
                   : Placement{Placement::Kind::copy, nullptr, invalidated_stag});
}

std::size_t Connection::landable(std::span<const std::uint8_t> bsdh) const {
    // Established: the LLP is up and no AbortConn is waiting.
    if (state_ != State::established || dup_ != Dup::none || disconn_received() || rx_bytes_ != 0 ||
        src_in_ || sink_out_ || bsdh.size() < w::kBsdhSize) {
        return 0;
    }
    auto hv = w::decode_bsdh(bsdh.first(w::kBsdhSize));
    const auto* h = std::get_if<w::Bsdh>(&hv);
    if (!h || h->mid != w::Mid::data || (h->flags & w::flag::oob_pres) != 0 ||
        h->len <= w::kBsdhSize || h->len > cfg_.recv_buf_size) {
        return 0;
    }
    return h->len - w::kBsdhSize;
}

std::optional<std::size_t> Connection::on_recv_landed(std::span<const std::uint8_t> buf,
                                                      std::size_t len) {
    if (buf.size() < w::kBsdhSize || len <= w::kBsdhSize || len > cfg_.recv_buf_size ||
        landable(buf) == 0) {
        return std::nullopt;
    }
    if (!on_message(buf.first(w::kBsdhSize), len, Placement{Placement::Kind::landed}))
        return 0;
    return len - w::kBsdhSize;
}

bool Connection::on_message(std::span<const std::uint8_t> bytes, std::size_t len, Placement where) {
    // Admission.
    if (llp_closed())
        return false;
    if (send_ == SendTeardown::abort_pending) {
        on_credit_only(bytes);
        return false;
    }
    if (state_ != State::connecting && state_ != State::established) {
        ++stats_.ignored;
        return false;
    }
    if (dup_peer_quiet(dup_)) {
        // 13.1.1 steps 2-3: the peer sent SuspComm or SuspCommAck and may
        // send nothing more until the new connection.
        go_reset(Error::suspended_message);
        return false;
    }
    if (!take_buffer()) {
        go_reset(Error::credit_overrun);
        return false;
    }
    ++stats_.messages_received;
    if (state_ == State::connecting) {
        handle_hello_ack(bytes);
        return false;
    }

    // Validation: Len, then the whole message unless it is Data (whose
    // payload stays where it is), then MSeq/MSeqAck.
    if (len > consumed_buffer_size()) {
        go_reset(Error::oversize);
        return false;
    }
    auto hv = w::decode_bsdh(bytes);
    const auto* h = std::get_if<w::Bsdh>(&hv);
    if (!h || h->len != len) {
        go_reset(Error::bad_message);  // decode(): too_short, length_mismatch
        return false;
    }
    w::Message m;
    Payload payload{0, {}, where};
    if (h->mid == w::Mid::data) {
        m.bufs = h->bufs;
        m.flags = h->flags;
        m.mseq = h->mseq;
        m.mseq_ack = h->mseq_ack;
        payload.size = len - w::kBsdhSize;
        if (where.kind != Placement::Kind::landed)
            payload.bytes = bytes.subspan(w::kBsdhSize);
    } else {
        auto r = w::decode(bytes);
        auto* decoded = std::get_if<w::Message>(&r);
        if (!decoded) {
            go_reset(Error::bad_message);
            return false;
        }
        m = std::move(*decoded);
    }
    if (!check_sequence(m))
        return false;

    // Only a final RdmaRdCompl (9.2 step 3) or an RdmaWrCompl (9.3 step 2)
    // may come as Send with Invalidate.
    if (where.invalidated != 0 && h->mid != w::Mid::rdma_rd_compl &&
        h->mid != w::Mid::rdma_wr_compl) {
        go_reset(Error::unexpected_message);
        return false;
    }
    if (m.flags & w::flag::oob_pend) {
        ++oob_pending_;
        supersede_mark();
    }
    if (h->mid != w::Mid::data || payload.size > 0)
        arm();  // not a gratuitous update
    if (!dispatch(m, payload)) {
        const Error e = std::exchange(violation_, Error::none);
        go_reset(e != Error::none ? e : Error::unexpected_message);
        return false;
    }
    ack_resize_if_due();
    pump();
    return state_ == State::established;
}

void Connection::on_credit_only(std::span<const std::uint8_t> bytes) {
    // An AbortConn waits for credit: only the credit information matters.
    if (!take_buffer()) {
        // The peer overran our buffers even now: give up on AbortConn.
        step(send_, SendEvent::give_up);
        qp_.disconnect(false);
        return;
    }
    auto h = w::decode_bsdh(bytes);
    if (const auto* b = std::get_if<w::Bsdh>(&h)) {
        peer_bufs_ = b->bufs;
        peer_ack_ = b->mseq_ack;
    }
    pump();
}

bool Connection::check_sequence(const w::Message& m) {
    if (m.mseq != static_cast<std::uint32_t>(last_rx_mseq_ + 1)) {  // 10.1
        go_reset(Error::mseq_mismatch);
        return false;
    }
    const std::uint32_t in_flight = (next_mseq_ - 1) - m.mseq_ack;
    if (in_flight > sent_after_setup_) {
        go_reset(Error::bad_mseq_ack);
        return false;
    }
    last_rx_mseq_ = m.mseq;
    peer_bufs_ = m.bufs;
    peer_ack_ = m.mseq_ack;
    return true;
}

bool Connection::dispatch(w::Message& m, const Payload& payload) {
    const Payload none{};
    return std::visit(
        [&](auto& v) -> bool {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, w::Hello> || std::is_same_v<T, w::HelloAck>) {
                return false;
            } else if constexpr (std::is_same_v<T, w::Data>) {
                // 11.2: no ULP payload while a SrcAvail is in process.
                if (payload.size > 0 && (disconn_received() || src_in_))
                    return false;
                if (payload.size > 0)
                    payload_received();
                deliver(payload, m.flags);
            } else if constexpr (std::is_same_v<T, w::SrcAvail>) {
                return on_src_avail(v, Payload{v.payload.size(), v.payload, Placement{}});
            } else if constexpr (std::is_same_v<T, w::RdmaRdCompl>) {
                if (!on_rdma_rd_compl(v, payload.where.invalidated))
                    return false;
                // 6.1.2: examined in the two completions only.
                if (m.flags & w::flag::req_pipe)
                    on_req_pipe();
            } else if constexpr (std::is_same_v<T, w::SendSm>) {
                on_send_sm();
                deliver(none, 0);
            } else if constexpr (std::is_same_v<T, w::SrcAvailCancel>) {
                on_src_avail_cancel(m.mseq);
                deliver(none, 0);
            } else if constexpr (std::is_same_v<T, w::SinkAvail>) {
                // 11.2: no ULP payload while a SrcAvail is in process.
                if (!v.payload.empty() && (disconn_received() || src_in_))
                    return false;
                if (!on_sink_avail(v))
                    return false;
                // Any payload is data for this direction (9.4), and counts
                // as such for our own SinkAvail (9.5.1 step 1).
                if (!v.payload.empty())
                    payload_received();
                deliver(Payload{v.payload.size(), v.payload, Placement{}}, 0);
            } else if constexpr (std::is_same_v<T, w::DisConn>) {
                if (!step(recv_, RecvEvent::disconn))
                    return false;  // a second DisConn
                // Nothing can be written into our SinkAvail any more.
                if (sink_out_)
                    finish_sink(0);
                deliver(none, 0);
                teardown_if_done();
            } else if constexpr (std::is_same_v<T, w::AbortConn>) {
                if (!step(recv_, RecvEvent::abort_conn))
                    return false;
                error_ = Error::peer_abort;
                state_ = State::reset;
                drop_queues();
            } else if constexpr (std::is_same_v<T, w::ChRcvBuf>) {
                if (!on_ch_rcv_buf(v))
                    return false;
                deliver(none, 0);
            } else if constexpr (std::is_same_v<T, w::ChRcvBufAck>) {
                if (!on_ch_rcv_buf_ack(v))
                    return false;
                deliver(none, 0);
            } else if constexpr (std::is_same_v<T, w::SuspComm>) {
                if (!on_susp_comm(v))
                    return false;
                deliver(none, 0);
            } else if constexpr (std::is_same_v<T, w::SuspCommAck>) {
                if (!on_susp_comm_ack())
                    return false;
                deliver(none, 0);
            } else if constexpr (std::is_same_v<T, w::SinkAvailCancel>) {
                on_sink_avail_cancel();
                deliver(none, 0);
            } else if constexpr (std::is_same_v<T, w::SinkCancelAck>) {
                on_sink_cancel_ack();
                deliver(none, 0);
            } else if constexpr (std::is_same_v<T, w::RdmaWrCompl>) {
                if (!on_rdma_wr_compl(v, payload.where.invalidated))
                    return false;
                if (m.flags & w::flag::req_pipe)
                    on_req_pipe();  // for the opposite half: our send half (6.1.2)
            } else if constexpr (std::is_same_v<T, w::ModeChange>) {
                if (!on_mode_change_msg(v))
                    return false;
                deliver(none, 0);
            } else {
                static_assert(sizeof(T) == 0, "every SDP Message has its handling above");
            }
            return true;
        },
        m.body);
}

void Connection::deliver(const Payload& p, std::uint8_t flags) {
    const std::size_t n = p.size;  // bytes for the reader
    if ((flags & w::flag::oob_pres) && n > 0 && p.bytes.size() == n) {
        // 9.5.3: the last byte is the OOB byte. It stays in the stream at
        // its position (the mark); reads skip it unless oob_inline.
        if (oob_pending_ > 0) {
            --oob_pending_;
        } else {
            supersede_mark();  // no OOB_PEND announced it (not per 9.5.3)
        }
        // Another one is announced already: this one is superseded at once
        // and stays in line (TCP's urgent pointer would name the newer).
        if (oob_pending_ == 0)
            urg_ = Urgent{rx_pos_ + rx_bytes_ + n - 1, p.bytes[n - 1], false};
    }
    if (n == 0) {
        repost(1);  // nothing to hold the private buffer for
        return;
    }
    stats_.bytes_received += n;
    switch (p.where.kind) {
        case Placement::Kind::landed:
            rx_pos_ += n;  // read at once (never with a mark: rx_ was empty)
            repost(1);     // the private buffer is free again
            return;
        case Placement::Kind::own: {
            std::vector<std::uint8_t>& buf = *p.where.buffer;
            const auto off = static_cast<std::size_t>(p.bytes.data() - buf.data());
            rx_bytes_ += n;
            rx_.push_back(Chunk{std::move(buf), off, off + n});
            if (!spare_.empty()) {
                buf = std::move(spare_.back());
                spare_.pop_back();
            } else {
                buf = std::vector<std::uint8_t>(cfg_.recv_buf_size);
            }
            return;
        }
        case Placement::Kind::copy:
            rx_bytes_ += n;
            rx_.push_back(
                Chunk{{p.bytes.begin(), p.bytes.begin() + static_cast<std::ptrdiff_t>(n)}, 0, n});
            return;
    }
}

void Connection::on_llp_closed() {
    if (!step(recv_, RecvEvent::llp_closed))
        return;                       // already closed
    step(send_, SendEvent::give_up);  // an AbortConn still waiting for credit
    if (state_ == State::established && step(dup_, DupEvent::llp_closed)) {
        // 13.1.1 step 4 (Remote Peer: after our SuspCommAck) or step 5
        // (Local Peer: suspended): the state waits for restart().
        control_.clear();
        return;
    }
    switch (state_) {
        case State::idle:
        case State::connecting:
            state_ = State::failed;  // 8.1.2
            if (error_ == Error::none)
                error_ = Error::llp_lost;
            drop_queues();
            break;
        case State::established:
            // 8.2.1 step 4 / 8.2.2: graceful only after a DisConn without AbortConn.
            if (recv_ == RecvTeardown::closed) {
                state_ = State::closed;
                tx_.clear();
                tx_bytes_ = 0;
                // No region may outlive the connection; bytes a finished
                // read placed stay the reader's to take.
                const auto placed = zread_result_;
                drop_zcopy();
                zread_result_ = placed;
            } else {
                state_ = State::reset;
                error_ = Error::llp_lost;
                drop_queues();
            }
            break;
        case State::closed:
        case State::reset:
        case State::failed:
            break;
    }
}

// ------------------------------------------------------------------ ULP ---

bool Connection::writable() const {
    return (state_ == State::connecting || state_ == State::established) &&
           send_ == SendTeardown::open;
}

std::size_t Connection::write_space() const {
    if (!writable() || src_out_)
        return 0;  // 11.2: nothing behind a SrcAvail in process
    const std::size_t q = send_queued();
    return q >= cfg_.send_queue_limit ? 0 : cfg_.send_queue_limit - q;
}

std::size_t Connection::write(std::span<const std::uint8_t> bytes) {
    const std::size_t n = std::min(bytes.size(), write_space());
    if (n == 0)
        return 0;
    queue_tx(bytes.first(n));
    pump();
    return n;
}

std::size_t Connection::tx_block_payload() const {
    const std::uint32_t limit =
        peer_recv_size_ > 0 ? std::min(peer_recv_size_, cfg_.send_buf_size) : cfg_.send_buf_size;
    return limit - w::kBsdhSize;
}

void Connection::queue_tx(std::span<const std::uint8_t> bytes) {
    const std::size_t cap = tx_block_payload();
    while (!bytes.empty()) {
        if (tx_.empty() || tx_.back().size() - w::kBsdhSize >= cap) {
            auto& b = tx_.emplace_back();
            b.reserve(w::kBsdhSize + std::min(cap, std::max<std::size_t>(bytes.size(), 256)));
            b.resize(w::kBsdhSize);
        }
        auto& b = tx_.back();
        const std::size_t k = std::min(bytes.size(), cap - (b.size() - w::kBsdhSize));
        if (b.capacity() < b.size() + k)
            b.reserve(std::min(w::kBsdhSize + cap, std::max(b.size() + k, 2 * b.capacity())));
        b.insert(b.end(), bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(k));
        bytes = bytes.subspan(k);
        tx_bytes_ += k;
    }
}

bool Connection::write_oob(std::uint8_t byte) {
    if (!writable() || src_out_)
        return false;
    oob_marks_.push_back(tx_stream_pos_ + send_queued());
    queue_tx(std::span<const std::uint8_t>(&byte, 1));
    pump();
    return true;
}

std::size_t Connection::consume(std::uint8_t* dst, std::size_t max, std::uint32_t& freed) {
    std::size_t n = 0;
    while (n < max && !rx_.empty()) {
        Chunk& c = rx_.front();
        const std::size_t k = std::min(max - n, c.end - c.off);
        if (dst != nullptr)
            std::memcpy(dst + n, c.bytes.data() + c.off, k);
        n += k;
        c.off += k;
        if (c.off == c.end) {
            if (c.bytes.size() == cfg_.recv_buf_size && spare_.size() < cfg_.recv_buf_count)
                spare_.push_back(std::move(c.bytes));  // a private buffer: reuse it
            if (!c.carried)
                ++freed;  // a buffer posted on this LLP: posted again
            rx_.pop_front();
        }
    }
    rx_bytes_ -= n;
    rx_pos_ += n;
    if (urg_ && rx_pos_ > urg_->pos)
        urg_.reset();  // passed: the urgent byte is gone (as TCP)
    return n;
}

void Connection::release(std::uint32_t freed) {
    if (freed > 0)
        arm();
    repost(freed);
}

std::size_t Connection::read(std::span<std::uint8_t> out) {
    std::size_t n = 0;
    std::uint32_t freed = 0;
    while (n < out.size() && !rx_.empty()) {
        std::size_t max = out.size() - n;
        if (urg_ && urg_->pos == rx_pos_) {
            if (n > 0)
                break;  // a read stops at the mark
            if (!oob_inline_) {
                consume(nullptr, 1, freed);  // out of line: not in the stream
                continue;
            }
        } else if (urg_) {
            max = std::min<std::size_t>(max, urg_->pos - rx_pos_);  // up to the mark
        }
        n += consume(out.data() + n, max, freed);
    }
    release(freed);
    pump();
    return n;
}

void Connection::supersede_mark() {
    if (!urg_)
        return;
    // Linux's tcp_check_urg(): the older byte stays in the stream as normal
    // data, except that a reader standing on it (out of line) skips it now.
    if (!oob_inline_ && urg_->pos == rx_pos_) {
        std::uint32_t freed = 0;
        consume(nullptr, 1, freed);
        release(freed);
    }
    urg_.reset();
}

std::optional<std::uint8_t> Connection::read_oob() {
    if (oob_inline_ || !urg_ || urg_->taken || oob_pending_ > 0)
        return std::nullopt;
    urg_->taken = true;
    return urg_->byte;
}

bool Connection::eof() const {
    // A reset after the peer's DisConn (AbortConn, a protocol violation)
    // dropped whatever was still unread: that is an error, not end of stream.
    return disconn_received() && readable() == 0 && !src_in_ && !zread_result_ &&
           state_ != State::reset && state_ != State::failed;
}

void Connection::shutdown_write() {
    if (state_ != State::connecting && state_ != State::established)
        return;
    step(send_, SendEvent::shutdown);  // rejected when already shut: nothing changes
    pump();
}

void Connection::abort() {
    if (state_ == State::closed || state_ == State::reset || state_ == State::failed)
        return;
    go_reset(Error::local_abort);
}

void Connection::go_reset(Error e) {
    error_ = e;
    const bool was_established = state_ == State::established;
    state_ = was_established ? State::reset : State::failed;
    drop_queues();
    if (llp_closed())
        return;
    if (was_established && !abort_received(recv_) && step(send_, SendEvent::abort)) {
        // 8.2.2: after a DisConn, AbortConn, then the normal LLP teardown.
        pump();
    } else {
        qp_.disconnect(false);  // no further SDP Messages
    }
}

void Connection::drop_queues() {
    tx_.clear();
    tx_bytes_ = 0;
    oob_marks_.clear();
    oob_flagged_ = 0;
    control_.clear();
    rx_.clear();
    rx_pos_ += rx_bytes_;
    rx_bytes_ = 0;
    urg_.reset();
    oob_pending_ = 0;
    drop_zcopy();
    dup_ = Dup::none;  // a reset or failure ends a socket duplication too: nothing to resume
}

std::string Connection::describe() const {
    std::string s(to_string(state_));
    if (error_ != Error::none)
        s += " (" + std::string(to_string(error_)) + ")";
    if (dup_ != Dup::none)
        s += ", duplication " + std::string(to_string(dup_));
    return s + ", send " + std::string(to_string(send_)) + ", recv " +
           std::string(to_string(recv_));
}

void Connection::teardown_if_done() {
    // Whoever has both sent and received DisConn closes the LLP gracefully
    // (8.2.1 Remote Peer step 4; both do on a simultaneous close).
    if (recv_ == RecvTeardown::disconn && step(send_, SendEvent::llp_teardown))
        qp_.disconnect(true);
}

// ------------------------------------------------------- Read Zcopy (9.2) ---
//
// Combined Mode (11.2): one advertisement in process per direction, and no
// ULP payload from its Data Source until the Data Sink has Processed it
// with RdmaRdCompl(s) or SendSm.

bool Connection::write_zcopy(std::span<const std::uint8_t> buf) {
    if (state_ != State::established || dup_ != Dup::none || send_ != SendTeardown::open ||
        src_out_ || send_queued() > 0 || !oob_marks_.empty() || !zcopy_capable() ||
        allowed().send_src_avail == Limit::none || buf.size() <= cfg_.bcopy_threshold ||
        buf.size() > 0xFFFFFFFFu || peer_recv_size_ <= w::kBsdhSize + w::kSrcAvailHeaderSize) {
        return false;
    }
    // Remote Read only: the provider never writes into it.
    auto region = qp_.register_region(
        std::span<std::uint8_t>(const_cast<std::uint8_t*>(buf.data()), buf.size()),
        Access::remote_read);
    if (!region)
        return false;
    // 9.2's deadlock rule from this side too: the peer's SrcAvail waits for
    // a reader and now ours will wait as well; a peer that does not recover
    // itself would wait for ever. Its data comes by Bcopy instead.
    if (src_in_ && !zread_)
        force_bcopy();
    src_out_ = SrcOut{buf, *region, 0, 0, false};  // inline_n: when it is sent (pump())
    zwrite_revoked_.reset();
    ++stats_.zcopy_writes;
    pump();
    return true;
}

std::optional<bool> Connection::start_zcopy_write(std::span<const std::uint8_t> buf) {
    if (!zcopy_capable() || buf.size() <= cfg_.bcopy_threshold || state_ != State::established ||
        send_ != SendTeardown::open || dup_ != Dup::none ||
        allowed().send_src_avail == Limit::none) {
        return false;
    }
    if (send_queued() > 0)
        return std::nullopt;
    return write_zcopy(buf);
}

void Connection::revoke_zcopy_write() {
    if (!src_out_ || src_out_->revoking)
        return;
    SrcOut& so = *src_out_;
    if (so.forced) {
        // After a SendSm (9.5.2.1): what was queued is the stream's; the
        // rest is not fed.
        bcopy_until_ -= so.buf.size() - so.fed;
        end_revoked(so.written + so.fed);
        return;
    }
    if (!so.advertised) {
        qp_.invalidate_region(so.region.stag);
        end_revoked(so.written);  // the peer never saw it
        return;
    }
    // 9.5.4: the peer may have begun reading it, and an RDMA Read cannot be
    // called back: the region stays valid until the peer Processed the
    // cancel (on_send_sm(), on_rdma_rd_compl(), on_sink_avail()).
    so.revoking = true;
    if (!so.cancel_sent) {  // (a suspend() may have sent it)
        so.cancel_sent = true;
        ++stats_.src_avail_cancel_sent;
        control_.push_back(Control{w::SrcAvailCancel{}});
    }
    pump();
}

void Connection::end_revoked(std::size_t taken) {
    zwrite_revoked_ = taken;
    src_out_.reset();
}

std::size_t Connection::take_zcopy_write_count(std::size_t size) {
    const std::size_t n = zwrite_revoked_.value_or(size);
    zwrite_revoked_.reset();
    return n;
}

std::size_t Connection::zcopy_readable() const {
    if (!src_in_ || zread_ || zread_result_ || rx_bytes_ != 0 || state_ != State::established ||
        dup_ != Dup::none)
        return 0;
    return src_in_->len - src_in_->inline_n - src_in_->done;
}

bool Connection::read_zcopy(std::span<std::uint8_t> out) {
    const std::size_t rest = zcopy_readable();
    if (rest == 0 || out.empty())
        return false;
    const auto n = static_cast<std::uint32_t>(std::min(out.size(), rest));
    // 9.2 step 2a: a buffer smaller than the rest and than the threshold is
    // not worth an RDMA Read: Bcopy for the rest (9.5.2.1).
    // The Data Sink's threshold is at least its private buffer size (9.5.1).
    if (n < rest && n < std::max<std::size_t>(cfg_.bcopy_threshold, announced_recv_size())) {
        force_bcopy();
        pump();
        return false;
    }
    auto region = qp_.register_region(out.first(n), Access::local_write);
    if (!region) {
        force_bcopy();
        pump();
        return false;
    }
    zread_ = ZRead{*region, next_rdma_id_++, n};
    qp_.post_rdma_read(zread_->id, *region, 0, src_in_->stag,
                       src_in_->va + src_in_->inline_n + src_in_->done, n);
    return true;
}

std::optional<std::size_t> Connection::take_zcopy_read() {
    auto r = zread_result_;
    zread_result_.reset();
    return r;
}

void Connection::on_rdma_read_done(std::uint64_t id, bool ok) {
    if (!zread_ || zread_->id != id)
        return;  // dropped by a reset meanwhile
    qp_.invalidate_region(zread_->region.stag);
    const std::uint32_t n = zread_->len;
    zread_.reset();
    if (!ok) {
        go_reset(Error::rdma_failed);
        return;
    }
    SrcIn& si = *src_in_;
    si.done += n;
    zread_result_ = n;
    ++stats_.zcopy_reads;
    stats_.zcopy_bytes_received += n;
    stats_.bytes_received += n;
    // 9.2 step 2b: RdmaRdCompl after the read completed, counting the bytes
    // read since the last one; the final one invalidates the Data Source's
    // STag (Send with SE and Invalidate, 9.2 step 3).
    const bool final = si.inline_n + si.done == si.len;
    control_.push_back(Control{w::RdmaRdCompl{n}, final ? si.stag : 0});
    if (final || dup_ != Dup::none) {
        src_in_.reset();  // done, or the rest is cancelled by a duplication (13)
    } else if (si.cancelled) {
        force_bcopy();  // 9.5.4 step 3: the rest is cancelled
    }
    if (!src_in_)
        ack_hold_.reset();
    arm();
    pump();
}

bool Connection::on_src_avail(const w::SrcAvail& v, const Payload& inline_payload) {
    if (allowed().accept_src_avail == Limit::none) {
        violation_ = Error::mode_violation;  // our receive half is Buffered (Figure 25)
        return false;
    }
    // One in process at a time (Combined: 11.2; Pipelined: our MaxAdverts is
    // 1, 11.3). Combined: at least one byte inline, part of the advertised
    // buffer (11.2); Pipelined: none (11.3).
    const bool pipelined = mode_in_ == Mode::pipelined;
    if (disconn_received() || src_in_ || v.len == 0 || v.len <= v.payload.size() ||
        v.payload.empty() != pipelined) {
        return false;
    }
    if (sink_out_ && sink_out_->advertised) {
        // 11.3 rule 2b (Pipelined only: our SinkAvail exists only there): it
        // crossed our SinkAvail; ignored, flow control processed as usual.
        // The Data Source takes it as discarded (rule 1b).
        ++stats_.src_avail_ignored;
        deliver(inline_payload, 0);
        return true;
    }
    // Combined: the inline bytes are ULP data (6.3.3.4). Pipelined: rule 2a,
    // a SinkAvail of ours not sent yet is withdrawn (we must not send it).
    if (!v.payload.empty())
        payload_received();
    else if (sink_out_)
        finish_sink(0);
    deliver(inline_payload, 0);
    src_in_ = SrcIn{v.stag, v.va, v.len, static_cast<std::uint32_t>(v.payload.size()), 0, false};
    // 9.2's deadlock rule: a SrcAvail of ours is outstanding too, and no
    // reader waits here; and without RDMA Read at all: Bcopy (9.5.2.1).
    if (!qp_.rdma_capable() || cfg_.bcopy_threshold == 0 ||
        (src_out_ && src_out_->advertised && !src_out_->forced))
        force_bcopy();
    return true;
}

void Connection::decline_zcopy() {
    if (src_in_ && !zread_) {
        force_bcopy();
        pump();
    }
}

void Connection::discard_input() {
    std::uint8_t sink[16 * 1024];
    while (readable() > 0)
        read(sink);
    decline_zcopy();
    while (readable() > 0)
        read(sink);
}

void Connection::force_bcopy() {
    if (!src_in_)
        return;
    src_in_.reset();
    ack_hold_.reset();
    ++stats_.send_sm_sent;
    control_.push_back(Control{w::SendSm{}});
}

bool Connection::on_rdma_rd_compl(const w::RdmaRdCompl& v, std::uint32_t invalidated) {
    if (!src_out_ || !src_out_->advertised || src_out_->forced)
        return false;  // nothing to complete, or after its SendSm
    SrcOut& so = *src_out_;
    const std::size_t rest = so.buf.size() - so.inline_n - so.acked;
    if (v.len > rest)
        return false;
    so.acked += v.len;
    stats_.zcopy_bytes_sent += v.len;
    const bool final = so.acked == so.buf.size() - so.inline_n;
    // 9.2 step 3: a remote invalidate names our STag, on the final one.
    if (invalidated != 0 && (invalidated != so.region.stag || !final))
        return false;
    deliver(Payload{}, 0);
    if (final) {
        qp_.invalidate_region(so.region.stag);
        if (so.revoking)
            end_revoked(so.written + so.buf.size());  // read in full before the cancel
        src_out_.reset();
    }
    return true;
}

void Connection::on_send_sm() {
    ++stats_.send_sm_received;
    if (!src_out_ || !src_out_->advertised || src_out_->forced) {
        ++stats_.ignored;  // nothing advertised (e.g. after a reset race), or a second one
        return;
    }
    // 9.5.2.1: the rest of the oldest incomplete SrcAvail goes as Data,
    // fed into the send queue as it has room (the caller's buffer stays
    // lent until all of it is queued: zcopy_write_pending()).
    SrcOut& so = *src_out_;
    qp_.invalidate_region(so.region.stag);
    if (so.revoking) {
        // 9.5.4: our SrcAvailCancel is Processed (or the peer forced Bcopy
        // before it saw it: then it ignores the cancel). Either way the
        // stream ends with what the peer took; the rest is not sent.
        end_revoked(so.written + so.inline_n + so.acked);
        return;
    }
    so.forced = true;
    so.fed = so.inline_n + so.acked;
    // "using Data Messages": not RDMA-Written into a SinkAvail either.
    bcopy_until_ = tx_stream_pos_ + send_queued() + (so.buf.size() - so.fed);
}

void Connection::feed_forced_rest() {
    SrcOut& so = *src_out_;
    const std::size_t room =
        send_queued() < cfg_.send_queue_limit ? cfg_.send_queue_limit - send_queued() : 0;
    const std::size_t k = std::min(room, so.buf.size() - so.fed);
    queue_tx(so.buf.subspan(so.fed, k));
    so.fed += k;
    if (so.fed == so.buf.size())
        src_out_.reset();
}

void Connection::on_src_avail_cancel(std::uint32_t mseq) {
    if (!src_in_)
        return;  // all Processed: ignored (9.5.4)
    if (zread_) {
        // In process: finish the read, RdmaRdCompl, then cancel the rest;
        // MSeqAck stays below the cancel until then.
        src_in_->cancelled = true;
        if (!ack_hold_)
            ack_hold_ = mseq - 1;  // a later cancel may not raise it
        return;
    }
    force_bcopy();  // exactly one SendSm for the cancelled advertisement
}

void Connection::drop_zcopy() {
    // Nothing may touch these buffers once the caller gets them back.
    if (src_out_)
        qp_.invalidate_region(src_out_->region.stag);
    if (zread_)
        qp_.invalidate_region(zread_->region.stag);
    if (sink_out_)
        qp_.invalidate_region(sink_out_->region.stag);
    sink_out_.reset();
    sink_in_.reset();
    src_out_.reset();
    src_in_.reset();
    zread_.reset();
    zread_result_.reset();
    ack_hold_.reset();
}

// ------------------------------------------------------ Write Zcopy (9.3) ---
//
// One SinkAvail outstanding per direction, as for SrcAvail (11.2; see
// docs/protocol-notes.md). Staleness (9.5.1) decides every crossing: a
// message with ULP payload that reaches the Data Sink while its SinkAvail is
// outstanding completes it (the Data Sink does not count it in NonDiscards),
// and the Data Source, which counts it in PotentialNonDiscards unless it
// holds that SinkAvail (then it knows the message completes it), discards
// such a SinkAvail on arrival.

bool Connection::post_sink(std::span<std::uint8_t> out) {
    return lend(out, {});
}

bool Connection::lend(std::span<std::uint8_t> out, std::span<const std::uint8_t> request) {
    // 9.3 step 1 / 9.5.1: larger than the private buffers, and the Data
    // Sink's threshold is at least their size.
    // 10.6: the size the peer knows until our ChRcvBufAck has gone.
    const std::size_t floor = std::max<std::size_t>(cfg_.bcopy_threshold, announced_recv_size());
    if (state_ != State::established || dup_ != Dup::none || disconn_received() || llp_closed() ||
        rx_bytes_ != 0 || src_in_ || zread_ || zread_result_ || sink_out_ || !zcopy_capable() ||
        allowed().send_sink_avail == Limit::none || out.size() <= floor ||
        out.size() > kMaxBufferSize) {
        return false;
    }
    auto region = qp_.register_region(out, Access::remote_write);
    if (!region)
        return false;
    sink_out_ = SinkOut{out, *region, false, false, {request.begin(), request.end()}};
    pump();
    return true;
}

std::size_t Connection::max_transaction_request() const {
    // One message: the SinkAvail header and the request in the peer's
    // private buffer, and in one of our send blocks.
    const std::size_t limit =
        std::min<std::size_t>(peer_recv_size_, cfg_.send_buf_size) - w::kBsdhSize;
    return peer_recv_size_ > w::kBsdhSize + w::kSinkAvailHeaderSize
               ? limit - w::kSinkAvailHeaderSize
               : 0;
}

bool Connection::transact(std::span<const std::uint8_t> request, std::span<std::uint8_t> reply) {
    // 9.4 / Figure 25: the request is the next data of our send half, so
    // nothing of that half may precede it (queued bytes, an advertised
    // buffer, an urgent byte), and it must be writable; the SinkAvail is
    // our receive half's, under post_sink()'s rules.
    if (request.empty() || request.size() > max_transaction_request() || !writable() ||
        send_queued() > 0 || src_out_ || !oob_marks_.empty() ||
        allowed().send_transaction == Limit::none) {
        return false;
    }
    if (!lend(reply, request))
        return false;
    if (!sink_out_->advertised) {
        // No credit for a message with payload now (10.5): the request goes
        // as Data, first in the queue (nothing was queued), and the
        // SinkAvail by itself. A request never waits inside a SinkAvail, so
        // withdrawing that SinkAvail (9.5.1, 11.3 rule 2a, a reset) never
        // takes written bytes with it.
        queue_tx(sink_out_->request);
        sink_out_->request.clear();
        pump();
    }
    return true;
}

void Connection::cancel_sink() {
    if (!sink_out_ || sink_out_->cancelled)
        return;
    if (!sink_out_->advertised) {
        finish_sink(0);  // never sent: nothing to revoke
        return;
    }
    // 9.5.5: no new SinkAvail or SinkAvailCancel until it is Processed
    // (RdmaWrCompl, a message with payload, or SinkCancelAck).
    sink_out_->cancelled = true;
    ++stats_.sink_avail_cancel_sent;
    control_.push_back(Control{w::SinkAvailCancel{}});
    pump();
}

void Connection::finish_sink(std::size_t placed) {
    qp_.invalidate_region(sink_out_->region.stag);  // 9.3 step 3 (a no-op after a remote one)
    sink_out_.reset();
    if (placed > 0)
        zread_result_ = placed;
}

void Connection::payload_received() {
    if (sink_out_ && sink_out_->advertised) {
        // 9.5.1 step 1: this message completes our SinkAvail (stale at the
        // Data Source, or used up by its Data, 9.5.2.2) and is not counted.
        // Its bytes are read from the stream like any others.
        ++stats_.sink_avail_completed_by_data;
        finish_sink(0);
        return;
    }
    if (sink_out_)
        finish_sink(0);  // not sent yet: withdrawn, the reader reads these bytes
    ++non_discards_;     // 6.3.3.4 (wraps at 2^32)
}

void Connection::payload_sent() {
    if (sink_in_) {
        // 9.5.2.2: Data instead of the peer's current SinkAvail. It
        // completes that SinkAvail at the Data Sink, which does not count it
        // in NonDiscards: neither do we.
        sink_in_.reset();
        ++stats_.sink_avail_bcopy;
        return;
    }
    ++potential_non_discards_;  // 9.5.1 step 3 (wraps at 2^32)
}

bool Connection::on_sink_avail(const w::SinkAvail& v) {
    // Figure 25: only towards a Pipelined half (a Transaction as well). We
    // never leave Pipelined Mode ourselves, so the 12.4 window in which a
    // Data Source back in Combined Mode ignores SinkAvails does not occur.
    const Permitted p = allowed();
    if ((v.payload.empty() ? p.accept_sink_avail : p.accept_transaction) == Limit::none) {
        violation_ = Error::mode_violation;
        return false;
    }
    if (v.len == 0 || v.len > kMaxBufferSize)
        return false;  // 6.3.3.1
    // 9.5.1 step 4: stale unless NonDiscards matches.
    if (v.non_discards != potential_non_discards_) {
        --potential_non_discards_;
        ++stats_.sink_avail_stale;
        return true;
    }
    // One at a time: our MaxAdverts is 1 (11.3; 9.5.5 forbids a new one
    // before the last is Processed as well).
    if (sink_in_)
        return false;
    if (src_out_ && src_out_->advertised && !src_out_->forced) {
        // 11.3 rule 1: it crossed our SrcAvail, which the Data Sink ignores
        // (rule 2b): Write Zcopy, and what the SinkAvail leaves is advertised
        // again. A Data Sink that had begun on our SrcAvail (read some,
        // or had its inline bytes, which would make this stale) could not
        // send a SinkAvail (rule 2a).
        if (src_out_->acked > 0 || src_out_->inline_n > 0)
            return false;
        ++stats_.src_avail_superseded;
        if (src_out_->revoking) {
            // 9.5.4: overridden by a SinkAvail, our SrcAvailCancel is
            // Processed; nothing of the buffer goes into the SinkAvail.
            qp_.invalidate_region(src_out_->region.stag);
            end_revoked(src_out_->written);
        } else {
            src_out_->advertised = false;
        }
    }
    sink_in_ = SinkIn{v.stag, v.va, v.len};
    ++stats_.sink_avail_received;
    return true;
}

bool Connection::write_into_sink() {
    if (!qp_.rdma_capable() || cfg_.bcopy_threshold == 0)
        return false;  // Bcopy only: the next Data completes the SinkAvail
    const SinkIn si = *sink_in_;
    std::size_t done = 0;
    if (src_out_ && !src_out_->advertised && !src_out_->forced) {
        // A write_zcopy() buffer not advertised yet goes straight into the
        // peer's buffer (as 11.3 rule 1a prefers Write Zcopy); a rest larger
        // than the threshold is advertised after, a smaller one queued.
        SrcOut& so = *src_out_;
        done = std::min<std::size_t>(so.buf.size(), si.len);
        qp_.post_rdma_write(so.buf.first(done), si.stag, si.va);
        so.buf = so.buf.subspan(done);
        so.region.to += done;
        so.written += done;
        if (so.buf.empty()) {
            qp_.invalidate_region(so.region.stag);
            src_out_.reset();
        } else if (so.buf.size() <= cfg_.bcopy_threshold) {
            cancel_src_out();
        }
    } else {
        // Queued bytes, unless one Data Message carries them all (Bcopy for
        // small writes, 11.2), an OOB byte is queued (it goes as the last
        // byte of a Data Message, 9.5.3) or they are the rest of a SrcAvail
        // answered with SendSm (9.5.2.1: Data Messages).
        if (send_queued() <= tx_block_payload() || disconn_sent() || !oob_marks_.empty() ||
            tx_stream_pos_ < bcopy_until_) {
            return false;
        }
        const std::size_t limit = std::min<std::size_t>(si.len, send_queued());
        while (done < limit) {
            std::vector<std::uint8_t>& front = tx_.front();
            const std::size_t have = front.size() - w::kBsdhSize;
            const std::size_t k = std::min(have, limit - done);
            if (k == have) {
                std::vector<std::uint8_t> block = std::move(front);
                tx_.pop_front();
                qp_.post_rdma_write_owned(std::move(block), w::kBsdhSize, si.stag, si.va + done);
            } else {
                const auto from = front.begin() + static_cast<std::ptrdiff_t>(w::kBsdhSize);
                qp_.post_rdma_write(std::span<const std::uint8_t>(front).subspan(w::kBsdhSize, k),
                                    si.stag, si.va + done);
                front.erase(from, from + static_cast<std::ptrdiff_t>(k));
            }
            done += k;
        }
        tx_bytes_ -= done;
        tx_stream_pos_ += done;
    }
    ++stats_.rdma_writes;
    stats_.rdma_write_bytes += done;
    stats_.zcopy_bytes_sent += done;  // not in bytes_sent, as Read Zcopy's
    // 9.3 step 2: one RdmaWrCompl after the Write(s), as Send with SE and
    // Invalidate of the Data Sink's STag (the SHOULD).
    control_.push_back(Control{w::RdmaWrCompl{static_cast<std::uint32_t>(done)}, si.stag});
    sink_in_.reset();
    return true;
}

bool Connection::on_rdma_wr_compl(const w::RdmaWrCompl& v, std::uint32_t invalidated) {
    // 9.3 step 3: it matches our (only) SinkAvail, for at most its size.
    if (!sink_out_ || !sink_out_->advertised || v.len > sink_out_->buf.size())
        return false;
    // 9.3 step 2: a remote invalidate must name the SinkAvail's STag.
    if (invalidated != 0 && invalidated != sink_out_->region.stag)
        return false;
    stats_.sink_bytes_received += v.len;
    stats_.zcopy_bytes_received += v.len;
    stats_.bytes_received += v.len;
    finish_sink(v.len);
    deliver(Payload{}, 0);
    return true;
}

void Connection::on_sink_avail_cancel() {
    if (!sink_in_) {
        ++stats_.ignored;  // 9.5.5: all Processed (used, stale or none): ignored
        return;
    }
    // Unprocessed (our Writes never stay In-Process): discarded, and exactly
    // one SinkCancelAck.
    sink_in_.reset();
    ++stats_.sink_cancel_ack_sent;
    control_.push_back(Control{w::SinkCancelAck{}});
}

void Connection::on_sink_cancel_ack() {
    if (!sink_out_ || !sink_out_->cancelled) {
        ++stats_.ignored;  // nothing of ours waits for it
        return;
    }
    finish_sink(0);  // 9.5.5: the cancel is Processed
}

// --------------------------------------------------------------- credits ---

bool Connection::take_buffer() {
    // A message with no buffer posted for it: the peer sent without credit
    // (10.2). A real QP would have terminated the stream (no buffer for an
    // untagged DDP segment); the engine must not count a buffer it never
    // posted. The caller decides what follows.
    if (consumed_ == posted_)
        return false;
    ++consumed_;
    return true;
}

std::uint32_t Connection::local_bufs() const {
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(posted_ - consumed_, 0xFFFF));
}

bool Connection::send_idle() const {
    return tx_bytes_ == 0 && control_.empty() && !src_out_ && (next_mseq_ - 1) == peer_ack_;
}

std::uint32_t Connection::send_credits() const {
    const std::uint32_t in_flight = (next_mseq_ - 1) - peer_ack_;  // WrapSubtract (10.2)
    const std::int64_t c = static_cast<std::int64_t>(peer_bufs_) - in_flight;
    return c > 0 ? static_cast<std::uint32_t>(c) : 0;
}

std::uint32_t Connection::peer_credit_estimate() const {
    const std::int64_t e = static_cast<std::int64_t>(last_adv_bufs_) -
                           static_cast<std::int64_t>(consumed_ - consumed_at_last_send_);
    return e > 0 ? static_cast<std::uint32_t>(e) : 0;
}

bool Connection::needs_credit_update() const {
    const std::uint32_t cur = local_bufs();
    const std::uint32_t est = peer_credit_estimate();
    if (cur <= est)
        return false;
    const std::uint32_t gain = cur - est;
    // 10.5 MUST: an update when the peer holds one credit or fewer. Taken
    // literally it never ends between two peers that each keep only two
    // buffers free (every update costs its sender the credit the answer
    // restores), so an update caused only by the peer's own pure update
    // (not armed_) is sent at most once until something else happens, and
    // always when the peer holds no credit at all (it could not even answer).
    // docs/protocol-notes.md, "10.5".
    if (!armed_ && gain < 2) {
        if (est == 0)
            return true;
        return est == 1 && !replied_;
    }
    if (est <= 1)
        return true;  // 10.5: MUST
    if (est <= 2 && cur >= 3)
        return true;  // the peer cannot send payload
    const std::uint32_t batch = std::max<std::uint32_t>(2, cfg_.recv_buf_count / 2u);
    return gain >= batch;
}

void Connection::repost(std::uint32_t n) {
    if (n == 0 || llp_closed())
        return;
    if (state_ == State::reset || state_ == State::failed || state_ == State::closed)
        return;
    posted_ += n;
    qp_.post_recv(n);
}

// ------------------------------------------------------------ send path ---

std::uint8_t Connection::take_pend_flag(bool carries_oob_byte) {
    if (oob_flagged_ >= oob_marks_.size())
        return 0;
    const std::uint64_t mark = oob_marks_[oob_flagged_];
    // The flag may go no later than the byte, and no more than 65535 bytes
    // before it (9.5.3).
    const bool is_carried = carries_oob_byte && oob_flagged_ == 0;
    if (!is_carried && mark - tx_stream_pos_ + 1 > kMaxOobDistance)
        return 0;
    ++oob_flagged_;
    return w::flag::oob_pend;
}

bool Connection::send(w::Body body, std::uint8_t flags, std::vector<std::uint8_t>* block,
                      std::uint32_t invalidate) {
    w::Message m;
    m.bufs = static_cast<std::uint16_t>(local_bufs());
    m.flags = flags;
    // 6.1.2: our preference for the half we receive on, in the two
    // completions only (an RdmaWrCompl's applies to the opposite half of the
    // one it completes, which is that half). Pipelined lets us lend reader
    // buffers (SinkAvail); the master ignores the bit in Buffered Mode.
    const bool completion = std::holds_alternative<w::RdmaRdCompl>(body) ||
                            std::holds_alternative<w::RdmaWrCompl>(body);
    if (completion && zcopy_capable() && mode_in_ != Mode::buffered)
        m.flags |= w::flag::req_pipe;  // the slave's hint only (Buffered: we are master)
    m.mseq = next_mseq_;
    m.mseq_ack = ack_hold_ ? *ack_hold_ : last_rx_mseq_;
    m.body = std::move(body);
    if (block) {
        // The payload is already in place after kBsdhSize bytes of headroom.
        w::encode_bsdh_into(m, block->size() - w::kBsdhSize,
                            std::span<std::uint8_t, w::kBsdhSize>(block->data(), w::kBsdhSize));
        qp_.post_send_owned(std::move(*block), w::is_solicited(m));
    } else if (invalidate != 0) {
        qp_.post_send_invalidate(w::encode(m), w::is_solicited(m), invalidate);
    } else {
        qp_.post_send_owned(w::encode(m), w::is_solicited(m));
    }
    if (std::holds_alternative<w::ModeChange>(m.body))
        ++stats_.mode_changes_sent;
    else if (std::holds_alternative<w::ChRcvBuf>(m.body))
        ++stats_.ch_rcv_buf_sent;
    ++next_mseq_;
    ++sent_after_setup_;
    last_adv_bufs_ = m.bufs;
    consumed_at_last_send_ = consumed_;
    armed_ = false;
    replied_ = false;
    ++stats_.messages_sent;
    return true;
}

void Connection::pump() {
    if (llp_closed())
        return;
    if (send_ == SendTeardown::abort_pending) {
        const std::uint32_t c = send_credits();
        if (c >= 2 || (c == 1 && local_bufs() > peer_credit_estimate())) {
            step(send_, SendEvent::abort_conn);
            send(w::AbortConn{});
            qp_.disconnect(true);  // after the AbortConn completes (8.2.2)
        }
        return;
    }
    if (state_ != State::established)
        return;
    if (dup_ != Dup::none && pump_duplication())
        return;
    // 10.6, the Local Peer's side: see Config::grow_peer_buffers.
    if (cfg_.grow_peer_buffers && !sized_by_caller_ && peer_recv_size_ < cfg_.send_buf_size &&
        send_queued() >= 4 * std::size_t{peer_recv_size_}) {
        ask_peer_resize(cfg_.send_buf_size);
    }
    for (;;) {
        if (src_out_ && src_out_->forced)
            feed_forced_rest();
        const std::uint32_t c = send_credits();
        const bool gives_credit = local_bufs() > peer_credit_estimate();
        // 10.5: 1 credit: only credit-providing messages without payload;
        // 2 credits: only messages without payload; 3+: anything.
        const bool may_control = c >= 2 || (c == 1 && gives_credit);
        if (!control_.empty() && may_control) {
            Control ctl = std::move(control_.front());
            control_.pop_front();
            send(std::move(ctl.body), take_pend_flag(false), nullptr, ctl.invalidate);
            continue;
        }
        if (sink_out_ && !sink_out_->advertised &&
            (sink_out_->request.empty() ? may_control : c >= 3)) {
            // 9.3 step 1: Len, STag and VA describe the whole buffer;
            // NonDiscards as of now (6.3.3.4). A Transaction's request
            // (9.4) is ULP payload: 10.5's three credits.
            SinkOut& so = *sink_out_;
            const std::size_t n = so.request.size();
            send(w::SinkAvail{.len = static_cast<std::uint32_t>(so.buf.size()),
                              .stag = so.region.stag,
                              .va = so.region.to,
                              .non_discards = non_discards_,
                              .payload = std::move(so.request)},
                 take_pend_flag(false));
            so.request.clear();
            so.advertised = true;
            ++stats_.sink_avail_sent;
            if (n > 0) {
                ++stats_.transactions_sent;
                stats_.bytes_sent += n;
                payload_sent();
            }
            continue;
        }
        if (sink_in_ && may_control && write_into_sink())
            continue;
        if (src_out_ && !src_out_->advertised && !src_out_->forced && c >= 3) {
            // 9.2 step 1: Len, STag and VA describe the whole buffer; in
            // Combined Mode its first bytes travel in the SrcAvail (11.2),
            // in Pipelined Mode none (11.3).
            SrcOut& so = *src_out_;
            so.inline_n = mode_out_ == Mode::pipelined
                              ? 0
                              : std::min({kSrcAvailInline,
                                          std::size_t{peer_recv_size_} - w::kBsdhSize -
                                              w::kSrcAvailHeaderSize,
                                          so.buf.size() - 1});
            const auto first = so.buf.first(so.inline_n);
            send(w::SrcAvail{.len = static_cast<std::uint32_t>(so.buf.size()),
                             .stag = so.region.stag,
                             .va = so.region.to,
                             .payload = {first.begin(), first.end()}},
                 take_pend_flag(false));
            so.advertised = true;
            if (so.inline_n > 0)
                payload_sent();
            stats_.bytes_sent += so.inline_n;
            continue;
        }
        if (send_queued() > 0 && !disconn_sent() && c >= 3) {
            const std::size_t room =
                std::min<std::size_t>(peer_recv_size_, cfg_.send_buf_size) - w::kBsdhSize;
            std::vector<std::uint8_t>& front = tx_.front();
            const std::size_t have = front.size() - w::kBsdhSize;
            std::size_t n = std::min(have, room);
            std::uint8_t flags = 0;
            bool carries_oob = false;
            if (!oob_marks_.empty() && oob_marks_.front() < tx_stream_pos_ + n) {
                const std::uint64_t to_mark = oob_marks_.front() - tx_stream_pos_ + 1;
                if (oob_flagged_ == 0 && to_mark > kMaxOobDistance) {
                    // 9.5.3: OOB_PEND may not go on a message with more than
                    // 65535 bytes up to the OOB byte, and it has not gone
                    // yet: end this one exactly 65535 bytes before the byte,
                    // so the next (which carries it) may take the flag.
                    n = static_cast<std::size_t>(to_mark - kMaxOobDistance);
                } else {
                    n = static_cast<std::size_t>(to_mark);
                    carries_oob = true;
                    flags |= w::flag::oob_pres;
                }
            }
            flags |= take_pend_flag(carries_oob);
            if (n < have) {
                // Split (an OOB byte, or a block queued before the peer's
                // buffer size was known): the rest becomes the next block.
                std::vector<std::uint8_t> rest;
                rest.reserve(w::kBsdhSize + (have - n));
                rest.resize(w::kBsdhSize);
                rest.insert(rest.end(),
                            front.begin() + static_cast<std::ptrdiff_t>(w::kBsdhSize + n),
                            front.end());
                front.resize(w::kBsdhSize + n);
                tx_.insert(tx_.begin() + 1, std::move(rest));
            }
            std::vector<std::uint8_t> block = std::move(tx_.front());
            tx_.pop_front();
            tx_bytes_ -= n;
            tx_stream_pos_ += n;
            if (carries_oob) {
                oob_marks_.pop_front();
                --oob_flagged_;
            }
            stats_.bytes_sent += n;
            ++stats_.data_messages_sent;
            payload_sent();
            send(w::Data{}, flags, &block);
            continue;
        }
        if (send_ == SendTeardown::draining && send_queued() == 0 && !src_out_ && may_control) {
            send(w::DisConn{}, take_pend_flag(false));
            step(send_, SendEvent::disconn);
            teardown_if_done();
            if (send_ == SendTeardown::closing)
                return;
            continue;
        }
        if (c >= 1 && needs_credit_update()) {
            const bool reply = !armed_;
            ++stats_.credit_updates_sent;
            send(w::Data{}, c >= 2 ? take_pend_flag(false) : 0);
            replied_ = reply;
            continue;
        }
        break;
    }
}

// ------------------------------------------- socket duplication (13.1) ---
//
// One machine (duplication.hpp); what each state may send is decided here.

bool Connection::on_susp_comm(const w::SuspComm& v) {
    ++stats_.susp_comm_received;
    if (!cfg_.duplication) {
        violation_ = Error::duplication_unsupported;
        return false;
    }
    // 6.5.1.1: the port to connect to; 0 names none. A socket whose teardown
    // has begun is not duplicated (docs/protocol-notes.md, 13.1.1).
    const bool open = (send_ == SendTeardown::open || send_ == SendTeardown::draining) &&
                      recv_ == RecvTeardown::open;
    const Dup before = dup_;
    const auto ev = role_ == Role::connecting ? DupEvent::susp_comm_at_connector
                                              : DupEvent::susp_comm_at_acceptor;
    if (v.dest_port == 0 || !open || !step(dup_, ev)) {
        violation_ = Error::bad_susp_comm;  // also a second SuspComm
        return false;
    }
    if (dup_ == Dup::local_sent) {
        ++stats_.susp_comm_disregarded;  // 13.1.2: the Accepting Peer
        return true;
    }
    if (before == Dup::local_waiting || before == Dup::local_sent)
        resend_port_ = local_port_;  // 13.1.2: ours again on the new connection
    resume_port_ = v.dest_port;
    // 13: advertisements not In-Process are cancelled by the transition.
    // The peer waited for its own In-Process operations (step 2), so it
    // reads no SrcAvail of ours any more: its rest becomes queued data.
    cancel_src_out();
    // A SrcAvailCancel or SendSm of ours still queued has nothing left to
    // act on: both advertisements are gone with the transition.
    std::erase_if(control_, [](const Control& c) {
        return std::holds_alternative<w::SrcAvailCancel>(c.body) ||
               std::holds_alternative<w::SendSm>(c.body);
    });
    // A ModeChange of ours still queued: the peer never saw it, and the new
    // connection starts Combined anyway (12, 8). Left queued, it would need
    // credit the quiet peer cannot give, and the wait would reset us.
    if (std::erase_if(control_, [](const Control& c) {
            return std::holds_alternative<w::ModeChange>(c.body);
        }) > 0) {
        mode_out_ = Mode::combined;
    }
    // The same for resizing (10.6): the new connection's Hello/HelloAck
    // carries our current size, and a ChRcvBuf of ours ends with this one.
    std::erase_if(control_, [](const Control& c) {
        return std::holds_alternative<w::ChRcvBuf>(c.body) ||
               std::holds_alternative<w::ChRcvBufAck>(c.body);
    });
    ack_due_.reset();
    asked_.reset();
    // Write Zcopy: the peer's SinkAvail is not In-Process here (our RDMA
    // Writes complete when posted), and the peer writes nothing into ours
    // after its SuspComm: both are cancelled by the transition.
    sink_in_.reset();
    if (sink_out_)
        finish_sink(0);
    if (src_in_ && !zread_) {
        src_in_.reset();  // the peer sends the rest on the new connection
        ack_hold_.reset();
    }
    return true;
}

bool Connection::on_susp_comm_ack() {
    ++stats_.susp_comm_ack_received;
    if (!step(dup_, DupEvent::susp_comm_ack)) {
        violation_ = Error::bad_susp_comm;  // none asked for
        return false;
    }
    // Everything the peer wrote into our SinkAvail came before this.
    if (sink_out_)
        finish_sink(0);
    return true;
}

bool Connection::on_mode_change_msg(const w::ModeChange& m) {
    // Only the Mode Master of the half it names may send it, only for a
    // transition of Figure 26, never to the current mode (12).
    const auto to = on_mode_change(mode_out_, mode_in_, m);
    if (!to) {
        violation_ = Error::bad_mode_change;
        return false;
    }
    // 12.1: the Data Source sends it only once its SrcAvail is Processed.
    if (!m.send_half && *to == Mode::buffered && src_in_) {
        violation_ = Error::bad_mode_change;
        return false;
    }
    ++stats_.mode_changes_received;
    (m.send_half ? mode_out_ : mode_in_) = *to;  // the slave switches at once (12)
    // 12.4, the Data Sink's only duty: state of an outstanding SinkAvail is
    // invalidated (the Data Source completed its Writes before the
    // ModeChange, so nothing more comes into the buffer).
    if (!m.send_half && *to != Mode::pipelined && sink_out_)
        finish_sink(0);
    return true;
}

// -------------------------------------------- buffer resizing (10.6) ---

std::uint32_t Connection::consumed_buffer_size() const {
    // consumed_ counts the buffer just taken: index consumed_ - 1.
    return consumed_ <= old_until_ ? old_size_ : cfg_.recv_buf_size;
}

std::uint32_t Connection::announced_recv_size() const {
    return announced_ != 0 ? announced_ : cfg_.recv_buf_size;
}

bool Connection::on_ch_rcv_buf(const w::ChRcvBuf& v) {
    ++stats_.ch_rcv_buf_received;
    if (asked_) {
        // Ours still queued (waiting for credit) is withdrawn, in either
        // role: the peer never saw it, so this is no concurrent request.
        // Sent ahead of our answer, an Accepting Peer would disregard it;
        // a Connecting Peer would answer it and give up its own request,
        // so it would ignore our ChRcvBufAck and its view of our buffers
        // would no longer match them.
        const bool unsent = std::erase_if(control_, [](const Control& c) {
                                return std::holds_alternative<w::ChRcvBuf>(c.body);
                            }) > 0;
        // 10.6.1: both asked at once (the peer sent this before it saw ours,
        // or its ChRcvBufAck would have come first). The Accepting Peer
        // disregards the Connecting Peer's; the Connecting Peer answers and
        // takes its own as disregarded (it may ask again later: the MAY).
        if (!unsent && role_ == Role::accepting) {
            ++stats_.ch_rcv_buf_disregarded;
            return true;
        }
        peer_recv_size_ = asked_from_;  // the peer's buffers did not change
        asked_.reset();
    }
    if (ack_due_)
        return false;  // 10.6: a new ChRcvBuf before ours acknowledged it
    const std::uint32_t cur = cfg_.recv_buf_size;
    std::uint32_t to = cur;
    if (qp_.resizable_recv()) {
        // Never smaller than asked (a size below the minimum gets the
        // minimum, 10 rule 4), never beyond what we allow, never the
        // other way.
        if (v.des_sz < cur)
            to = std::max(v.des_sz, static_cast<std::uint32_t>(w::kMinPrivateBufferSize));
        else if (v.des_sz > cur)
            to = std::max(cur, std::min({v.des_sz, cfg_.max_recv_buf_size, kMaxBufferSize}));
        // (max_recv_buf_size 0 or below the current size: never larger)
    }
    if (to == cur) {
        // Unable or unwilling: the original size (10.6), at once.
        control_.push_back(Control{w::ChRcvBufAck{cur}});
        return true;
    }
    ++stats_.recv_resizes;
    // Buffers posted so far keep their size; those posted from now on have
    // the new one (10.6.2: at once, not after the old ones completed).
    // Buffers of an earlier change still posted keep their (larger) size.
    old_size_ = consumed_ < old_until_ ? std::max(cur, old_size_) : cur;
    old_until_ = posted_;
    announced_ = cur;
    cfg_.recv_buf_size = to;
    spare_.clear();  // private buffers of the old size
    ack_due_ = to;
    if (to < cur) {
        // Smaller: acknowledged at once (the MAY); the peer already sends
        // no more than `to`.
        ack_due_.reset();
        announced_ = to;
        control_.push_back(Control{w::ChRcvBufAck{to}});
    }
    ack_resize_if_due();
    return true;
}

void Connection::ack_resize_if_due() {
    // 10.6: larger, acknowledged once every buffer of the old size was
    // consumed; SinkAvail decisions use the new size from then on. Not
    // during a duplication (the new connection's setup tells the size).
    if (!ack_due_ || consumed_ < old_until_ || dup_ != Dup::none)
        return;
    control_.push_back(Control{w::ChRcvBufAck{*ack_due_}});
    announced_ = *ack_due_;
    ack_due_.reset();
}

bool Connection::on_ch_rcv_buf_ack(const w::ChRcvBufAck& v) {
    // Nothing of ours waits for it (as SinkCancelAck): no request, or ours
    // still queued (waiting for credit), which the peer cannot have seen.
    const bool unsent = std::any_of(control_.begin(), control_.end(), [](const Control& c) {
        return std::holds_alternative<w::ChRcvBuf>(c.body);
    });
    if (!asked_ || unsent) {
        ++stats_.ignored;
        return true;
    }
    const std::uint32_t asked = *asked_;
    const std::uint32_t from = asked_from_;
    asked_.reset();
    const std::uint32_t act = v.act_sz;
    if (asked > from) {
        // 10.6: increased or unchanged, never smaller.
        if (act < from || act > kMaxBufferSize)
            return false;
        no_more_increase_ = act == from;
    } else {
        // Decreased, not below the size asked, or unchanged.
        if (act > from || act < asked)
            return false;
        no_more_decrease_ = act == from;
    }
    peer_recv_size_ = act;  // the SHOULD: at once
    return true;
}

bool Connection::request_peer_recv_size(std::uint32_t size) {
    if (!ask_peer_resize(size))
        return false;
    sized_by_caller_ = true;
    pump();
    return true;
}

bool Connection::ask_peer_resize(std::uint32_t size) {
    // Not while our ChRcvBufAck for the peer's request is still due: the
    // peer would take ours as concurrent and disregard it (10.6.1).
    if (state_ != State::established || dup_ != Dup::none || send_ != SendTeardown::open ||
        asked_ || ack_due_ || size == peer_recv_size_ || size < w::kMinPrivateBufferSize ||
        size > kMaxBufferSize) {
        return false;
    }
    const bool increase = size > peer_recv_size_;
    if (increase ? no_more_increase_ : no_more_decrease_)
        return false;
    asked_ = size;
    asked_from_ = peer_recv_size_;
    control_.push_back(Control{w::ChRcvBuf{size}});
    // 10.6: smaller at once (nothing of ours goes before the ChRcvBuf:
    // control messages go first); larger only from the ChRcvBufAck on.
    if (!increase)
        peer_recv_size_ = size;
    return true;
}

bool Connection::zcopy_capable() const {
    return qp_.rdma_capable() && cfg_.bcopy_threshold > 0;
}

void Connection::on_req_pipe() {
    // 12.3: as Mode Master of our send half we follow the hint when we can
    // do zero copy ourselves (a Pipelined Data Source must take SinkAvails,
    // Figure 25). Never during a duplication or after our DisConn (no data
    // is left to place). The Mode Master changes its mode at once (12); the
    // ModeChange leaves before any later message of ours (control_ first).
    if (mode_out_ != Mode::combined || !zcopy_capable() || dup_ != Dup::none ||
        send_ != SendTeardown::open) {
        return;
    }
    control_.push_back(Control{w::ModeChange{false, Mode::pipelined}});
    mode_out_ = Mode::pipelined;
}

bool Connection::suspend(std::uint16_t dest_port) {
    const bool open = (send_ == SendTeardown::open || send_ == SendTeardown::draining) &&
                      recv_ == RecvTeardown::open;
    if (state_ != State::established || dest_port == 0 || !open || !step(dup_, DupEvent::suspend)) {
        return false;
    }
    local_port_ = dest_port;
    sink_in_.reset();  // 13: not In-Process, cancelled by the transition
    if (src_out_ && src_out_->advertised && !src_out_->forced) {
        // In-Process: the peer may be reading it. Cancel (9.5.4, once) and
        // wait for its RdmaRdCompl(s) or SendSm.
        if (!src_out_->cancel_sent) {
            src_out_->cancel_sent = true;
            ++stats_.src_avail_cancel_sent;
            control_.push_back(Control{w::SrcAvailCancel{}});
        }
    } else if (src_out_) {
        cancel_src_out();
    }
    pump();
    return true;
}

bool Connection::in_process() const {
    // Our RDMA Read of the peer's buffer, and (Local Peer) our SrcAvail
    // until the peer answered its SrcAvailCancel.
    return zread_.has_value() || (src_out_ && src_out_->advertised && !src_out_->forced);
}

void Connection::cancel_src_out() {
    if (!src_out_)
        return;
    SrcOut& so = *src_out_;
    if (!so.forced)
        qp_.invalidate_region(so.region.stag);
    // What the peer did not take goes as data, after what is queued (the
    // fed part of a forced rest, which precedes it in the stream).
    const std::size_t from = so.forced ? so.fed : so.advertised ? so.inline_n + so.acked : 0;
    queue_tx(so.buf.subspan(from));
    if (so.revoking)
        end_revoked(so.written + so.buf.size());  // all of it is the stream's
    src_out_.reset();
}

bool Connection::pump_duplication() {
    if (dup_quiet(dup_))
        return true;  // steps 2-3: no SDP Message, no RDMA
    // local_waiting / remote_waiting: control messages (an RdmaRdCompl
    // completing the In-Process read, a SrcAvailCancel) go first. Each, and
    // the SuspComm after them, may take the last credit: no credit update
    // is needed after them (the 10.5 reserve keeps updates flowing, and
    // nothing flows after these). The SuspCommAck needs none (below).
    while (!control_.empty() && send_credits() >= 1) {
        Control ctl = std::move(control_.front());
        control_.pop_front();
        send(std::move(ctl.body), 0, nullptr, ctl.invalidate);
    }
    if (dup_ == Dup::local_waiting && in_process() && send_credits() >= 1 &&
        needs_credit_update()) {
        // The peer may need credit to answer our SrcAvailCancel.
        ++stats_.credit_updates_sent;
        send(w::Data{});
    }
    if (in_process() || !control_.empty()) {
        if (dup_ == Dup::remote_waiting && !zread_ && send_credits() == 0) {
            // The peer is quiet: no credit will come back for the control
            // messages before the SuspCommAck (docs/protocol-notes.md, 13.1.1).
            go_reset(Error::bad_susp_comm);
        }
        return true;
    }
    if (dup_ == Dup::local_waiting) {
        if (send_credits() == 0)
            return true;
        cancel_src_out();  // answered by SendSm: the rest is data
        if (src_in_ && !zread_) {
            src_in_.reset();  // 13: cancelled by the transition
            ack_hold_.reset();
        }
        send(w::SuspComm{local_port_});
        ++stats_.susp_comm_sent;
        step(dup_, DupEvent::susp_comm_sent);
        // One receive buffer more than the SuspComm advertised: the peer's
        // messages in flight may use up every advertised one, and we send
        // no credit update after the SuspComm; its SuspCommAck lands here
        // (docs/protocol-notes.md, 13.1.1).
        repost(1);
        return true;
    }
    // remote_waiting: step 3, then step 4's LLP close after the send. The
    // SuspCommAck goes even without a credit: the peer is quiet and can
    // give none, and the SuspComm's sender keeps a buffer posted for it.
    send(w::SuspCommAck{});
    ++stats_.susp_comm_ack_sent;
    step(dup_, DupEvent::susp_comm_ack_sent);
    qp_.disconnect(true);
    return true;
}

bool Connection::restart(Role role) {
    if (state_ != State::established || !llp_closed() ||
        (dup_ != Dup::reconnecting && dup_ != Dup::local_done)) {
        return false;
    }
    // Nothing of the old connection's context survives but the streams.
    cancel_src_out();
    const auto placed = zread_result_;
    drop_zcopy();
    zread_result_ = placed;  // bytes a finished read placed stay the reader's
    control_.clear();
    non_discards_ = 0;
    mode_out_ = mode_in_ = Mode::combined;  // a new connection starts Combined (12)
    for (Chunk& c : rx_)
        c.carried = true;  // posted on the old LLP: the new one counts afresh
    role_ = role;
    state_ = State::idle;
    error_ = Error::none;
    minor_ = cfg_.minor;
    ird_ = cfg_.ird;
    ord_ = cfg_.ord;
    peer_max_adverts_ = 0;
    peer_recv_size_ = 0;
    // 10.6: the new connection's Hello/HelloAck tell the current size.
    old_until_ = 0;
    old_size_ = 0;
    ack_due_.reset();
    announced_ = 0;
    asked_.reset();
    no_more_increase_ = no_more_decrease_ = false;
    next_mseq_ = 1;
    last_rx_mseq_ = 0;
    sent_after_setup_ = 0;
    peer_bufs_ = 0;
    peer_ack_ = 0;
    posted_ = 0;
    consumed_ = 0;
    last_adv_bufs_ = 0;
    consumed_at_last_send_ = 0;
    armed_ = false;
    replied_ = false;
    oob_flagged_ = 0;  // OOB_PEND flags go again on the new connection
    oob_pending_ = 0;
    potential_non_discards_ = 0;
    recv_ = RecvTeardown::open;
    dup_ = Dup::none;
    resume_port_ = 0;
    resumed_ = true;
    return true;
}

void Connection::resume_failed() {
    // After restart() the new setup may have failed already: the reason
    // that counts is the duplication's.
    if (state_ == State::closed)
        return;
    error_ = Error::resume_failed;
    state_ = State::reset;
    dup_ = Dup::none;
    resend_port_.reset();
    drop_queues();
    if (!llp_closed())
        qp_.disconnect(false);
}

std::optional<Carry> Connection::hand_over() {
    if (state_ != State::established || dup_ != Dup::local_done)
        return std::nullopt;
    cancel_src_out();  // (done before the SuspComm already; its rest is queued)
    Carry c;
    c.unread.reserve(rx_bytes_);
    // What read() would return: an out-of-line urgent byte is skipped.
    const bool skip = urg_ && !oob_inline_;
    const std::uint64_t skip_pos = skip ? urg_->pos : 0;
    std::uint64_t pos = rx_pos_;
    for (const Chunk& ch : rx_) {
        const std::span<const std::uint8_t> s(ch.bytes.data() + ch.off, ch.end - ch.off);
        if (skip && skip_pos >= pos && skip_pos < pos + s.size()) {
            const auto k = static_cast<std::size_t>(skip_pos - pos);
            c.unread.insert(c.unread.end(), s.begin(), s.begin() + static_cast<std::ptrdiff_t>(k));
            c.unread.insert(c.unread.end(), s.begin() + static_cast<std::ptrdiff_t>(k + 1),
                            s.end());
        } else {
            c.unread.insert(c.unread.end(), s.begin(), s.end());
        }
        pos += s.size();
    }
    c.unsent.reserve(tx_bytes_);
    for (const auto& block : tx_)
        c.unsent.insert(c.unsent.end(), block.begin() + static_cast<std::ptrdiff_t>(w::kBsdhSize),
                        block.end());
    c.write_shut = send_ != SendTeardown::open;
    c.recv_buf_size = cfg_.recv_buf_size;
    c.ird = ird_;
    c.ord = ord_;
    // Done here: nothing more goes out; the old LLP closes gracefully (the
    // Remote Peer closes it after its SuspCommAck anyway).
    const auto placed = zread_result_;
    error_ = Error::handed_off;
    state_ = State::reset;
    drop_queues();
    zread_result_ = placed;
    resend_port_.reset();
    if (!llp_closed())
        qp_.disconnect(true);
    return c;
}

bool Connection::carry_in(std::span<const std::uint8_t> unread,
                          std::span<const std::uint8_t> unsent, bool write_shut) {
    if (state_ != State::idle)
        return false;
    if (!unread.empty()) {
        rx_.push_back(Chunk{{unread.begin(), unread.end()}, 0, unread.size(), true});
        rx_bytes_ += unread.size();
    }
    queue_tx(unsent);
    if (write_shut)
        step(send_, SendEvent::shutdown);
    resumed_ = true;  // established() counts it (13.1.1 step 8)
    return true;
}

}  // namespace sdp::engine
