// SPDX-License-Identifier: Apache-2.0
// Loads the sdp-pmd YAML configuration into a validated Config.
//
// The loader walks the yaml-cpp node tree itself rather than calling
// Node::as<T>(), so that every error names the file, line and dotted key,
// unknown keys are caught at every level, and no exception leaves
// load_config_*(). The schema is documented in docs/configuration.md.
#include "daemon/config/config.hpp"

#include "daemon/core/cluster.hpp"
#include "daemon/core/registrations.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <span>
#include <system_error>
#include <utility>

#include "pmclient/pm_time.hpp"

namespace pmd {

namespace {

constexpr std::size_t kMaxConfigSize = 16 * 1024 * 1024;
constexpr std::chrono::milliseconds kMinAckTimeout{100};
constexpr std::chrono::milliseconds kMaxAckTimeout = std::chrono::hours{1};
constexpr std::uint64_t kMaxTransactions = 100'000'000;
constexpr std::uint64_t kMaxLogRateLimit = 1'000'000;
constexpr std::size_t kMaxServiceName = 64;

constexpr std::array<std::string_view, 16> kTopLevelKeys = {
    "registry",         "limits",         "listen",       "ack_timeout",
    "max_transactions", "services",       "deny_ap_port", "accept_iwpm_request",
    "log_level",        "log_rate_limit", "control",      "state_file",
    "metrics",          "workers",        "health",       "on_demand_open_timeout",
};
constexpr std::array<std::string_view, 5> kHealthKeys = {"check", "interval", "timeout", "rise",
                                                         "fall"};
constexpr std::chrono::milliseconds kMinHealthInterval{100};
constexpr std::chrono::milliseconds kMaxHealthInterval = std::chrono::hours{1};
constexpr std::chrono::milliseconds kMinHealthTimeout{10};
constexpr std::chrono::milliseconds kMaxHealthTimeout = std::chrono::minutes{1};
constexpr std::uint64_t kMaxHealthCount = 100;
constexpr std::array<std::string_view, 3> kControlKeys = {"socket", "admin_group", "read_group"};
constexpr std::array<std::string_view, 2> kLimitsKeys = {"per_source", "source_quench"};
constexpr std::array<std::string_view, 8> kRegistryKeys = {
    "backend",   "endpoints",     "prefix",          "member",
    "lease_ttl", "max_staleness", "request_timeout", "tls"};
constexpr std::array<std::string_view, 3> kTlsKeys = {"ca", "cert", "key"};
constexpr std::size_t kMaxEtcdEndpoints = 16;
constexpr std::array<std::string_view, 3> kPerSourceKeys = {"rate", "burst", "max_sources"};
constexpr std::array<std::string_view, 4> kQuenchKeys = {"max_unacked", "window", "period",
                                                         "max_sources"};
constexpr std::uint64_t kMaxRate = 100'000'000;
constexpr std::uint64_t kMaxTrackedSources = 10'000'000;
constexpr std::size_t kMaxSocketPath = 107;  // sizeof(sockaddr_un::sun_path) - 1
constexpr std::size_t kMaxGroupName = 256;
constexpr std::array<std::string_view, 7> kServiceKeys = {
    "name", "conventional", "sdp", "policy", "pm_time", "allow", "health",
};

template <class E>
struct Named {
    std::string_view name;
    E value;
};

constexpr std::array<Named<Policy>, 3> kPolicies{{
    {"first", Policy::first},
    {"round-robin", Policy::round_robin},
    {"hash", Policy::hash},
}};
constexpr std::array<Named<RegistryConfig::Backend>, 2> kBackends = {{
    {"local", RegistryConfig::Backend::local},
    {"etcd", RegistryConfig::Backend::etcd},
}};
constexpr std::array<Named<HealthCheck>, 3> kHealthChecks{{
    {"listener", HealthCheck::listener},
    {"connect", HealthCheck::connect},
    {"off", HealthCheck::off},
}};
constexpr std::array<Named<pm::DenyApPort>, 2> kDenyApPorts{{
    {"echo", pm::DenyApPort::echo},
    {"zero", pm::DenyApPort::zero},
}};
constexpr std::array<Named<LogLevel>, 5> kLogLevels{{
    {"error", LogLevel::error},
    {"warning", LogLevel::warning},
    {"notice", LogLevel::notice},
    {"info", LogLevel::info},
    {"debug", LogLevel::debug},
}};

// Where the content of the text lies, by 1-based line: its first line that is
// neither blank, a comment nor a document marker, and the line where a second
// YAML document starts, if any (a "---" after content, or content after a
// "..." end marker). Markers at column 0 are always document boundaries
// (block scalars are indented).
struct DocumentLayout {
    std::optional<int> first_content;
    std::string_view first_content_text;  // that line, without indentation
    std::optional<int> second_document;
};

// "~" or "null" (any usual case), optionally followed by a comment: a document
// that explicitly says "nothing here".
bool is_null_scalar(std::string_view row) {
    auto end = row.find_first_of(" \t\r#");
    auto word = row.substr(0, end);
    if (end != std::string_view::npos &&
        row.find_first_not_of(" \t\r", end) != std::string_view::npos &&
        row[row.find_first_not_of(" \t\r", end)] != '#') {
        return false;
    }
    return word == "~" || word == "null" || word == "Null" || word == "NULL";
}

DocumentLayout scan_documents(std::string_view text) {
    DocumentLayout layout;
    bool started = false;
    bool ended = false;
    int line = 0;
    std::size_t pos = 0;
    while (pos < text.size() && !layout.second_document) {
        ++line;
        auto end = text.find('\n', pos);
        auto row = text.substr(pos, end == std::string_view::npos ? text.npos : end - pos);
        pos = end == std::string_view::npos ? text.size() : end + 1;
        auto is_marker = [&](std::string_view m) {
            return row.rfind(m, 0) == 0 &&
                   (row.size() == 3 || row[3] == ' ' || row[3] == '\t' || row[3] == '\r');
        };
        if (is_marker("---")) {
            if (started || ended) {
                layout.second_document = line;
            }
            started = true;  // the first document starts here
        } else if (is_marker("...")) {
            ended = true;
        } else if (auto first = row.find_first_not_of(" \t\r");
                   first != std::string_view::npos && row[first] != '#') {
            if (ended) {
                layout.second_document = line;
            }
            started = true;
            if (!layout.first_content) {
                layout.first_content = line;
                layout.first_content_text = row.substr(first);
            }
        }
    }
    return layout;
}

// yaml-cpp marks are 0-based; a null mark (no position) becomes line 0.
int line_of(const YAML::Mark& mark) {
    return mark.is_null() || mark.line < 0 ? 0 : mark.line + 1;
}

// A value from the file, quoted for an error message: printable ASCII as is,
// anything else escaped, long values shortened.
std::string quote(std::string_view s) {
    constexpr std::size_t kMaxShown = 80;
    std::string out = "\"";
    for (std::size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c >= 0x20 && c < 0x7f) {
            out += static_cast<char>(c);
        } else {
            constexpr char kHex[] = "0123456789abcdef";
            out += "\\x";
            out += kHex[c >> 4];
            out += kHex[c & 0xf];
        }
    }
    if (s.size() > kMaxShown) {
        out += "...";
    }
    out += '"';
    return out;
}

std::string describe(const YAML::Node& node) {
    switch (node.Type()) {
        case YAML::NodeType::Scalar:
            return quote(node.Scalar());
        case YAML::NodeType::Sequence:
            return "a list";
        case YAML::NodeType::Map:
            return "a map";
        case YAML::NodeType::Null:
        case YAML::NodeType::Undefined:
            break;
    }
    return "nothing";
}

template <class E, std::size_t N>
std::string choices(const std::array<Named<E>, N>& names) {
    std::string out;
    for (std::size_t i = 0; i < N; ++i) {
        if (i > 0) {
            out += i + 1 == N ? " or " : ", ";
        }
        out += names[i].name;
    }
    return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j < row.size(); ++j) {
        row[j] = j;
    }
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diagonal = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
            diagonal = above;
        }
    }
    return row[b.size()];
}

