// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the SDP engine's receive path and ULP calls. An Accepting
// Peer is set up from a fixed Hello, then the input drives it as a list of
// records [op][len][bytes]. Every message the engine sends must decode, fit
// the peer's buffers and carry consecutive MSeqs; nothing may crash.
// Socket duplication (13.1.1): the records also suspend (Local Peer) and
// move the engine to a new LLP connection when it waits for one (restart()
// as the Connecting Peer after its SuspCommAck, as the Accepting Peer when
// suspended itself); nothing may be sent after a SuspCommAck on the same
// connection.
// Receive buffer resizing (10.6): an input that grants the engine's ChRcvBuf
// for larger buffers lets it send larger messages from then on.
// Zero copy: an input starting with 0x7A runs with an RDMA-capable QP and
// a Bcopy Threshold, and records 0xF0-0xFF lend a reader buffer (Write
// Zcopy, 9.3), cancel it (9.5.5), advertise a writer buffer (9.2) or give
// it up (9.5.4), or take a result. RDMA Writes may only go into a SinkAvail the input sent, within
// its bounds, and a lent buffer's region is gone once it is given back.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <variant>
#include <vector>

#include "sdp/bytes/byte_order.hpp"
#include "sdp/engine/connection.hpp"
#include "sdp/wire/message.hpp"

namespace w = sdp::wire;
namespace e = sdp::engine;

namespace {

constexpr std::uint32_t kPeerRecvSize = 512;

class CheckingQp : public e::QueuePair {
  public:
    void post_send(std::span<const std::uint8_t> m, bool se) override {
        auto r = w::decode(m);
        auto* msg = std::get_if<w::Message>(&r);
        if (!msg || m.size() > peer_size_)
            std::abort();
        if (se != w::is_solicited(*msg))
            std::abort();
        if (!first_ && msg->mseq != next_mseq_)
            std::abort();
        if (first_ && msg->mseq != 0)
            std::abort();  // HelloAck
        next_mseq_ = msg->mseq + 1;
        first_ = false;
        if (closed_ || quiet_)
            std::abort();  // nothing after an abortive disconnect or a SuspCommAck
        if (std::holds_alternative<w::SuspCommAck>(msg->body))
            quiet_ = true;
        if (const auto* c = std::get_if<w::ChRcvBuf>(&msg->body))
            asked_larger_ = c->des_sz > peer_size_;
    }
    // A new LLP connection (13.1.1 step 4): the Accepting Peer's HelloAck
    // comes first again; the Connecting Peer's Hello is not a Send.
    void new_llp(bool connecting) {
        first_ = !connecting;
        peer_size_ = kPeerRecvSize;  // the new connection's Hello / HelloAck
        asked_larger_ = false;
        next_mseq_ = 1;
        closed_ = false;
        quiet_ = false;
        posted_ = 0;
    }
    void post_recv(std::uint32_t n) override { posted_ += n; }
    [[nodiscard]] bool rdma_capable() const override { return rdma_; }
    [[nodiscard]] bool resizable_recv() const override { return rdma_; }  // 10.6 too
    std::optional<e::Region> register_region(std::span<std::uint8_t> mem,
                                             e::Access access) override {
        if (!rdma_)
            return std::nullopt;
        const std::uint32_t stag = ++next_stag_;
        live_.insert(stag);
        if (access == e::Access::remote_write)
            sink_stag_ = stag;
        return e::Region{stag, 0x1000, mem.size()};
    }
    void invalidate_region(std::uint32_t stag) override { live_.erase(stag); }
    void post_rdma_write(std::span<const std::uint8_t> d, std::uint32_t stag,
                         std::uint64_t to) override {
        // Only into a SinkAvail the peer sent and the engine took (9.3 step
        // 2), within it. Every one taken counts: a later one with the same
        // STag may be stale (9.5.1 step 4) and leave the engine on the
        // earlier one. (The write may come inside the on_recv of the
        // SinkAvail itself.)
        commit_taken();
        const auto [first, last] = advertised_.equal_range(stag);
        const bool within = std::any_of(first, last, [&](const auto& a) {
            const auto [va, len] = a.second;
            return to >= va && d.size() <= len && to - va <= len - d.size();
        });
        if (!rdma_ || closed_ || quiet_ || !within)
            std::abort();
    }
    // A message the input delivers, before on_recv: its SinkAvail, if any,
    // is a target once the engine took it (commit_taken()).
    void saw(std::span<const std::uint8_t> m) {
        commit_taken();  // the previous message's
        auto r = w::decode(m);
        if (const auto* msg = std::get_if<w::Message>(&r)) {
            if (const auto* sa = std::get_if<w::SinkAvail>(&msg->body))
                seen_ = std::pair{sa->stag, std::pair{sa->va, sa->len}};
            // 10.6: a ChRcvBufAck answering the engine's request for larger
            // buffers lets it send up to the granted size from then on. (An
            // upper bound: the engine may still refuse the answer.)
            if (const auto* a = std::get_if<w::ChRcvBufAck>(&msg->body);
                a && asked_larger_ && a->act_sz > peer_size_)
                peer_size_ = a->act_sz;
        }
    }
    [[nodiscard]] bool live(std::uint32_t stag) const { return live_.count(stag) != 0; }
    bool rdma_ = false;
    std::uint32_t sink_stag_ = 0;
    const e::Stats* stats_ = nullptr;  // the engine's, for commit_taken()
    void disconnect(bool graceful) override {
        if (!graceful)
            closed_ = true;
    }
    std::uint64_t posted_ = 0;

