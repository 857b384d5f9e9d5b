// SPDX-License-Identifier: Apache-2.0
// The blocking driver of ConnectProcedure: performs each action on the
// calling thread until the procedure is done or failed. The TCP actions
// (bind a socket to CpIPAddr:0, connect with a bounded wait, the fallback
// socket) are built in; the Port Mapper question, the cache flush and, for
// SDP over another endpoint, bind/connect/handshake are the caller's
// (pmclient::connect, sdp::Stream::connect over the soft or rdma provider).
#pragma once

#include <chrono>
#include <string>
#include <system_error>

#include "connect_procedure.hpp"
#include "pmclient/address.hpp"
#include "pmclient/types.hpp"

namespace pmclient {

class BlockingConnect {
  public:
    explicit BlockingConnect(std::chrono::milliseconds connect_timeout)
        : timeout_(connect_timeout) {}
    virtual ~BlockingConnect();  // closes a socket not released
    BlockingConnect(const BlockingConnect&) = delete;
    BlockingConnect& operator=(const BlockingConnect&) = delete;

    // Runs `proc` from start() to done or failed; returns that last action.
    const ConnectProcedure::Action& run(ConnectProcedure& proc);
    // The TCP socket (blocking mode): after done, the connected one; -1
    // when none (or when an override of bind() carries SDP elsewhere).
    int release_fd();
    // CpIPAddr:CpPort of the socket (or endpoint) bound last.
    [[nodiscard]] const pm::Endpoint& local() const { return local_; }

  protected:
    struct BindOutcome {
        std::error_code ec;
        std::string why;                 // replaces ec.message() in the reason
        bool provider_unusable = false;  // SDP cannot go from there; TCP can
    };
    // The actions. Defaults: a TCP socket bound to cp:0 (fd_), connected
    // with a bounded wait; handshake succeeds at once (none).
    virtual BindOutcome bind(const pm::IpAddress& cp);
    virtual Result resolve(const pm::Endpoint& conventional, const pm::Endpoint& local) = 0;
    virtual void flush_cache(const pm::Endpoint& conventional) = 0;
    virtual std::error_code connect(const pm::Endpoint& sdp_address, std::string& why);
    virtual std::error_code handshake(std::string& why);

    void close_fd();
    int fd_ = -1;
    pm::Endpoint local_;
    std::chrono::milliseconds timeout_;

  private:
    // A fresh TCP socket (bound to address:0 when bind_cp) connected to the
    // Conventional Address.
    std::error_code fallback(const ConnectProcedure::Action& a, std::string& why);
};

}  // namespace pmclient
