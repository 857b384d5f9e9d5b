// SPDX-License-Identifier: Apache-2.0
// The dynamic registrations' side of Server (see server.hpp): the store
// (core/registrations.hpp) loaded from and saved to the state file, the
// registry snapshot built from it and the lease timer armed for its next
// deadline.
#include <algorithm>

#include "daemon/io/log.hpp"
#include "daemon/io/server.hpp"

namespace pmd::io {

std::shared_ptr<const Registry> Server::make_registry(const std::vector<Service>& statics) const {
    std::vector<Service> all = statics;
    for (Service& s : backend_->services(statics, store_.registrations())) {
        all.push_back(std::move(s));
    }
    // Services keep their counts across reloads and registrations.
    return std::make_shared<const Registry>(std::move(all), registry_.get());
}

void Server::load_state() {
    const std::string& path = config_.state_file;
    StateLoad loaded = read_state_file(path, WallClock::now());
    if (loaded.error) {
        std::string error;
        auto moved = move_aside(path, error);
        log::err("state file " + path + " is corrupt (" + *loaded.error + "); " +
                 (moved ? "moved aside to " + *moved
                        : "could not move it aside: " + error +
                              "; it will be overwritten on the "
                              "next change") +
                 "; starting without dynamic registrations");
        return;
    }
    auto change = store_.load(std::move(loaded.registrations), config_.services, WallClock::now());
    // Owners that exited (or a reboot) while the daemon was stopped.
    for (const OwnerProcess& owner : store_.owners()) {
        if (auto why = OwnerWatch::gone(owner)) {
            auto dropped = store_.owner_exited(owner.pid);
            for (auto& removed : dropped.removed) {
                log::notice("registration \"" + removed.registration.service.name +
                            "\" from the state file dropped: its owner process " +
                            std::to_string(owner.pid) + " is gone (" + *why + ")");
            }
            change.changed = change.changed || dropped.changed;
            change.next_deadline = dropped.next_deadline;
        }
    }
    for (const auto& removed : change.removed) {
        const std::string& name = removed.registration.service.name;
        if (removed.cause == RegistrationStore::Cause::conflict) {
            log::warning("registration \"" + name +
                         "\" from the state file dropped: " + removed.conflict);
        } else {
            log::notice("registration \"" + name + "\" expired while stopped, dropped");
        }
    }
    watch_owners();
    backend_->own_changed(store_.registrations());
    if (!loaded.missing) {
        log::notice("state file " + path + ": " + std::to_string(store_.size()) +
                    " dynamic registrations");
    }
    publish(make_registry(config_.services));
    if (change.changed) {
        if (auto error = persist()) {
            log::err("state file: " + *error);
        }
    }
}

std::optional<std::string> Server::persist() {
    auto error = write_state_file(config_.state_file, store_.registrations());
    if (error) {
        ++state_write_errors_;
    }
    return error;
}

void Server::arm_lease_timer(std::optional<WallClock::time_point> deadline) {
    if (stopping_) {
        return;
    }
    if (!deadline) {
        lease_timer_.cancel();
        return;
    }
    // Re-checked at least once a minute in case the wall clock jumps.
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - WallClock::now());
    wait = std::clamp(wait, std::chrono::milliseconds(0), std::chrono::milliseconds(60'000));
    lease_timer_.expires_after(wait + std::chrono::milliseconds(1));
    lease_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (ec || stopping_) {
            return;
        }
        expire_leases();
    });
}

void Server::log_removed(const RegistrationStore::Change& change, std::string_view context) {
    for (const auto& removed : change.removed) {
        const std::string& name = removed.registration.service.name;
        switch (removed.cause) {
            case RegistrationStore::Cause::conflict:
                log::warning(std::string(context) + "registration \"" + name +
                             "\" removed: " + removed.conflict);
                break;
            case RegistrationStore::Cause::owner_exited:
                log::notice("registration \"" + name + "\" removed: its owner process " +
                            std::to_string(removed.registration.process->pid) + " exited");
                break;
            case RegistrationStore::Cause::lease_expired:
                log::notice("registration \"" + name + "\" lease expired, removed");
                break;
        }
    }
}

void Server::apply_change(const RegistrationStore::Change& change, std::string_view context) {
    log_removed(change, context);
    if (!change.changed) {
        return;
    }
    watch_owners();
    backend_->own_changed(store_.registrations());
    publish(make_registry(config_.services));
    if (auto error = persist()) {
        log::err("state file: " + *error);
    }
}

void Server::owner_exited(std::int64_t pid) {
    if (stopping_) {
        return;
    }
    const auto change = store_.owner_exited(pid);
    apply_change(change, "");
    arm_lease_timer(change.next_deadline);
}

void Server::expire_leases() {
    const auto change = store_.expire(WallClock::now());
    apply_change(change, "");
    arm_lease_timer(change.next_deadline);
}

}  // namespace pmd::io
