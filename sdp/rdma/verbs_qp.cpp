// SPDX-License-Identifier: Apache-2.0
#include "sdp/rdma/verbs_qp.hpp"

#include <algorithm>
#include <cerrno>
#include <limits>

namespace sdp::rdma {

using iwarp::VerbsError;

RdmaQueuePair::RdmaQueuePair(const QpResources& res) : res_(res) {}

RdmaQueuePair::~RdmaQueuePair() {
    for (auto& [stag, r] : regions_) {
        (void)stag;
        ibv_dereg_mr(r.mr);
    }
}

iwarp::Result<iwarp::MemoryRegion, VerbsError> RdmaQueuePair::reg_mr(std::span<std::uint8_t> mem,
                                                                     std::uint64_t base,
                                                                     std::uint32_t access) {
    if (mem.empty() || res_.pd == nullptr) {
        return iwarp::unexpected(VerbsError::invalid_region);
    }
    // iova = the buffer's own address, whatever `base` asks for. The kernel
    // refuses (EINVAL) an iova whose offset within a page differs from the
    // buffer's (ib_umem / ib_umem_find_best_pgsz), and our heap buffers are
    // not page aligned; siw 6.1 also keys its regions by virtual address
    // whatever iova says, and local SGEs (sge_for_bytes) carry virtual
    // addresses, which are in the region's iova space only when iova = addr.
    // The tagged offset the peer must use is the returned MemoryRegion::base.
    (void)base;
    const auto addr = reinterpret_cast<std::uintptr_t>(mem.data());
    errno = 0;
    ibv_mr* mr =
        ibv_reg_mr_iova(res_.pd, mem.data(), mem.size(), addr, to_ibv_access(access, res_.iwarp));
    if (mr == nullptr) {
        reg_error_ = describe_reg_failure(errno, mem.size());
        return iwarp::unexpected(VerbsError::invalid_region);
    }
    Region r;
    r.mr = mr;
    r.view.addr = reinterpret_cast<std::uintptr_t>(mem.data());
    r.view.length = mem.size();
    r.view.base = addr;
    r.view.lkey = mr->lkey;
    r.view.rkey = mr->rkey;
    r.view.access = access;
    if (auto it = regions_.find(mr->rkey); it != regions_.end()) {
        // A provider reusing a live key would be a bug; never leak the old MR.
        ibv_dereg_mr(it->second.mr);
        regions_.erase(it);
    }
    regions_[mr->rkey] = r;
    by_addr_.emplace(r.view.addr, mr->rkey);
    iwarp::MemoryRegion out;
    out.stag = mr->rkey;
    out.base = addr;
    out.length = mem.size();
    out.access = access;
    return out;
}

bool RdmaQueuePair::dereg_mr(std::uint32_t stag) {
    auto it = regions_.find(stag);
    if (it == regions_.end()) {
        return false;
    }
    auto range = by_addr_.equal_range(it->second.view.addr);
    for (auto a = range.first; a != range.second; ++a) {
        if (a->second == stag) {
            by_addr_.erase(a);
            break;
        }
    }
    ibv_dereg_mr(it->second.mr);
    regions_.erase(it);
    return true;
}

const RdmaQueuePair::Region* RdmaQueuePair::region_containing(const void* p,
                                                              std::size_t len) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    auto it = by_addr_.upper_bound(a);
    while (it != by_addr_.begin()) {
        --it;
        const auto& r = regions_.at(it->second);
        if (sge_for_bytes(r.view, p, len)) {
            return &r;
        }
    }
    return nullptr;
}

std::optional<VerbsError> RdmaQueuePair::post_send(const iwarp::SendWr& wr) {
    if (state_ == iwarp::QpState::error || res_.qp == nullptr) {
        return VerbsError::qp_error;
    }
    if (wr.data.size() > std::numeric_limits<std::uint32_t>::max()) {
        return VerbsError::too_long;
    }
    if (sq_.size() >= res_.max_send_wr) {
        return VerbsError::queue_full;
    }
    ibv_sge sge{};
    int num_sge = 0;
    bool inline_data = false;
    iwarp::WcOpcode wc_op = iwarp::WcOpcode::send;
    if (wr.opcode == iwarp::WrOpcode::rdma_read) {
        wc_op = iwarp::WcOpcode::rdma_read;
        if (wr.read_length > 0) {
            auto it = regions_.find(wr.local_stag);
            if (it == regions_.end()) {
                return VerbsError::invalid_region;
            }
            auto s =
                sge_for_to(it->second.view, wr.local_to, wr.read_length, iwarp::kAccessLocalWrite);
            if (!s) {
                return VerbsError::invalid_region;
            }
            sge = *s;
            num_sge = 1;
        }
    } else {
        if (wr.opcode == iwarp::WrOpcode::rdma_write) {
            wc_op = iwarp::WcOpcode::rdma_write;
        }
        if (!wr.data.empty()) {
            if (const Region* r = region_containing(wr.data.data(), wr.data.size())) {
                sge = *sge_for_bytes(r->view, wr.data.data(), wr.data.size());
            } else if (wr.data.size() <= res_.max_inline) {
                sge.addr = reinterpret_cast<std::uintptr_t>(wr.data.data());
                sge.length = static_cast<std::uint32_t>(wr.data.size());
                sge.lkey = 0;
                inline_data = true;
            } else {
                return VerbsError::invalid_region;
            }
            num_sge = 1;
        }
    }
    const std::uint64_t id = next_id_++;
    ibv_send_wr w = make_send_wr(wr, id, &sge, num_sge, inline_data);
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(res_.qp, &w, &bad);
    if (rc != 0) {
        if (rc == ENOMEM) {
            return VerbsError::queue_full;
        }
        state_ = iwarp::QpState::error;
        return VerbsError::qp_error;
    }
    sq_.push_back(Posted{id, wr.wr_id, wc_op, wr.signaled});
    return std::nullopt;
}

