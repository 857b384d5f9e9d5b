// SPDX-License-Identifier: Apache-2.0
// The minimal view of an iWARP queue pair that the SDP engine needs.
//
// The engine is sans-I/O: it never blocks, owns no socket, clock or thread.
// It calls these methods to act, and is told about completions through
// Connection::on_recv() / on_llp_closed(). A provider adapter (sdp/iwarp/
// soft or rdma-core) or an in-memory fake implements this interface.
// Calls never re-enter the engine: an adapter queues and delivers later.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace sdp::engine {

// A ULP buffer registered for one zero-copy transfer (9.2, 9.3): the peer
// names it by STag and tagged offset.
struct Region {
    std::uint32_t stag = 0;
    std::uint64_t to = 0;  // tagged offset of the first byte
    std::size_t length = 0;
};

enum class Access : std::uint8_t {
    remote_read,   // a Data Source's buffer that the peer RDMA-Reads
    local_write,   // a Data Sink's buffer that our RDMA Read fills
    remote_write,  // a Data Sink's buffer that the peer RDMA-Writes (9.3)
};

class QueuePair {
  public:
    virtual ~QueuePair() = default;

    // Post one RDMAP Send carrying one whole SDP Message. solicited selects
    // Send with Solicited Event (section 14.2). The bytes are copied before
    // the call returns. Sends complete in order.
    virtual void post_send(std::span<const std::uint8_t> message, bool solicited) = 0;

    // The same, handing over the encoded message (an adapter that keeps the
    // bytes until the Send completes can take them without a copy).
    virtual void post_send_owned(std::vector<std::uint8_t>&& message, bool solicited) {
        post_send(message, solicited);
    }

    // Post `count` more receive buffers, each of Connection::local_recv_size()
    // bytes, to the receive queue. Each incoming Send consumes one.
    virtual void post_recv(std::uint32_t count) = 0;
    // Receive buffer resizing (10.6): true if post_recv() sizes each buffer
    // by local_recv_size() at the time of the call (which changes when the
    // peer's ChRcvBuf is granted). False: the engine answers every ChRcvBuf
    // with the unchanged size.
    [[nodiscard]] virtual bool resizable_recv() const { return false; }

    // --- zero copy (Read Zcopy 9.2, Write Zcopy 9.3). A provider without
    // RDMA Read and Write leaves rdma_capable() false: the engine then uses
    // Bcopy only (a SrcAvail from the peer is answered with SendSm, a
    // SinkAvail is never used).
    [[nodiscard]] virtual bool rdma_capable() const { return false; }
    // Registers `mem` for one transfer with an unguessable STag; nullopt if
    // it cannot (the engine falls back to Bcopy).
    virtual std::optional<Region> register_region(std::span<std::uint8_t> /*mem*/,
                                                  Access /*access*/) {
        return std::nullopt;
    }
    // Invalidates (deregisters) a region: its STag is refused from now on.
    virtual void invalidate_region(std::uint32_t /*stag*/) {}
    // RDMA Read of `len` bytes at (remote_stag, remote_to) into `local` at
    // `local_off`. Completes with Connection::on_rdma_read_done(id, ok), in
    // posting order, never from inside this call.
    virtual void post_rdma_read(std::uint64_t /*id*/, const Region& /*local*/,
                                std::size_t /*local_off*/, std::uint32_t /*remote_stag*/,
                                std::uint64_t /*remote_to*/, std::uint32_t /*len*/) {}
    // RDMA Write of `data` into the peer's region at (remote_stag,
    // remote_to). The bytes are copied before the call returns, as with
    // post_send(); Writes and Sends go in posting order, so a Send posted
    // after it reaches the peer after the data is placed (RDMAP ordering).
    // A bad STag or range is the peer's to refuse (RDMAP Terminate).
    virtual void post_rdma_write(std::span<const std::uint8_t> /*data*/,
                                 std::uint32_t /*remote_stag*/, std::uint64_t /*remote_to*/) {}
    // The same, handing over a vector whose bytes from `off` on are the data.
    virtual void post_rdma_write_owned(std::vector<std::uint8_t>&& bytes, std::size_t off,
                                       std::uint32_t remote_stag, std::uint64_t remote_to) {
        post_rdma_write(std::span<const std::uint8_t>(bytes).subspan(off), remote_stag, remote_to);
    }
    // post_send_owned() as Send with (Solicited Event and) Invalidate of the
    // peer's `stag` (RDMAP 4.3): the peer's region is gone when it arrives.
    virtual void post_send_invalidate(std::vector<std::uint8_t>&& message, bool solicited,
                                      std::uint32_t /*stag*/) {
        post_send_owned(std::move(message), solicited);
    }

    // Tear down the LLP (TCP) connection. graceful: after every posted Send
    // has been transmitted (FIN). Abortive: at once, unsent Sends are dropped
    // (RST). The adapter reports the end with Connection::on_llp_closed().
    virtual void disconnect(bool graceful) = 0;
};

}  // namespace sdp::engine
