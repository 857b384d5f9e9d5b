// SPDX-License-Identifier: Apache-2.0
#include "sdp/rdma/adapter.hpp"

#include <algorithm>
#include <cstring>

#include "sdp/rdma/error.hpp"
#include "sdp/rdma/translate.hpp"
#include "sdp/wire/message.hpp"

namespace sdp::rdma {

namespace {

// wr_id of a Send or RDMA Write posted from its own region (bigger than a
// slot), and of an RDMA Read (the engine's id below the bit).
constexpr std::uint64_t kBigSendBit = 1ull << 63;
constexpr std::uint64_t kReadBit = 1ull << 62;

}  // namespace

namespace {

// This provider does not reconnect for a socket duplication (13.1.1 step 4
// needs a new rdma_cm connection and QP): a SuspComm resets the connection
// with duplication_unsupported (docs/sdp.md, "Socket duplication").
engine::Config without_duplication(engine::Config cfg) {
    cfg.duplication = false;
    return cfg;
}

}  // namespace

std::uint32_t EngineAdapter::recv_slots_for(const engine::Config& cfg) {
    // The engine raises the count to at least 4; keep a few spare slots.
    return std::max<std::uint32_t>(cfg.recv_buf_count, 4) + 4;
}

EngineAdapter::EngineAdapter(engine::Role role, const engine::Config& cfg, std::uint32_t send_slots)
    : recv_slots_(recv_slots_for(cfg)),
      send_slots_(std::max<std::uint32_t>(send_slots, 1)),
      send_buf_size_(cfg.send_buf_size),
      sdp_(role, without_duplication(cfg), *this) {}

std::error_code EngineAdapter::attach(iwarp::QueuePair& qp, std::string* why) {
    qp_ = &qp;
    recv_slot_size_ = sdp_.local_recv_size();
    recv_slab_.assign(static_cast<std::size_t>(recv_slots_) * recv_slot_size_, 0);
    if (!qp.reg_mr(recv_slab_, 0, iwarp::kAccessLocalWrite | kAccessRecvOnly)) {
        if (why != nullptr) {
            *why = "registering the receive buffers failed";
        }
        return Errc::resources;
    }
    for (std::uint32_t i = recv_slots_; i > 0; --i) {
        free_recv_.push_back(i - 1);
    }
    // Messages are at most min(send_buf_size, the peer's buffer) bytes
    // (the engine clamps send_buf_size to at least this minimum).
    send_slot_size_ = std::max<std::uint32_t>(
        send_buf_size_, static_cast<std::uint32_t>(wire::kMinPrivateBufferSize));
    send_slab_.assign(static_cast<std::size_t>(send_slots_) * send_slot_size_, 0);
    if (!qp.reg_mr(send_slab_, 0, 0)) {
        if (why != nullptr) {
            *why = "registering the send buffers failed";
        }
        return Errc::resources;
    }
    for (std::uint32_t i = send_slots_; i > 0; --i) {
        free_send_.push_back(i - 1);
    }
    return {};
}

void EngineAdapter::post_send(std::span<const std::uint8_t> message, bool solicited) {
    post_send_owned(std::vector<std::uint8_t>(message.begin(), message.end()), solicited);
}

void EngineAdapter::post_send_owned(std::vector<std::uint8_t>&& message, bool solicited) {
    post_send_invalidate(std::move(message), solicited, 0);
}

void EngineAdapter::post_send_invalidate(std::vector<std::uint8_t>&& message, bool solicited,
                                         std::uint32_t stag) {
    Work w;
    w.bytes = std::move(message);
    w.solicited = solicited;
    w.stag = stag;
    pending_sends_.push_back(std::move(w));
}

std::optional<engine::Region> EngineAdapter::register_region(std::span<std::uint8_t> mem,
                                                             engine::Access access) {
    if (qp_ == nullptr || broken_ || llp_reported_) {
        return std::nullopt;
    }
    // One registration per transfer, invalidated after it: a cache of
    // application buffers would need memory-map notifications (a freed and
    // reallocated buffer at the same address may be other pages than the
    // ones pinned), which verbs do not give (docs/rdma.md, "Zero copy").
    std::uint32_t rights = iwarp::kAccessLocalWrite;
    if (access == engine::Access::remote_read) {
        rights = iwarp::kAccessRemoteRead;
    } else if (access == engine::Access::remote_write) {
        rights = iwarp::kAccessRemoteWrite;
    }
    auto mr = qp_->reg_mr(mem, 0, rights);  // tagged offsets from mr->base
    if (!mr) {
        return std::nullopt;
    }
    return engine::Region{mr->stag, mr->base, mr->length};
}

void EngineAdapter::invalidate_region(std::uint32_t stag) {
    if (qp_ != nullptr) {
        qp_->dereg_mr(stag);  // also after the peer's Send with Invalidate
    }
}

void EngineAdapter::post_rdma_read(std::uint64_t id, const engine::Region& local,
                                   std::size_t local_off, std::uint32_t remote_stag,
                                   std::uint64_t remote_to, std::uint32_t len) {
    Work w;
    w.kind = Work::Kind::read;
    w.read_id = id;
    w.local_stag = local.stag;
    w.local_to = local.to + local_off;
    w.read_len = len;
    w.stag = remote_stag;
    w.remote_to = remote_to;
    pending_sends_.push_back(std::move(w));
}

void EngineAdapter::post_rdma_write(std::span<const std::uint8_t> data, std::uint32_t remote_stag,
                                    std::uint64_t remote_to) {
    post_rdma_write_owned(std::vector<std::uint8_t>(data.begin(), data.end()), 0, remote_stag,
                          remote_to);
}

void EngineAdapter::post_rdma_write_owned(std::vector<std::uint8_t>&& bytes, std::size_t off,
                                          std::uint32_t remote_stag, std::uint64_t remote_to) {
    Work w;
    w.kind = Work::Kind::write;
    w.bytes = std::move(bytes);
    w.off = std::min(off, w.bytes.size());
    w.stag = remote_stag;
    w.remote_to = remote_to;
    pending_sends_.push_back(std::move(w));
}

void EngineAdapter::post_recv(std::uint32_t count) {
    pending_recvs_ += count;
}

void EngineAdapter::disconnect(bool graceful) {
    if (!graceful) {
        teardown_ = Teardown::abortive;
    } else if (teardown_ == Teardown::none) {
        teardown_ = Teardown::graceful;
    }
}

void EngineAdapter::fail(std::string text) {
    broken_ = true;
    if (error_text_.empty()) {
        error_text_ = std::move(text);
    }
}

bool EngineAdapter::try_post(Work& w) {
    iwarp::SendWr wr;
    wr.signaled = true;  // every slot, region and read is released from its completion
    if (w.kind == Work::Kind::read) {
        wr.opcode = iwarp::WrOpcode::rdma_read;
        wr.wr_id = kReadBit | w.read_id;
        wr.remote_stag = w.stag;
        wr.remote_to = w.remote_to;
        wr.local_stag = w.local_stag;
        wr.local_to = w.local_to;
        wr.read_length = w.read_len;
        return post_or_fail(wr, "post_send (RDMA Read)") != PostResult::full;
    }
    if (w.kind == Work::Kind::write) {
        wr.opcode = iwarp::WrOpcode::rdma_write;
        wr.remote_stag = w.stag;
        wr.remote_to = w.remote_to;
    } else {
        wr.opcode = w.solicited ? iwarp::WrOpcode::send_se : iwarp::WrOpcode::send;
        wr.invalidate_stag = w.stag;
    }
    const auto data = std::span<const std::uint8_t>(w.bytes).subspan(w.off);
    if (data.size() <= send_slot_size_) {
        if (free_send_.empty()) {
            return false;
        }
        const std::uint32_t slot = free_send_.back();
        std::uint8_t* p = send_slab_.data() + static_cast<std::size_t>(slot) * send_slot_size_;
        if (!data.empty()) {
            std::memcpy(p, data.data(), data.size());
        }
        wr.wr_id = slot;
        wr.data = std::span<const std::uint8_t>(p, data.size());
        const PostResult r = post_or_fail(wr, "post_send");
        if (r == PostResult::posted) {
            free_send_.pop_back();
        }
        return r != PostResult::full;
    }
    // Larger than a slot: its own region while it is posted.
    BigSend b;
    b.bytes = std::move(w.bytes);
    auto mr = qp_->reg_mr(b.bytes, 0, 0);
    if (!mr) {
        fail("registering a large send failed");
        return true;
    }
    b.stag = mr->stag;
    const std::uint64_t id = kBigSendBit | next_big_++;
    wr.wr_id = id;
    wr.data = std::span<const std::uint8_t>(b.bytes).subspan(w.off);
    const PostResult r = post_or_fail(wr, "post_send");
    if (r != PostResult::posted) {
        qp_->dereg_mr(b.stag);
        if (r == PostResult::full) {
            w.bytes = std::move(b.bytes);  // posted later
            return false;
        }
        return true;
    }
    big_sends_.emplace(id, std::move(b));
    return true;
}

EngineAdapter::PostResult EngineAdapter::post_or_fail(const iwarp::SendWr& wr, const char* what) {
    const auto e = qp_->post_send(wr);
    if (e == iwarp::VerbsError::queue_full) {
        return PostResult::full;
    }
    if (e) {
        fail(std::string(what) + ": " + iwarp::to_string(*e));
        return PostResult::failed;
    }
    ++sends_in_flight_;
    return PostResult::posted;
}

bool EngineAdapter::flush_pending() {
    if (qp_ == nullptr || broken_ || llp_reported_) {
        return false;
    }
    bool moved = false;
    while (pending_recvs_ > 0 && !free_recv_.empty() && !broken_) {
        const std::uint32_t slot = free_recv_.back();
        iwarp::RecvWr wr;
        wr.wr_id = slot;
        wr.buffer = std::span<std::uint8_t>(
            recv_slab_.data() + static_cast<std::size_t>(slot) * recv_slot_size_, recv_slot_size_);
        auto e = qp_->post_recv(wr);
        if (e == iwarp::VerbsError::queue_full) {
            break;
        }
        moved = true;
        if (e) {
            fail(std::string("post_recv: ") + iwarp::to_string(*e));
            break;
        }
        free_recv_.pop_back();
        --pending_recvs_;
    }
    while (can_send_ && !pending_sends_.empty() && !broken_) {
        if (!try_post(pending_sends_.front())) {
            break;
        }
        pending_sends_.pop_front();
        moved = true;
    }
    return moved;
}

bool EngineAdapter::handle_completions() {
    if (qp_ == nullptr) {
        return false;
    }
    bool any = false;
    iwarp::Completion cq[32];
    while (true) {
        const std::size_t n = qp_->poll_cq(cq);
        if (n == 0) {
            break;
        }
        any = true;
        for (std::size_t i = 0; i < n; ++i) {
            const auto& c = cq[i];
            if (c.status != iwarp::WcStatus::success) {
                fail("work completed with an error (status " +
                     std::to_string(static_cast<int>(c.status)) + ")");
            }
            if (c.opcode == iwarp::WcOpcode::recv) {
                const auto slot = static_cast<std::uint32_t>(c.wr_id);
                if (c.status == iwarp::WcStatus::success && !llp_reported_) {
                    const std::size_t len = std::min<std::size_t>(c.byte_len, recv_slot_size_);
                    sdp_.on_recv(
                        std::span<const std::uint8_t>(
                            recv_slab_.data() + static_cast<std::size_t>(slot) * recv_slot_size_,
                            len),
                        c.solicited, c.invalidated_stag);
                }
                free_recv_.push_back(slot);
                continue;
            }
            if (sends_in_flight_ > 0) {
                --sends_in_flight_;
            }
            if (c.opcode == iwarp::WcOpcode::rdma_read) {
                if (!llp_reported_) {
                    sdp_.on_rdma_read_done(c.wr_id & ~kReadBit,
                                           c.status == iwarp::WcStatus::success);
                }
                continue;
            }
            if ((c.wr_id & kBigSendBit) != 0) {
                if (auto it = big_sends_.find(c.wr_id); it != big_sends_.end()) {
                    qp_->dereg_mr(it->second.stag);
                    big_sends_.erase(it);
                }
            } else {
                free_send_.push_back(static_cast<std::uint32_t>(c.wr_id));
            }
        }
    }
    if (!broken_ && qp_->state() == iwarp::QpState::error) {
        fail("queue pair entered the error state");
    }
    return any;
}

bool EngineAdapter::progress() {
    bool any = false;
    for (int round = 0; round < 64; ++round) {
        bool moved = handle_completions();
        moved = flush_pending() || moved;
        any = any || moved;
        if (!moved) {
            break;
        }
    }
    return any;
}

void EngineAdapter::llp_closed() {
    if (llp_reported_) {
        return;
    }
    handle_completions();  // data that arrived before the teardown
    llp_reported_ = true;
    pending_sends_.clear();
    pending_recvs_ = 0;
    sdp_.on_llp_closed();
}

}  // namespace sdp::rdma