// " (did you mean "policy"?)" for a near miss, else "".
std::string suggestion(std::string_view key, std::span<const std::string_view> known) {
    constexpr std::size_t kMaxDistance = 2;
    if (key.size() > 64) {
        return "";
    }
    for (auto candidate : known) {
        if (edit_distance(key, candidate) <= kMaxDistance) {
            return " (did you mean " + quote(candidate) + "?)";
        }
    }
    return "";
}

std::optional<std::uint64_t> parse_unsigned(std::string_view text) {
    std::uint64_t value = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc{} || ptr != end) {
        return std::nullopt;
    }
    return value;
}

bool all_digits(std::string_view text) {
    return !text.empty() &&
           std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A service address: "*:PORT" (address nullopt) or "a.b.c.d:PORT" / "[v6]:PORT".
struct ServiceAddress {
    std::optional<pm::IpAddress> address;
    std::uint16_t port = 0;
};

std::optional<ServiceAddress> parse_service_address(std::string_view text) {
    if (text.starts_with("*:")) {
        // Let Endpoint::parse judge the port.
        auto ep = pm::Endpoint::parse("0.0.0.0" + std::string(text.substr(1)));
        if (!ep) {
            return std::nullopt;
        }
        return ServiceAddress{std::nullopt, ep->port};
    }
    auto ep = pm::Endpoint::parse(text);
    if (!ep) {
        return std::nullopt;
    }
    return ServiceAddress{ep->address, ep->port};
}

std::string_view family_name(pm::Family f) {
    return f == pm::Family::v4 ? "IPv4" : "IPv6";
}

// A node and where it sits in the document, for error messages.
struct Field {
    YAML::Node node;
    std::string path;  // dotted key path, e.g. "services[1].sdp[0]"
    YAML::Mark mark;   // where errors about this value point
};

std::string join(const std::string& path, std::string_view key) {
    return path.empty() ? std::string(key) : path + "." + std::string(key);
}

// Reads a whole file into `out`; on failure returns the reason.
std::optional<std::string> read_file(const std::string& path, std::string& out) {
    struct Closer {
        void operator()(std::FILE* f) const { std::fclose(f); }
    };
    const auto reason = [](std::string_view what, int err) {
        return std::string(what) + ": " + std::generic_category().message(err);
    };
    errno = 0;
    std::unique_ptr<std::FILE, Closer> file(std::fopen(path.c_str(), "rb"));
    if (!file) {
        return reason("cannot open", errno);
    }
    std::array<char, 64 * 1024> buffer;
    for (;;) {
        const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), file.get());
        out.append(buffer.data(), n);
        if (out.size() > kMaxConfigSize) {
            return "file is larger than " + std::to_string(kMaxConfigSize) + " bytes";
        }
        if (n < buffer.size()) {
            if (std::ferror(file.get())) {
                return reason("cannot read", errno);
            }
            return std::nullopt;
        }
    }
}

class Loader {
  public:
    explicit Loader(std::string file) : file_(std::move(file)) {}

    ConfigResult load(const std::string& text);

  private:
    struct Entry {
        std::string key;
        YAML::Mark key_mark;
        Field value;
    };

    // A service plus what duplicate checks across services need.
    struct ParsedService {
        Service service;
        Field name;
        Field conventional;
    };

    bool fail(const YAML::Mark& mark, std::string path, std::string message) {
        error_ = ConfigError{file_, line_of(mark), std::move(path), std::move(message)};
        return false;
    }
    bool fail(const Field& f, std::string message) {
        return fail(f.mark, f.path, std::move(message));
    }

