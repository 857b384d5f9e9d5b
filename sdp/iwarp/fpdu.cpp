// SPDX-License-Identifier: Apache-2.0
#include "sdp/iwarp/fpdu.hpp"

#include <algorithm>
#include <array>

#include "sdp/bytes/byte_order.hpp"

namespace sdp::iwarp {

const char* to_string(FpduError e) {
    switch (e) {
        case FpduError::crc:
            return "MPA CRC error";
        case FpduError::length:
            return "bad MPA ULPDU length";
    }
    return "unknown FPDU error";
}

void frame_fpdu(FpduFrame& f, std::span<const std::uint8_t> header,
                std::span<const std::uint8_t> payload, bool crc) {
    const std::size_t len = header.size() + payload.size();
    bytes::store16(f.prefix, static_cast<std::uint16_t>(len));
    std::copy(header.begin(), header.end(), f.prefix + kFpduHeaderSize);
    f.prefix_len = static_cast<std::uint8_t>(kFpduHeaderSize + header.size());
    const std::size_t pad = fpdu_pad(len);
    std::fill_n(f.trailer, pad, std::uint8_t{0});
    std::uint32_t v = 0;
    if (crc) {
        Crc32c c;
        c.update(std::span<const std::uint8_t>(f.prefix, f.prefix_len));
        c.update(payload);
        c.update(std::span<const std::uint8_t>(f.trailer, pad));
        v = c.value();
    }
    bytes::store32<bytes::Order::little>(f.trailer + pad, v);
    f.trailer_len = static_cast<std::uint8_t>(pad + kFpduCrcSize);
}

void append_fpdu(std::vector<std::uint8_t>& out, std::span<const std::uint8_t> header,
                 std::span<const std::uint8_t> payload, bool crc) {
    const std::size_t len = header.size() + payload.size();
    const std::size_t start = out.size();
    if (out.capacity() < start + fpdu_size(len)) {
        // Geometric growth: FPDUs are appended one after another.
        out.reserve(std::max(start + fpdu_size(len), 2 * out.capacity()));
    }
    bytes::put16(out, static_cast<std::uint16_t>(len));
    out.insert(out.end(), header.begin(), header.end());
    out.insert(out.end(), payload.begin(), payload.end());
    out.insert(out.end(), fpdu_pad(len), std::uint8_t{0});
    std::uint32_t v = 0;
    if (crc) {
        v = crc32c(std::span<const std::uint8_t>(out).subspan(start));
    }
    bytes::put32<bytes::Order::little>(out, v);
}

std::size_t FpduReceiver::whole_fpdu(std::span<const std::uint8_t> in) {
    if (in.size() < kFpduHeaderSize) {
        return 0;
    }
    const std::size_t len = bytes::get16(in.data());
    if (len == 0 || len > max_ulpdu_ || in.size() < fpdu_size(len)) {
        return 0;
    }
    len_ = len;
    const std::size_t body = kFpduHeaderSize + len + fpdu_pad(len);
    if (crc_) {
        const std::uint32_t got = bytes::get32<bytes::Order::little>(in.data() + body);
        if (got != crc32c(in.first(body))) {
            error_ = FpduError::crc;
        }
    }
    return body + kFpduCrcSize;
}

std::size_t FpduReceiver::step(std::span<const std::uint8_t> in) {
    switch (state_) {
        case State::header: {
            const std::size_t n = std::min(in.size(), kFpduHeaderSize - hdr_fill_);
            std::copy_n(in.begin(), n, hdr_ + hdr_fill_);
            hdr_fill_ += n;
            if (hdr_fill_ == kFpduHeaderSize) {
                len_ = bytes::get16(hdr_);
                if (len_ == 0 || len_ > max_ulpdu_) {
                    error_ = FpduError::length;
                    return n;
                }
                crc32_.reset();
                if (crc_) {
                    crc32_.update(std::span<const std::uint8_t>(hdr_, kFpduHeaderSize));
                }
                ulpdu_.clear();
                ulpdu_.reserve(len_);
                data_need_ = len_ + fpdu_pad(len_);
                state_ = State::data;
            }
            return n;
        }
        case State::data: {
            const std::size_t n = std::min(in.size(), data_need_);
            auto chunk = in.first(n);
            if (crc_) {
                crc32_.update(chunk);
            }
            const std::size_t to_ulpdu = std::min(n, len_ - std::min(len_, ulpdu_.size()));
            ulpdu_.insert(ulpdu_.end(), chunk.begin(),
                          chunk.begin() + static_cast<std::ptrdiff_t>(to_ulpdu));
            data_need_ -= n;
            if (data_need_ == 0) {
                state_ = State::trailer;
                trailer_fill_ = 0;
            }
            return n;
        }
        case State::trailer: {
            const std::size_t n = std::min(in.size(), kFpduCrcSize - trailer_fill_);
            std::copy_n(in.begin(), n, trailer_ + trailer_fill_);
            trailer_fill_ += n;
            if (trailer_fill_ == kFpduCrcSize) {
                const std::uint32_t got = bytes::get32<bytes::Order::little>(trailer_);
                if (crc_ && got != crc32_.value()) {
                    error_ = FpduError::crc;
                    return n;
                }
                state_ = State::header;
                hdr_fill_ = 0;
                complete_ = true;
            }
            return n;
        }
    }
    return 0;
}

}  // namespace sdp::iwarp
