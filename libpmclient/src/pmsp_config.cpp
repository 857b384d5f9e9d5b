// SPDX-License-Identifier: Apache-2.0
#include "pmsp_config.hpp"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>

#include "pmclient/message.hpp"

namespace pmclient {

namespace {

constexpr const char* kWant = " (want \"1.2.3.4:3935\", \"[::1]:3935\" or a bare address)";

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
        s.remove_prefix(1);
    }
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
        s.remove_suffix(1);
    }
    return s;
}

PmspSetting setting_of(std::vector<pm::Endpoint> list, std::string source) {
    PmspSetting s;
    if (!list.empty()) {
        s.endpoint = list.front();
    }
    s.endpoints = std::move(list);
    s.source = std::move(source);
    return s;
}

}  // namespace

std::optional<pm::Endpoint> parse_pmsp(std::string_view text) {
    std::optional<pm::Endpoint> ep = pm::Endpoint::parse(text);
    if (!ep) {
        auto addr = pm::IpAddress::parse(text);
        if (!addr) {
            return std::nullopt;
        }
        ep = pm::Endpoint{*addr, pm::kDefaultPort};
    }
    if (ep->port == 0 || ep->address.is_unspecified()) {
        return std::nullopt;
    }
    return ep;
}

std::vector<pm::Endpoint> parse_pmsp_list(std::string_view text, std::string& error) {
    std::vector<pm::Endpoint> list;
    error.clear();
    std::size_t n = 0;
    for (;;) {
        ++n;
        const std::size_t comma = text.find(',');
        const std::string_view entry = trim(text.substr(0, comma));
        if (entry.empty()) {
            error = "entry " + std::to_string(n) + " is empty";
            return {};
        }
        auto ep = parse_pmsp(entry);
        if (!ep) {
            error = "invalid endpoint '" + std::string(entry) + "'" + kWant;
            return {};
        }
        list.push_back(*ep);
        if (list.size() > kMaxPmsps) {
            error = "more than " + std::to_string(kMaxPmsps) + " PMSPs";
            return {};
        }
        if (comma == std::string_view::npos) {
            break;
        }
        text.remove_prefix(comma + 1);
    }
    if (auto why = validate_pmsp_list(list); !why.empty()) {
        error = why;
        return {};
    }
    return list;
}

std::variant<PmspSetting, std::string> load_pmsp_file(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        return PmspSetting{std::nullopt, {}, "default"};
    }
    try {
        YAML::Node root = YAML::LoadFile(path);
        if (!root || root.IsNull()) {
            return PmspSetting{std::nullopt, {}, "default"};
        }
        if (!root.IsMap()) {
            return path + ": top level must be a mapping";
        }
        YAML::Node pmsp = root["pmsp"];
        if (!pmsp || pmsp.IsNull()) {
            return PmspSetting{std::nullopt, {}, "default"};
        }
        auto where = [&](const YAML::Node& n) {
            return path + ":" + std::to_string(n.Mark().line + 1) + ": pmsp: ";
        };
        std::vector<pm::Endpoint> list;
        if (pmsp.IsScalar()) {
            std::string why;
            list = parse_pmsp_list(pmsp.as<std::string>(), why);
            if (!why.empty()) {
                return where(pmsp) + why;
            }
        } else if (pmsp.IsSequence()) {
            if (pmsp.size() == 0) {
                return where(pmsp) + "the list is empty";
            }
            for (const auto& item : pmsp) {
                if (!item.IsScalar()) {
                    return where(item) + "expected \"host:port\" in the list";
                }
                auto text = item.as<std::string>();
                auto ep = parse_pmsp(trim(text));
                if (!ep) {
                    return where(item) + "invalid endpoint '" + text + "'" + kWant;
                }
                list.push_back(*ep);
            }
            if (auto why = validate_pmsp_list(list); !why.empty()) {
                return where(pmsp) + why;
            }
        } else {
            return where(pmsp) + "expected \"host:port\" or a list of them";
        }
        return setting_of(std::move(list), path);
    } catch (const YAML::Exception& e) {
        return path + ": " + e.what();
    }
}

std::variant<PmspSetting, std::string> load_pmsp_setting() {
    if (const char* env = std::getenv("SDP_PMSP"); env != nullptr && *env != '\0') {
        std::string why;
        auto list = parse_pmsp_list(env, why);
        if (!why.empty()) {
            return "SDP_PMSP: " + why;
        }
        return setting_of(std::move(list), "SDP_PMSP");
    }
    std::string path = kDefaultConfigPath;
    if (const char* p = std::getenv("SDP_PMCLIENT_CONFIG"); p != nullptr && *p != '\0') {
        path = p;
    }
    return load_pmsp_file(path);
}

}  // namespace pmclient