std::optional<VerbsError> RdmaQueuePair::post_recv(const iwarp::RecvWr& wr) {
    if (state_ == iwarp::QpState::error || res_.qp == nullptr) {
        return VerbsError::qp_error;
    }
    if (wr.buffer.size() > std::numeric_limits<std::uint32_t>::max()) {
        return VerbsError::too_long;
    }
    if (rq_.size() >= res_.max_recv_wr) {
        return VerbsError::queue_full;
    }
    ibv_sge sge{};
    int num_sge = 0;
    if (!wr.buffer.empty()) {
        const Region* r = region_containing(wr.buffer.data(), wr.buffer.size());
        // Local write is what the device needs (remote write implies it).
        constexpr std::uint32_t kWritable = iwarp::kAccessLocalWrite | iwarp::kAccessRemoteWrite;
        if (r == nullptr || (r->view.access & kWritable) == 0) {
            return VerbsError::invalid_region;
        }
        sge = *sge_for_bytes(r->view, wr.buffer.data(), wr.buffer.size());
        num_sge = 1;
    }
    const std::uint64_t id = next_id_++;
    ibv_recv_wr w = make_recv_wr(id, &sge, num_sge);
    ibv_recv_wr* bad = nullptr;
    const int rc = ibv_post_recv(res_.qp, &w, &bad);
    if (rc != 0) {
        if (rc == ENOMEM) {
            return VerbsError::queue_full;
        }
        state_ = iwarp::QpState::error;
        return VerbsError::qp_error;
    }
    rq_.push_back(Posted{id, wr.wr_id, iwarp::WcOpcode::recv, true});
    return std::nullopt;
}

void RdmaQueuePair::drain(ibv_cq* cq, std::deque<Posted>& q) {
    if (cq == nullptr) {
        return;
    }
    ibv_wc wc[16];
    while (true) {
        const int n = ibv_poll_cq(cq, 16, wc);
        if (n <= 0) {
            if (n < 0) {
                state_ = iwarp::QpState::error;
            }
            return;
        }
        for (int i = 0; i < n; ++i) {
            const auto it = std::find_if(q.begin(), q.end(),
                                         [&](const Posted& e) { return e.id == wc[i].wr_id; });
            if (it == q.end()) {
                continue;  // not ours (cannot happen on a private CQ)
            }
            const Posted p = *it;
            // Unsignaled requests posted before this one are done with it
            // (they raise no completion of their own). Signaled ones keep
            // their entry: completions of a send queue are not always in
            // posting order (siw completes an RDMA Read when its Read
            // Response arrives, after the Sends posted behind it).
            const auto first =
                std::remove_if(q.begin(), it, [](const Posted& e) { return !e.signaled; });
            q.erase(first, std::next(it));
            if (wc[i].status != IBV_WC_SUCCESS) {
                state_ = iwarp::QpState::error;
                if (wc[i].status != IBV_WC_WR_FLUSH_ERR || !last_error_) {
                    last_error_ = wc[i].status;
                }
            }
            ready_.push_back(to_completion(wc[i], p.user, p.opcode));
        }
    }
}

std::size_t RdmaQueuePair::poll_cq(std::span<iwarp::Completion> out) {
    if (ready_.size() < out.size()) {
        drain(res_.send_cq, sq_);
        drain(res_.recv_cq, rq_);
    }
    std::size_t n = 0;
    while (n < out.size() && !ready_.empty()) {
        out[n++] = ready_.front();
        ready_.pop_front();
    }
    return n;
}

bool RdmaQueuePair::arm(bool solicited_only) {
    bool ok = true;
    if (res_.send_cq != nullptr) {
        ok = ibv_req_notify_cq(res_.send_cq, 0) == 0 && ok;
    }
    if (res_.recv_cq != nullptr) {
        ok = ibv_req_notify_cq(res_.recv_cq, solicited_only ? 1 : 0) == 0 && ok;
    }
    return ok;
}

int RdmaQueuePair::consume_events() {
    if (res_.channel == nullptr) {
        return 0;
    }
    int n = 0;
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    while (ibv_get_cq_event(res_.channel, &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        ++n;
    }
    return n;
}

void RdmaQueuePair::to_error() {
    if (res_.qp != nullptr) {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_ERR;
        (void)ibv_modify_qp(res_.qp, &attr, IBV_QP_STATE);
    }
    state_ = iwarp::QpState::error;
}

}  // namespace sdp::rdma
