// SPDX-License-Identifier: Apache-2.0
// One SDP connection over the soft iWARP provider, still sans-I/O: the MPA
// startup (SDP Hello as MPA Request private data), the soft QP engine
// (sdp/iwarp/qp.hpp) and the SDP connection machine (sdp/engine), joined by
// an adapter that implements the engine's QueuePair on the iWARP QP.
//
// The driver (sdp/io/channel.hpp, or a test pipe) moves bytes: on_bytes()
// with what TCP delivered, take_output() for what to write, on_eof() when
// the TCP stream ended, and honours llp_request() (FIN after the output is
// written, or RST at once).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sdp/engine/connection.hpp"
#include "sdp/engine/qp.hpp"
#include "sdp/iwarp/mpa.hpp"
#include "sdp/iwarp/qp.hpp"

namespace sdp::io {

struct SessionConfig {
    engine::Config engine;
    bool crc = true;  // ask for MPA CRC (used if either side asks)
    std::uint16_t ird = 1;
    std::uint16_t ord = 1;
    // STag randomness (iwarp::QpConfig::stag_seed); the socket drivers draw
    // it from the OS (sdp/io/channel.hpp, with_os_randomness()).
    std::uint64_t stag_seed = 0;
};

// What the driver must do with the TCP connection.
enum class LlpRequest : std::uint8_t {
    none,
    fin,  // shutdown(SHUT_WR) once take_output() is drained
    rst,  // abortive close now (SO_LINGER 0)
};

enum class SessionPhase : std::uint8_t {
    mpa,          // MPA startup in progress
    hello,        // MPA done; Connecting Peer waits for HelloAck
    established,  // SDP established (or later: closed/reset, see sdp().state())
    failed,       // startup failed (MPA or Hello/HelloAck)
};

class SoftSession final : private engine::QueuePair, private iwarp::UntaggedPlacer {
  public:
    SoftSession(iwarp::MpaRole role, const SessionConfig& cfg);
    SoftSession(const SoftSession&) = delete;
    SoftSession& operator=(const SoftSession&) = delete;
    ~SoftSession() override;

    // The TCP MSS: FPDUs are sized to it. Set before the MPA startup ends.
    void set_mss(std::size_t mss) { mss_ = mss; }
    // Initiator: builds the Hello and queues the MPA Request. Returns false
    // (phase failed) if the Hello does not fit the private data.
    bool start();
    // Socket duplication (13.1.1): after the old LLP connection is gone and
    // the engine waits for a new one (Connection::restart()), starts over
    // in `role` for the new TCP connection: a fresh MPA negotiator and QP,
    // no output, the engine restarted with its unread and unsent bytes.
    // Then set_mss() and start() as for a first connection. False: the
    // engine is not in such a state (nothing changed).
    bool restart(iwarp::MpaRole role);

    // Bytes from TCP, in order, any split.
    void on_bytes(std::span<const std::uint8_t> in);
    // The TCP stream is gone (FIN from the peer, RST, or a socket error).
    void on_eof();
    // Appends at most about max_bytes of bytes to write to `out`.
    void take_output(std::vector<std::uint8_t>& out, std::size_t max_bytes = 256 * 1024);
    [[nodiscard]] bool has_output() const;

    // Gathered output (no copy of the payload; use instead of take_output(),
    // not mixed with it while output_queued() > 0):
    //  1. prepare_output(max): frames FPDUs (and MPA frames) until about
    //     `max` bytes are queued;
    //  2. peek_output(segs): fills segs with the queued bytes, in order, as
    //     up to segs.size() spans (e.g. for writev/sendmsg); returns the count;
    //  3. consume_output(n): the first n queued bytes were written.
    // The spans stay valid until consumed (or on_eof()). Payload spans point
    // into the session's send buffers, which are released once consumed.
    void prepare_output(std::size_t max_bytes = 256 * 1024);
    std::size_t peek_output(std::span<std::span<const std::uint8_t>> segs) const;
    void consume_output(std::size_t n);
    // Direct placement into a reader's memory (saves the copy out of the
    // private buffer). begin_landing(zone): while active, the payload of
    // each Data Message that the engine finds landable() is placed straight
    // into `zone`, back to back, as long as it fits; landed() counts the
    // bytes of completed messages there, in stream order before anything
    // readable() afterwards. end_landing() stops it and returns landed();
    // a message placed only in part goes back into its private buffer, so
    // nothing is lost. The zone must stay valid until end_landing(). False
    // (not started) if a landing is already active or there is no QP.
    bool begin_landing(std::span<std::uint8_t> zone);
    std::size_t end_landing();
    [[nodiscard]] bool landing() const { return land_.active; }
    [[nodiscard]] std::size_t landed() const { return land_.used; }
    // Active, and too little room left for another full private buffer.
    [[nodiscard]] bool landing_full() const;

    // Bytes framed by prepare_output() and not yet consumed.
    [[nodiscard]] std::size_t output_queued() const { return out_bytes_; }
    [[nodiscard]] LlpRequest llp_request() const { return llp_; }

    [[nodiscard]] SessionPhase phase() const;
    [[nodiscard]] engine::Connection& sdp() { return conn_; }
    [[nodiscard]] const engine::Connection& sdp() const { return conn_; }
    [[nodiscard]] const iwarp::MpaNegotiator& mpa() const { return mpa_; }
    [[nodiscard]] const iwarp::QpEngine* qp() const { return qp_.get(); }
    // Why the startup failed or the connection broke, for messages.
    [[nodiscard]] std::string describe_error() const;
    [[nodiscard]] bool eof_seen() const { return eof_; }
    // Every Send posted so far has been handed to take_output() (for the
    // Accepting Peer: the HelloAck went out after the initiator's RTR).
    [[nodiscard]] bool sends_flushed() const {
        return qp_ && pending_sends_.empty() && send_bufs_.empty();
    }

