// SPDX-License-Identifier: Apache-2.0
// The adaptive choice of a Data Source's transfer mechanism (issue #13,
// `Mechanism::automatic`): Bcopy (9.1) or zero copy (Read Zcopy, 9.2) for
// each write larger than the Bcopy Threshold, picked from the cost measured
// so far on this connection. Sans-I/O: the driver says how long each write
// took (its clock), the chooser keeps the numbers and decides.
//
// Writes are grouped by size (one class per power of two). In each class
// both mechanisms are tried kWarmup times, alternately; after that the one
// with the lower cost per byte (an exponentially weighted mean, weight 1/4
// for the newest sample) is used, and every kExplore-th write of the class
// tries the other one, so that a change of conditions is noticed. Writes
// not larger than the threshold always go by Bcopy (section 10 rule 5's
// threshold keeps its meaning).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace sdp::engine {

enum class Choice : std::uint8_t { bcopy, zcopy };

class MechanismChooser {
  public:
    static constexpr std::uint32_t kWarmup = 3;
    static constexpr std::uint32_t kExplore = 16;

    explicit MechanismChooser(std::size_t threshold) : threshold_(threshold) {}

    // The mechanism for the next write of `size` bytes.
    Choice choose(std::size_t size);
    // A write of `size` bytes by `used` cost `nanoseconds` (for the driver:
    // from its start to the start of the next write, so that the time the
    // transfer still takes after a Bcopy write returned counts too).
    void record(std::size_t size, Choice used, std::uint64_t nanoseconds);

    // The class's mean cost in picoseconds per byte (0: no sample yet).
    [[nodiscard]] std::uint64_t cost(std::size_t size, Choice c) const;
    [[nodiscard]] std::size_t threshold() const { return threshold_; }

  private:
    struct Mean {
        std::uint64_t ps_per_byte = 0;
        std::uint32_t samples = 0;
    };
    struct Class {
        std::array<Mean, 2> mean{};
        std::uint32_t writes = 0;
    };
    static std::size_t class_of(std::size_t size);

    std::size_t threshold_;
    std::array<Class, 64> classes_{};
};

}  // namespace sdp::engine
