// SPDX-License-Identifier: Apache-2.0
// The SDP connection machine (sdp/engine) on any verbs queue pair of
// sdp/iwarp/verbs.hpp: the rdma-core QP (rdma/verbs_qp.hpp) in production,
// the soft provider's QpEngine in the unit tests. It implements the
// engine's QueuePair:
//
//   post_send(message, solicited) -> copied into a registered send slot,
//                                    Send (solicited: Send with SE), signaled;
//                                    messages larger than a slot get their own
//                                    region while posted
//   post_recv(count)              -> registered receive slots of
//                                    local_recv_size() bytes
//   zero copy (9.2, 9.3)          -> register_region: ibv_reg_mr of the
//                                    caller's buffer for one transfer,
//                                    invalidate_region: ibv_dereg_mr;
//                                    RDMA Read into it, RDMA Write and Send
//                                    with Invalidate queued in order with
//                                    the Sends (RDMAP ordering)
//   disconnect(graceful)          -> recorded; the connection manager acts on
//                                    teardown() (rdma_disconnect after the
//                                    sends drained, or QP to error first)
//   receive completion            -> Connection::on_recv()
//
// Calls from the engine never post at once (no re-entry): work is queued and
// posted by progress(), sends only once set_can_send() (QP in RTS).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "sdp/engine/connection.hpp"
#include "sdp/engine/qp.hpp"
#include "sdp/iwarp/verbs.hpp"

namespace sdp::rdma {

class EngineAdapter final : private engine::QueuePair {
  public:
    enum class Teardown : std::uint8_t { none, graceful, abortive };

    // send_slots: registered send buffers (Sends in flight at once).
    EngineAdapter(engine::Role role, const engine::Config& cfg, std::uint32_t send_slots);
    EngineAdapter(const EngineAdapter&) = delete;
    EngineAdapter& operator=(const EngineAdapter&) = delete;
    ~EngineAdapter() override = default;

    // Receive slots this adapter posts at most (size the receive queue so).
    [[nodiscard]] std::uint32_t recv_slots() const { return recv_slots_; }
    // The same for an adapter built with `cfg`, before there is one.
    [[nodiscard]] static std::uint32_t recv_slots_for(const engine::Config& cfg);
    // Registers the slabs on `qp`; call once, before sdp().connect()/accept().
    // The QP's owner deregisters them (regions die with the QP); this object
    // must outlive the QP.
    std::error_code attach(iwarp::QueuePair& qp, std::string* why = nullptr);
    void set_can_send() { can_send_ = true; }

    // Polls completions, feeds the engine, posts queued work. True if
    // anything happened.
    bool progress();
    // The LLP is gone: tells the engine once (on_llp_closed).
    void llp_closed();

    [[nodiscard]] engine::Connection& sdp() { return sdp_; }
    [[nodiscard]] const engine::Connection& sdp() const { return sdp_; }
    [[nodiscard]] Teardown teardown() const { return teardown_; }
    // A post failed or a completion carried an error: the QP is lost.
    [[nodiscard]] bool broken() const { return broken_; }
    [[nodiscard]] bool llp_reported() const { return llp_reported_; }
    // No work request queued or in flight (a graceful disconnect may go now).
    [[nodiscard]] bool sends_drained() const {
        return pending_sends_.empty() && sends_in_flight_ == 0;
    }
    [[nodiscard]] const std::string& error_text() const { return error_text_; }
    [[nodiscard]] std::size_t big_sends() const { return big_sends_.size(); }

  private:
    // One send-queue work request waiting to be posted, in posting order:
    // a Send (stag: Send with Invalidate of that peer STag), an RDMA Write
    // of bytes[off..] to (stag, remote_to), or an RDMA Read into a
    // registered local region.
    struct Work {
        enum class Kind : std::uint8_t { send, write, read };
        Kind kind = Kind::send;
        std::vector<std::uint8_t> bytes;
        std::size_t off = 0;
        bool solicited = false;
        std::uint32_t stag = 0;
        std::uint64_t remote_to = 0;
        std::uint64_t read_id = 0;  // the engine's id (on_rdma_read_done)
        std::uint32_t local_stag = 0;
        std::uint64_t local_to = 0;
        std::uint32_t read_len = 0;
    };

    // engine::QueuePair
    void post_send(std::span<const std::uint8_t> message, bool solicited) override;
    void post_send_owned(std::vector<std::uint8_t>&& message, bool solicited) override;
    void post_recv(std::uint32_t count) override;
    void disconnect(bool graceful) override;
    [[nodiscard]] bool rdma_capable() const override { return qp_ != nullptr; }
    std::optional<engine::Region> register_region(std::span<std::uint8_t> mem,
                                                  engine::Access access) override;
    void invalidate_region(std::uint32_t stag) override;
    void post_rdma_read(std::uint64_t id, const engine::Region& local, std::size_t local_off,
                        std::uint32_t remote_stag, std::uint64_t remote_to,
                        std::uint32_t len) override;
    void post_rdma_write(std::span<const std::uint8_t> data, std::uint32_t remote_stag,
                         std::uint64_t remote_to) override;
    void post_rdma_write_owned(std::vector<std::uint8_t>&& bytes, std::size_t off,
                               std::uint32_t remote_stag, std::uint64_t remote_to) override;
    void post_send_invalidate(std::vector<std::uint8_t>&& message, bool solicited,
                              std::uint32_t stag) override;

    bool handle_completions();
    bool flush_pending();
    // Posts `w`; false: the send queue is full (try again later).
    bool try_post(Work& w);
    // One post_send: counted in flight when posted; any error but a full
    // queue breaks the adapter (fail(), with `what` in the text).
    enum class PostResult : std::uint8_t { posted, full, failed };
    PostResult post_or_fail(const iwarp::SendWr& wr, const char* what);
    void fail(std::string text);

    iwarp::QueuePair* qp_ = nullptr;
    std::uint32_t recv_slots_ = 0;
    std::uint32_t send_slots_ = 0;
    std::uint32_t send_buf_size_ = 0;
    std::vector<std::uint8_t> recv_slab_;
    std::vector<std::uint8_t> send_slab_;
    std::uint32_t recv_slot_size_ = 0;
    std::uint32_t send_slot_size_ = 0;
    std::vector<std::uint32_t> free_recv_;
    std::vector<std::uint32_t> free_send_;
    struct BigSend {
        std::vector<std::uint8_t> bytes;
        std::uint32_t stag = 0;
    };
    std::map<std::uint64_t, BigSend> big_sends_;
    std::uint64_t next_big_ = 0;
    std::size_t sends_in_flight_ = 0;

    engine::Connection sdp_;
    std::deque<Work> pending_sends_;
    std::uint32_t pending_recvs_ = 0;
    bool can_send_ = false;
    bool broken_ = false;
    bool llp_reported_ = false;
    Teardown teardown_ = Teardown::none;
    std::string error_text_;
};

}  // namespace sdp::rdma
