// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/state_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "daemon/config/config.hpp"
#include "pmclient/address.hpp"
#include "pmclient/pm_time.hpp"

namespace pmd::io {

using nlohmann::json;

namespace {

constexpr std::size_t kMaxStateSize = 64 * 1024 * 1024;

std::string errno_text(int err) {
    return std::generic_category().message(err);
}

// A string argument; error when present with another type.
bool get_string(const json& args, const char* key, std::optional<std::string>& out,
                std::string& error) {
    auto it = args.find(key);
    if (it == args.end() || it->is_null()) {
        return true;
    }
    if (!it->is_string()) {
        error = std::string(key) + ": expected a string";
        return false;
    }
    out = it->get<std::string>();
    return true;
}

bool get_string_list(const json& args, const char* key,
                     std::optional<std::vector<std::string>>& out, std::string& error) {
    auto it = args.find(key);
    if (it == args.end() || it->is_null()) {
        return true;
    }
    if (it->is_string()) {  // a single address is a list of one
        out = std::vector<std::string>{it->get<std::string>()};
        return true;
    }
    if (!it->is_array()) {
        error = std::string(key) + ": expected a list of strings";
        return false;
    }
    out.emplace();
    for (std::size_t i = 0; i < it->size(); ++i) {
        const json& v = (*it)[i];
        if (!v.is_string()) {
            error = std::string(key) + "[" + std::to_string(i) + "]: expected a string";
            return false;
        }
        out->push_back(v.get<std::string>());
    }
    return true;
}

bool printable(std::string_view s) {
    for (unsigned char c : s) {
        if (c < 0x20 || c == 0x7f) {
            return false;
        }
    }
    return true;
}

// `on_demand`: {"ports": "7001-7004" or a list of such strings and port
// numbers, "single_use": false}.
std::variant<OnDemand, std::string> parse_on_demand(const json& j) {
    if (!j.is_object()) {
        return std::string(
            "on_demand: expected an object {\"ports\": \"7001-7004\", \"single_use\": false}");
    }
    OnDemand od;
    for (const auto& [key, value] : j.items()) {
        if (key == "single_use") {
            if (!value.is_boolean()) {
                return std::string("on_demand.single_use: expected true or false");
            }
            od.single_use = value.get<bool>();
        } else if (key != "ports") {
            return "on_demand: unknown key \"" + (printable(key) && key.size() < 64 ? key : "?") +
                   "\"";
        }
    }
    auto ports = j.find("ports");
    if (ports == j.end()) {
        return std::string("on_demand.ports: missing (e.g. \"7001-7004\")");
    }
    const std::string bad = "on_demand.ports: expected \"A-B\", a port, or a list of them (1 to " +
                            std::to_string(kMaxOnDemandPorts) + " ports, none 0)";
    std::vector<json> items;
    if (ports->is_array()) {
        if (ports->empty() || ports->size() > kMaxOnDemandPorts) {
            return bad;
        }
        items.assign(ports->begin(), ports->end());
    } else {
        items.push_back(*ports);
    }
    for (const json& item : items) {
        std::string text;
        if (item.is_number_integer() && item.get<std::int64_t>() >= 0 &&
            item.get<std::int64_t>() <= 65535) {
            text = std::to_string(item.get<std::int64_t>());
        } else if (item.is_string() && item.get<std::string>().size() <= 4096) {
            text = item.get<std::string>();
        } else {
            return bad;
        }
        auto list = pm::parse_port_list(text, kMaxOnDemandPorts);
        if (!list) {
            return bad;
        }
        od.ports.insert(od.ports.end(), list->begin(), list->end());
        if (od.ports.size() > kMaxOnDemandPorts) {
            return bad;
        }
    }
    std::sort(od.ports.begin(), od.ports.end());
    od.ports.erase(std::unique(od.ports.begin(), od.ports.end()), od.ports.end());
    return od;
}

}  // namespace

std::variant<Registration, std::string> parse_registration(const json& args, bool from_state,
                                                           WallClock::time_point now) {
    if (!args.is_object()) {
        return std::string("arguments: expected an object");
    }
    static constexpr std::string_view kKeys[] = {"name",    "conventional", "sdp",      "policy",
                                                 "pm_time", "allow",        "lease",    "owner",
                                                 "pid",     "health",       "on_demand"};
    static constexpr std::string_view kStateKeys[] = {"expires_at", "pid_start_time", "boot_id"};
    for (const auto& [key, value] : args.items()) {
        bool known = std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys) ||
                     (from_state && std::find(std::begin(kStateKeys), std::end(kStateKeys), key) !=
                                        std::end(kStateKeys));
        if (!known) {
            return "unknown argument \"" + (printable(key) && key.size() < 64 ? key : "?") + "\"";
        }
    }
    std::string error;
    std::optional<std::string> name, conventional, policy, pm_time, lease, owner;
    std::optional<std::vector<std::string>> sdp, allow;
    if (!get_string(args, "name", name, error) ||
        !get_string(args, "conventional", conventional, error) ||
        !get_string_list(args, "sdp", sdp, error) || !get_string(args, "policy", policy, error) ||
        !get_string_list(args, "allow", allow, error) || !get_string(args, "lease", lease, error) ||
        !get_string(args, "owner", owner, error)) {
        return error;
    }
    if (auto it = args.find("pm_time"); it != args.end() && !it->is_null()) {
        if (it->is_number_unsigned()) {
            pm_time = std::to_string(it->get<std::uint64_t>());
        } else if (it->is_string()) {
            pm_time = it->get<std::string>();
        } else {
            return std::string("pm_time: expected a string or a number 0-255");
        }
    }
    std::optional<OnDemand> on_demand;
    if (auto it = args.find("on_demand"); it != args.end() && !it->is_null()) {
        if (from_state) {
            // It lives as long as its acceptor's connection: never stored.
            return std::string("on_demand: not kept in the state file");
        }
        auto parsed = parse_on_demand(*it);
        if (auto* e = std::get_if<std::string>(&parsed)) {
            return *e;
        }
        on_demand = std::get<OnDemand>(std::move(parsed));
        if (!sdp) {
            // The address asked for; the port is the pool's.
            sdp = std::vector<std::string>{"*:" + std::to_string(on_demand->ports.front())};
        }
        if (args.contains("health") && !args["health"].is_null()) {
            return std::string(
                "health: not with on_demand (its listeners come and go with the transactions)");
        }
    }
    for (const char* required : {"name", "conventional", "sdp"}) {
        if ((!args.contains(required) || args[required].is_null()) &&
            !(on_demand && std::string_view(required) == "sdp")) {
            return "missing argument \"" + std::string(required) + "\"";
        }
    }
    ServiceFields fields;
    if (on_demand) {
        fields.health = std::vector<std::pair<std::string, std::string>>{{"check", "off"}};
    }
    if (auto it = args.find("health"); it != args.end() && !it->is_null()) {
        // "off", or an object of the config file's health keys, with
        // strings ("500ms", "connect") or whole numbers (rise, fall).
        auto& h = fields.health.emplace();
        if (it->is_string() && *it == "off") {
            h.emplace_back("check", "off");
        } else if (it->is_object() && it->size() <= 5) {
            for (const auto& [key, value] : it->items()) {
                if (value.is_string() && value.get<std::string>().size() <= 32) {
                    h.emplace_back(key, value.get<std::string>());
                } else if (value.is_number_integer() && value.get<std::int64_t>() >= 0) {
                    h.emplace_back(key, std::to_string(value.get<std::int64_t>()));
                } else {
                    return "health." + (printable(key) && key.size() < 64 ? key : "?") +
                           ": expected a string or a whole number";
                }
            }
        } else {
            return std::string(
                "health: expected \"off\" or an object with check, interval, timeout, rise, "
                "fall");
        }
    }
    fields.name = *name;
    fields.conventional = *conventional;
    fields.sdp = *sdp;
    fields.policy = policy;
    fields.pm_time = pm_time;
    fields.allow = allow;
    auto made = make_service(fields, "register");
    if (auto* e = std::get_if<ConfigError>(&made)) {
        return e->key.empty() ? e->message : e->key + ": " + e->message;
    }
    Registration r;
    r.service = std::move(std::get<Service>(made));
    r.service.dynamic = true;
    if (on_demand) {
        if (r.service.pm_time == pm::kPmTimePermanent) {
            return std::string(
                "pm_time: permanent is not for on_demand (a pool port would never be released)");
        }
        r.service.on_demand = std::move(on_demand);
    }
    if (owner) {
        if (owner->size() > kMaxOwner || !printable(*owner)) {
            return "owner: at most " + std::to_string(kMaxOwner) +
                   " bytes without control characters";
        }
        r.owner = *owner;
    }
    if (lease) {
        auto d = parse_duration(*lease);
        if (!d) {
            return std::string("lease: bad duration (use a number and ms, s, m or h, e.g. 30s)");
        }
        if (*d < kMinLease || *d > kMaxLease) {
            return std::string("lease: out of range (1s to 365 days)");
        }
        r.lease = *d;
        r.start_lease(now);
    }
    if (auto it = args.find("pid"); it != args.end() && !it->is_null()) {
        if (!it->is_number_integer() || it->get<std::int64_t>() < 1 ||
            it->get<std::int64_t>() > kMaxPid) {
            return "pid: expected a process ID (1 to " + std::to_string(kMaxPid) + ")" +
                   (from_state ? "" : " or \"peer\"");
        }
        OwnerProcess p;
        p.pid = it->get<std::int64_t>();
        if (from_state) {
            if (auto st = args.find("pid_start_time"); st != args.end() && !st->is_null()) {
                if (!st->is_number_unsigned()) {
                    return std::string("pid_start_time: expected a number of clock ticks");
                }
                p.start_time = st->get<std::uint64_t>();
            }
            if (auto b = args.find("boot_id"); b != args.end() && !b->is_null()) {
                if (!b->is_string() || b->get<std::string>().size() > 64 ||
                    !printable(b->get<std::string>())) {
                    return std::string("boot_id: expected the kernel's boot ID");
                }
                p.boot_id = b->get<std::string>();
            }
        }
        r.process = std::move(p);
    } else if (from_state && (args.contains("pid_start_time") || args.contains("boot_id"))) {
        return std::string("pid_start_time, boot_id: only with a pid");
    }
    if (from_state) {
        auto it = args.find("expires_at");
        if (it != args.end() && !it->is_null()) {
            if (!it->is_number_integer() || !r.lease) {
                return std::string("expires_at: expected a number of milliseconds, with a lease");
            }
            r.expires = WallClock::time_point(std::chrono::milliseconds(it->get<std::int64_t>()));
        }
    }
    return r;
}