    // Shape checks. `what` completes "expected ...".
    bool map_entries(const Field& f, std::string_view what, std::span<const std::string_view> known,
                     std::vector<Entry>& out);
    bool sequence_items(const Field& f, std::string_view what, std::vector<Field>& out);
    bool scalar(const Field& f, std::string_view what, std::string& out);

    // Values.
    bool load_root(const Field& root, Config& config);
    bool load_listen(const Field& f, std::vector<pm::Endpoint>& out);
    bool load_duration(const Field& f, std::chrono::milliseconds min, std::chrono::milliseconds max,
                       std::string_view range, std::chrono::milliseconds& out);
    bool load_number(const Field& f, std::uint64_t min, std::uint64_t max, std::uint64_t& out);
    bool load_bool(const Field& f, bool& out);
    template <class E, std::size_t N>
    bool load_enum(const Field& f, const std::array<Named<E>, N>& names, E& out);
    bool load_services(const Field& f, std::vector<Service>& out);
    bool load_service(const Field& f, ParsedService& out);
    bool load_name(const Field& f, std::string& out);
    bool load_conventional(const Field& f, Service& s);
    bool load_sdp(const Field& f, Service& s);
    bool load_pm_time(const Field& f, std::uint8_t& out);
    bool load_allow(const Field& f, std::vector<pm::Prefix>& out);
    bool load_control(const Field& f, ControlConfig& out);
    bool load_limits(const Field& f, Config& config);
    bool load_per_source(const Field& f, LimiterConfig& out);
    bool load_quench(const Field& f, QuenchConfig& out);
    bool load_path(const Field& f, std::size_t max, std::string& out);
    bool load_group(const Field& f, std::string& out);
    bool load_metrics(const Field& f, std::optional<pm::Endpoint>& out);
    bool load_workers(const Field& f, unsigned& out);
    bool load_health(const Field& f, HealthOverrides& out);
    bool load_registry(const Field& f, RegistryConfig& out);
    bool load_tls(const Field& f, RegistryConfig& out);

  public:
    // For make_service(): one service from a node tree built in memory.
    std::variant<Service, ConfigError> service_from(const YAML::Node& node);

  private:
    std::string file_;
    std::optional<ConfigError> error_;
};

ConfigResult Loader::load(const std::string& text) {
    if (text.size() > kMaxConfigSize) {
        return ConfigError{file_, 0, "",
                           "file is larger than " + std::to_string(kMaxConfigSize) + " bytes"};
    }
    // One document only. yaml-cpp 0.7's LoadAll() can loop without end on
    // some malformed input (found by tests/fuzz/fuzz_config.cpp), so the
    // document is read with Load() and a second document is detected by its
    // marker: "---" or "..." at the start of a line after the first content.
    const DocumentLayout layout = scan_documents(text);
    if (layout.second_document) {
        return ConfigError{file_, *layout.second_document, "",
                           "more than one YAML document; the configuration is one document"};
    }
    YAML::Node document;
    try {
        document = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
        return ConfigError{file_, line_of(e.mark), "", "YAML syntax error: " + e.msg};
    } catch (const std::exception& e) {
        return ConfigError{file_, 0, "", std::string("cannot parse YAML: ") + e.what()};
    }
    Config config = Config::defaults();
    if (!document || document.IsNull()) {
        if (layout.first_content && !is_null_scalar(layout.first_content_text)) {
            // yaml-cpp gives up on some malformed text by returning an empty
            // document; text that is there must never pass as "no settings".
            return ConfigError{file_, *layout.first_content, "",
                               "YAML syntax error: no settings could be read from this line on"};
        }
        return config;  // empty, or comments only
    }
    const Field root{document, "", document.Mark()};
    if (!load_root(root, config)) {
        return *error_;
    }
    return config;
}

bool Loader::map_entries(const Field& f, std::string_view what,
                         std::span<const std::string_view> known, std::vector<Entry>& out) {
    if (!f.node.IsMap()) {
        return fail(f, "expected " + std::string(what) + ", got " + describe(f.node));
    }
    for (const auto& entry : f.node) {
        // Copies: yaml-cpp's iterator hands out a temporary pair, and Node is
        // a cheap handle.
        const YAML::Node key = entry.first;
        const YAML::Node value = entry.second;
        const YAML::Mark key_mark = key.IsNull() ? f.mark : key.Mark();
        if (!key.IsScalar()) {
            return fail(key_mark, f.path, "expected a key name, got " + describe(key));
        }
        const std::string& name = key.Scalar();
        std::string path = join(f.path, name);
        if (std::find(known.begin(), known.end(), name) == known.end()) {
            return fail(key_mark, std::move(path),
                        "unknown key " + quote(name) + suggestion(name, known));
        }
        for (const Entry& seen : out) {
            if (seen.key == name) {
                return fail(key_mark, std::move(path),
                            "duplicate key " + quote(name) + " (first at line " +
                                std::to_string(line_of(seen.key_mark)) + ")");
            }
        }
        const YAML::Mark value_mark = value.IsNull() ? key_mark : value.Mark();
        out.push_back(Entry{name, key_mark, Field{value, std::move(path), value_mark}});
    }
    return true;
}

// An empty value ("key:" or "key: []") is an empty list; callers decide
// whether that is allowed.
bool Loader::sequence_items(const Field& f, std::string_view what, std::vector<Field>& out) {
    if (f.node.IsNull()) {
        return true;
    }
    if (!f.node.IsSequence()) {
        return fail(f, "expected a list of " + std::string(what) + ", got " + describe(f.node));
    }
    std::size_t index = 0;
    for (const YAML::Node& item : f.node) {
        // A null item has no position of its own (yaml-cpp gives the next
        // token's), so point at the list.
        const YAML::Mark mark = item.IsNull() ? f.mark : item.Mark();
        out.push_back(Field{item, f.path + "[" + std::to_string(index) + "]", mark});
        ++index;
    }
    return true;
}

