// SPDX-License-Identifier: Apache-2.0
#include "sdp/rdma/adapter.hpp"

#include <algorithm>
#include <cstring>

#include "sdp/rdma/error.hpp"
#include "sdp/rdma/translate.hpp"
#include "sdp/wire/message.hpp"

namespace sdp::rdma {

namespace {

// wr_id of a Send posted from its own region (bigger than a slot).
constexpr std::uint64_t kBigSendBit = 1ull << 63;

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
    pending_sends_.emplace_back(std::vector<std::uint8_t>(message.begin(), message.end()),
                                solicited);
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

bool EngineAdapter::try_send(std::span<const std::uint8_t> message, bool solicited) {
    iwarp::SendWr wr;
    wr.opcode = solicited ? iwarp::WrOpcode::send_se : iwarp::WrOpcode::send;
    wr.signaled = true;  // every slot is recycled from its completion
    if (message.size() <= send_slot_size_) {
        if (free_send_.empty()) {
            return false;
        }
        const std::uint32_t slot = free_send_.back();
        std::uint8_t* p = send_slab_.data() + static_cast<std::size_t>(slot) * send_slot_size_;
        if (!message.empty()) {
            std::memcpy(p, message.data(), message.size());
        }
        wr.wr_id = slot;
        wr.data = std::span<const std::uint8_t>(p, message.size());
        auto e = qp_->post_send(wr);
        if (e == iwarp::VerbsError::queue_full) {
            return false;
        }
        if (e) {
            fail(std::string("post_send: ") + iwarp::to_string(*e));
            return true;
        }
        free_send_.pop_back();
        ++sends_in_flight_;
        return true;
    }
    // Larger than a slot: its own region while it is posted.
    BigSend b;
    b.bytes.assign(message.begin(), message.end());
    auto mr = qp_->reg_mr(b.bytes, 0, 0);
    if (!mr) {
        fail("registering a large send failed");
        return true;
    }
    b.stag = mr->stag;
    const std::uint64_t id = kBigSendBit | next_big_++;
    wr.wr_id = id;
    wr.data = b.bytes;
    auto e = qp_->post_send(wr);
    if (e) {
        qp_->dereg_mr(b.stag);
        if (e == iwarp::VerbsError::queue_full) {
            return false;
        }
        fail(std::string("post_send: ") + iwarp::to_string(*e));
        return true;
    }
    big_sends_.emplace(id, std::move(b));
    ++sends_in_flight_;
    return true;
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
        auto& [bytes, se] = pending_sends_.front();
        if (!try_send(bytes, se)) {
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
                        c.solicited);
                }
                free_recv_.push_back(slot);
                continue;
            }
            if (c.opcode != iwarp::WcOpcode::send) {
                continue;  // this adapter posts no RDMA Write / Read
            }
            if (sends_in_flight_ > 0) {
                --sends_in_flight_;
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
