// SPDX-License-Identifier: Apache-2.0
// Where the dynamic registrations live beyond this daemon (`registry:`,
// docs/cluster.md). The RegistrationStore (core/registrations.hpp) keeps
// what this daemon's control socket registered, with its state file, leases
// and owner processes, whatever the backend; the backend decides which
// dynamic services the workers answer for:
//
//   local  this daemon's registrations, nothing else (the default).
//   etcd   every replica's registrations, merged (core/cluster.hpp): this
//          daemon's are written to etcd under its lease, the others' are
//          read from a snapshot kept current by a watch. The PMReq hot path
//          never waits for etcd: it reads the registry snapshot the Server
//          publishes whenever the backend reports a change.
//
// Everything runs on the main thread's io_context.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/core/cluster.hpp"
#include "daemon/core/registrations.hpp"
#include "daemon/core/service.hpp"

namespace pmd::io {

class RegistryBackend {
  public:
    virtual ~RegistryBackend() = default;

    virtual std::string_view name() const = 0;
    virtual void start() = 0;
    // No callback and no etcd call after stop().
    virtual void stop() = 0;
    // The store's registrations after every change.
    virtual void own_changed(std::span<const Registration> own) = 0;
    // The dynamic services to publish next to `statics`, given the store's
    // registrations `own`.
    virtual std::vector<Service> services(std::span<const Service> statics,
                                          std::span<const Registration> own) const = 0;
    // Why `r` cannot be registered here beyond the store's own checks
    // (another replica holds the name or the Conventional Address).
    virtual std::optional<std::string> conflict(const Registration& r) const = 0;
    // For `sdp-pmctl cluster`: the backend, its endpoints' health and what
    // it holds. May ask etcd first.
    virtual void status(std::span<const Service> statics,
                        std::function<void(nlohmann::json)> done) = 0;
    // The etcd backend's counters (all zero for `local`).
    virtual cluster::Counters counters() const = 0;
    virtual void reset_counters() = 0;
    // False while dynamic services are denied because etcd has not answered
    // for longer than max_staleness (always true for `local`).
    virtual bool serving() const = 0;
};

// `changed` runs (on the io_context) whenever services() may return
// something new: the Server publishes a new registry then. `member` is the
// name of this replica when the configuration leaves it empty.
std::unique_ptr<RegistryBackend> make_registry_backend(boost::asio::io_context& io,
                                                       const RegistryConfig& config,
                                                       const std::string& default_member,
                                                       std::function<void()> changed);

// The host name made into a valid member name (characters outside
// [A-Za-z0-9._-] become '-', at most 64), "sdp-pmd" when there is none.
std::string default_member_name();

}  // namespace pmd::io
