// SPDX-License-Identifier: Apache-2.0
// The Flow Control Modes of the two half-connections (draft-pinkerton-iwarp-
// sdp-01, sections 11 and 12) as tables, in the style of duplication.hpp:
//
//   Figure 25  what a peer may do for each pair of modes (permitted())
//   Figure 26  the legal transitions of a half-connection's mode
//   Figure 27  which end of a half-connection is the Mode Master
//
// A half-connection carries data from its Data Source to its Data Sink; each
// end of a connection is the Data Source of one half and the Data Sink of the
// other. "out" below is the half this end sends on, "in" the one it receives
// on. Both start in Combined Mode (12, 8).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "sdp/wire/message.hpp"

namespace sdp::engine {

using Mode = wire::FlowMode;

// This end's role on a half-connection.
enum class HalfRole : std::uint8_t { source, sink };

// Figure 27: the Data Sink in Buffered Mode, the Data Source otherwise.
HalfRole mode_master(Mode m);

// Figures 26 and 27, and 12 ("MUST NOT send a ModeChange Message that
// specifies the current Mode"): may `who` (the Mode Master of `from`) change
// the half-connection from `from` to `to`?
bool may_change(Mode from, Mode to, HalfRole who);

// How many of an advertisement may be outstanding: none, one at a time
// ("1" in Figure 25), or several (up to MaxAdverts, 6.2).
enum class Limit : std::uint8_t { none, one, many };

// Figure 25, for this end with its out half in `out` and its in half in
// `in`.
struct Permitted {
    bool post_rdma_read = false;   // Read Zcopy as Data Sink of the in half
    bool post_rdma_write = false;  // Write Zcopy as Data Source of the out half
    Limit send_src_avail = Limit::none;
    Limit send_sink_avail = Limit::none;
    Limit send_transaction = Limit::none;
    Limit accept_src_avail = Limit::none;
    Limit accept_sink_avail = Limit::none;
    Limit accept_transaction = Limit::none;
    bool operator==(const Permitted&) const = default;
};
Permitted permitted(Mode out, Mode in);

// A ModeChange received (6.3.8): S=0 changes the half this end receives on
// (the sender is its Data Source), S=1 the half this end sends on (the
// sender is its Data Sink). The new mode of that half, or nullopt when the
// sender may not ask for it (not the Mode Master, not a transition of
// Figure 26, or the current mode): a protocol violation.
std::optional<Mode> on_mode_change(Mode out, Mode in, const wire::ModeChange& m);

std::string_view to_string(Mode m);

}  // namespace sdp::engine
