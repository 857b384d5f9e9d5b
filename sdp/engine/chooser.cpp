// SPDX-License-Identifier: Apache-2.0
#include "sdp/engine/chooser.hpp"

#include <bit>

namespace sdp::engine {

std::size_t MechanismChooser::class_of(std::size_t size) {
    return static_cast<std::size_t>(std::bit_width(size) - 1);  // floor(log2), size > 0
}

Choice MechanismChooser::choose(std::size_t size) {
    if (threshold_ == 0 || size <= threshold_)
        return Choice::bcopy;
    Class& k = classes_[class_of(size)];
    const Mean& b = k.mean[0];
    const Mean& z = k.mean[1];
    ++k.writes;
    if (b.samples < kWarmup || z.samples < kWarmup)
        return z.samples < b.samples ? Choice::zcopy : Choice::bcopy;  // alternately
    const Choice best = z.ps_per_byte < b.ps_per_byte ? Choice::zcopy : Choice::bcopy;
    if (k.writes % kExplore == 0)
        return best == Choice::zcopy ? Choice::bcopy : Choice::zcopy;
    return best;
}

void MechanismChooser::record(std::size_t size, Choice used, std::uint64_t nanoseconds) {
    if (size == 0 || size <= threshold_)
        return;
    Mean& m = classes_[class_of(size)].mean[used == Choice::zcopy ? 1 : 0];
    // Picoseconds per byte: 1 ns per 64 KiB still counts.
    const std::uint64_t ns = nanoseconds > (UINT64_MAX / 1000) ? UINT64_MAX / 1000 : nanoseconds;
    const std::uint64_t sample = ns * 1000 / size;
    m.ps_per_byte = m.samples == 0 ? sample : (3 * m.ps_per_byte + sample) / 4;
    ++m.samples;
}

std::uint64_t MechanismChooser::cost(std::size_t size, Choice c) const {
    if (size == 0)
        return 0;
    return classes_[class_of(size)].mean[c == Choice::zcopy ? 1 : 0].ps_per_byte;
}

}  // namespace sdp::engine
