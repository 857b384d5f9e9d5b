// SPDX-License-Identifier: Apache-2.0
#include "daemon/io/control_handler.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <array>
#include <exception>
#include <memory>
#include <new>
#include <utility>
#include <variant>

#include "daemon/config/config.hpp"

namespace pmd::io {

using nlohmann::json;

namespace {

std::string dump(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Handled answer(const Reply& r, std::string command) {
    json out;
    out["result"] = r.result;
    out["text"] = r.text;
    if (!r.arguments.is_null()) {
        out["arguments"] = r.arguments;
    }
    return Handled{dump(out) + "\n", std::move(command), r.result};
}

Reply error(int result, std::string text) {
    return Reply{result, std::move(text), nullptr};
}

bool only_keys(const json& args, std::initializer_list<std::string_view> keys, Reply& err) {
    for (const auto& item : args.items()) {
        if (std::find(keys.begin(), keys.end(), item.key()) == keys.end()) {
            err = error(kResultError, "unknown argument \"" + shown(item.key()) + "\"");
            return false;
        }
    }
    return true;
}

std::optional<std::string> read_regular_file(const std::string& path, std::string& out) {
    constexpr std::size_t kMax = 16 * 1024 * 1024;
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        return std::string("cannot open: ") + std::strerror(errno);
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        return std::string("not a regular file");
    }
    char buf[65536];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            const int err = errno;
            ::close(fd);
            return std::string("cannot read: ") + std::strerror(err);
        }
        if (n == 0) {
            break;
        }
        out.append(buf, static_cast<std::size_t>(n));
        if (out.size() > kMax) {
            ::close(fd);
            return std::string("file is larger than 16 MiB");
        }
    }
    ::close(fd);
    return std::nullopt;
}

// The channel lines by their key (parse_channel_line).
constexpr std::pair<std::string_view, ChannelMessage::Kind> kChannelKinds[] = {
    {"opened", ChannelMessage::Kind::opened},
    {"failed", ChannelMessage::Kind::failed},
    {"connected", ChannelMessage::Kind::connected},
    {"closed", ChannelMessage::Kind::closed},
};

// --- one handler per command of pmctl::kCommands --------------------------------

using Finish = Done<Reply>;

void run_version(const json&, const Peer&, ControlBackend&, Finish done) {
    done(Reply{kResultOk, "sdp-pmd " SDPPM_VERSION, json{{"version", SDPPM_VERSION}}});
}

void run_status(const json&, const Peer&, ControlBackend& b, Finish done) {
    b.status([done](json j) { done(Reply{kResultOk, "running", std::move(j)}); });
}

void run_services(const json&, const Peer&, ControlBackend& b, Finish done) {
    b.services([done](json s) {
        const std::size_t n = s.size();
        done(Reply{kResultOk, std::to_string(n) + " services", json{{"services", std::move(s)}}});
    });
}

void run_transactions(const json& args, const Peer&, ControlBackend& b, Finish done) {
    Reply bad;
    if (!only_keys(args, {"limit"}, bad)) {
        return done(std::move(bad));
    }
    std::size_t limit = 1000;
    if (args.contains("limit")) {
        if (!args["limit"].is_number_unsigned()) {
            return done(error(kResultError, "limit: expected a number"));
        }
        limit = static_cast<std::size_t>(
            std::min<std::uint64_t>(args["limit"].get<std::uint64_t>(), 1'000'000));
    }
    b.transactions(limit, [done](json t) {
        std::string text = std::to_string(t["total"].get<std::uint64_t>()) + " transactions";
        done(Reply{kResultOk, std::move(text), std::move(t)});
    });
}

void run_stats(const json&, const Peer&, ControlBackend& b, Finish done) {
    b.stats([done](json j) { done(Reply{kResultOk, "counters", std::move(j)}); });
}

void run_stats_reset(const json&, const Peer&, ControlBackend& b, Finish done) {
    b.reset_stats([done] { done(Reply{kResultOk, "counters reset", nullptr}); });
}

void run_reload(const json&, const Peer&, ControlBackend& b, Finish done) {
    b.reload_config(std::move(done));
}

Reply config_test(const json& args, const Peer& peer) {
    Reply bad;
    if (!only_keys(args, {"path"}, bad)) {
        return bad;
    }
    if (!args.contains("path") || !args["path"].is_string()) {
        return error(kResultError, "missing argument \"path\" (a string)");
    }
    const std::string path = args["path"].get<std::string>();
    if (path.empty() || path.find('\0') != std::string::npos || path.size() > 4096) {
        return error(kResultError, "path: bad path");
    }
    // The daemon may read what the caller may not: only files the caller
    // could read itself are tested, so no error message leaks content.
    if (!peer_may_read(path, peer)) {
        return error(kResultDenied, "path: " + shown(path) + " is not readable by the caller");
    }
    // Only regular files: a FIFO or a device must never block the daemon.
    std::string text;
    if (auto why = read_regular_file(path, text)) {
        return error(kResultError, "path: " + shown(path) + ": " + *why);
    }
    ConfigResult loaded = load_config_string(text, path);
    if (const auto* e = std::get_if<ConfigError>(&loaded)) {
        return Reply{kResultError, e->to_string(), json{{"valid", false}}};
    }
    const auto& c = std::get<Config>(loaded);
    return Reply{kResultOk, path + ": OK, " + std::to_string(c.services.size()) + " services",
                 json{{"valid", true}, {"services", c.services.size()}}};
}