json service_json(const Service& s) {
    ServiceFields f = service_fields(s);
    json j;
    j["name"] = f.name;
    j["conventional"] = f.conventional;
    j["sdp"] = f.sdp;
    j["policy"] = *f.policy;
    j["pm_time"] = s.pm_time;
    j["allow"] = f.allow ? *f.allow : std::vector<std::string>{};
    j["dynamic"] = s.dynamic;
    if (s.on_demand) {
        j["on_demand"] = json{{"ports", pm::port_list_text(s.on_demand->ports)},
                              {"single_use", s.on_demand->single_use}};
    }
    return j;
}

json registration_json(const Registration& r, WallClock::time_point now) {
    json j = service_json(r.service);
    j["owner"] = r.owner;
    j["pid"] = r.process ? json(r.process->pid) : json(nullptr);
    if (r.expires) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*r.expires - now);
        j["lease_expires_in"] = std::max<double>(0.0, static_cast<double>(left.count()) / 1000.0);
    } else {
        j["lease_expires_in"] = nullptr;
    }
    return j;
}

json registration_entry(const Registration& r) {
    json j;
    ServiceFields f = service_fields(r.service);
    j["name"] = f.name;
    j["conventional"] = f.conventional;
    j["sdp"] = f.sdp;
    j["policy"] = *f.policy;
    j["pm_time"] = r.service.pm_time;
    if (f.allow) {
        j["allow"] = *f.allow;
    }
    if (f.health) {
        json h = json::object();
        for (const auto& [key, value] : *f.health) {
            h[key] = value;
        }
        j["health"] = std::move(h);
    }
    if (!r.owner.empty()) {
        j["owner"] = r.owner;
    }
    if (r.process) {
        j["pid"] = r.process->pid;
        if (r.process->start_time) {
            j["pid_start_time"] = *r.process->start_time;
        }
        if (!r.process->boot_id.empty()) {
            j["boot_id"] = r.process->boot_id;
        }
    }
    if (r.lease && r.expires) {
        j["lease"] = std::to_string(r.lease->count()) + "ms";
        j["expires_at"] =
            std::chrono::duration_cast<std::chrono::milliseconds>(r.expires->time_since_epoch())
                .count();
    }
    return j;
}

