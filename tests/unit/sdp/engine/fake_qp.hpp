// SPDX-License-Identifier: Apache-2.0
// An in-memory iWARP queue-pair pair for engine tests: Sends are queued and
// delivered one at a time, in order, into the peer's posted receives. A Send
// that finds no posted receive or does not fit in one is a fault (RDMAP
// would terminate the stream), which the tests assert never happens.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sdp/engine/connection.hpp"
#include "sdp/wire/message.hpp"

namespace sdp::test {

// n bytes of a seeded pseudo-random pattern.
inline std::vector<std::uint8_t> pattern(std::size_t n, std::uint32_t seed) {
    std::vector<std::uint8_t> b(n);
    std::mt19937 rng(seed);
    for (auto& x : b)
        x = static_cast<std::uint8_t>(rng());
    return b;
}

// Reads what c has into `got`.
inline void drain(engine::Connection& c, std::vector<std::uint8_t>& got) {
    std::vector<std::uint8_t> buf(64 * 1024);
    while (std::size_t n = c.read(buf))
        got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
}

// Writes what fits of `all` from `off` on.
inline void feed(engine::Connection& c, const std::vector<std::uint8_t>& all, std::size_t& off) {
    if (off < all.size())
        off += c.write(std::span(all).subspan(off));
}

struct Packet {
    std::vector<std::uint8_t> bytes;
    bool solicited = false;
    bool close = false;            // graceful LLP teardown marker
    std::uint32_t invalidate = 0;  // Send with Invalidate of this STag
    // An RDMA Write of `bytes` to (stag, to) instead of a Send (in order
    // with the Sends, as RDMAP orders them).
    bool write = false;
    std::uint32_t stag = 0;
    std::uint64_t to = 0;
};

class FakeQp : public engine::QueuePair {
  public:
    void post_send(std::span<const std::uint8_t> m, bool se) override {
        if (down)
            return;
        outbound.push_back(Packet{{m.begin(), m.end()}, se, false});
        sent_log.push_back(outbound.back());
    }
    void post_recv(std::uint32_t n) override { posted += n; }

    // RDMA Read and Write emulation (zero copy), on when `rdma` is set:
    // regions with random STags; reads queued and served by Pair::step()
    // from the peer's regions, writes placed in the peer's regions in order
    // with the Sends, with the RDMAP checks (STag, access, bounds).
    struct Reg {
        std::span<std::uint8_t> mem;
        engine::Access access;
        std::uint64_t to;
    };
    struct ReadOp {
        std::uint64_t id;
        engine::Region local;
        std::size_t off;
        std::uint32_t stag;
        std::uint64_t to;
        std::uint32_t len;
    };
    bool rdma_capable() const override { return rdma; }
    bool resizable_recv() const override { return resizable; }
    bool resizable = false;  // receive buffer resizing (10.6)
    std::optional<engine::Region> register_region(std::span<std::uint8_t> mem,
                                                  engine::Access access) override {
        if (!rdma || refuse_registration)
            return std::nullopt;
        std::uint32_t stag = 0;
        while (stag == 0 || regions.count(stag) != 0)
            stag = static_cast<std::uint32_t>(rng());
        const std::uint64_t to = 0x10000000ull * (++registered) + (rng() & 0xFFF);
        regions[stag] = Reg{mem, access, to};
        return engine::Region{stag, to, mem.size()};
    }
    void invalidate_region(std::uint32_t stag) override {
        regions.erase(stag);
        ++invalidations;
    }
    void post_rdma_read(std::uint64_t id, const engine::Region& local, std::size_t off,
                        std::uint32_t stag, std::uint64_t to, std::uint32_t len) override {
        reads.push_back(ReadOp{id, local, off, stag, to, len});
    }
    void post_rdma_write(std::span<const std::uint8_t> data, std::uint32_t stag,
                         std::uint64_t to) override {
        if (down)
            return;
        Packet p{{data.begin(), data.end()}, false, false};
        p.write = true;
        p.stag = stag;
        p.to = to;
        outbound.push_back(std::move(p));
        ++writes;
    }
    void post_send_invalidate(std::vector<std::uint8_t>&& m, bool se, std::uint32_t stag) override {
        if (down)
            return;
        outbound.push_back(Packet{std::move(m), se, false, stag});
        sent_log.push_back(outbound.back());
    }

