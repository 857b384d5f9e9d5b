// SPDX-License-Identifier: Apache-2.0
// The minimal view of an iWARP queue pair that the SDP engine needs.
//
// The engine is sans-I/O: it never blocks, owns no socket, clock or thread.
// It calls these methods to act, and is told about completions through
// Connection::on_recv() / on_llp_closed(). A provider adapter (sdp/iwarp/
// soft or rdma-core) or an in-memory fake implements this interface.
// Calls never re-enter the engine: an adapter queues and delivers later.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace sdp::engine {

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

    // Tear down the LLP (TCP) connection. graceful: after every posted Send
    // has been transmitted (FIN). Abortive: at once, unsent Sends are dropped
    // (RST). The adapter reports the end with Connection::on_llp_closed().
    virtual void disconnect(bool graceful) = 0;
};

}  // namespace sdp::engine