bool Loader::scalar(const Field& f, std::string_view what, std::string& out) {
    if (f.node.IsScalar()) {
        out = f.node.Scalar();
        return true;
    }
    if (f.node.IsNull()) {
        return fail(f, "missing value: expected " + std::string(what));
    }
    return fail(f, "expected " + std::string(what) + ", got " + describe(f.node));
}

bool Loader::load_root(const Field& root, Config& config) {
    std::vector<Entry> entries;
    if (!map_entries(root, "a map of settings at the top level", kTopLevelKeys, entries)) {
        return false;
    }
    for (const Entry& e : entries) {
        const Field& f = e.value;
        bool ok = true;
        if (e.key == "listen") {
            ok = load_listen(f, config.listen);
        } else if (e.key == "ack_timeout") {
            ok = load_duration(f, kMinAckTimeout, kMaxAckTimeout, "100ms and 1h",
                               config.ack_timeout);
        } else if (e.key == "on_demand_open_timeout") {
            ok = load_duration(f, std::chrono::milliseconds(10), kMaxAckTimeout, "10ms and 1h",
                               config.on_demand_open_timeout);
        } else if (e.key == "max_transactions") {
            std::uint64_t n = 0;
            ok = load_number(f, 1, kMaxTransactions, n);
            config.max_transactions = static_cast<std::size_t>(n);
        } else if (e.key == "services") {
            ok = load_services(f, config.services);
        } else if (e.key == "deny_ap_port") {
            ok = load_enum(f, kDenyApPorts, config.deny_ap_port);
        } else if (e.key == "accept_iwpm_request") {
            ok = load_bool(f, config.accept_iwpm_request);
        } else if (e.key == "log_level") {
            ok = load_enum(f, kLogLevels, config.log_level);
        } else if (e.key == "log_rate_limit") {
            std::uint64_t n = 0;
            ok = load_number(f, 1, kMaxLogRateLimit, n);
            config.log_rate_limit = static_cast<unsigned>(n);
        } else if (e.key == "control") {
            ok = load_control(f, config.control);
        } else if (e.key == "state_file") {
            ok = load_path(f, 4096, config.state_file);
        } else if (e.key == "metrics") {
            ok = load_metrics(f, config.metrics);
        } else if (e.key == "limits") {
            ok = load_limits(f, config);
        } else if (e.key == "workers") {
            ok = load_workers(f, config.workers);
        } else if (e.key == "health") {
            ok = load_health(f, config.health);
        } else if (e.key == "registry") {
            ok = load_registry(f, config.registry);
        }
        if (!ok) {
            return false;
        }
    }
    return true;
}

bool Loader::load_listen(const Field& f, std::vector<pm::Endpoint>& out) {
    std::vector<Field> items;
    if (!sequence_items(f, "addresses", items)) {
        return false;
    }
    if (items.empty()) {
        return fail(f, "must not be empty");
    }
    std::vector<pm::Endpoint> endpoints;
    std::vector<int> lines;
    for (const Field& item : items) {
        std::string text;
        if (!scalar(item, "an address such as \"0.0.0.0:3935\" or \"[::]:3935\"", text)) {
            return false;
        }
        auto ep = pm::Endpoint::parse(text);
        if (!ep) {
            return fail(item, "bad address " + quote(text));
        }
        auto seen = std::find(endpoints.begin(), endpoints.end(), *ep);
        if (seen != endpoints.end()) {
            return fail(item, "duplicate address " + quote(text) + " (first at line " +
                                  std::to_string(lines[seen - endpoints.begin()]) + ")");
        }
        endpoints.push_back(*ep);
        lines.push_back(line_of(item.mark));
    }
    out = std::move(endpoints);
    return true;
}

bool Loader::load_duration(const Field& f, std::chrono::milliseconds min,
                           std::chrono::milliseconds max, std::string_view range,
                           std::chrono::milliseconds& out) {
    std::string text;
    if (!scalar(f, "a duration such as \"5s\"", text)) {
        return false;
    }
    auto d = parse_duration(text);
    if (!d) {
        return fail(f,
                    "bad duration " + quote(text) + " (use a number and ms, s, m or h, e.g. 5s)");
    }
    if (*d < min || *d > max) {
        return fail(f, "out of range: " + quote(text) + " is not between " + std::string(range));
    }
    out = *d;
    return true;
}

bool Loader::load_number(const Field& f, std::uint64_t min, std::uint64_t max, std::uint64_t& out) {
    std::string text;
    if (!scalar(f, "a number", text)) {
        return false;
    }
    if (!all_digits(text)) {
        return fail(f, "bad number " + quote(text));
    }
    auto n = parse_unsigned(text);
    if (!n || *n < min || *n > max) {
        return fail(f, "out of range: " + quote(text) + " is not between " + std::to_string(min) +
                           " and " + std::to_string(max));
    }
    out = *n;
    return true;
}

bool Loader::load_workers(const Field& f, unsigned& out) {
    std::string text;
    if (!scalar(f, "a number of workers or \"auto\"", text)) {
        return false;
    }
    if (auto n = parse_workers(text)) {
        out = *n;
        return true;
    }
    if (all_digits(text)) {
        return fail(f, "out of range: " + quote(text) + " is not between 1 and " +
                           std::to_string(kMaxWorkers) + " (or \"auto\")");
    }
    return fail(f, "bad value " + quote(text) + " (expected a number from 1 to " +
                       std::to_string(kMaxWorkers) + " or \"auto\")");
}

// YAML 1.2 core schema booleans only: "yes"/"on" are errors, not surprises.
bool Loader::load_bool(const Field& f, bool& out) {
    std::string text;
    if (!scalar(f, "true or false", text)) {
        return false;
    }
    if (text == "true" || text == "True" || text == "TRUE") {
        out = true;
        return true;
    }
    if (text == "false" || text == "False" || text == "FALSE") {
        out = false;
        return true;
    }
    return fail(f, "expected true or false, got " + quote(text));
}

