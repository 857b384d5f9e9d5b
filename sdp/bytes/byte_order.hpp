// SPDX-License-Identifier: Apache-2.0
// Fixed-width unsigned fields in big-endian (network, the default) or
// little-endian order, and a bounded reader over a byte span. The one copy
// for every codec of the SDP tree: the iWARP layers (MPA, DDP/RDMAP, FPDU
// CRC), the SDP wire codec, sdp::Handoff and the fuzz targets. Pure: no I/O.
//
//   get16/32/64(p)      read a field at p (the caller has checked the size);
//   store16/32(p, v)    write a field at p;
//   put16/32/64(out, v) append a field to `out`;
//   Reader{span}        reads from the front of `in`: every read fails
//                       (false, nothing consumed) past the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <boost/endian/conversion.hpp>

namespace sdp::bytes {

enum class Order { big, little };

namespace detail {

// Boost.Endian does the loads and stores (one load or store and a byte
// swap where needed); this header adds the vector appends and the reader.
template <Order O>
constexpr boost::endian::order order_of() {
    return O == Order::big ? boost::endian::order::big : boost::endian::order::little;
}

template <typename T, Order O>
T load(const std::uint8_t* p) {
    return boost::endian::endian_load<T, sizeof(T), order_of<O>()>(p);
}

template <typename T, Order O>
void store(std::uint8_t* p, T v) {
    boost::endian::endian_store<T, sizeof(T), order_of<O>()>(p, v);
}

template <typename T, Order O>
void append(std::vector<std::uint8_t>& out, T v) {
    std::uint8_t b[sizeof(T)];
    store<T, O>(b, v);
    out.insert(out.end(), b, b + sizeof(T));
}

}  // namespace detail

template <Order O = Order::big>
std::uint16_t get16(const std::uint8_t* p) {
    return detail::load<std::uint16_t, O>(p);
}
template <Order O = Order::big>
std::uint32_t get32(const std::uint8_t* p) {
    return detail::load<std::uint32_t, O>(p);
}
template <Order O = Order::big>
std::uint64_t get64(const std::uint8_t* p) {
    return detail::load<std::uint64_t, O>(p);
}

template <Order O = Order::big>
void store16(std::uint8_t* p, std::uint16_t v) {
    detail::store<std::uint16_t, O>(p, v);
}
template <Order O = Order::big>
void store32(std::uint8_t* p, std::uint32_t v) {
    detail::store<std::uint32_t, O>(p, v);
}

template <Order O = Order::big>
void put16(std::vector<std::uint8_t>& out, std::uint16_t v) {
    detail::append<std::uint16_t, O>(out, v);
}
template <Order O = Order::big>
void put32(std::vector<std::uint8_t>& out, std::uint32_t v) {
    detail::append<std::uint32_t, O>(out, v);
}
template <Order O = Order::big>
void put64(std::vector<std::uint8_t>& out, std::uint64_t v) {
    detail::append<std::uint64_t, O>(out, v);
}

// Reads from the front of `in`; every read fails (false, `in` and the
// output unchanged) when fewer bytes are left than it needs.
template <Order O = Order::big>
struct BasicReader {
    std::span<const std::uint8_t> in;

    bool take(std::size_t n, std::span<const std::uint8_t>& out) {
        if (in.size() < n) {
            return false;
        }
        out = in.first(n);
        in = in.subspan(n);
        return true;
    }
    bool u8(std::uint8_t& v) { return field(v); }
    bool u16(std::uint16_t& v) { return field(v); }
    bool u32(std::uint32_t& v) { return field(v); }
    bool u64(std::uint64_t& v) { return field(v); }

  private:
    template <typename T>
    bool field(T& v) {
        std::span<const std::uint8_t> b;
        if (!take(sizeof(T), b)) {
            return false;
        }
        v = detail::load<T, O>(b.data());
        return true;
    }
};

using Reader = BasicReader<Order::big>;
using LeReader = BasicReader<Order::little>;

}  // namespace sdp::bytes
