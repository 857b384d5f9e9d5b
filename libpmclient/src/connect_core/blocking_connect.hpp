// SPDX-License-Identifier: Apache-2.0
// The blocking driver of ConnectProcedure: performs each action on the
// calling thread until the procedure is done or failed. The TCP actions
// (bind a socket to CpIPAddr:0, connect with a bounded wait, the fallback
// socket) are built in; the Port Mapper question, the cache flush and, for
// SDP over another endpoint, bind/connect/handshake are the caller's
// (pmclient::connect, sdp::Stream::connect over the soft or rdma provider).
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <optional>
#include <stop_token>
#include <string>
#include <system_error>

#include "connect_procedure.hpp"
#include "pmclient/address.hpp"
#include "pmclient/types.hpp"

namespace pmclient {

// While alive, a stop request on `stop` shuts the socket of `fd` down
// (SHUT_RDWR): a TCP connect in progress on it (SYN_SENT) or a startup
// waiting on it ends at once. It shuts down a duplicate descriptor of its
// own, so that it never reaches a number the socket's owner has closed and
// the kernel has given to another file meanwhile.
class ShutdownOnStop {
  public:
    ShutdownOnStop(std::stop_token stop, int fd);
    ~ShutdownOnStop();
    ShutdownOnStop(const ShutdownOnStop&) = delete;
    ShutdownOnStop& operator=(const ShutdownOnStop&) = delete;

  private:
    struct Shut {
        int fd;
        void operator()() const noexcept { ::shutdown(fd, SHUT_RDWR); }
    };
    int dup_;
    std::optional<std::stop_callback<Shut>> cb_;
};

class BlockingConnect {
  public:
    // `stop`: a stop requested (from another thread) ends the procedure at
    // its next step, or in the wait of the step in progress (the Port
    // Mapper question, a TCP connect, the soft startup), with
    // operation_canceled; a connection the step made meanwhile is closed.
    explicit BlockingConnect(std::chrono::milliseconds connect_timeout, std::stop_token stop = {})
        : timeout_(connect_timeout), stop_(std::move(stop)) {}
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
    std::stop_token stop_;
    static constexpr const char* kCancelled = "cancelled by the caller";

  private:
    // step() unless a stop was requested; cancelled() when one was, before
    // or while it ran.
    template <typename Step, typename Cancelled>
    auto stopped_or(Step&& step, Cancelled&& cancelled) -> decltype(step());
    // A fresh TCP socket (bound to address:0 when bind_cp) connected to the
    // Conventional Address.
    std::error_code fallback(const ConnectProcedure::Action& a, std::string& why);
    // fd_ connected to `to` with a bounded wait that a stop ends (no SYN
    // at all when the stop came first).
    std::error_code connect_fd(const pm::Endpoint& to);
};

}  // namespace pmclient