void run_config_test(const json& args, const Peer& peer, ControlBackend&, Finish done) {
    done(config_test(args, peer));
}

void run_register(const json& args, const Peer& peer, ControlBackend& b, Finish done) {
    if (!args.is_object()) {
        return done(error(kResultError, "arguments: expected an object"));
    }
    // "pid": "peer" ties the registration to the process asking, as the
    // kernel names it (SO_PEERCRED: right across PID namespaces).
    const json* use = &args;
    json with_pid;
    if (auto it = args.find("pid"); it != args.end() && it->is_string() && *it == "peer") {
        if (peer.pid <= 0) {
            return done(error(kResultError,
                              "pid: \"peer\": the peer's process ID is unknown "
                              "(it is in another PID namespace)"));
        }
        with_pid = args;
        with_pid["pid"] = peer.pid;
        use = &with_pid;
    }
    auto parsed = parse_registration(*use, false, b.wall_now());
    if (auto* e = std::get_if<std::string>(&parsed)) {
        return done(error(kResultError, *e));
    }
    auto& r = std::get<Registration>(parsed);
    if (r.service.on_demand) {
        if (peer.channel.expired()) {
            return done(error(kResultError, "on_demand: needs a control connection kept open"));
        }
        if (r.lease) {
            return done(error(kResultError,
                              "lease: not with on_demand (it lives as long as this connection)"));
        }
        return b.register_on_demand(std::move(r), peer.channel, std::move(done));
    }
    b.register_service(std::move(r), std::move(done));
}

void run_unregister(const json& args, const Peer&, ControlBackend& b, Finish done) {
    Reply bad;
    if (!only_keys(args, {"name"}, bad)) {
        return done(std::move(bad));
    }
    if (!args.contains("name") || !args["name"].is_string()) {
        return done(error(kResultError, "missing argument \"name\" (a string)"));
    }
    b.unregister_service(args["name"].get<std::string>(), std::move(done));
}

void run_cluster(const json&, const Peer&, ControlBackend& b, Finish done) {
    b.cluster([done](json j) { done(Reply{kResultOk, "registry", std::move(j)}); });
}

using Handler = void (*)(const json& args, const Peer& peer, ControlBackend& b, Finish done);

struct Bound {
    std::string_view name;
    Handler run = nullptr;
};

// In the order of pmctl::kCommands, one entry each (checked below): a
// command without a handler, or a handler without a command, does not compile.
constexpr std::array<Bound, pmctl::kCommands.size()> kHandlers{{
    {"status", run_status},
    {"services", run_services},
    {"register", run_register},
    {"unregister", run_unregister},
    {"transactions", run_transactions},
    {"stats", run_stats},
    {"stats-reset", run_stats_reset},
    {"reload", run_reload},
    {"config-test", run_config_test},
    {"version", run_version},
    {"cluster", run_cluster},
}};

constexpr bool handlers_match_commands() {
    for (std::size_t i = 0; i < kHandlers.size(); ++i) {
        if (kHandlers[i].name != pmctl::kCommands[i].name || kHandlers[i].run == nullptr) {
            return false;
        }
    }
    return true;
}
static_assert(handlers_match_commands(),
              "kHandlers must bind a handler to every entry of pmctl::kCommands, in its order");

}  // namespace

std::string shown(std::string_view s, std::size_t max) {
    std::string out;
    for (unsigned char c : s.substr(0, max)) {
        out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
    }
    return out;
}

