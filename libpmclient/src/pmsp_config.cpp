// SPDX-License-Identifier: Apache-2.0
#include "pmsp_config.hpp"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>

#include "pmclient/message.hpp"

namespace pmclient {

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

std::variant<PmspSetting, std::string> load_pmsp_file(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        return PmspSetting{std::nullopt, "default"};
    }
    try {
        YAML::Node root = YAML::LoadFile(path);
        if (!root || root.IsNull()) {
            return PmspSetting{std::nullopt, "default"};
        }
        if (!root.IsMap()) {
            return path + ": top level must be a mapping";
        }
        YAML::Node pmsp = root["pmsp"];
        if (!pmsp || pmsp.IsNull()) {
            return PmspSetting{std::nullopt, "default"};
        }
        if (!pmsp.IsScalar()) {
            return path + ":" + std::to_string(pmsp.Mark().line + 1) +
                   ": pmsp: expected \"host:port\"";
        }
        auto text = pmsp.as<std::string>();
        auto ep = parse_pmsp(text);
        if (!ep) {
            return path + ":" + std::to_string(pmsp.Mark().line + 1) +
                   ": pmsp: invalid endpoint '" + text +
                   "' (want \"1.2.3.4:3935\" or \"[::1]:3935\")";
        }
        return PmspSetting{ep, path};
    } catch (const YAML::Exception& e) {
        return path + ": " + e.what();
    }
}

std::variant<PmspSetting, std::string> load_pmsp_setting() {
    if (const char* env = std::getenv("SDP_PMSP"); env != nullptr && *env != '\0') {
        auto ep = parse_pmsp(env);
        if (!ep) {
            return std::string("SDP_PMSP: invalid endpoint '") + env +
                   "' (want \"1.2.3.4:3935\" or \"[::1]:3935\")";
        }
        return PmspSetting{ep, "SDP_PMSP"};
    }
    std::string path = kDefaultConfigPath;
    if (const char* p = std::getenv("SDP_PMCLIENT_CONFIG"); p != nullptr && *p != '\0') {
        path = p;
    }
    return load_pmsp_file(path);
}

}  // namespace pmclient