  private:
    // Once the engine counted a SinkAvail taken (not stale, not refused),
    // the one last seen is a write target.
    void commit_taken() {
        if (seen_ && stats_->sink_avail_received != sinks_taken_)
            advertised_.insert(*seen_);
        sinks_taken_ = stats_->sink_avail_received;
        seen_.reset();
    }
    std::uint32_t next_stag_ = 0;
    std::set<std::uint32_t> live_;
    std::multimap<std::uint32_t, std::pair<std::uint64_t, std::uint32_t>> advertised_;
    std::optional<std::pair<std::uint32_t, std::pair<std::uint64_t, std::uint32_t>>> seen_;
    std::uint64_t sinks_taken_ = 0;
    bool first_ = true;
    std::uint32_t peer_size_ = kPeerRecvSize;  // the input's receive buffers
    bool asked_larger_ = false;                // the engine's last ChRcvBuf
    bool closed_ = false;
    bool quiet_ = false;
    std::uint32_t next_mseq_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    CheckingQp qp;
    e::Config cfg;
    cfg.recv_buf_size = 1024;
    cfg.recv_buf_count = 6;
    cfg.send_queue_limit = 4096;
    if (size > 0 && data[0] == 0x7A) {
        qp.rdma_ = true;
        cfg.bcopy_threshold = 1024;
        cfg.max_recv_buf_size = 8192;  // 10.6 grants
        cfg.grow_peer_buffers = true;  // and asks
    }
    // Lent buffers outlive the connection; the writer's stays unchanged.
    std::vector<std::uint8_t> sink(16384);
    const std::vector<std::uint8_t> source(16384, 0x5A);
    e::Connection c(e::Role::accepting, cfg, qp);
    qp.stats_ = &c.stats();
    w::Message hello;
    hello.bufs = 5;
    hello.body = w::Hello{.major = 1,
                          .minor = 1,
                          .max_adverts = 2,
                          .des_rem_rcv_sz = 512,
                          .local_rcv_sz = kPeerRecvSize,
                          .loc_ird = 1,
                          .loc_ord = 1};
    if (c.accept(w::encode(hello)) != e::Error::none)
        std::abort();