  private:
    // One piece of gathered output: inline bytes (FPDU prefix / trailer),
    // an owned vector (MPA frames, ready-made FPDUs, copied payloads) or a
    // span into a send buffer.
    struct Piece {
        std::vector<std::uint8_t> owned;
        const std::uint8_t* ext = nullptr;
        std::uint32_t len = 0;
        std::uint32_t off = 0;  // bytes of this piece already consumed
        std::uint8_t inl[iwarp::kFpduHeaderSize + iwarp::kFpduMaxFramedHeader];
        [[nodiscard]] const std::uint8_t* data() const {
            return ext ? ext : owned.empty() ? inl : owned.data();
        }
    };
    class GatherSink;
    void push_inline(const std::uint8_t* p, std::size_t n);
    void push_owned(std::vector<std::uint8_t>&& bytes);
    void push_ext(const std::uint8_t* p, std::size_t n);
    void release_send_buffers();

    // engine::QueuePair
    void post_send(std::span<const std::uint8_t> message, bool solicited) override;
    void post_send_owned(std::vector<std::uint8_t>&& message, bool solicited) override;
    void post_recv(std::uint32_t count) override;
    void disconnect(bool graceful) override;
    [[nodiscard]] bool rdma_capable() const override { return qp_ != nullptr; }
    // Buffers are sized at each post (10.6).
    [[nodiscard]] bool resizable_recv() const override { return true; }
    std::optional<engine::Region> register_region(std::span<std::uint8_t> mem,
                                                  engine::Access access) override;
    void invalidate_region(std::uint32_t stag) override;
    void post_rdma_read(std::uint64_t id, const engine::Region& local, std::size_t local_off,
                        std::uint32_t remote_stag, std::uint64_t remote_to,
                        std::uint32_t len) override;
    void post_send_invalidate(std::vector<std::uint8_t>&& message, bool solicited,
                              std::uint32_t stag) override;
    void post_rdma_write(std::span<const std::uint8_t> data, std::uint32_t remote_stag,
                         std::uint64_t remote_to) override;
    void post_rdma_write_owned(std::vector<std::uint8_t>&& bytes, std::size_t off,
                               std::uint32_t remote_stag, std::uint64_t remote_to) override;
    // One Send of an owned message (invalidate: Send with Invalidate).
    void send_owned(std::vector<std::uint8_t>&& message, bool solicited, std::uint32_t invalidate);

    // iwarp::UntaggedPlacer
    bool place(const iwarp::RecvWr& wr, std::uint32_t mo,
               std::span<const std::uint8_t> payload) override;
    void after_mpa();
    void attach_qp();
    void poll_completions();
    void qp_failed();

    SessionConfig cfg_;
    iwarp::MpaNegotiator mpa_;
    engine::Connection conn_;
    std::unique_ptr<iwarp::QpEngine> qp_;
    std::size_t mss_ = 1460;
    bool setup_failed_ = false;
    bool eof_ = false;
    bool llp_reported_ = false;
    bool polling_ = false;  // inside poll_completions()
    LlpRequest llp_ = LlpRequest::none;
    std::string setup_error_;

    // Work posted before the QP exists (Connecting Peer: receive buffers
    // with the Hello; Accepting Peer: the HelloAck).
    std::uint32_t pending_recvs_ = 0;
    std::deque<std::pair<std::vector<std::uint8_t>, bool>> pending_sends_;

    // Send buffers owned until their completion (completions are in order)
    // and, with gathered output, until their last byte was consumed: the
    // output offset at which each completed buffer may go.
    std::deque<std::vector<std::uint8_t>> send_bufs_;
    std::deque<std::uint64_t> send_release_at_;
    std::deque<Piece> out_;
    std::size_t out_bytes_ = 0;
    std::uint64_t out_produced_ = 0;  // bytes ever queued in out_
    std::uint64_t out_consumed_ = 0;
    // Receive buffers by wr_id, and the free slots.
    std::vector<std::vector<std::uint8_t>> recv_bufs_;
    std::vector<std::uint64_t> free_recv_;
    std::vector<iwarp::Completion> cq_;

    // Direct placement state (begin_landing()).
    struct Flight {  // a message placed (or being placed) into the zone
        std::uint64_t wr_id = 0;
        std::span<std::uint8_t> private_buf;  // its posted buffer (BSDH)
        std::size_t off = 0;                  // its payload's place in the zone
        std::size_t room = 0;                 // BSDH Len - BSDH size
        std::size_t placed_end = 0;           // message offset placed up to
    };
    struct Landing {
        std::span<std::uint8_t> zone;
        bool active = false;
        // No more messages may land until end_landing(): one went to its
        // private buffer, and the stream order must hold.
        bool blocked = false;
        std::size_t used = 0;  // payload bytes of completed landed messages
        // Placed messages whose completion was not taken yet, in order; the
        // last one may still be receiving segments.
        std::deque<Flight> flights;
        [[nodiscard]] std::size_t next_off() const {
            return flights.empty() ? used : flights.back().off + flights.back().room;
        }
    };
    void unland_all();
    Landing land_;
    // The message being received (any path): did its segments come in
    // order, MO contiguous from 0, and how far? Only such a message may
    // move into a zone (a hostile peer may send MOs in any order).
    struct Order {
        bool valid = false;
        std::uint64_t wr_id = 0;
        bool contiguous = false;
        std::size_t end = 0;
    };
    Order order_;
};

}  // namespace sdp::io
