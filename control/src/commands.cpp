// SPDX-License-Identifier: Apache-2.0
#include "pmctl/commands.hpp"

#include <algorithm>

namespace pmctl {

namespace {

constexpr std::size_t kIndent = 2;
constexpr std::size_t kSummaryColumn = 33;

}  // namespace

std::string_view to_string(Access a) {
    switch (a) {
        case Access::none:
            return "none";
        case Access::read:
            return "read";
        case Access::admin:
            return "admin";
    }
    return "?";
}

const Command* find_command(std::string_view name) {
    auto it = std::find_if(kCommands.begin(), kCommands.end(),
                           [&](const Command& c) { return c.name == name; });
    return it == kCommands.end() ? nullptr : &*it;
}

std::string_view cli_word(std::string_view usage) {
    return usage.substr(0, usage.find_first_of(" \n"));
}

std::string help_line(std::string_view usage, std::string_view summary) {
    std::string out;
    // Continuation lines line up under the first argument.
    const std::size_t hang = kIndent + std::min(usage.find(' '), usage.size()) + 1;
    std::size_t column = 0;
    for (std::size_t start = 0;;) {
        const auto nl = usage.find('\n', start);
        const std::string_view line = usage.substr(start, nl - start);
        const std::size_t indent = start == 0 ? kIndent : hang;
        out += std::string(indent, ' ');
        out += line;
        column = indent + line.size();
        if (nl == std::string_view::npos) {
            break;
        }
        out += '\n';
        start = nl + 1;
    }
    if (column + 2 > kSummaryColumn) {
        out += '\n';
        column = 0;
    }
    out += std::string(kSummaryColumn - column, ' ');
    out += summary;
    out += '\n';
    return out;
}

}  // namespace pmctl
