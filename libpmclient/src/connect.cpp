// SPDX-License-Identifier: Apache-2.0
#include "pmclient/connect.hpp"

#include "libpmclient/src/connect_core/blocking_connect.hpp"
#include "libpmclient/src/connect_core/connect_procedure.hpp"

namespace pmclient {

namespace {

// TCP only: the procedure has no handshake step here.
class TcpConnect final : public BlockingConnect {
  public:
    TcpConnect(BlockingResolver& r, const ConnectOptions& o)
        : BlockingConnect(o.connect_timeout), resolver_(r), request_(o.request) {}

  private:
    Result resolve(const pm::Endpoint& conventional, const pm::Endpoint& local) override {
        return resolver_.resolve(ResolveRequest{conventional, local, request_});
    }
    void flush_cache(const pm::Endpoint& conventional) override {
        resolver_.resolver().flush_cache(conventional);
    }
    BlockingResolver& resolver_;
    std::optional<RequestOptions> request_;
};

}  // namespace

ConnectResult connect(BlockingResolver& resolver, const pm::Endpoint& conventional,
                      std::optional<pm::IpAddress> cp_addr, const ConnectOptions& options) {
    ConnectProcedure::Options po;
    po.connect_timeout = options.connect_timeout;
    po.cp = cp_addr;
    ConnectProcedure proc(conventional, po);
    TcpConnect io(resolver, options);
    const auto& last = io.run(proc);
    ConnectResult res;
    res.resolution = proc.resolution();
    res.reason = proc.reason();
    if (last.step != ConnectProcedure::Step::done) {
        // sys_errno is the errno of a failing system call; a Port Mapper
        // failure (resolution() says which) has none.
        if (proc.failed_at() != ConnectProcedure::Step::resolve) {
            res.sys_errno = proc.error().value();
        }
        return res;
    }
    res.fd = io.release_fd();
    res.used_sdp = last.sdp;
    res.peer = proc.peer();
    res.local = io.local();
    if (last.sdp) {
        res.reason = "connected to SDP Address";
    }
    return res;
}

}  // namespace pmclient
