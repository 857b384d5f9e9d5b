// SPDX-License-Identifier: Apache-2.0
// An in-memory iWARP queue-pair pair for engine tests: Sends are queued and
// delivered one at a time, in order, into the peer's posted receives. A Send
// that finds no posted receive or does not fit in one is a fault (RDMAP
// would terminate the stream), which the tests assert never happens.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sdp/engine/connection.hpp"
#include "sdp/wire/message.hpp"

namespace sdp::test {

struct Packet {
    std::vector<std::uint8_t> bytes;
    bool solicited = false;
    bool close = false;  // graceful LLP teardown marker
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
        bool moved = deliver(qa, qb, b);
        if (!llp_down)
            moved = deliver(qb, qa, a) || moved;
        return moved;
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
        const bool buffer = delivery == Delivery::buffer ||
                            (delivery == Delivery::alternate && (delivered++ & 1) != 0);
        if (buffer) {
            // As the soft provider does: the whole private buffer, which the
            // engine may keep (Data) and replace with a spare one.
            std::vector<std::uint8_t> buf(dst.local_recv_size());
            std::copy(p.bytes.begin(), p.bytes.end(), buf.begin());
            dst.on_recv_buffer(buf, p.bytes.size(), p.solicited);
            if (buf.size() != dst.local_recv_size())
                faults.push_back("buffer handed back with the wrong size");
        } else {
            dst.on_recv(p.bytes, p.solicited);
        }
        return true;
    }
};

}  // namespace sdp::test
