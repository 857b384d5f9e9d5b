// SPDX-License-Identifier: Apache-2.0
#include "sdp/engine/chooser.hpp"

#include <algorithm>
#include <bit>

namespace sdp::engine {

std::size_t MechanismChooser::class_of(std::size_t size) {
    return static_cast<std::size_t>(std::bit_width(size) - 1);  // floor(log2), size > 0
}

Choice MechanismChooser::best(const Class& k) {
    // Zero copy only when clearly cheaper (by 1/8): Bcopy is the safe
    // default, and a noisy sample should not move a class to the mechanism
    // whose trials of the other are rare.
    return 8 * k.mean[1].ps_per_byte < 7 * k.mean[0].ps_per_byte ? Choice::zcopy : Choice::bcopy;
}

Choice MechanismChooser::choose(std::size_t size) {
    if (threshold_ == 0 || size <= threshold_)
        return Choice::bcopy;
    Class& k = classes_[class_of(size)];
    if (k.tried[0] < kWarmup || k.tried[1] < kWarmup) {
        // Alternately (by choices made: a Bcopy sample may come only when
        // the zero-copy write after it has drained the queue).
        const Choice c = k.tried[1] < k.tried[0] ? Choice::zcopy : Choice::bcopy;
        ++k.tried[c == Choice::zcopy ? 1 : 0];
        return c;
    }
    if (k.mean[0].samples == 0 || k.mean[1].samples == 0) {
        // A warm-up write of that mechanism left no sample (it fell back,
        // failed, or its run ended unmeasured): try it again.
        const int missing = k.mean[0].samples == 0 ? 0 : 1;
        k.tried[static_cast<std::size_t>(missing)] = 0;
        return missing == 0 ? Choice::bcopy : Choice::zcopy;
    }
    const Choice pick = best(k);
    if (--k.countdown == 0) {
        k.exploring = true;
        k.countdown = k.interval;
        return pick == Choice::zcopy ? Choice::bcopy : Choice::zcopy;
    }
    return pick;
}

bool MechanismChooser::same_class(std::size_t a, std::size_t b) {
    return std::bit_width(a) == std::bit_width(b);
}

void MechanismChooser::record(std::size_t size, Choice used, std::uint64_t nanoseconds,
                              std::size_t bytes) {
    if (size == 0 || size <= threshold_)
        return;
    if (bytes == 0)
        bytes = size;
    Class& k = classes_[class_of(size)];
    const Choice before = best(k);
    Mean& m = k.mean[used == Choice::zcopy ? 1 : 0];
    // Picoseconds per byte: 1 ns per 64 KiB still counts.
    const std::uint64_t ns = nanoseconds > (UINT64_MAX / 1000) ? UINT64_MAX / 1000 : nanoseconds;
    const std::uint64_t sample = ns * 1000 / bytes;
    m.ps_per_byte = m.samples == 0 ? sample : (3 * m.ps_per_byte + sample) / 4;
    ++m.samples;
    if (k.exploring && used != before) {
        // A trial: confirmed, the next one twice as late; otherwise soon.
        k.exploring = false;
        k.interval = best(k) == before ? std::min(k.interval * 2, kMaxExplore) : kExplore;
        k.countdown = k.interval;
    }
}

std::uint64_t MechanismChooser::cost(std::size_t size, Choice c) const {
    if (size == 0)
        return 0;
    return classes_[class_of(size)].mean[c == Choice::zcopy ? 1 : 0].ps_per_byte;
}

void MechanismChooser::begin_write(std::uint64_t now, std::size_t size, Choice used) {
    if (run_ && run_->bytes > 0 && (used == Choice::zcopy || run_->used == Choice::zcopy)) {
        record(run_->size, run_->used, now > run_->start ? now - run_->start : 0, run_->bytes);
    }
    if (used == Choice::bcopy && run_ && run_->used == Choice::bcopy &&
        (size <= threshold_ || same_class(run_->size, size))) {
        return;
    }
    run_ = Run{now, size, 0, used};
}

void MechanismChooser::restart_run(std::uint64_t now, std::size_t size) {
    run_ = Run{now, size, 0, Choice::bcopy};
}

void MechanismChooser::wrote(std::size_t bytes) {
    if (run_) {
        run_->bytes += bytes;
    }
}

}  // namespace sdp::engine
