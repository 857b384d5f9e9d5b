// SPDX-License-Identifier: Apache-2.0
// The pools of on-demand SDP listen ports (sections 7.4 and 15.2.1), without
// I/O: which port of each on-demand service is free, being opened, offered
// (PMAccept sent, no PMAck yet) or held (PMAck or connection seen), and
// until when. The main thread owns it (one pool per daemon, so a flood
// spread over the UDP workers still holds at most the pool's ports); the
// shell turns its commands into control-channel lines to the acceptor
// (`{"open": P, "id": N}`, `{"close": P}`) and its answers into replies
// the worker shards send (docs/control-protocol.md, "On-demand services").
//
// Every operation takes `now`; next_deadline() tells the shell when to
// call on_timer(). No sockets, no clock, no threads.
//
// Life of a port: free -> opening (open(), until the acceptor answers or
// open_timeout) -> offered (PMAccept sent; until ack_timeout, restarted by
// a duplicate PMReq) -> held (PMAck or a connection reported; until the
// service's hold time) -> free. A single-use service frees the port at the
// first connection. Every way back to free (except from a failed open)
// sends {"close": P}: the pool counts listeners, not connections, and an
// established connection on the port is the acceptor's, unaffected.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "daemon/core/pmsp.hpp"
#include "daemon/core/service.hpp"

namespace pmd {

struct PoolTimers {
    std::chrono::milliseconds open_timeout{1000};  // acceptor's answer to {"open"}
    std::chrono::milliseconds ack_timeout{5000};   // PMAccept to PMAck or connection
};

struct PoolCounters {
    std::uint64_t opens = 0;            // {"open"} sent
    std::uint64_t opened = 0;           // the acceptor opened the port
    std::uint64_t open_failures = 0;    // the acceptor could not open it
    std::uint64_t open_timeouts = 0;    // no answer within open_timeout
    std::uint64_t exhausted = 0;        // no free port: PMDeny
    std::uint64_t connections = 0;      // connections reported by acceptors
    std::uint64_t released_unused = 0;  // PMAck timer expired, no PMAck, no connection
    std::uint64_t released_used = 0;    // hold time over, or single use connected
    std::uint64_t bad_answers = 0;      // unknown id or port from an acceptor
};

class OnDemandPool {
  public:
    // The shell's name for whoever waits for an open (a worker's request).
    using Token = std::uint64_t;

    // To send to the service's acceptor.
    struct Command {
        enum class Kind : std::uint8_t { open, close };
        Kind kind = Kind::open;
        std::string service;
        std::uint16_t port = 0;
        std::uint64_t id = 0;  // open: echoed in the answer
    };
    // The end of a wait: the port opened, or nullopt (exhausted: no free
    // port; else the open failed or timed out).
    struct Answer {
        Token token = 0;
        std::optional<std::uint16_t> port;
        bool exhausted = false;
    };
    struct Step {
        std::vector<Command> commands;
        std::vector<Answer> answers;
    };

    explicit OnDemandPool(PoolTimers timers = {}) : timers_(timers) {}

    void set_timers(PoolTimers t) { timers_ = t; }
    // A service joins or changes (renewal): `hold` is how long a port stays
    // open after its PMAck or first connection (the PmTime lifetime).
    // Changing the ports of a live service keeps its open listeners.
    void add_service(const std::string& name, const OnDemand& od, std::chrono::milliseconds hold);
    // The service goes (its acceptor's channel closed): waiters get a
    // failed answer; nothing is sent (the acceptor is gone).
    Step remove_service(std::string_view name);
    bool has_service(std::string_view name) const;

    // A new transaction wants a port: an open command, or an answer at once.
    Step open(std::string_view service, Token token, TimePoint now);
    // The acceptor answered the open `id` for `port`.
    Step opened(std::string_view service, std::uint64_t id, std::uint16_t port, bool ok,
                TimePoint now);
    // A duplicate PMReq re-sent the PMAccept for `port`.
    void touch(std::string_view service, std::uint16_t port, TimePoint now);
    // PMAck for `port`.
    void acked(std::string_view service, std::uint16_t port, TimePoint now);
    // The acceptor reports a connection on `port`.
    Step connected(std::string_view service, std::uint16_t port, TimePoint now);
    // The transaction that `port` was opened for is gone before its PMAccept.
    Step cancel(std::string_view service, std::uint16_t port);

    Step on_timer(TimePoint now);
    std::optional<TimePoint> next_deadline() const;

    // Listeners open or being opened for `service` (0 when unknown).
    std::size_t in_use(std::string_view service) const;
    std::size_t in_use() const;
    const PoolCounters& counters() const { return counters_; }
    void reset_counters() { counters_ = {}; }
    // A line from an acceptor the shell could not read.
    void note_bad_answer() { ++counters_.bad_answers; }

  private:
    enum class State : std::uint8_t { free, opening, offered, held };
    struct Slot {
        State state = State::free;
        std::uint64_t id = 0;
        Token token = 0;
        TimePoint deadline{};
    };
    struct Pool {
        OnDemand od;
        std::chrono::milliseconds hold{0};
        std::map<std::uint16_t, Slot> slots;
        std::deque<std::uint16_t> free;  // least recently freed first
        std::size_t used = 0;
    };
    Pool* find(std::string_view name);
    const Pool* find(std::string_view name) const;
    // The slot of `port` when it is in `state`, else nullptr.
    Slot* slot_in(std::string_view service, std::uint16_t port, State state);
    // Back to free; with `close`, {"close": port} into `step`.
    void release(const std::string& name, Pool& p, std::uint16_t port, bool close, Step& step);

    PoolTimers timers_;
    std::map<std::string, Pool, std::less<>> pools_;
    std::uint64_t next_id_ = 1;
    PoolCounters counters_;
};

}  // namespace pmd
