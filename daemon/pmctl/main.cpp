// SPDX-License-Identifier: Apache-2.0
// sdp-pmctl: the sdp-pmd admin tool. Talks to the daemon's control socket
// (docs/control-protocol.md), validates configuration files without a
// daemon, and asks a Port Mapper for a mapping as a PM client would
// (libpmclient), printing the reply like dig.
//
// Exit codes (docs/sdp-pmctl.md): 0 ok, 1 refused by the daemon (error, not
// found, conflict) or PMDeny, 2 usage, 3 daemon unreachable or no PM reply,
// 4 permission denied.
#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "daemon/config/config.hpp"
#include "pmclient/pm_time.hpp"
#include "pmclient/resolver.hpp"
#include "pmctl/client.hpp"
#include "pmctl/commands.hpp"

namespace po = boost::program_options;
using nlohmann::json;

namespace {

constexpr int kExitOk = 0;
constexpr int kExitRefused = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnreachable = 3;
constexpr int kExitDenied = 4;

// Where the daemon is and how long to wait for it.
struct Target {
    std::string socket;
    std::chrono::milliseconds timeout;
};

struct Failure {
    int code;
    std::string message;
};

[[noreturn]] void fail(int code, const std::string& message) {
    throw Failure{code, message};
}

// sdp-pmctl's own commands, next to those of the daemon (pmctl::kCommands).
struct LocalCommand {
    std::string_view usage;
    std::string_view summary;
};
constexpr LocalCommand kLocalCommands[] = {
    {"check-config FILE", "validate a configuration file (no daemon needed)"},
    {"query HOST[:PORT] --service IP:PORT [--from IP:PORT] [--timeout DURATION]",
     "ask a Port Mapper, print the reply and its RTT"},
};

// Every command word sdp-pmctl takes.
std::vector<std::string> command_words() {
    std::vector<std::string> out;
    for (const auto& c : pmctl::kCommands) {
        const std::string word(pmctl::cli_word(c.usage));
        if (!word.empty() && std::find(out.begin(), out.end(), word) == out.end()) {
            out.push_back(word);
        }
    }
    for (const auto& c : kLocalCommands) {
        out.emplace_back(pmctl::cli_word(c.usage));
    }
    return out;
}

std::string usage_text() {
    std::string out =
        "Usage: sdp-pmctl [--socket PATH] [--json] COMMAND [ARGS]\n"
        "\n"
        "Commands:\n";
    for (const auto& c : pmctl::kCommands) {
        if (!c.usage.empty()) {
            out += pmctl::help_line(c.usage, c.summary);
        }
    }
    for (const auto& c : kLocalCommands) {
        out += pmctl::help_line(c.usage, c.summary);
    }
    out +=
        "\n"
        "Exit codes: 0 ok, 1 refused or not found (PMDeny for query), 2 usage,\n"
        "3 daemon unreachable (no reply for query), 4 permission denied.\n";
    return out;
}

// --- the control socket --------------------------------------------------------

// The daemon's reply, or the failure as an exit code.
pmctl::Reply call(const Target& target, std::string_view command, const json& arguments = nullptr) {
    pmctl::Answer a = pmctl::call(target.socket, command, arguments, target.timeout);
    if (!a.ok()) {
        switch (a.error().code) {
            case pmctl::Errc::invalid_request:
                fail(kExitUsage, a.error().message);
            case pmctl::Errc::permission_denied:
                fail(kExitDenied, a.error().message);
            case pmctl::Errc::unreachable:
                break;
        }
        fail(kExitUnreachable, a.error().message);
    }
    return a.reply();
}

int exit_for_result(int result) {
    switch (result) {
        case 0:
            return kExitOk;
        case 2:
            return kExitUsage;
        case 5:
            return kExitDenied;
        default:
            return kExitRefused;
    }
}

// --- output -------------------------------------------------------------------

std::string text_of(const json& v) {
    if (v.is_null()) {
        return "-";
    }
    if (v.is_string()) {
        return v.get<std::string>();
    }
    if (v.is_array()) {
        std::string out;
        for (const auto& e : v) {
            if (!out.empty()) {
                out += ',';
            }
            out += text_of(e);
        }
        return out.empty() ? "-" : out;
    }
    if (v.is_number_float()) {
        std::ostringstream os;
        os << std::fixed << std::setprecision(1) << v.get<double>();
        return os.str();
    }
    return v.dump();
}

void print_table(const std::vector<std::string>& head,
                 const std::vector<std::vector<std::string>>& rows) {
    std::vector<std::size_t> width(head.size());
    for (std::size_t i = 0; i < head.size(); ++i) {
        width[i] = head[i].size();
        for (const auto& r : rows) {
            width[i] = std::max(width[i], r[i].size());
        }
    }
    auto line = [&](const std::vector<std::string>& cells) {
        std::string out;
        for (std::size_t i = 0; i < cells.size(); ++i) {
            out += cells[i];
            if (i + 1 < cells.size()) {
                out += std::string(width[i] - cells[i].size() + 2, ' ');
            }
        }
        std::cout << out << '\n';
    };
    line(head);
    for (const auto& r : rows) {
        line(r);
    }
}

void print_human(const std::string& command, const json& response) {
    const json& args = response.contains("arguments") ? response["arguments"] : json(nullptr);
    if (command == "services" && args.contains("services")) {
        std::vector<std::vector<std::string>> rows;
        for (const auto& s : args["services"]) {
            std::string lease = s.value("lease_expires_in", json(nullptr)).is_null()
                                    ? "-"
                                    : text_of(s["lease_expires_in"]) + "s";
            std::string live = s.contains("counters")
                                   ? text_of(s["counters"].value("transactions", json(0)))
                                   : "-";
            // Each SDP address's health, in the order of SDP: "up 12s" (state
            // and time since it last changed), "-" when not checked.
            std::string health;
            for (const auto& h : s.value("health", json::array())) {
                std::string one = "-";
                if (h.value("check", "off") != "off") {
                    one = h.value("state", "?");
                    if (h.contains("since_seconds") && h["since_seconds"].is_number()) {
                        one += ' ' + std::to_string(h["since_seconds"].get<long long>()) + 's';
                    }
                }
                health += (health.empty() ? "" : ",") + one;
            }
            // On-demand: the pool and how many of its ports listen now,
            // "127.0.0.1 ports 7001-7004 (1/4 open)".
            std::string sdp = text_of(s["sdp"]);
            std::string kind = s.value("dynamic", false) ? "dynamic" : "static";
            if (const auto od = s.value("on_demand", json(nullptr)); od.is_object()) {
                const std::string ports = od.value("ports", "");
                const auto list = pm::parse_port_list(ports, 65535);
                const std::string first =
                    s["sdp"].is_array() && !s["sdp"].empty() ? text_of(s["sdp"][0]) : "*:0";
                sdp = first.substr(0, first.rfind(':')) + " ports " + ports + " (" +
                      text_of(od.value("listeners", json(0))) + "/" +
                      std::to_string(list ? list->size() : 0) + " open)";
                kind = od.value("single_use", false) ? "on-demand,single-use" : "on-demand";
            }
            rows.push_back({text_of(s["name"]), text_of(s["conventional"]), sdp,
                            health.empty() ? "-" : health, text_of(s["policy"]),
                            pm::pm_time_to_string(s.value("pm_time", std::uint8_t{0})), kind,
                            s.value("owner", json(nullptr)).is_null() || text_of(s["owner"]).empty()
                                ? "-"
                                : text_of(s["owner"]),
                            s.value("pid", json(nullptr)).is_null() ? "-" : text_of(s["pid"]),
                            lease, live});
        }
        print_table({"NAME", "CONVENTIONAL", "SDP", "HEALTH", "POLICY", "PM_TIME", "KIND", "OWNER",
                     "PID", "LEASE", "LIVE"},
                    rows);
        return;
    }
    if (command == "transactions" && args.contains("transactions")) {
        std::vector<std::vector<std::string>> rows;
        for (const auto& t : args["transactions"]) {
            rows.push_back({text_of(t["service"]), text_of(t["client"]), text_of(t["conventional"]),
                            text_of(t["sdp"]), text_of(t["assoc_handle"]),
                            text_of(t["expires_in_ms"]) + "ms"});
        }
        print_table({"SERVICE", "CLIENT", "CONVENTIONAL", "SDP", "ASSOC_HANDLE", "EXPIRES"}, rows);
        std::cout << text_of(args["total"]) << " transactions\n";
        return;
    }
    if ((command == "status" || command == "stats") && args.is_object()) {
        std::size_t w = 0;
        for (const auto& item : args.items()) {
            w = std::max(w, item.key().size());
        }
        for (const auto& item : args.items()) {
            std::string value =
                item.value().is_number_float() && command == "stats"
                    ? std::to_string(static_cast<long long>(item.value().get<double>()))
                    : text_of(item.value());
            std::cout << item.key() << ':' << std::string(w - item.key().size() + 1, ' ') << value
                      << '\n';
        }
        return;
    }
    if (command == "cluster" && args.is_object()) {
        std::cout << "backend: " << text_of(args.value("backend", json("?"))) << '\n';
        if (args.value("backend", "") != "etcd") {
            return;
        }
        std::cout << "member: " << text_of(args["member"])
                  << "\nprefix: " << text_of(args["prefix"]) << "\nserving: "
                  << (args.value("fresh", false) ? "yes" : "no (etcd silent too long)")
                  << "\nlast etcd answer: "
                  << (args["since_contact_ms"].is_null()
                          ? std::string("never")
                          : text_of(args["since_contact_ms"]) + " ms ago")
                  << "\nview current: "
                  << (args.value("view_age_ms", json(nullptr)).is_null()
                          ? std::string("never")
                          : text_of(args["view_age_ms"]) + " ms ago")
                  << "\nrevision: " << text_of(args["revision"])
                  << "\nlease: " << text_of(args["lease"]) << " (ttl "
                  << text_of(args["lease_ttl_s"])
                  << " s)\nown registrations: " << text_of(args["own_written"]) << '/'
                  << text_of(args["own"]) << " written\nconflicts: " << text_of(args["conflicts"])
                  << "\n\n";
        std::vector<std::vector<std::string>> rows;
        for (const auto& e : args.value("endpoints", json::array())) {
            const bool healthy = e.value("healthy", false);
            rows.push_back({text_of(e["endpoint"]), healthy ? "healthy" : "unhealthy",
                            healthy ? text_of(e["version"]) : "-",
                            healthy ? (e.value("leader", false) ? "leader" : "follower") : "-",
                            healthy ? text_of(e["revision"]) : "-",
                            healthy ? text_of(e["latency_ms"]) + " ms" : text_of(e["error"])});
        }
        print_table({"ENDPOINT", "HEALTH", "VERSION", "ROLE", "REVISION", "LATENCY/ERROR"}, rows);
        std::cout << '\n';
        rows.clear();
        const json members = args.value("members", json::object());
        for (const auto& item : members.items()) {
            rows.push_back({item.key(), text_of(item.value())});
        }
        print_table({"REPLICA", "KEYS"}, rows);
        return;
    }
    if (command == "register" && args.is_object()) {
        std::cout << response.value("text", "") << ": " << text_of(args["conventional"]) << " -> "
                  << text_of(args["sdp"]) << '\n';
        return;
    }
    std::cout << response.value("text", "ok") << '\n';
}

// --- query (PM client) ----------------------------------------------------------

pm::Endpoint parse_pmsp(const std::string& text) {
    if (auto ep = pm::Endpoint::parse(text)) {
        return *ep;
    }
    if (auto ip = pm::IpAddress::parse(text)) {
        return pm::Endpoint{*ip, pm::kDefaultPort};
    }
    if (text.size() > 2 && text.front() == '[' && text.back() == ']') {
        if (auto ip = pm::IpAddress::parse(text.substr(1, text.size() - 2))) {
            return pm::Endpoint{*ip, pm::kDefaultPort};
        }
    }
    fail(kExitUsage, "bad PMSP address \"" + text + "\" (expected IP or IP:PORT)");
}

int run_query(const po::variables_map& vm, bool as_json) {
    if (!vm.count("operand") || vm["operand"].as<std::vector<std::string>>().size() != 1) {
        fail(kExitUsage, "query needs exactly one HOST[:PORT]");
    }
    const pm::Endpoint pmsp = parse_pmsp(vm["operand"].as<std::vector<std::string>>()[0]);
    if (!vm.count("service")) {
        fail(kExitUsage, "query needs --service IP:PORT (the Conventional Address)");
    }
    const std::string service_text = vm["service"].as<std::string>();
    auto conventional = pm::Endpoint::parse(service_text);
    if (!conventional || conventional->port == 0) {
        fail(kExitUsage, "bad --service address \"" + service_text + "\" (expected IP:PORT)");
    }
    pm::Endpoint cp{pm::IpAddress::any(conventional->address.family()), 0};
    if (vm.count("from")) {
        auto from = pm::Endpoint::parse(vm["from"].as<std::string>());
        if (!from || from->port == 0) {
            fail(kExitUsage,
                 "bad --from address \"" + vm["from"].as<std::string>() + "\" (expected IP:PORT)");
        }
        cp = *from;
    } else {
        std::random_device rd;
        cp.port = static_cast<std::uint16_t>(32768 + rd() % 28232);
    }
    std::chrono::milliseconds deadline{3000};
    if (vm.count("timeout")) {
        auto d = pmd::parse_duration(vm["timeout"].as<std::string>());
        if (!d || *d < std::chrono::milliseconds(1) || *d > std::chrono::minutes(10)) {
            fail(kExitUsage, "bad --timeout \"" + vm["timeout"].as<std::string>() +
                                 "\" (a duration from 1ms to 10m, e.g. 3s)");
        }
        deadline = *d;
    }
    pmclient::ResolverOptions options;
    options.read_environment = false;
    options.cache_capacity = 0;
    options.defaults.pmsp = pmsp;
    options.defaults.use_cache = false;
    options.defaults.deadline = deadline;
    options.strict_source = true;
    pmclient::Result r;
    try {
        r = pmclient::resolve(pmclient::ResolveRequest{*conventional, cp, std::nullopt}, options);
    } catch (const std::exception& e) {
        fail(kExitUsage, std::string("query: ") + e.what());
    }
    const double rtt_ms = static_cast<double>(r.rtt.count()) / 1000.0;
    int code = kExitOk;
    switch (r.kind) {
        case pmclient::ResultKind::accepted:
            code = kExitOk;
            break;
        case pmclient::ResultKind::denied:
            code = kExitRefused;
            break;
        case pmclient::ResultKind::timeout:
            code = kExitUnreachable;
            break;
        case pmclient::ResultKind::error:
            code = r.error == pmclient::Errc::invalid_argument ? kExitUsage : kExitUnreachable;
            break;
    }
    char handle[19];
    std::snprintf(handle, sizeof handle, "0x%016llx",
                  static_cast<unsigned long long>(r.assoc_handle));
    if (as_json) {
        json j{{"result", std::string(pmclient::to_string(r.kind))},
               {"pmsp", r.pmsp.to_string()},
               {"conventional", conventional->to_string()},
               {"from", cp.to_string()},
               {"assoc_handle", handle},
               {"attempts", r.attempts},
               {"rtt_ms", rtt_ms}};
        if (r.accepted()) {
            j["sdp"] = r.sdp.to_string();
            j["pm_time"] = r.pm_time;
            j["lifetime"] = pm::pm_time_to_string(r.pm_time);
        }
        if (!r.reason.empty()) {
            j["reason"] = r.reason;
        }
        std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
    } else {
        std::cout << ";; PMReq for " << conventional->to_string() << " from CpIPAddr/CpPort "
                  << cp.to_string() << " to PMSP " << r.pmsp.to_string() << '\n';
        switch (r.kind) {
            case pmclient::ResultKind::accepted:
                std::cout << ";; ANSWER: PMAccept\n"
                          << "SDP address:  " << r.sdp.to_string() << '\n'
                          << "PmTime:       " << unsigned{r.pm_time} << " ("
                          << pm::pm_time_to_string(r.pm_time) << ")\n"
                          << "AssocHandle:  " << handle << '\n';
                break;
            case pmclient::ResultKind::denied:
                std::cout << ";; ANSWER: PMDeny\n"
                          << "AssocHandle:  " << handle << '\n';
                break;
            default:
                std::cout << ";; NO ANSWER: " << pmclient::to_string(r.kind)
                          << (r.reason.empty() ? "" : " (" + r.reason + ")") << '\n';
                break;
        }
        std::cout << ";; Query time: " << std::fixed << std::setprecision(3) << rtt_ms << " ms, "
                  << r.attempts << " PMReq sent\n";
    }
    if (code == kExitUnreachable) {
        std::cerr << "sdp-pmctl: no answer from " << r.pmsp.to_string()
                  << (r.reason.empty() ? "" : ": " + r.reason) << '\n';
    } else if (code == kExitUsage) {
        std::cerr << "sdp-pmctl: " << (r.reason.empty() ? "bad query" : r.reason) << '\n';
    }
    return code;
}

// --- check-config ---------------------------------------------------------------

int run_check_config(const po::variables_map& vm, bool as_json) {
    if (!vm.count("operand") || vm["operand"].as<std::vector<std::string>>().size() != 1) {
        fail(kExitUsage, "check-config needs exactly one FILE");
    }
    const std::string path = vm["operand"].as<std::vector<std::string>>()[0];
    pmd::ConfigResult loaded = pmd::load_config_file(path);
    if (const auto* e = std::get_if<pmd::ConfigError>(&loaded)) {
        if (as_json) {
            std::cout << json{{"valid", false},
                              {"file", e->file},
                              {"line", e->line},
                              {"key", e->key},
                              {"message", e->message}}
                             .dump(2, ' ', false, json::error_handler_t::replace)
                      << '\n';
        }
        std::cerr << e->to_string() << '\n';
        return kExitRefused;
    }
    const auto& c = std::get<pmd::Config>(loaded);
    if (as_json) {
        std::cout << json{{"valid", true}, {"file", path}, {"services", c.services.size()}}.dump(2)
                  << '\n';
    } else {
        std::cout << path << ": OK, " << c.services.size() << " services\n";
    }
    return kExitOk;
}

// --- the daemon commands --------------------------------------------------------

int run_daemon_command(const std::string& command, const po::variables_map& vm, bool as_json,
                       const Target& target) {
    const std::vector<std::string> operands = vm.count("operand")
                                                  ? vm["operand"].as<std::vector<std::string>>()
                                                  : std::vector<std::string>{};
    std::string wire = command;
    json args = nullptr;
    if (command == "register") {
        if (operands.size() < 3) {
            fail(kExitUsage,
                 "register needs NAME CONVENTIONAL SDP... (e.g. web 192.0.2.1:80 "
                 "192.0.2.1:8080)");
        }
        args = json{{"name", operands[0]},
                    {"conventional", operands[1]},
                    {"sdp", std::vector<std::string>(operands.begin() + 2, operands.end())}};
        for (const char* key : {"policy", "lease", "owner"}) {
            if (vm.count(key)) {
                args[key] = vm[key].as<std::string>();
            }
        }
        if (vm.count("pm-time")) {
            args["pm_time"] = vm["pm-time"].as<std::string>();
        }
        if (vm.count("allow")) {
            args["allow"] = vm["allow"].as<std::vector<std::string>>();
        }
        if (vm.count("pid")) {
            args["pid"] = vm["pid"].as<std::int64_t>();
        }
        if (vm.count("health-check")) {
            args["health"] = json{{"check", vm["health-check"].as<std::string>()}};
        }
    } else if (command == "unregister") {
        if (operands.size() != 1) {
            fail(kExitUsage, "unregister needs exactly one NAME");
        }
        args = json{{"name", operands[0]}};
    } else {
        if (!operands.empty()) {
            fail(kExitUsage, command + " takes no operand (\"" + operands[0] + "\")");
        }
        if (command == "transactions" && vm.count("limit")) {
            args = json{{"limit", vm["limit"].as<unsigned>()}};
        }
        if (command == "stats" && vm.count("reset")) {
            wire = "stats-reset";
        }
    }
    const pmctl::Reply reply = call(target, wire, args);
    const json& response = reply.document;
    const int result = reply.result;
    if (as_json) {
        std::cout << response.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
    } else if (result == 0) {
        print_human(command, response);
    }
    if (result != 0) {
        std::string text = response.value("text", "error");
        std::cerr << "sdp-pmctl: " << text << '\n';
    }
    return exit_for_result(result);
}

}  // namespace