int json_depth(std::string_view text, int limit) {
    int depth = 0;
    int max = 0;
    bool in_string = false;
    bool escaped = false;
    for (char c : text) {
        if (in_string) {
            if (escaped) {
                escaped = false;
            } else if (c == '\\') {
                escaped = true;
            } else if (c == '"') {
                in_string = false;
            }
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            max = std::max(max, ++depth);
            if (max > limit) {
                return max;
            }
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return max;
}

std::optional<ChannelMessage> parse_channel_line(std::string_view line) {
    try {
        if (!line.empty() && line.back() == '\r') {
            line.remove_suffix(1);
        }
        if (line.size() > 4096 || json_depth(line, 2) > 1) {
            return std::nullopt;
        }
        json j = json::parse(line.begin(), line.end(), nullptr, false);
        if (j.is_discarded() || !j.is_object() || j.size() > 3) {
            return std::nullopt;
        }
        const auto port_of = [](const json& v) -> std::optional<std::uint16_t> {
            if (!v.is_number_unsigned() || v.get<std::uint64_t>() == 0 ||
                v.get<std::uint64_t>() > 65535) {
                return std::nullopt;
            }
            return static_cast<std::uint16_t>(v.get<std::uint64_t>());
        };
        std::optional<ChannelMessage> out;
        std::string_view out_key;
        for (const auto& [name, kind] : kChannelKinds) {
            auto it = j.find(std::string(name));
            if (it == j.end()) {
                continue;
            }
            auto port = port_of(*it);
            if (out || !port) {
                return std::nullopt;  // two kinds in one line, or a bad port
            }
            out = ChannelMessage{kind, *port, 0, {}};
            out_key = name;
        }
        if (!out) {
            return std::nullopt;
        }
        const bool with_id =
            out->kind == ChannelMessage::Kind::opened || out->kind == ChannelMessage::Kind::failed;
        for (const auto& [key, value] : j.items()) {
            if (key == "id" && with_id && value.is_number_unsigned()) {
                out->id = value.get<std::uint64_t>();
            } else if (key == "error" && out->kind == ChannelMessage::Kind::failed &&
                       value.is_string()) {
                out->error = shown(value.get<std::string>(), 200);
            } else if (key != out_key) {
                return std::nullopt;
            }
        }
        if (with_id && !j.contains("id")) {
            return std::nullopt;
        }
        return out;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

bool peer_may_read(const std::string& path, const Peer& peer) {
    if (peer.uid == 0) {
        return true;
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        return false;
    }
    if (st.st_uid == peer.uid) {
        return (st.st_mode & S_IRUSR) != 0;
    }
    const bool in_group = st.st_gid == peer.gid || std::find(peer.groups.begin(), peer.groups.end(),
                                                             st.st_gid) != peer.groups.end();
    if (in_group) {
        return (st.st_mode & S_IRGRP) != 0;
    }
    return (st.st_mode & S_IROTH) != 0;
}

namespace {

// The synchronous part: a refusal or malformed request is answered here;
// otherwise the handler runs and answers through `done`.
std::optional<Handled> dispatch(std::string_view line, const Peer& peer, ControlBackend& backend,
                                const Done<Handled>& done) {
    // Exactly one answer, even when a handler throws after it answered or
    // answers after it threw.
    auto answered = std::make_shared<bool>(false);
    try {
        if (!line.empty() && line.back() == '\r') {
            line.remove_suffix(1);
        }
        if (line.size() > kMaxControlLine) {
            return answer(error(kResultError, "request longer than " +
                                                  std::to_string(kMaxControlLine) + " bytes"),
                          "");
        }
        if (json_depth(line, kMaxControlDepth) > kMaxControlDepth) {
            return answer(error(kResultError, "request nested deeper than " +
                                                  std::to_string(kMaxControlDepth) + " levels"),
                          "");
        }
        json request = json::parse(line.begin(), line.end(), nullptr, false);
        if (request.is_discarded()) {
            return answer(error(kResultError, "bad JSON"), "");
        }
        if (!request.is_object() || !request.contains("command") ||
            !request["command"].is_string()) {
            return answer(
                error(kResultError, "expected {\"command\": \"...\", \"arguments\": {...}}"), "");
        }
        const std::string command = request["command"].get<std::string>();
        for (const auto& item : request.items()) {
            if (item.key() != "command" && item.key() != "arguments") {
                return answer(error(kResultError, "unknown key \"" + shown(item.key()) + "\""),
                              command);
            }
        }
        json args = json::object();
        if (request.contains("arguments") && !request["arguments"].is_null()) {
            if (!request["arguments"].is_object()) {
                return answer(error(kResultError, "arguments: expected an object"), command);
            }
            args = request["arguments"];
        }
        if (peer.access == Access::none) {
            return answer(error(kResultDenied, "permission denied"), command);
        }
        const pmctl::Command* info = pmctl::find_command(command);
        if (info == nullptr) {
            return answer(
                error(kResultUnsupported, "unsupported command \"" + shown(command) + "\""),
                command);
        }
        if (info->access == Access::admin && peer.access != Access::admin) {
            return answer(error(kResultDenied, "permission denied: \"" + command +
                                                   "\" needs root or the admin group"),
                          command);
        }
        const auto index = static_cast<std::size_t>(info - pmctl::kCommands.data());
        kHandlers[index].run(args, peer, backend, [done, command, answered](Reply r) {
            if (std::exchange(*answered, true)) {
                return;
            }
            // May run later from a completion on the main loop, outside the
            // try below: a failure to render is an error reply, not an
            // exception out of io_context::run().
            decltype(answer(r, command)) text;
            try {
                text = answer(r, command);
            } catch (const std::exception& e) {
                text = answer(error(kResultError, std::string("internal error: ") + e.what()),
                              command);
            }
            done(std::move(text));
        });
        return std::nullopt;
    } catch (const std::bad_alloc&) {
        if (std::exchange(*answered, true)) {
            return std::nullopt;
        }
        return answer(error(kResultError, "out of memory"), "");
    } catch (const std::exception& e) {
        if (std::exchange(*answered, true)) {
            return std::nullopt;
        }
        return answer(error(kResultError, std::string("internal error: ") + e.what()), "");
    }
}

}  // namespace

void handle_control_line(std::string_view line, const Peer& peer, ControlBackend& backend,
                         Done<Handled> done) {
    if (auto h = dispatch(line, peer, backend, done)) {
        done(std::move(*h));
    }
}

}  // namespace pmd::io
