// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the YAML config loader. Any text must give a Config or one
// ConfigError, never an exception, a crash or a hang.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <variant>

#include "daemon/config/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size > 64 * 1024) {
        return 0;  // the loader's own size cap is tested elsewhere
    }
    std::string text(reinterpret_cast<const char*>(data), size);
    auto r = pmd::load_config_string(text, "fuzz.yaml");
    if (auto* err = std::get_if<pmd::ConfigError>(&r)) {
        if (err->message.empty()) {
            std::abort();  // every error must say what is wrong
        }
    } else if (std::get<pmd::Config>(r).listen.empty()) {
        std::abort();  // a valid config always listens somewhere
    }
    return 0;
}
