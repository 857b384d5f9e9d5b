// SPDX-License-Identifier: Apache-2.0
// A minimal expected<T, E> (C++20 has no std::expected): every decoder in
// this directory returns a value or a typed error, never throws.
#pragma once

#include <utility>
#include <variant>

namespace sdp::iwarp {

template <class E>
struct Unexpected {
    E error;
};

template <class E>
Unexpected<E> unexpected(E e) {
    return Unexpected<E>{e};
}

template <class T, class E>
class Result {
  public:
    Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT
    Result(Unexpected<E> e) : v_(std::in_place_index<1>, e.error) {}   // NOLINT

    [[nodiscard]] bool has_value() const { return v_.index() == 0; }
    explicit operator bool() const { return has_value(); }
    [[nodiscard]] T& value() { return std::get<0>(v_); }
    [[nodiscard]] const T& value() const { return std::get<0>(v_); }
    [[nodiscard]] E error() const { return std::get<1>(v_); }
    T& operator*() { return value(); }
    const T& operator*() const { return value(); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }

  private:
    std::variant<T, E> v_;
};

}  // namespace sdp::iwarp
