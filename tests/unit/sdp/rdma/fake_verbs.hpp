// SPDX-License-Identifier: Apache-2.0
// An in-memory RC "device" behind the real libibverbs entry points, so the
// rdma-core QP (sdp::rdma::RdmaQueuePair) runs its actual ibv_post_send /
// ibv_post_recv / ibv_poll_cq / ibv_req_notify_cq path without hardware.
// ibv_post_send and friends are inline calls through ibv_context::ops, which
// this fake fills; ibv_reg_mr_iova2, ibv_dereg_mr and ibv_modify_qp are
// exported functions, defined by fake_verbs.cpp in this test executable
// only (they take precedence over libibverbs' definitions).
//
// Semantics kept from iWARP: Sends consume the peer's receives in order; a
// Send with no receive posted, a Send larger than the receive or a tagged
// access violation moves both QPs to error (a Terminate) and flushes.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <vector>

namespace fakeverbs {

struct Cq {
    ibv_cq cq{};
    std::deque<ibv_wc> wcs;
    int armed = -1;                  // -1 not armed, 0 any, 1 solicited only
    int events = 0;                  // notifications that would have fired
    std::uint32_t* depth = nullptr;  // send CQ: its QP's signaled sends in flight
};

struct Qp {
    ibv_qp qp{};
    Qp* peer = nullptr;
    Cq* scq = nullptr;
    Cq* rcq = nullptr;
    std::uint32_t max_send_wr = 16;
    std::uint32_t max_recv_wr = 16;
    struct Recv {
        std::uint64_t wr_id;
        std::vector<ibv_sge> sge;
    };
    std::deque<Recv> rq;
    std::uint32_t sq_depth = 0;  // signaled sends whose completion is not polled yet
    bool error = false;
    std::vector<ibv_send_wr> sent;  // copies of every posted send WR (sg_list cleared)
    // As siw: an RDMA Read completes when its Read Response arrives, after
    // Sends posted later have completed. While set, successful Read
    // completions wait in `held` until release_reads().
    bool hold_reads = false;
    std::deque<ibv_wc> held;
};

// One pair of connected QPs with their CQs on a shared fake context.
struct Pair {
    Pair();
    ~Pair();
    Pair(const Pair&) = delete;
    Pair& operator=(const Pair&) = delete;
    ibv_context ctx{};
    ibv_pd pd{};
    Cq cq[4];
    Qp a;
    Qp b;
};

// When non-zero, the next ibv_reg_mr_iova2 fails with this errno (then 0).
extern int fail_next_reg;

// Marks every live region with all of `access` invalid (as a remote
// invalidation would); returns how many.
std::size_t invalidate_with_access(int access);

// Moves q's held Read completions to its send CQ; returns how many.
std::size_t release_reads(Qp& q);

// Live registrations (for leak checks).
std::size_t live_mrs();

}  // namespace fakeverbs
