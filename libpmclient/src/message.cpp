// SPDX-License-Identifier: Apache-2.0
#include "pmclient/message.hpp"

#include <cstring>

namespace pm {
namespace {

void put16(std::uint8_t* p, std::uint16_t v) {
    p[0] = static_cast<std::uint8_t>(v >> 8);
    p[1] = static_cast<std::uint8_t>(v);
}

void put64(std::uint8_t* p, std::uint64_t v) {
    for (int i = 7; i >= 0; --i) {
        p[i] = static_cast<std::uint8_t>(v);
        v >>= 8;
    }
}

std::uint16_t get16(const std::uint8_t* p) {
    return static_cast<std::uint16_t>((p[0] << 8) | p[1]);
}

std::uint64_t get64(const std::uint8_t* p) {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) {
        v = (v << 8) | p[i];
    }
    return v;
}

IpAddress get_addr(const std::uint8_t* p, Family f) {
    if (f == Family::v4) {
        return IpAddress::v4({p[0], p[1], p[2], p[3]});
    }
    std::array<std::uint8_t, 16> b{};
    std::memcpy(b.data(), p, 16);
    return IpAddress::v6(b);
}

void put_addr(std::uint8_t* p, const IpAddress& a, Family f) {
    std::memset(p, 0, 16);
    std::memcpy(p, a.bytes().data(), f == Family::v4 ? 4 : 16);
}

}  // namespace

std::string_view to_string(MessageType t) {
    switch (t) {
        case MessageType::request:
            return "PMReq";
        case MessageType::accept:
            return "PMAccept";
        case MessageType::ack:
            return "PMAck";
        case MessageType::deny:
            return "PMDeny";
    }
    return "?";
}

std::string_view to_string(DecodeError e) {
    switch (e) {
        case DecodeError::too_short:
            return "too_short";
        case DecodeError::too_long:
            return "too_long";
        case DecodeError::bad_version:
            return "bad_version";
        case DecodeError::reserved_ipv:
            return "reserved_ipv";
    }
    return "?";
}

DecodeResult decode(std::span<const std::uint8_t> bytes) {
    if (bytes.size() < kMessageSize) {
        return DecodeError::too_short;
    }
    const std::uint8_t* p = bytes.data();
    if ((p[0] >> 6) != 0) {
        return DecodeError::bad_version;
    }
    auto type = static_cast<MessageType>((p[0] >> 4) & 0x3);
    bool trailer = false;
    if (bytes.size() != kMessageSize) {
        if (bytes.size() != kIwpmRequestSize || type != MessageType::request) {
            return DecodeError::too_long;
        }
        trailer = true;
    }
    unsigned ipv = p[0] & 0x0f;
    if (ipv != 4 && ipv != 6) {
        return DecodeError::reserved_ipv;
    }
    Message m;
    m.type = type;
    m.ipv = static_cast<Family>(ipv);
    m.pm_time = p[1];
    // p[2], p[3]: Reserved, never checked (7.3.1.5).
    m.ap_port = get16(p + 4);
    m.cp_port = get16(p + 6);
    m.assoc_handle = get64(p + 8);
    m.cp_addr = get_addr(p + 16, m.ipv);
    m.ap_addr = get_addr(p + 32, m.ipv);
    m.iwpm_trailer = trailer;
    return m;
}

void encode(const Message& m, std::span<std::uint8_t, kMessageSize> out) {
    std::uint8_t* p = out.data();
    p[0] = static_cast<std::uint8_t>((static_cast<unsigned>(m.type) & 0x3) << 4 |
                                     (static_cast<unsigned>(m.ipv) & 0xf));
    p[1] = m.pm_time;
    p[2] = 0;
    p[3] = 0;
    put16(p + 4, m.ap_port);
    put16(p + 6, m.cp_port);
    put64(p + 8, m.assoc_handle);
    put_addr(p + 16, m.cp_addr, m.ipv);
    put_addr(p + 32, m.ap_addr, m.ipv);
}

Wire encode(const Message& m) {
    Wire w{};
    encode(m, w);
    return w;
}

Message make_accept(const Message& req, const Endpoint& sdp, std::uint8_t pm_time) {
    Message r = req;
    r.type = MessageType::accept;
    r.pm_time = pm_time;
    r.ap_port = sdp.port;
    r.ap_addr = sdp.address;
    r.iwpm_trailer = false;
    return r;
}

Message make_deny(const Message& req, DenyApPort ap_port) {
    Message r = req;
    r.type = MessageType::deny;
    r.pm_time = 0;
    if (ap_port == DenyApPort::zero) {
        r.ap_port = 0;
    }
    r.iwpm_trailer = false;
    return r;
}

Message make_ack(const Message& accept) {
    Message r = accept;
    r.type = MessageType::ack;
    r.pm_time = 0;
    r.iwpm_trailer = false;
    return r;
}

}  // namespace pm
