// SPDX-License-Identifier: Apache-2.0
#include "sdp/iwarp/mpa.hpp"

#include <algorithm>
#include <cstring>

#include "sdp/bytes/byte_order.hpp"

namespace sdp::iwarp {
namespace {

constexpr char kRepKey[] = "MPA ID Rep Frame";
constexpr std::size_t kKeySize = 16;

std::uint16_t cap14(std::uint16_t v) {
    return std::min<std::uint16_t>(v, kMpaIrdOrdMax);
}

}  // namespace

const char* to_string(MpaError e) {
    switch (e) {
        case MpaError::need_more:
            return "incomplete MPA frame";
        case MpaError::bad_key:
            return "bad MPA key";
        case MpaError::bad_rev:
            return "unsupported MPA revision";
        case MpaError::pd_too_long:
            return "MPA private data too long";
        case MpaError::bad_v2_block:
            return "MPA v2 IRD/ORD block missing";
        case MpaError::markers_not_supported:
            return "MPA markers not supported";
        case MpaError::rejected_by_peer:
            return "rejected by peer";
        case MpaError::rejected_locally:
            return "rejected locally";
        case MpaError::no_matching_rtr:
            return "no matching peer-to-peer RTR";
        case MpaError::ulp_pd_too_long:
            return "ULP private data too long";
        case MpaError::wrong_state:
            return "call not allowed in this MPA state";
    }
    return "unknown MPA error";
}

Result<MpaDecoded, MpaError> decode_mpa_frame(std::span<const std::uint8_t> in) {
    if (in.size() < kMpaHeaderSize) {
        // Reject a wrong key as early as it is visible.
        const std::size_t n = std::min(in.size(), kKeySize);
        if (n > 0 && std::memcmp(in.data(), kMpaRequestKey.data(), n) != 0 &&
            std::memcmp(in.data(), kRepKey, n) != 0) {
            return unexpected(MpaError::bad_key);
        }
        return unexpected(MpaError::need_more);
    }
    MpaFrame f;
    if (std::memcmp(in.data(), kMpaRequestKey.data(), kKeySize) == 0) {
        f.key = MpaKey::request;
    } else if (std::memcmp(in.data(), kRepKey, kKeySize) == 0) {
        f.key = MpaKey::reply;
    } else {
        return unexpected(MpaError::bad_key);
    }
    const std::uint8_t flags = in[16];
    f.markers = (flags & kMpaFlagMarkers) != 0;
    f.crc = (flags & kMpaFlagCrc) != 0;
    f.reject = (flags & kMpaFlagReject) != 0;
    f.enhanced = (flags & kMpaFlagEnhanced) != 0;
    f.rev = in[17];
    const std::size_t pd_len = bytes::get16(&in[18]);
    if (pd_len > kMpaMaxPrivateData) {
        return unexpected(MpaError::pd_too_long);
    }
    if (in.size() < kMpaHeaderSize + pd_len) {
        return unexpected(MpaError::need_more);
    }
    f.private_data.assign(in.begin() + kMpaHeaderSize, in.begin() + kMpaHeaderSize + pd_len);
    return MpaDecoded{std::move(f), kMpaHeaderSize + pd_len};
}

Result<std::vector<std::uint8_t>, MpaError> encode_mpa_frame(const MpaFrame& f) {
    if (f.private_data.size() > 0xFFFF) {
        return unexpected(MpaError::pd_too_long);
    }
    std::vector<std::uint8_t> out;
    out.reserve(kMpaHeaderSize + f.private_data.size());
    const char* key = f.key == MpaKey::request ? kMpaRequestKey.data() : kRepKey;
    out.insert(out.end(), key, key + kKeySize);
    std::uint8_t flags = 0;
    flags |= f.markers ? kMpaFlagMarkers : 0;
    flags |= f.crc ? kMpaFlagCrc : 0;
    flags |= f.reject ? kMpaFlagReject : 0;
    flags |= f.enhanced ? kMpaFlagEnhanced : 0;
    out.push_back(flags);
    out.push_back(f.rev);
    bytes::put16(out, static_cast<std::uint16_t>(f.private_data.size()));
    out.insert(out.end(), f.private_data.begin(), f.private_data.end());
    return out;
}

std::array<std::uint8_t, kMpaV2BlockSize> encode_mpa_v2(const MpaV2Params& p) {
    const auto ird =
        static_cast<std::uint16_t>((p.p2p ? 0x8000 : 0) | (p.send_rtr ? 0x4000 : 0) | cap14(p.ird));
    const auto ord = static_cast<std::uint16_t>((p.write_rtr ? 0x8000 : 0) |
                                                (p.read_rtr ? 0x4000 : 0) | cap14(p.ord));
    std::array<std::uint8_t, kMpaV2BlockSize> b{};
    bytes::store16(b.data(), ird);
    bytes::store16(b.data() + 2, ord);
    return b;
}

MpaV2Params decode_mpa_v2(std::span<const std::uint8_t, kMpaV2BlockSize> b) {
    const std::uint16_t ird = bytes::get16(b.data());
    const std::uint16_t ord = bytes::get16(b.data() + 2);
    MpaV2Params p;
    p.p2p = (ird & 0x8000) != 0;
    p.send_rtr = (ird & 0x4000) != 0;
    p.ird = ird & kMpaIrdOrdMax;
    p.write_rtr = (ord & 0x8000) != 0;
    p.read_rtr = (ord & 0x4000) != 0;
    p.ord = ord & kMpaIrdOrdMax;
    return p;
}

MpaNegotiator::MpaNegotiator(MpaRole role, MpaConfig cfg)
    : role_(role),
      cfg_(std::move(cfg)),
      state_(role == MpaRole::initiator ? MpaState::idle : MpaState::awaiting_request) {
    cfg_.ird = cap14(cfg_.ird);
    cfg_.ord = cap14(cfg_.ord);
    reply_rev_ = cfg_.enhanced ? 2 : 1;
}

std::optional<MpaError> MpaNegotiator::start() {
    if (role_ != MpaRole::initiator || state_ != MpaState::idle) {
        return MpaError::wrong_state;
    }
    const std::size_t limit = cfg_.enhanced ? kMpaMaxUlpPrivData : kMpaMaxSendPrivData;
    if (cfg_.private_data.size() > limit) {
        return MpaError::ulp_pd_too_long;
    }
    MpaFrame f;
    f.key = MpaKey::request;
    f.crc = cfg_.crc;
    f.enhanced = cfg_.enhanced;
    f.rev = cfg_.enhanced ? 2 : 1;
    if (cfg_.enhanced) {
        MpaV2Params p;
        p.p2p = cfg_.p2p;
        p.ird = cfg_.ird;
        p.ord = cfg_.ord;
        p.write_rtr = cfg_.p2p && cfg_.rtr_write;
        p.read_rtr = cfg_.p2p && cfg_.rtr_read;
        const auto b = encode_mpa_v2(p);
        f.private_data.assign(b.begin(), b.end());
    }
    f.private_data.insert(f.private_data.end(), cfg_.private_data.begin(), cfg_.private_data.end());
    sent_rev_ = f.rev;
    auto bytes = encode_mpa_frame(f);
    out_.insert(out_.end(), bytes->begin(), bytes->end());
    state_ = MpaState::awaiting_reply;
    return std::nullopt;
}

std::size_t MpaNegotiator::on_bytes(std::span<const std::uint8_t> in) {
    std::size_t used = 0;
    while (used < in.size() &&
           (state_ == MpaState::awaiting_reply || state_ == MpaState::awaiting_request)) {
        std::size_t want = kMpaHeaderSize - std::min(in_.size(), kMpaHeaderSize);
        if (in_.size() >= kMpaHeaderSize) {
            want = kMpaHeaderSize + bytes::get16(&in_[18]) - in_.size();
        }
        const std::size_t take = std::min(want, in.size() - used);
        in_.insert(in_.end(), in.begin() + static_cast<std::ptrdiff_t>(used),
                   in.begin() + static_cast<std::ptrdiff_t>(used + take));
        used += take;
        auto d = decode_mpa_frame(in_);
        if (!d) {
            if (d.error() != MpaError::need_more) {
                fail(d.error());
            }
            continue;
        }
        in_.clear();
        handle_frame(d->frame);
    }
    return used;
}

void MpaNegotiator::fail(MpaError e) {
    state_ = MpaState::failed;
    error_ = e;
}

void MpaNegotiator::handle_frame(const MpaFrame& f) {
    if (role_ == MpaRole::responder) {
        handle_request(f);
    } else {
        handle_reply(f);
    }
}

void MpaNegotiator::handle_request(const MpaFrame& f) {
    if (f.key != MpaKey::request) {
        fail(MpaError::bad_key);
        return;
    }
    if (f.rev == 0 || f.rev > 2) {
        send_reply(true, {});
        fail(MpaError::bad_rev);
        return;
    }
    reply_rev_ = std::min<std::uint8_t>(reply_rev_, f.rev);
    outcome_.rev = reply_rev_;
    outcome_.enhanced = reply_rev_ == 2 && f.enhanced && cfg_.enhanced;
    outcome_.crc = f.crc || cfg_.crc;
    if (f.markers) {
        send_reply(true, {});
        fail(MpaError::markers_not_supported);
        return;
    }
    std::span<const std::uint8_t> ulp(f.private_data);
    outcome_.ird = cfg_.ird;
    outcome_.ord = cfg_.ord;
    if (outcome_.enhanced) {
        if (f.private_data.size() < kMpaV2BlockSize) {
            outcome_.enhanced = false;
            send_reply(true, {});
            fail(MpaError::bad_v2_block);
            return;
        }
        if (!take_v2_block(ulp)) {
            outcome_.p2p = false;
            send_reply(true, {});
            fail(MpaError::no_matching_rtr);
            return;
        }
    }
    outcome_.peer_private_data.assign(ulp.begin(), ulp.end());
    state_ = MpaState::request_received;
}

bool MpaNegotiator::take_v2_block(std::span<const std::uint8_t>& ulp) {
    const auto peer = decode_mpa_v2(ulp.first<kMpaV2BlockSize>());
    ulp = ulp.subspan(kMpaV2BlockSize);
    outcome_.ord = std::min(peer.ird, cfg_.ord);
    outcome_.ird = std::min(peer.ord, cfg_.ird);
    if (!peer.p2p || !cfg_.p2p) {
        return true;
    }
    outcome_.p2p = true;
    if (peer.write_rtr && cfg_.rtr_write) {
        outcome_.rtr = RtrMode::write;
    } else if (peer.read_rtr && cfg_.rtr_read) {
        outcome_.rtr = RtrMode::read;
    } else {
        return false;
    }
    return true;
}

void MpaNegotiator::send_reply(bool reject, std::span<const std::uint8_t> ulp_pd) {
    MpaFrame f;
    f.key = MpaKey::reply;
    f.crc = outcome_.crc;
    f.reject = reject;
    f.rev = reply_rev_;
    f.enhanced = outcome_.enhanced;
    if (outcome_.enhanced) {
        MpaV2Params p;
        p.p2p = outcome_.p2p;
        p.ird = outcome_.ird;
        p.ord = outcome_.ord;
        p.write_rtr = outcome_.rtr == RtrMode::write;
        p.read_rtr = outcome_.rtr == RtrMode::read;
        const auto b = encode_mpa_v2(p);
        f.private_data.assign(b.begin(), b.end());
    }
    f.private_data.insert(f.private_data.end(), ulp_pd.begin(), ulp_pd.end());
    auto bytes = encode_mpa_frame(f);
    out_.insert(out_.end(), bytes->begin(), bytes->end());
}

std::optional<MpaError> MpaNegotiator::accept(std::span<const std::uint8_t> ulp_private_data) {
    if (state_ != MpaState::request_received) {
        return MpaError::wrong_state;
    }
    const std::size_t limit = outcome_.enhanced ? kMpaMaxUlpPrivData : kMpaMaxSendPrivData;
    if (ulp_private_data.size() > limit) {
        return MpaError::ulp_pd_too_long;
    }
    send_reply(false, ulp_private_data);
    state_ = MpaState::established;
    return std::nullopt;
}

std::optional<MpaError> MpaNegotiator::reject(std::span<const std::uint8_t> ulp_private_data) {
    if (state_ != MpaState::request_received) {
        return MpaError::wrong_state;
    }
    const std::size_t limit = outcome_.enhanced ? kMpaMaxUlpPrivData : kMpaMaxSendPrivData;
    send_reply(true, ulp_private_data.first(std::min(limit, ulp_private_data.size())));
    fail(MpaError::rejected_locally);
    return std::nullopt;
}

void MpaNegotiator::handle_reply(const MpaFrame& f) {
    if (f.key != MpaKey::reply) {
        fail(MpaError::bad_key);
        return;
    }
    if (f.rev == 0 || f.rev > sent_rev_) {
        fail(MpaError::bad_rev);
        return;
    }
    outcome_.rev = f.rev;
    outcome_.enhanced = f.rev == 2 && f.enhanced && cfg_.enhanced;
    outcome_.crc = f.crc || cfg_.crc;
    outcome_.ird = cfg_.ird;
    outcome_.ord = cfg_.ord;
    std::span<const std::uint8_t> ulp(f.private_data);
    // A rejecting Reply's block is taken for its values only: the
    // rejection is the error.
    if (outcome_.enhanced && ulp.size() >= kMpaV2BlockSize && !take_v2_block(ulp) && !f.reject) {
        outcome_.p2p = false;
        outcome_.peer_private_data.assign(ulp.begin(), ulp.end());
        fail(MpaError::no_matching_rtr);
        return;
    }
    outcome_.peer_private_data.assign(ulp.begin(), ulp.end());
    if (f.reject) {
        fail(MpaError::rejected_by_peer);
        return;
    }
    if (outcome_.enhanced && f.private_data.size() < kMpaV2BlockSize) {
        fail(MpaError::bad_v2_block);
        return;
    }
    if (f.markers) {
        fail(MpaError::markers_not_supported);
        return;
    }
    state_ = MpaState::established;
}

std::vector<std::uint8_t> MpaNegotiator::take_output() {
    return std::exchange(out_, {});
}

}  // namespace sdp::iwarp