    bool rdma = false;
    bool refuse_registration = false;
    std::map<std::uint32_t, Reg> regions;
    std::deque<ReadOp> reads;
    std::uint64_t registered = 0;
    std::uint64_t invalidations = 0;
    std::uint64_t writes = 0;
    std::mt19937 rng{12345};
    void disconnect(bool graceful) override {
        if (graceful)
            outbound.push_back(Packet{{}, false, true});
        else
            abortive = true;
        ++disconnects;
        last_disconnect_graceful = graceful;
    }

    std::deque<Packet> outbound;
    std::vector<Packet> sent_log;
    std::uint64_t posted = 0;
    bool abortive = false;
    bool down = false;
    int disconnects = 0;
    bool last_disconnect_graceful = false;
};

// Two engines wired back to back: a is the Connecting Peer, b the Accepting.
// A message the peer of `to` sends next, as `to` expects it: the next MSeq,
// acknowledging everything `to` sent; `bufs` is the credit it gives.
inline wire::Message next_message_to(const engine::Connection& to, wire::Body body,
                                     std::uint16_t bufs, std::uint8_t flags = 0) {
    wire::Message m;
    m.bufs = bufs;
    m.flags = flags;
    m.mseq = to.last_received_mseq() + 1;
    m.mseq_ack = to.next_mseq() - 1;
    m.body = std::move(body);
    return m;
}

class Pair {
  public:
    explicit Pair(const engine::Config& ca = {}, const engine::Config& cb = {})
        : a(engine::Role::connecting, ca, qa), b(engine::Role::accepting, cb, qb) {}

    // Hello through the "MPA private data", HelloAck through the QP.
    engine::Error handshake() {
        auto hello = a.connect();
        auto e = b.accept(hello);
        run();
        return e;
    }

    // Delivers one packet in each direction; false when nothing moved.
    bool step() {
        if (llp_down)
            return false;
        if (qa.abortive || qb.abortive) {
            llp_teardown();
            return true;
        }
        bool moved = serve_read(qa, qb, a) | serve_read(qb, qa, b);
        moved = deliver(qa, qb, b) || moved;
        if (!llp_down)
            moved = deliver(qb, qa, a) || moved;
        return moved;
    }

    // Serves one RDMA Read that `reader` posted, from `source`'s regions.
    bool serve_read(FakeQp& reader, FakeQp& source, engine::Connection& dst) {
        if (reader.reads.empty() || llp_down)
            return false;
        const auto op = reader.reads.front();
        reader.reads.pop_front();
        bool ok = false;
        auto src = source.regions.find(op.stag);
        auto loc = reader.regions.find(op.local.stag);
        if (src != source.regions.end() && loc != reader.regions.end() &&
            src->second.access == engine::Access::remote_read &&
            loc->second.access == engine::Access::local_write && op.to >= src->second.to &&
            op.to - src->second.to + op.len <= src->second.mem.size() &&
            op.off + op.len <= loc->second.mem.size()) {
            std::memcpy(loc->second.mem.data() + op.off,
                        src->second.mem.data() + (op.to - src->second.to), op.len);
            ok = true;
        } else {
            faults.push_back("RDMA Read refused (stale STag, access or bounds)");
        }
        dst.on_rdma_read_done(op.id, ok);
        return true;
    }

    void run(int limit = 10'000'000) {
        while (limit-- > 0 && step()) {
        }
    }

    void llp_teardown() {
        llp_down = true;
        qa.down = qb.down = true;
        qa.outbound.clear();
        qb.outbound.clear();
        a.on_llp_closed();
        b.on_llp_closed();
    }

    // Delivers only what a sent toward b (b's replies stay queued).
    void run_to_b() {
        while (!llp_down && (qa.abortive || !qa.outbound.empty())) {
            if (qa.abortive || qb.abortive) {
                llp_teardown();
                break;
            }
            deliver(qa, qb, b);
        }
    }