int main(int argc, char** argv) {
    try {
        po::options_description global("Options");
        // clang-format off
        global.add_options()
            ("socket,s", po::value<std::string>()->value_name("PATH"),
             "control socket (default /run/sdp-pmd/control.sock, or $SDP_PMD_SOCKET)")
            ("json,j", "machine-readable JSON output")
            ("timeout", po::value<std::string>()->value_name("DURATION"),
             "how long to wait for an answer (default 10s; query: 3s)")
            ("help,h", "print this help and exit")
            ("version,V", "print the version and exit");
        po::options_description specific("Command options");
        specific.add_options()
            ("policy", po::value<std::string>()->value_name("P"), "register: first, round-robin or hash")
            ("pm-time", po::value<std::string>()->value_name("T"),
             "register: single-use, permanent, a duration or a byte")
            ("allow", po::value<std::vector<std::string>>()->value_name("PREFIX"),
             "register: allowed client prefix (repeatable)")
            ("lease", po::value<std::string>()->value_name("DURATION"),
             "register: expire unless renewed within DURATION")
            ("owner", po::value<std::string>()->value_name("TEXT"), "register: free text")
            ("pid", po::value<std::int64_t>()->value_name("PID"),
             "register: remove the mapping when process PID exits")
            ("health-check", po::value<std::string>()->value_name("C"),
             "register: listener, connect or off (default: the daemon's health:)")
            ("limit", po::value<unsigned>()->value_name("N"), "transactions: at most N")
            ("reset", "stats: reset the counters")
            ("service", po::value<std::string>()->value_name("IP:PORT"),
             "query: the Conventional Address asked for")
            ("from", po::value<std::string>()->value_name("IP:PORT"),
             "query: CpIPAddr and CpPort (default: any address, a random port)");
        po::options_description hidden;
        hidden.add_options()
            ("command", po::value<std::string>())
            ("operand", po::value<std::vector<std::string>>());
        // clang-format on
        po::options_description all;
        all.add(global).add(specific).add(hidden);
        po::positional_options_description pos;
        pos.add("command", 1).add("operand", -1);

        po::variables_map vm;
        try {
            po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
            po::notify(vm);
        } catch (const po::error& e) {
            std::cerr << "sdp-pmctl: " << e.what() << " (try 'sdp-pmctl --help')\n";
            return kExitUsage;
        }
        if (vm.count("help")) {
            std::cout << usage_text() << '\n' << global << '\n' << specific;
            return kExitOk;
        }
        if (vm.count("version") && !vm.count("command")) {
            std::cout << "sdp-pmctl " << SDPPM_VERSION << '\n';
            return kExitOk;
        }
        if (!vm.count("command")) {
            std::cerr << "sdp-pmctl: missing command (try 'sdp-pmctl --help')\n";
            return kExitUsage;
        }
        const std::string command = vm["command"].as<std::string>();
        const bool as_json = vm.count("json") > 0;

        // Options that belong to another command are usage errors.
        struct Allowed {
            const char* option;
            std::vector<std::string> commands;
        };
        const std::vector<Allowed> allowed = {
            {"policy", {"register"}},       {"pm-time", {"register"}},   {"allow", {"register"}},
            {"lease", {"register"}},        {"owner", {"register"}},     {"pid", {"register"}},
            {"health-check", {"register"}}, {"limit", {"transactions"}}, {"reset", {"stats"}},
            {"service", {"query"}},         {"from", {"query"}},
        };
        const std::vector<std::string> words = command_words();
        if (std::find(words.begin(), words.end(), command) == words.end()) {
            std::cerr << "sdp-pmctl: unknown command \"" << command
                      << "\" (try 'sdp-pmctl --help')\n";
            return kExitUsage;
        }
        for (const auto& a : allowed) {
            if (vm.count(a.option) &&
                std::find(a.commands.begin(), a.commands.end(), command) == a.commands.end()) {
                std::cerr << "sdp-pmctl: --" << a.option << " does not apply to " << command
                          << '\n';
                return kExitUsage;
            }
        }

        if (command == "check-config") {
            return run_check_config(vm, as_json);
        }
        if (command == "query") {
            return run_query(vm, as_json);
        }

        std::string socket = pmctl::kDefaultSocket;
        if (const char* env = std::getenv("SDP_PMD_SOCKET"); env && *env) {
            socket = env;
        }
        if (vm.count("socket")) {
            socket = vm["socket"].as<std::string>();
        }
        std::chrono::milliseconds timeout{10'000};
        if (vm.count("timeout")) {
            auto d = pmd::parse_duration(vm["timeout"].as<std::string>());
            if (!d || d->count() < 1 || *d > std::chrono::hours(1)) {
                fail(kExitUsage, "bad --timeout \"" + vm["timeout"].as<std::string>() +
                                     "\" (a duration from 1ms to 1h, e.g. 10s)");
            }
            timeout = *d;
        }
        const Target target{socket, timeout};
        if (command == "version") {
            const json response = call(target, "version").document;
            if (as_json) {
                std::cout << response.dump(2) << '\n';
            } else {
                std::cout << "sdp-pmctl " << SDPPM_VERSION << "\nsdp-pmd "
                          << text_of(response.value("arguments", json::object())
                                         .value("version", json(nullptr)))
                          << '\n';
            }
            const int result = response["result"].get<int>();
            if (result != 0) {
                std::cerr << "sdp-pmctl: " << response.value("text", "error") << '\n';
            }
            return exit_for_result(result);
        }
        return run_daemon_command(command, vm, as_json, target);
    } catch (const Failure& f) {
        std::cerr << "sdp-pmctl: " << f.message << '\n';
        return f.code;
    } catch (const std::exception& e) {
        std::cerr << "sdp-pmctl: " << e.what() << '\n';
        return kExitRefused;
    }
}
