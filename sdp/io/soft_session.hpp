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

#include "iwarp/mpa.hpp"
#include "iwarp/qp.hpp"
#include "sdp/engine/connection.hpp"
#include "sdp/engine/qp.hpp"

namespace sdp::io {

struct SessionConfig {
    engine::Config engine;
    bool crc = true;  // ask for MPA CRC (used if either side asks)
    std::uint16_t ird = 1;
    std::uint16_t ord = 1;
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

class SoftSession final : private engine::QueuePair {
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

    // Bytes from TCP, in order, any split.
    void on_bytes(std::span<const std::uint8_t> in);
    // The TCP stream is gone (FIN from the peer, RST, or a socket error).
    void on_eof();
    // Appends at most about max_bytes of bytes to write to `out`.
    void take_output(std::vector<std::uint8_t>& out, std::size_t max_bytes = 256 * 1024);
    [[nodiscard]] bool has_output() const;
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
    // engine::QueuePair
    void post_send(std::span<const std::uint8_t> message, bool solicited) override;
    void post_recv(std::uint32_t count) override;
    void disconnect(bool graceful) override;

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
    LlpRequest llp_ = LlpRequest::none;
    std::string setup_error_;

    // Work posted before the QP exists (Connecting Peer: receive buffers
    // with the Hello; Accepting Peer: the HelloAck).
    std::uint32_t pending_recvs_ = 0;
    std::deque<std::pair<std::vector<std::uint8_t>, bool>> pending_sends_;

    // Send buffers owned until their completion (completions are in order).
    std::deque<std::vector<std::uint8_t>> send_bufs_;
    // Receive buffers by wr_id, and the free slots.
    std::vector<std::vector<std::uint8_t>> recv_bufs_;
    std::vector<std::uint64_t> free_recv_;
    std::vector<iwarp::Completion> cq_;
};

}  // namespace sdp::io
