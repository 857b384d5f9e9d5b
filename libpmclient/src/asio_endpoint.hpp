// SPDX-License-Identifier: Apache-2.0
// Conversions between pm::Endpoint and Asio endpoints (internal).
#pragma once

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>

#include "pmclient/address.hpp"

namespace pmclient::detail {

inline boost::asio::ip::address to_asio(const pm::IpAddress& a) {
    const auto& b = a.bytes();
    if (a.is_v4()) {
        return boost::asio::ip::address_v4(
            boost::asio::ip::address_v4::bytes_type{b[0], b[1], b[2], b[3]});
    }
    boost::asio::ip::address_v6::bytes_type v6{};
    for (std::size_t i = 0; i < 16; ++i) {
        v6[i] = b[i];
    }
    return boost::asio::ip::address_v6(v6);
}

inline pm::IpAddress to_pm(const boost::asio::ip::address& a) {
    if (a.is_v4()) {
        auto b = a.to_v4().to_bytes();
        return pm::IpAddress::v4({b[0], b[1], b[2], b[3]});
    }
    auto b = a.to_v6().to_bytes();
    std::array<std::uint8_t, 16> out{};
    for (std::size_t i = 0; i < 16; ++i) {
        out[i] = b[i];
    }
    return pm::IpAddress::v6(out);
}

template <typename Proto = boost::asio::ip::udp>
typename Proto::endpoint to_asio_ep(const pm::Endpoint& e) {
    return typename Proto::endpoint(to_asio(e.address), e.port);
}

inline boost::asio::ip::udp::endpoint to_asio(const pm::Endpoint& e) {
    return to_asio_ep<boost::asio::ip::udp>(e);
}

inline pm::Endpoint to_pm(const boost::asio::ip::udp::endpoint& e) {
    return pm::Endpoint{to_pm(e.address()), e.port()};
}

}  // namespace pmclient::detail