template <class E, std::size_t N>
bool Loader::load_enum(const Field& f, const std::array<Named<E>, N>& names, E& out) {
    std::string text;
    if (!scalar(f, "one of " + choices(names), text)) {
        return false;
    }
    for (const auto& n : names) {
        if (n.name == text) {
            out = n.value;
            return true;
        }
    }
    return fail(f, "unknown value " + quote(text) + " (expected " + choices(names) + ")");
}

bool Loader::load_services(const Field& f, std::vector<Service>& out) {
    std::vector<Field> items;
    if (!sequence_items(f, "services", items)) {
        return false;
    }
    struct FirstUse {
        std::string service;
        int line;
    };
    std::map<std::string, int, std::less<>> names;  // name -> line
    std::map<std::pair<std::optional<pm::IpAddress>, std::uint16_t>, FirstUse> conventionals;
    std::vector<Service> services;
    services.reserve(items.size());
    for (const Field& item : items) {
        ParsedService parsed;
        if (!load_service(item, parsed)) {
            return false;
        }
        const Service& s = parsed.service;
        auto [name_it, new_name] = names.emplace(s.name, line_of(parsed.name.mark));
        if (!new_name) {
            return fail(parsed.name, "duplicate service " + quote(s.name) +
                                         " (first defined at line " +
                                         std::to_string(name_it->second) + ")");
        }
        auto [conv_it, new_conv] =
            conventionals.emplace(std::pair{s.conventional_address, s.conventional_port},
                                  FirstUse{s.name, line_of(parsed.conventional.mark)});
        if (!new_conv) {
            return fail(parsed.conventional, "duplicate service: conventional address " +
                                                 quote(parsed.conventional.node.Scalar()) +
                                                 " is already used by " +
                                                 quote(conv_it->second.service) + " (line " +
                                                 std::to_string(conv_it->second.line) + ")");
        }
        services.push_back(std::move(parsed.service));
    }
    out = std::move(services);
    return true;
}

bool Loader::load_service(const Field& f, ParsedService& out) {
    std::vector<Entry> entries;
    if (!map_entries(f, "a service (a map with name, conventional, sdp...)", kServiceKeys,
                     entries)) {
        return false;
    }
    const auto find = [&entries](std::string_view key) -> const Field* {
        for (const Entry& e : entries) {
            if (e.key == key) {
                return &e.value;
            }
        }
        return nullptr;
    };
    // Required keys first, in a fixed order: sdp is checked against
    // conventional whatever order the file lists them in.
    for (std::string_view key : {"name", "conventional", "sdp"}) {
        if (find(key) == nullptr) {
            return fail(f, "missing required key " + quote(key));
        }
    }
    Service& s = out.service;
    out.name = *find("name");
    out.conventional = *find("conventional");
    if (!load_name(out.name, s.name) || !load_conventional(out.conventional, s) ||
        !load_sdp(*find("sdp"), s)) {
        return false;
    }
    if (const Field* policy = find("policy"); policy && !load_enum(*policy, kPolicies, s.policy)) {
        return false;
    }
    if (const Field* pm_time = find("pm_time"); pm_time && !load_pm_time(*pm_time, s.pm_time)) {
        return false;
    }
    if (const Field* allow = find("allow"); allow && !load_allow(*allow, s.allow)) {
        return false;
    }
    if (const Field* health = find("health"); health && !load_health(*health, s.health)) {
        return false;
    }
    return true;
}

// `health: off`, or a map with check, interval, timeout, rise, fall.
bool Loader::load_health(const Field& f, HealthOverrides& out) {
    if (f.node.IsScalar()) {
        if (f.node.Scalar() == "off") {
            out = HealthOverrides{};
            out.check = HealthCheck::off;
            return true;
        }
        return fail(f, "expected off or a map with check, interval, timeout, rise, fall, got " +
                           describe(f.node));
    }
    std::vector<Entry> entries;
    if (!map_entries(f, "off or a map with check, interval, timeout, rise, fall", kHealthKeys,
                     entries)) {
        return false;
    }
    HealthOverrides h;
    for (const Entry& e : entries) {
        bool ok = true;
        std::uint64_t n = 0;
        std::chrono::milliseconds d{0};
        if (e.key == "check") {
            HealthCheck c = HealthCheck::off;
            ok = load_enum(e.value, kHealthChecks, c);
            h.check = c;
        } else if (e.key == "interval") {
            ok = load_duration(e.value, kMinHealthInterval, kMaxHealthInterval, "100ms and 1h", d);
            h.interval = d;
        } else if (e.key == "timeout") {
            ok = load_duration(e.value, kMinHealthTimeout, kMaxHealthTimeout, "10ms and 1m", d);
            h.timeout = d;
        } else {
            ok = load_number(e.value, 1, kMaxHealthCount, n);
            (e.key == "rise" ? h.rise : h.fall) = static_cast<std::uint32_t>(n);
        }
        if (!ok) {
            return false;
        }
    }
    out = h;
    return true;
}

bool Loader::load_name(const Field& f, std::string& out) {
    if (!scalar(f, "a service name", out)) {
        return false;
    }
    if (!is_valid_service_name(out)) {
        return fail(f, "bad service name " + quote(out) + " (use 1 to " +
                           std::to_string(kMaxServiceName) + " letters, digits, '.', '_' or '-')");
    }
    return true;
}

bool Loader::load_conventional(const Field& f, Service& s) {
    std::string text;
    if (!scalar(f, "an address such as \"192.0.2.10:80\" or \"*:80\"", text)) {
        return false;
    }
    auto parsed = parse_service_address(text);
    if (!parsed) {
        return fail(f, "bad address " + quote(text));
    }
    if (parsed->port == 0) {
        return fail(f, "port must not be 0 in " + quote(text));
    }
    if (parsed->address) {
        // The registry is looked up with canonical (unmapped) addresses.
        parsed->address = parsed->address->unmapped();
        if (parsed->address->is_unspecified()) {
            return fail(f, "unspecified address in " + quote(text) + "; write \"*:" +
                               std::to_string(parsed->port) + "\" to match any address");
        }
    }
    s.conventional_address = parsed->address;
    s.conventional_port = parsed->port;
    return true;
}