    std::uint32_t mseq = 1;  // lets well-formed records reach deep states
    std::size_t i = 0;
    std::vector<std::uint8_t> buf(2048);
    std::size_t zsize = 0;  // the zero-copy write in progress
    while (i + 2 <= size) {
        const std::uint8_t op = data[i];
        const std::size_t len = std::min<std::size_t>(data[i + 1], size - i - 2);
        std::span<const std::uint8_t> arg(data + i + 2, len);
        i += 2 + len;
        if (op >= 0xF0) {
            switch (op & 3) {
                case 0:  // a reader lends len * 64 + 1 bytes (Write Zcopy)
                    if (!c.sink_pending())
                        c.post_sink(std::span(sink).first(std::min(sink.size(), len * 64 + 1)));
                    break;
                case 1:
                    c.cancel_sink();
                    break;
                case 2:  // a writer advertises len * 64 + 1 bytes (Read Zcopy),
                         // or gives its pending one up (9.5.4)
                    if (c.zcopy_write_pending()) {
                        c.revoke_zcopy_write();
                    } else if (c.write_zcopy(std::span(source).first(len * 64 + 1))) {
                        zsize = len * 64 + 1;
                    }
                    break;
                case 3:
                    (void)c.take_zcopy_read();
                    break;
            }
            if (!c.sink_pending() && qp.live(qp.sink_stag_))
                std::abort();  // given back but still registered
            if (zsize != 0 && !c.zcopy_write_pending()) {
                if (c.take_zcopy_write_count(zsize) > zsize)
                    std::abort();  // more than the write had
                zsize = 0;
            }
            continue;
        }
        switch (op % 10) {
            case 0:  // raw bytes as one incoming Send
                qp.saw(arg);
                c.on_recv(arg, false);
                break;
            case 1: {  // a well-formed BSDH around the bytes: MID, flags, bufs from arg
                std::vector<std::uint8_t> m;
                m.reserve(16 + len);
                m.resize(16);
                const std::uint8_t mids[] = {0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09,
                                             0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0xFD, 0xFE, 0xFF};
                m[0] = 0;
                m[1] = arg.empty() ? 4 : static_cast<std::uint8_t>(arg[0] % 12);
                m[2] = arg.size() > 1 ? arg[1] : 0;
                m[3] = arg.size() > 2 ? mids[arg[2] % 16] : 0xFF;
                if (arg.size() > 3)
                    m.insert(m.end(), arg.begin() + 3, arg.end());
                sdp::bytes::store32(&m[4], static_cast<std::uint32_t>(m.size()));
                sdp::bytes::store32(&m[8], mseq);
                sdp::bytes::store32(&m[12], c.next_mseq() - 1);
                ++mseq;
                qp.saw(m);
                c.on_recv(m, false);
                break;
            }
            case 2:
                c.write(arg);
                break;
            case 3:
                c.read(std::span(buf).first(len * 8 + 1));
                break;
            case 4:
                c.shutdown_write();
                break;
            case 5:
                if (len > 0 && arg[0] == 0xAB)
                    c.abort();
                break;
            case 6:
                if (len > 0 && arg[0] == 0xCD)
                    c.on_llp_closed();
                break;
            case 7:
                c.write_oob(len > 0 ? arg[0] : 0);
                (void)c.read_oob();
                break;
            case 8:  // Local Peer: SuspComm (13.1.1 step 2), port from arg (0 refused)
                c.suspend(len > 1 ? sdp::bytes::get16(arg.data()) : 0);
                break;
            case 9: {  // the old LLP goes; a new one if the engine waits for it
                if (len == 0 || arg[0] != 0xEF)
                    break;
                c.on_llp_closed();
                const e::Dup d = c.duplication();
                if (d != e::Dup::reconnecting && d != e::Dup::local_done)
                    break;
                const bool connecting = d == e::Dup::reconnecting;
                qp.new_llp(connecting);
                mseq = 1;
                if (!c.restart(connecting ? e::Role::connecting : e::Role::accepting))
                    std::abort();
                if (!connecting) {
                    if (c.accept(w::encode(hello)) != e::Error::none)
                        std::abort();
                    break;
                }
                if (c.connect().empty())
                    std::abort();
                w::Message ack;
                ack.bufs = 5;
                ack.body = w::HelloAck{.major = 1,
                                       .minor = 1,
                                       .max_adverts = 2,
                                       .act_rcv_sz = kPeerRecvSize,
                                       .loc_ird = 1,
                                       .loc_ord = 1};
                c.on_recv(w::encode(ack), true);
                if (c.state() != e::State::established)
                    std::abort();
                break;
            }
        }
        if (c.local_bufs() > qp.posted_)
            std::abort();
        if (c.readable() > cfg.recv_buf_count * std::size_t{cfg.recv_buf_size})
            std::abort();
    }
    return 0;
}
