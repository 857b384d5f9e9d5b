// SPDX-License-Identifier: Apache-2.0
// The rdma_cm connection manager of the rdma-core provider: one RC
// connection on an iWARP device with its PD, CQs, completion channel and QP,
// and a listener. Every wait is bounded by the options' timeouts; each
// connection has its own event channel, so nothing is shared between them.
//
// Active side:  create_active(dst) resolves the address and the route
//               (rdma_resolve_addr / rdma_resolve_route), refuses non-iWARP
//               devices, creates the verbs resources; the caller posts its
//               receive buffers, then connect(hello) sends the MPA Request
//               with the Hello as private data and waits for ESTABLISHED.
// Passive side: Listener::get_request() waits for CONNECT_REQUEST, moves the
//               new id to its own channel and creates its resources; the
//               Hello is peer_private_data(); the caller then accept()s or
//               reject()s.
#pragma once

#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "sdp/rdma/error.hpp"
#include "sdp/rdma/translate.hpp"
#include "sdp/rdma/verbs_qp.hpp"

namespace sdp::rdma {

struct CmOptions {
    std::chrono::milliseconds resolve_timeout{2000};     // address and route, each
    std::chrono::milliseconds establish_timeout{5000};   // connect()/accept() until ESTABLISHED
    std::chrono::milliseconds disconnect_timeout{2000};  // close: wait for DISCONNECTED
    std::uint16_t ird = 1;  // RDMA Reads served at once (responder_resources)
    std::uint16_t ord = 1;  // RDMA Reads outstanding (initiator_depth)
    std::uint32_t max_send_wr = 64;
    std::uint32_t max_recv_wr = 64;
    std::uint32_t max_inline = 64;  // asked for; the device may give less (then 0)
};

class Connection {
  public:
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;
    ~Connection();

    static std::unique_ptr<Connection> create_active(const sockaddr* dst, const sockaddr* src,
                                                     const CmOptions& opt, std::error_code& ec,
                                                     std::string* why = nullptr);
    // The active side in two steps, for a source port that must be known
    // before the destination (the Port Mapper's CpIPAddr:CpPort, SDP 7.5.1):
    // bind_active() creates the id and binds it to `src` with rdma_bind_addr
    // (port 0: rdma_cm picks one, see local_address()); resolve() then
    // resolves the route to `dst` from that address and port and creates the
    // verbs resources, like create_active().
    static std::unique_ptr<Connection> bind_active(const sockaddr* src, const CmOptions& opt,
                                                   std::error_code& ec, std::string* why = nullptr);
    std::error_code resolve(const sockaddr* dst, std::string* why = nullptr);
    // The id's source address and port (rdma_get_local_addr); ss_family is
    // AF_UNSPEC before the id is bound.
    [[nodiscard]] sockaddr_storage local_address() const;
    // The peer's address and port (rdma_get_peer_addr), AF_UNSPEC if unknown.
    [[nodiscard]] sockaddr_storage peer_address() const;
    // Active: MPA Request with `private_data` (the SDP Hello, at most
    // kMaxPrivateData bytes); waits for ESTABLISHED. Errors: rejected
    // (connection_refused), unreachable, connect_error, timed_out, ...
    std::error_code connect(std::span<const std::uint8_t> private_data, std::string* why = nullptr);
    // Passive: MPA Reply with `private_data`; waits for ESTABLISHED.
    std::error_code accept(std::span<const std::uint8_t> private_data, std::string* why = nullptr);
    // Passive: MPA Reply with the Reject bit.
    std::error_code reject(std::span<const std::uint8_t> private_data = {});

    // Passive: the Request's private data (the Hello). Active: the Reply's
    // private data once connect() returned (also after a rejection).
    [[nodiscard]] std::span<const std::uint8_t> peer_private_data() const { return peer_pd_; }
    // Passive: the initiator's IRD (responder_resources) / ORD (initiator_depth).
    [[nodiscard]] const rdma_conn_param& request_param() const { return request_; }

    [[nodiscard]] RdmaQueuePair& qp() { return *qp_; }
    [[nodiscard]] const ReadLimits& limits() const { return limits_; }
    [[nodiscard]] std::string device_name() const;
    [[nodiscard]] int cm_fd() const;
    [[nodiscard]] bool established() const { return established_; }
    [[nodiscard]] bool disconnected() const { return disconnected_; }
    // connect() failed because rdma_connect said EADDRINUSE: siw binds a
    // kernel TCP socket to the port rdma_cm picked from its own port space,
    // which a host TCP socket (one in TIME_WAIT, say) may hold.
    [[nodiscard]] bool port_in_use() const { return port_in_use_; }

    // Handles pending CM events without blocking; true when the connection
    // is gone (DISCONNECTED, DEVICE_REMOVAL).
    bool poll_events();
    // rdma_disconnect() once (iWARP: TCP FIN after the QP is flushed).
    void disconnect();
    // Abortive: QP to error first, then rdma_disconnect().
    void abort();
    // disconnect(), then waits up to disconnect_timeout for DISCONNECTED.
    void close();

  private:
    friend class Listener;
    explicit Connection(const CmOptions& opt);
    static std::unique_ptr<Connection> open_id(const CmOptions& opt, std::error_code& ec,
                                               std::string* why);
    std::error_code setup_verbs(std::string* why);
    std::error_code wait_for(rdma_cm_event_type wanted, std::chrono::milliseconds timeout,
                             std::string* why);

    CmOptions opt_;
    rdma_event_channel* ch_ = nullptr;
    rdma_cm_id* id_ = nullptr;
    ibv_pd* pd_ = nullptr;
    ibv_comp_channel* cc_ = nullptr;
    ibv_cq* send_cq_ = nullptr;
    ibv_cq* recv_cq_ = nullptr;
    bool qp_created_ = false;
    std::unique_ptr<RdmaQueuePair> qp_;
    ReadLimits limits_;
    rdma_conn_param request_{};
    std::vector<std::uint8_t> peer_pd_;
    bool established_ = false;
    bool disconnected_ = false;
    bool disconnect_sent_ = false;
    bool port_in_use_ = false;
};

class Listener {
  public:
    Listener(const Listener&) = delete;
    Listener& operator=(const Listener&) = delete;
    ~Listener();

    // rdma_bind_addr + rdma_listen. Port 0 picks one (see port()).
    static std::unique_ptr<Listener> listen(const sockaddr* addr, int backlog, std::error_code& ec,
                                            std::string* why = nullptr);
    [[nodiscard]] std::uint16_t port() const;
    [[nodiscard]] int fd() const;
    // Waits up to `timeout` for a CONNECT_REQUEST. A request on a device
    // that is not iWARP is rejected and reported as not_iwarp.
    std::unique_ptr<Connection> get_request(std::chrono::milliseconds timeout, const CmOptions& opt,
                                            std::error_code& ec, std::string* why = nullptr);

  private:
    Listener() = default;
    rdma_event_channel* ch_ = nullptr;
    rdma_cm_id* id_ = nullptr;
};

}  // namespace sdp::rdma