bool Loader::load_sdp(const Field& f, Service& s) {
    std::vector<Field> items;
    if (!sequence_items(f, "addresses", items)) {
        return false;
    }
    if (items.empty()) {
        return fail(f, "must not be empty: list at least one SDP address");
    }
    if (items.size() > kMaxSdpAddresses) {
        return fail(f,
                    "at most " + std::to_string(kMaxSdpAddresses) + " SDP addresses per service");
    }
    for (const Field& item : items) {
        std::string text;
        if (!scalar(item, "an address such as \"192.0.2.10:8080\" or \"*:8080\"", text)) {
            return false;
        }
        auto parsed = parse_service_address(text);
        if (!parsed) {
            return fail(item, "bad address " + quote(text));
        }
        if (parsed->port == 0) {
            return fail(item, "port must not be 0 in " + quote(text));
        }
        // "*", 0.0.0.0 and :: all mean "the ApIPAddr the client asked for";
        // they are stored one way, as 0.0.0.0.
        pm::Endpoint ep{pm::IpAddress::any(pm::Family::v4), parsed->port};
        if (parsed->address && !parsed->address->is_unspecified()) {
            ep.address = *parsed->address;
            // A PMAccept carries one IP version for both addresses, so an
            // SDP address of the other family could never be handed out.
            if (s.conventional_address && ep.address.family() != s.conventional_address->family()) {
                return fail(item, "SDP address " + quote(text) + " is " +
                                      std::string(family_name(ep.address.family())) +
                                      " but the conventional address is " +
                                      std::string(family_name(s.conventional_address->family())));
            }
        }
        if (std::find(s.sdp.begin(), s.sdp.end(), ep) != s.sdp.end()) {
            return fail(item, "duplicate SDP address " + quote(text));
        }
        s.sdp.push_back(ep);
    }
    return true;
}

bool Loader::load_pm_time(const Field& f, std::uint8_t& out) {
    std::string text;
    if (!scalar(f, "single-use, permanent, a duration or a byte 0-255", text)) {
        return false;
    }
    if (text == "single-use") {
        out = pm::kPmTimeSingleUse;
        return true;
    }
    if (text == "permanent") {
        out = pm::kPmTimePermanent;
        return true;
    }
    if (all_digits(text)) {
        auto n = parse_unsigned(text);
        if (!n || *n > 255) {
            return fail(f, "out of range: raw PmTime " + quote(text) +
                               " is not between 0 and 255 (write a duration such as 30s for a "
                               "time)");
        }
        out = static_cast<std::uint8_t>(*n);
        return true;
    }
    if (auto d = parse_duration(text)) {
        out = pm::pm_time_from_duration(*d);
        return true;
    }
    return fail(f, "bad pm_time " + quote(text) +
                       " (expected single-use, permanent, a duration such as 30s, or a byte "
                       "0-255)");
}

bool Loader::load_allow(const Field& f, std::vector<pm::Prefix>& out) {
    std::vector<Field> items;
    if (!sequence_items(f, "prefixes", items)) {
        return false;
    }
    if (items.empty()) {
        // An empty list reads as "nobody" but would mean "anybody".
        return fail(f, "must not be empty: leave allow out to accept any client");
    }
    for (const Field& item : items) {
        std::string text;
        if (!scalar(item, "a prefix such as \"10.0.0.0/8\"", text)) {
            return false;
        }
        auto prefix = pm::Prefix::parse(text);
        if (!prefix) {
            return fail(item, "bad prefix " + quote(text));
        }
        if (std::find(out.begin(), out.end(), *prefix) != out.end()) {
            return fail(
                item, "duplicate prefix " + quote(text) + " (same as " + prefix->to_string() + ")");
        }
        out.push_back(*prefix);
    }
    return true;
}

bool Loader::load_control(const Field& f, ControlConfig& out) {
    std::vector<Entry> entries;
    if (!map_entries(f, "a map with socket, admin_group, read_group", kControlKeys, entries)) {
        return false;
    }
    for (const Entry& e : entries) {
        bool ok = true;
        if (e.key == "socket") {
            ok = load_path(e.value, kMaxSocketPath, out.socket);
            out.socket_configured = true;
        } else if (e.key == "admin_group") {
            ok = load_group(e.value, out.admin_group);
        } else if (e.key == "read_group") {
            ok = load_group(e.value, out.read_group);
        }
        if (!ok) {
            return false;
        }
    }
    return true;
}

