// SPDX-License-Identifier: Apache-2.0
// The UDP listen sockets of sdp-pmd and their reload. One Listener per listen
// address: sockets[i] belongs to worker i (an SO_REUSEPORT group bound in
// worker order and steered by source address, io/reuseport.hpp), or a single
// socket on worker 0. The set opens (or adopts, under socket activation) the
// sockets, hands them to the workers and, on a reload, carries out the diff
// of core/listen_plan.hpp: everything that can fail (binding the new
// addresses) happens in prepare(), before anything changes; commit() then
// moves the sockets between the workers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "daemon/io/udp_socket.hpp"
#include "daemon/io/worker.hpp"
#include "pmclient/address.hpp"

namespace pmd::io {

class ListenSet {
  public:
    struct Listener {
        pm::Endpoint endpoint;
        std::vector<std::shared_ptr<UdpSocket>> sockets;
        bool steered = false;  // source-address steering attached
    };
    using List = std::vector<Listener>;
    // A reload's listeners, bound but not yet serving.
    struct Prepared {
        List next;
        std::vector<bool> opened;        // next[i] is new (else kept)
        std::vector<std::size_t> close;  // running listeners next does not keep
    };

    // `workers` outlives the set. set_running() tells whether the workers'
    // threads run (sockets are then handed over by post()).
    explicit ListenSet(std::vector<std::unique_ptr<Worker>>& workers);
    ~ListenSet();
    ListenSet(const ListenSet&) = delete;
    ListenSet& operator=(const ListenSet&) = delete;

    // At start: binds every address of `listen` and hands the sockets to the
    // workers. Logs what failed and returns false.
    bool open(const std::vector<pm::Endpoint>& listen);
    // At start, socket activation: the inherited UDP sockets (owned by
    // worker 0's io_context) with siblings for the other workers.
    void adopt(std::vector<std::shared_ptr<UdpSocket>> inherited);

    // A reload: the listeners for `listen`, running ones kept, new ones
    // bound but not yet serving. nullopt (and logged) when one cannot be bound.
    std::optional<Prepared> prepare(const std::vector<pm::Endpoint>& listen);
    // Serves what prepare() opened instead of the running listeners.
    void commit(Prepared p);

    // The endpoints actually bound (a configured port 0 replaced by the real one).
    std::vector<pm::Endpoint> bound() const;
    std::size_t steered() const;
    std::size_t size() const { return listeners_.size(); }
    void set_running(bool running) { running_ = running; }
    // Drops the sockets (before the workers' io_contexts go).
    void clear() { listeners_.clear(); }

  private:
    std::optional<Prepared> open_list(const std::vector<pm::Endpoint>& listen);
    std::optional<Listener> open_one(const pm::Endpoint& ep, boost::system::error_code& ec);
    Listener adopt_one(std::shared_ptr<UdpSocket> s);
    void steer(Listener& l);
    void attach(const Listener& l);
    void detach(const Listener& l);

    std::vector<std::unique_ptr<Worker>>& workers_;
    std::uint32_t steering_seed_;
    bool steering_warned_ = false;
    bool running_ = false;
    List listeners_;
};

}  // namespace pmd::io