std::string state_text(std::span<const Registration> registrations) {
    json list = json::array();
    for (const Registration& r : registrations) {
        if (r.service.on_demand) {
            continue;  // lives as long as its acceptor's control connection
        }
        list.push_back(registration_entry(r));
    }
    json doc;
    doc["version"] = 1;
    doc["registrations"] = std::move(list);
    return doc.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

StateLoad parse_state(const std::string& text, WallClock::time_point now) {
    StateLoad out;
    json doc = json::parse(text, nullptr, false);
    if (doc.is_discarded()) {
        out.error = "not valid JSON (torn or corrupt)";
        return out;
    }
    if (!doc.is_object() || !doc.contains("version") || doc["version"] != 1 ||
        !doc.contains("registrations") || !doc["registrations"].is_array()) {
        out.error =
            "not a version 1 state file (expected {\"version\": 1, \"registrations\": [...]})";
        return out;
    }
    const json& list = doc["registrations"];
    if (list.size() > kMaxRegistrations) {
        out.error = "more than " + std::to_string(kMaxRegistrations) + " registrations";
        return out;
    }
    for (std::size_t i = 0; i < list.size(); ++i) {
        auto parsed = parse_registration(list[i], true, now);
        if (auto* e = std::get_if<std::string>(&parsed)) {
            out.error = "registrations[" + std::to_string(i) + "]: " + *e;
            out.registrations.clear();
            return out;
        }
        out.registrations.push_back(std::move(std::get<Registration>(parsed)));
    }
    return out;
}

StateLoad read_state_file(const std::string& path, WallClock::time_point now) {
    StateLoad out;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            out.missing = true;
        } else {
            out.error = "cannot open: " + errno_text(errno);
        }
        return out;
    }
    std::string text;
    char buf[65536];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            out.error = "cannot read: " + errno_text(errno);
            ::close(fd);
            return out;
        }
        if (n == 0) {
            break;
        }
        text.append(buf, static_cast<std::size_t>(n));
        if (text.size() > kMaxStateSize) {
            ::close(fd);
            out.error = "larger than " + std::to_string(kMaxStateSize) + " bytes";
            return out;
        }
    }
    ::close(fd);
    try {
        return parse_state(text, now);
    } catch (const std::exception& e) {
        out.error = std::string("cannot parse: ") + e.what();
        return out;
    }
}