bool Loader::load_registry(const Field& f, RegistryConfig& out) {
    std::vector<Entry> entries;
    if (!map_entries(f,
                     "a map with backend, endpoints, prefix, member, lease_ttl, "
                     "max_staleness, request_timeout, tls",
                     kRegistryKeys, entries)) {
        return false;
    }
    for (const Entry& e : entries) {
        bool ok = true;
        std::string text;
        if (e.key == "backend") {
            ok = load_enum(e.value, kBackends, out.backend);
        } else if (e.key == "endpoints") {
            std::vector<Field> items;
            ok = sequence_items(e.value, "etcd URLs such as \"http://10.0.0.1:2379\"", items);
            if (ok && items.size() > kMaxEtcdEndpoints) {
                return fail(e.value,
                            "at most " + std::to_string(kMaxEtcdEndpoints) + " etcd endpoints");
            }
            out.endpoints.clear();
            for (std::size_t i = 0; ok && i < items.size(); ++i) {
                ok = scalar(items[i], "an etcd URL such as \"http://10.0.0.1:2379\"", text);
                if (ok && !cluster::parse_endpoint_url(text)) {
                    return fail(items[i], "bad etcd endpoint " + quote(text) +
                                              " (use http://HOST:PORT or https://HOST:PORT)");
                }
                out.endpoints.push_back(text);
            }
        } else if (e.key == "prefix") {
            ok = scalar(e.value, "a key prefix such as \"/sdp-pm/\"", text);
            out.prefix = text;
        } else if (e.key == "member") {
            ok = scalar(e.value, "a member name", text);
            if (ok && !cluster::is_valid_member(text)) {
                return fail(e.value, "bad member name " + quote(text) +
                                         " (use 1 to 64 letters, digits, '.', '_' or '-')");
            }
            out.member = text;
        } else if (e.key == "lease_ttl") {
            ok = load_duration(e.value, std::chrono::seconds(2), std::chrono::hours(1), "2s and 1h",
                               out.lease_ttl);
        } else if (e.key == "max_staleness") {
            ok = load_duration(e.value, std::chrono::milliseconds(100), std::chrono::hours(24),
                               "100ms and 24h", out.max_staleness);
        } else if (e.key == "request_timeout") {
            ok = load_duration(e.value, std::chrono::milliseconds(10), std::chrono::minutes(1),
                               "10ms and 1m", out.request_timeout);
        } else if (e.key == "tls") {
            ok = load_tls(e.value, out);
        }
        if (!ok) {
            return false;
        }
    }
    cluster::Settings settings;
    settings.prefix = out.prefix;
    settings.member = out.member.empty() ? "placeholder" : out.member;
    settings.lease_ttl = std::chrono::duration_cast<std::chrono::seconds>(out.lease_ttl);
    settings.max_staleness = out.max_staleness;
    if (auto why = cluster::validate(settings); !why.empty()) {
        return fail(f, why);
    }
    if (out.request_timeout > out.lease_ttl / 3) {
        // A keep-alive must be able to time out, and be retried, within
        // the lease.
        return fail(f, "request_timeout must be at most a third of lease_ttl");
    }
    if (out.backend == RegistryConfig::Backend::etcd && out.endpoints.empty()) {
        return fail(f, "backend etcd needs at least one entry in endpoints");
    }
    return true;
}

bool Loader::load_tls(const Field& f, RegistryConfig& out) {
    std::vector<Entry> entries;
    if (!map_entries(f, "a map with ca, cert, key", kTlsKeys, entries)) {
        return false;
    }
    for (const Entry& e : entries) {
        std::string& target = e.key == "ca"     ? out.tls_ca
                              : e.key == "cert" ? out.tls_cert
                                                : out.tls_key;
        if (!load_path(e.value, 4096, target)) {
            return false;
        }
    }
    if (out.tls_cert.empty() != out.tls_key.empty()) {
        return fail(f, "cert and key go together");
    }
    return true;
}

bool Loader::load_limits(const Field& f, Config& config) {
    std::vector<Entry> entries;
    if (!map_entries(f, "a map with per_source, source_quench", kLimitsKeys, entries)) {
        return false;
    }
    for (const Entry& e : entries) {
        bool ok = e.key == "per_source" ? load_per_source(e.value, config.per_source)
                                        : load_quench(e.value, config.quench);
        if (!ok) {
            return false;
        }
    }
    return true;
}

bool Loader::load_per_source(const Field& f, LimiterConfig& out) {
    std::vector<Entry> entries;
    if (!map_entries(f, "a map with rate, burst, max_sources", kPerSourceKeys, entries)) {
        return false;
    }
    for (const Entry& e : entries) {
        std::uint64_t n = 0;
        bool ok = true;
        if (e.key == "rate") {
            ok = load_number(e.value, 0, kMaxRate, n);
            out.rate = static_cast<double>(n);
        } else if (e.key == "burst") {
            ok = load_number(e.value, 1, kMaxRate, n);
            out.burst = static_cast<double>(n);
        } else {
            ok = load_number(e.value, 1, kMaxTrackedSources, n);
            out.max_sources = static_cast<std::size_t>(n);
        }
        if (!ok) {
            return false;
        }
    }
    if (out.rate > 0 && out.burst < 1) {
        out.burst = out.rate;  // a second's worth unless told otherwise
    }
    return true;
}

bool Loader::load_quench(const Field& f, QuenchConfig& out) {
    std::vector<Entry> entries;
    if (!map_entries(f, "a map with max_unacked, window, period, max_sources", kQuenchKeys,
                     entries)) {
        return false;
    }
    for (const Entry& e : entries) {
        std::uint64_t n = 0;
        bool ok = true;
        if (e.key == "max_unacked") {
            ok = load_number(e.value, 0, kMaxRate, n);
            out.max_unacked = static_cast<std::uint32_t>(n);
        } else if (e.key == "window") {
            ok = load_duration(e.value, std::chrono::milliseconds(10), std::chrono::hours(1),
                               "10ms and 1h", out.window);
        } else if (e.key == "period") {
            ok = load_duration(e.value, std::chrono::milliseconds(10), std::chrono::hours(24),
                               "10ms and 24h", out.period);
        } else {
            ok = load_number(e.value, 1, kMaxTrackedSources, n);
            out.max_sources = static_cast<std::size_t>(n);
        }
        if (!ok) {
            return false;
        }
    }
    return true;
}

// An absolute file path without NUL, at most `max` bytes.
bool Loader::load_path(const Field& f, std::size_t max, std::string& out) {
    std::string text;
    if (!scalar(f, "an absolute path", text)) {
        return false;
    }
    if (text.empty() || text.front() != '/') {
        return fail(f, "not an absolute path: " + quote(text));
    }
    if (text.find('\0') != std::string::npos) {
        return fail(f, "path contains a NUL byte: " + quote(text));
    }
    if (text.size() > max) {
        return fail(f, "path longer than " + std::to_string(max) + " bytes: " + quote(text));
    }
    if (text.back() == '/') {
        return fail(f, "names a directory, not a file: " + quote(text));
    }
    out = std::move(text);
    return true;
}

