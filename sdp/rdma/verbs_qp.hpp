// SPDX-License-Identifier: Apache-2.0
// The rdma-core provider's queue pair: sdp/iwarp/verbs.hpp's QueuePair over
// an ibv QP (RNIC or Linux siw). It does not own the QP, CQs, PD or channel
// (rdma::Connection does); it owns the memory regions registered through it
// and keeps its own work-request ids, because ibv_wc's opcode is undefined
// on error completions.
//
// Blocking waits: both CQs share one completion channel. arm() requests the
// next notification (receive CQ solicited-only if asked), fd() is the
// channel's non-blocking descriptor for poll(2), and consume_events() reads
// and acknowledges what it delivered.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "sdp/iwarp/verbs.hpp"
#include "sdp/rdma/translate.hpp"

namespace sdp::rdma {

struct QpResources {
    ibv_pd* pd = nullptr;
    ibv_qp* qp = nullptr;
    ibv_cq* send_cq = nullptr;
    ibv_cq* recv_cq = nullptr;
    ibv_comp_channel* channel = nullptr;  // may be null: no blocking waits
    std::uint32_t max_send_wr = 0;        // as created (ibv_qp_cap)
    std::uint32_t max_recv_wr = 0;
    std::uint32_t max_inline = 0;
    bool iwarp = true;
};

class RdmaQueuePair final : public iwarp::QueuePair {
  public:
    explicit RdmaQueuePair(const QpResources& res);
    ~RdmaQueuePair() override;  // deregisters every region still registered

    // Registers with iova = the buffer's address (see verbs_qp.cpp): `base`
    // is ignored and the region's tagged offsets start at
    // MemoryRegion::base, the address of mem[0]. On failure
    // reg_error_text() says why (naming RLIMIT_MEMLOCK when that is it).
    iwarp::Result<iwarp::MemoryRegion, iwarp::VerbsError> reg_mr(std::span<std::uint8_t> mem,
                                                                 std::uint64_t base,
                                                                 std::uint32_t access) override;
    [[nodiscard]] const std::string& reg_error_text() const { return reg_error_; }
    bool dereg_mr(std::uint32_t stag) override;
    // Send / Send+SE / RDMA Write: the data must lie in a region registered
    // here (any access), or be at most max_inline bytes (copied inline).
    // RDMA Read: the sink is local_stag/local_to, registered kAccessLocalWrite.
    std::optional<iwarp::VerbsError> post_send(const iwarp::SendWr& wr) override;
    // The buffer must lie in a region registered with kAccessLocalWrite (or
    // kAccessRemoteWrite, which implies it in verbs).
    std::optional<iwarp::VerbsError> post_recv(const iwarp::RecvWr& wr) override;
    std::size_t poll_cq(std::span<iwarp::Completion> out) override;
    [[nodiscard]] iwarp::QpState state() const override { return state_; }

    // Requests a notification for the next completion on the send CQ and
    // the next (solicited_only: next solicited or error) on the receive CQ.
    bool arm(bool solicited_only);
    // Reads and acknowledges pending channel events without blocking;
    // returns how many.
    int consume_events();
    [[nodiscard]] int fd() const { return res_.channel != nullptr ? res_.channel->fd : -1; }
    // Moves the QP to the error state (abortive close): outstanding work is
    // flushed.
    void to_error();
    [[nodiscard]] std::size_t sends_outstanding() const { return sq_.size(); }
    [[nodiscard]] std::size_t recvs_outstanding() const { return rq_.size(); }
    [[nodiscard]] const ibv_wc_status* last_error_status() const {
        return last_error_ ? &*last_error_ : nullptr;
    }

  private:
    struct Region {
        ibv_mr* mr = nullptr;
        RegionView view;
    };
    struct Posted {
        std::uint64_t id = 0;  // our ibv wr_id
        std::uint64_t user = 0;
        iwarp::WcOpcode opcode = iwarp::WcOpcode::send;
        bool signaled = true;
    };

    const Region* region_containing(const void* p, std::size_t len) const;
    void drain(ibv_cq* cq, std::deque<Posted>& q);

    QpResources res_;
    iwarp::QpState state_ = iwarp::QpState::rts;
    std::map<std::uint32_t, Region> regions_;               // by STag (rkey)
    std::multimap<std::uintptr_t, std::uint32_t> by_addr_;  // first byte -> STag
    std::deque<Posted> sq_;                                 // in posting order
    std::deque<Posted> rq_;
    std::uint64_t next_id_ = 1;
    std::deque<iwarp::Completion> ready_;
    std::optional<ibv_wc_status> last_error_;
    std::string reg_error_;
};

}  // namespace sdp::rdma