std::optional<std::string> write_state_file(const std::string& path,
                                            std::span<const Registration> registrations) {
    namespace fs = std::filesystem;
    const fs::path target(path);
    const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
        return "cannot create " + dir.string() + ": " + ec.message();
    }
    const std::string text = state_text(registrations);
    const std::string tmp = path + ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0) {
        return "cannot create " + tmp + ": " + errno_text(errno);
    }
    std::size_t off = 0;
    while (off < text.size()) {
        ssize_t n = ::write(fd, text.data() + off, text.size() - off);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            const int err = errno;
            ::close(fd);
            ::unlink(tmp.c_str());
            return "cannot write " + tmp + ": " + errno_text(err);
        }
        off += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0) {
        const int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        return "cannot fsync " + tmp + ": " + errno_text(err);
    }
    ::close(fd);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        return "cannot rename " + tmp + " to " + path + ": " + errno_text(err);
    }
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);  // the rename itself is durable only after this
        ::close(dfd);
    }
    return std::nullopt;
}

std::optional<std::string> move_aside(const std::string& path, std::string& error) {
    std::time_t t = WallClock::to_time_t(WallClock::now());
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &tm);
    std::string target = path + ".corrupt-" + stamp;
    // Never overwrite an earlier corrupt copy from the same second.
    for (int i = 1; ::access(target.c_str(), F_OK) == 0 && i < 100; ++i) {
        target = path + ".corrupt-" + stamp + "." + std::to_string(i);
    }
    if (::rename(path.c_str(), target.c_str()) != 0) {
        error = errno_text(errno);
        return std::nullopt;
    }
    return target;
}

}  // namespace pmd::io
