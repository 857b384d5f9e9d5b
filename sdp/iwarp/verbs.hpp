// SPDX-License-Identifier: Apache-2.0
// A verbs-like interface both iWARP providers implement: the soft provider
// (sdp/iwarp/qp.hpp, MPA/DDP/RDMAP over a TCP byte stream) and the rdma-core
// one (RNICs, siw). Buffers are caller-owned: a posted buffer or a registered
// region must stay valid until its completion / deregistration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "sdp/iwarp/result.hpp"

namespace sdp::iwarp {

// Memory region access rights (bit set).
inline constexpr std::uint32_t kAccessLocalWrite = 1u << 0;   // RDMA Read sink
inline constexpr std::uint32_t kAccessRemoteRead = 1u << 1;   // RDMA Read source
inline constexpr std::uint32_t kAccessRemoteWrite = 1u << 2;  // RDMA Write sink

struct MemoryRegion {
    std::uint32_t stag = 0;
    std::uint64_t base = 0;  // tagged offset of the first byte
    std::size_t length = 0;
    std::uint32_t access = 0;
};

enum class WrOpcode : std::uint8_t { send, send_se, rdma_write, rdma_read };

struct SendWr {
    std::uint64_t wr_id = 0;
    WrOpcode opcode = WrOpcode::send;
    bool signaled = true;  // completion on success (errors always complete)
    // Send / RDMA Write: the source bytes.
    std::span<const std::uint8_t> data;
    // RDMA Write: sink; RDMA Read: source (the peer's region).
    std::uint32_t remote_stag = 0;
    std::uint64_t remote_to = 0;
    // RDMA Read: local sink region (registered with kAccessLocalWrite).
    std::uint32_t local_stag = 0;
    std::uint64_t local_to = 0;
    std::uint32_t read_length = 0;
    // Send / Send with SE: as Send with Invalidate of this peer STag (RDMAP
    // 4.3); 0: a plain Send.
    std::uint32_t invalidate_stag = 0;
};

struct RecvWr {
    std::uint64_t wr_id = 0;
    std::span<std::uint8_t> buffer;
};

enum class WcOpcode : std::uint8_t { send, rdma_write, rdma_read, recv };

enum class WcStatus : std::uint8_t {
    success,
    local_protection_error,  // a local region check failed while sending
    remote_access_error,     // the peer reported a protection error (Terminate)
    remote_operation_error,  // the peer reported another error (Terminate)
    fatal_error,             // we terminated the stream (protocol error)
    wr_flush_error,          // flushed because the QP entered the error state
};

struct Completion {
    std::uint64_t wr_id = 0;
    WcOpcode opcode = WcOpcode::send;
    WcStatus status = WcStatus::success;
    std::uint32_t byte_len = 0;
    bool solicited = false;              // receive of a Send with Solicited Event
    std::uint32_t invalidated_stag = 0;  // receive of a Send with Invalidate
    bool operator==(const Completion&) const = default;
};

enum class VerbsError : std::uint8_t {
    qp_error,        // the QP is in the error state
    queue_full,      // send or receive queue at its limit
    invalid_region,  // local region missing, lacking access or out of bounds
    too_long,        // message larger than 4 GiB - 1
};
const char* to_string(VerbsError e);

enum class QpState : std::uint8_t { rts, error };

class QueuePair {
  public:
    virtual ~QueuePair() = default;
    QueuePair() = default;
    QueuePair(const QueuePair&) = delete;
    QueuePair& operator=(const QueuePair&) = delete;

    virtual Result<MemoryRegion, VerbsError> reg_mr(std::span<std::uint8_t> mem, std::uint64_t base,
                                                    std::uint32_t access) = 0;
    virtual bool dereg_mr(std::uint32_t stag) = 0;
    virtual std::optional<VerbsError> post_send(const SendWr& wr) = 0;
    virtual std::optional<VerbsError> post_recv(const RecvWr& wr) = 0;
    // Moves up to out.size() completions into out; returns how many.
    virtual std::size_t poll_cq(std::span<Completion> out) = 0;
    [[nodiscard]] virtual QpState state() const = 0;
};

}  // namespace sdp::iwarp