// A group name as in /etc/group. Whether it exists is checked when a client
// connects (groups may be created after the daemon starts).
bool Loader::load_group(const Field& f, std::string& out) {
    std::string text;
    if (!scalar(f, "a group name", text)) {
        return false;
    }
    const auto allowed = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '_' || c == '-' || c == '$';
    };
    if (text.empty() || text.size() > kMaxGroupName || text.front() == '-' ||
        !std::all_of(text.begin(), text.end(), allowed)) {
        return fail(f, "bad group name " + quote(text));
    }
    out = std::move(text);
    return true;
}

bool Loader::load_metrics(const Field& f, std::optional<pm::Endpoint>& out) {
    std::string text;
    if (!scalar(f, "an address such as \"127.0.0.1:9935\"", text)) {
        return false;
    }
    auto ep = pm::Endpoint::parse(text);
    if (!ep) {
        return fail(f, "bad address " + quote(text));
    }
    out = *ep;
    return true;
}

std::variant<Service, ConfigError> Loader::service_from(const YAML::Node& node) {
    ParsedService parsed;
    if (!load_service(Field{node, "", YAML::Mark::null_mark()}, parsed)) {
        return *error_;
    }
    return std::move(parsed.service);
}

}  // namespace

std::variant<Service, ConfigError> make_service(const ServiceFields& fields,
                                                const std::string& context) {
    try {
        YAML::Node node(YAML::NodeType::Map);
        node["name"] = fields.name;
        node["conventional"] = fields.conventional;
        YAML::Node sdp(YAML::NodeType::Sequence);
        for (const auto& s : fields.sdp) {
            sdp.push_back(s);
        }
        node["sdp"] = sdp;
        if (fields.policy) {
            node["policy"] = *fields.policy;
        }
        if (fields.pm_time) {
            node["pm_time"] = *fields.pm_time;
        }
        if (fields.allow) {
            YAML::Node allow(YAML::NodeType::Sequence);
            for (const auto& a : *fields.allow) {
                allow.push_back(a);
            }
            node["allow"] = allow;
        }
        if (fields.health) {
            YAML::Node health(YAML::NodeType::Map);
            for (const auto& [key, value] : *fields.health) {
                health[key] = value;
            }
            node["health"] = health;
        }
        return Loader(context).service_from(node);
    } catch (const std::bad_alloc&) {
        return ConfigError{context, 0, "", "out of memory"};
    } catch (const std::exception& e) {
        return ConfigError{context, 0, "", std::string("internal error: ") + e.what()};
    }
}

ServiceFields service_fields(const Service& s) {
    ServiceFields f;
    f.name = s.name;
    f.conventional = conventional_text(s);
    for (const auto& ep : s.sdp) {
        f.sdp.push_back(ep.address.is_unspecified() ? "*:" + std::to_string(ep.port)
                                                    : ep.to_string());
    }
    f.policy = std::string(to_string(s.policy));
    f.pm_time = std::to_string(s.pm_time);
    if (!s.allow.empty()) {
        f.allow.emplace();
        for (const auto& p : s.allow) {
            f.allow->push_back(p.to_string());
        }
    }
    const HealthOverrides& h = s.health;
    if (h != HealthOverrides{}) {
        auto& out = f.health.emplace();
        auto ms = [](std::chrono::milliseconds d) { return std::to_string(d.count()) + "ms"; };
        if (h.check) {
            out.emplace_back("check", std::string(to_string(*h.check)));
        }
        if (h.interval) {
            out.emplace_back("interval", ms(*h.interval));
        }
        if (h.timeout) {
            out.emplace_back("timeout", ms(*h.timeout));
        }
        if (h.rise) {
            out.emplace_back("rise", std::to_string(*h.rise));
        }
        if (h.fall) {
            out.emplace_back("fall", std::to_string(*h.fall));
        }
    }
    return f;
}

Config Config::defaults() {
    Config config;
    config.listen = {
        pm::Endpoint{pm::IpAddress::any(pm::Family::v4), pm::kDefaultPort},
        pm::Endpoint{pm::IpAddress::any(pm::Family::v6), pm::kDefaultPort},
    };
    return config;
}

std::string ConfigError::to_string() const {
    std::string out = file;
    if (line > 0) {
        out += ":" + std::to_string(line);
    }
    out += ": ";
    if (!key.empty()) {
        out += key + ": ";
    }
    out += message;
    return out;
}

bool is_valid_service_name(std::string_view name) {
    const auto allowed = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '_' || c == '-';
    };
    return !name.empty() && name.size() <= kMaxServiceName &&
           std::all_of(name.begin(), name.end(), allowed);
}

ConfigResult load_config_string(const std::string& yaml, const std::string& name) {
    const std::string file = name.empty() ? "<config>" : name;
    try {
        return Loader(file).load(yaml);
    } catch (const YAML::Exception& e) {
        return ConfigError{file, line_of(e.mark), "", "YAML error: " + e.msg};
    } catch (const std::bad_alloc&) {
        return ConfigError{file, 0, "", "out of memory"};
    } catch (const std::exception& e) {
        return ConfigError{file, 0, "", std::string("internal error: ") + e.what()};
    } catch (...) {
        return ConfigError{file, 0, "", "internal error"};
    }
}

ConfigResult load_config_file(const std::string& path) {
    try {
        std::string text;
        if (auto reason = read_file(path, text)) {
            return ConfigError{path, 0, "", std::move(*reason)};
        }
        return load_config_string(text, path);
    } catch (const std::bad_alloc&) {
        return ConfigError{path, 0, "", "out of memory"};
    } catch (...) {
        return ConfigError{path, 0, "", "internal error"};
    }
}

}  // namespace pmd

namespace pmd {

std::optional<unsigned> parse_workers(std::string_view text) {
    if (text == "auto") {
        return 0u;
    }
    if (!all_digits(text)) {
        return std::nullopt;
    }
    auto n = parse_unsigned(text);
    if (!n || *n < 1 || *n > kMaxWorkers) {
        return std::nullopt;
    }
    return static_cast<unsigned>(*n);
}

}  // namespace pmd