    // Delivers one message from a to b as a's engine would number it (Bufs
    // 16); inv: as Send with Invalidate of that STag; flags: the BSDH Flags
    // (6.1.2). Returns its MSeq.
    std::uint32_t inject(wire::Body body, std::uint32_t inv = 0, std::uint8_t flags = 0) {
        const wire::Message m = next_message_to(b, std::move(body), 16, flags);
        qa.outbound.push_back(Packet{wire::encode(m), false, false, inv});
        run_to_b();
        return m.mseq;
    }

    // Puts raw bytes on the wire from a to b (as if a's engine sent them).
    void inject_to_b(std::vector<std::uint8_t> bytes, bool se = false) {
        qa.outbound.push_back(Packet{std::move(bytes), se, false});
    }

    // How receive completions reach the engine: on_recv() (span),
    // on_recv_buffer() (the whole private buffer), or alternating.
    enum class Delivery { span, buffer, alternate };
    Delivery delivery = Delivery::alternate;
    std::uint64_t delivered = 0;

    FakeQp qa, qb;
    engine::Connection a, b;
    bool llp_down = false;
    std::vector<std::string> faults;

  private:
    bool deliver(FakeQp& from, FakeQp& to, engine::Connection& dst) {
        if (from.outbound.empty())
            return false;
        Packet p = std::move(from.outbound.front());
        from.outbound.pop_front();
        if (p.close) {
            llp_teardown();
            return true;
        }
        if (p.write) {
            // Tagged placement (RFC 5041 7.1): a stale or foreign STag, a
            // region without remote write, or out of bounds: Terminate.
            auto r = to.regions.find(p.stag);
            if (r == to.regions.end() || r->second.access != engine::Access::remote_write ||
                p.to < r->second.to ||
                p.to - r->second.to + p.bytes.size() > r->second.mem.size()) {
                faults.push_back("RDMA Write refused (stale STag, access or bounds)");
                llp_teardown();
                return true;
            }
            std::memcpy(r->second.mem.data() + (p.to - r->second.to), p.bytes.data(),
                        p.bytes.size());
            return true;
        }
        if (to.posted == 0) {
            faults.push_back("send with no posted receive");
            llp_teardown();
            return true;
        }
        if (p.bytes.size() > dst.local_recv_size()) {
            faults.push_back("send larger than the receive buffer");
            llp_teardown();
            return true;
        }
        --to.posted;
        if (p.invalidate != 0)
            to.regions.erase(p.invalidate);  // remote invalidate (RDMAP 4.3)
        const bool buffer = delivery == Delivery::buffer ||
                            (delivery == Delivery::alternate && (delivered++ & 1) != 0);
        if (buffer) {
            // As the soft provider does: the whole private buffer, which the
            // engine may keep (Data) and replace with a spare one.
            std::vector<std::uint8_t> buf(dst.local_recv_size());
            std::copy(p.bytes.begin(), p.bytes.end(), buf.begin());
            const std::size_t size = buf.size();
            dst.on_recv_buffer(buf, p.bytes.size(), p.solicited, p.invalidate);
            // Left as it was, or replaced by one of the size posted now
            // (which a ChRcvBuf in this very message may have changed, 10.6).
            if (buf.size() != size && buf.size() != dst.local_recv_size())
                faults.push_back("buffer handed back with the wrong size");
        } else {
            dst.on_recv(p.bytes, p.solicited, p.invalidate);
        }
        return true;
    }
};

// Relays `data` from `src` to `dst`, two engines of `p`: writes what fits
// from `off` on (bytes before it were written already), runs the pair and
// reads at `dst`, until all of `data` is read or `rounds` runs have passed.
// Returns what `dst` read.
inline std::vector<std::uint8_t> relay(Pair& p, engine::Connection& src, engine::Connection& dst,
                                       const std::vector<std::uint8_t>& data, std::size_t off = 0,
                                       int rounds = 100000) {
    std::vector<std::uint8_t> got;
    for (int i = 0; i < rounds && got.size() < data.size(); ++i) {
        feed(src, data, off);
        p.run();
        drain(dst, got);
    }
    return got;
}

}  // namespace sdp::test
