// SPDX-License-Identifier: Apache-2.0
// The adaptive choice of a Data Source's transfer mechanism (issue #13,
// `Mechanism::automatic`): Bcopy (9.1) or zero copy (Read Zcopy, 9.2) for
// each write larger than the Bcopy Threshold, picked from the cost measured
// so far on this connection. Sans-I/O: the driver says how long each write
// took (its clock), the chooser keeps the numbers and decides.
//
// Writes are grouped by size (one class per power of two). In each class
// both mechanisms are tried kWarmup times, alternately; after that Bcopy is
// used unless zero copy costs at least 1/8 less per byte (an exponentially
// weighted mean, weight 1/4 for the newest sample), and now and then a
// write tries the other
// one, so that a change of conditions is noticed: after kExplore writes,
// then after twice as many each time the trial confirms the choice (at most
// kMaxExplore), and after kExplore again once the choice changed. An
// exploring write costs what the worse mechanism costs, so it must be rare
// where the two differ a lot (64 KiB on loopback: zero copy 4x). Writes
// not larger than the threshold always go by Bcopy (section 10 rule 5's
// threshold keeps its meaning).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace sdp::engine {

enum class Choice : std::uint8_t { bcopy, zcopy };

class MechanismChooser {
  public:
    static constexpr std::uint32_t kWarmup = 3;
    static constexpr std::uint32_t kExplore = 16;
    static constexpr std::uint32_t kMaxExplore = 1024;

    explicit MechanismChooser(std::size_t threshold) : threshold_(threshold) {}

    // The mechanism for the next write of `size` bytes.
    Choice choose(std::size_t size);
    // Writes of the class of `size` by `used` moved `bytes` (0: `size`) in
    // `nanoseconds`. For the driver: a zero-copy write from its start to the
    // next write's start; a run of Bcopy writes from the first one's start
    // until its bytes have left the send queue (the next zero-copy write
    // waits for that), so that queued bytes count where they were written.
    void record(std::size_t size, Choice used, std::uint64_t nanoseconds, std::size_t bytes = 0);
    // Whether two sizes are in the same class.
    [[nodiscard]] static bool same_class(std::size_t a, std::size_t b);

    // --- the sample being taken, for a driver's write() ---------------------
    // The last zero-copy write (until the next write starts) or the current
    // run of Bcopy writes (until a zero-copy write has drained the queue
    // behind it). `now` is the driver's clock in nanoseconds.
    //
    // A write of `size` by `used` starts: a sample that either is zero copy
    // ends and is recorded. A Bcopy write continues the current Bcopy run
    // unless it is larger than the threshold and of another size class (that
    // run ends without a sample: its queue was not drained). Small writes
    // (at most the threshold) join the run, so a "small header, large body"
    // pattern still measures the body's class.
    void begin_write(std::uint64_t now, std::size_t size, Choice used);
    // The zero-copy write of `size` was refused: a new Bcopy run starts (the
    // one before ends without a sample).
    void restart_run(std::uint64_t now, std::size_t size);
    // Bytes the write in progress moved.
    void wrote(std::size_t bytes);
    // The write failed: no sample from it.
    void discard() { run_.reset(); }

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
        std::array<std::uint32_t, 2> tried{};  // warm-up choices made
        std::uint32_t interval = kExplore;     // writes between trials
        std::uint32_t countdown = kExplore;    // writes to the next trial
        bool exploring = false;                // the last choice was a trial
    };
    static Choice best(const Class& k);
    static std::size_t class_of(std::size_t size);

    struct Run {
        std::uint64_t start = 0;
        std::size_t size = 0;   // its size class
        std::size_t bytes = 0;  // written in it
        Choice used = Choice::bcopy;
    };

    std::size_t threshold_;
    std::array<Class, 64> classes_{};
    std::optional<Run> run_;
};

// A driver's write() and the chooser: the one sequence of calls every
// front end makes (SoftChannel, RdmaChannel, AsioChannel). Without
// `automatic` (a fixed mechanism, or no Bcopy Threshold) it answers with the
// fixed choice and records nothing. `now` is the driver's clock.
class WriteChoice {
  public:
    WriteChoice() = default;
    WriteChoice(bool automatic, std::size_t threshold) {
        if (automatic && threshold > 0) {
            chooser_.emplace(threshold);
        }
    }
    [[nodiscard]] bool automatic() const { return chooser_.has_value(); }
    [[nodiscard]] const MechanismChooser* chooser() const {
        return chooser_ ? &*chooser_ : nullptr;
    }
    // A write that may not wait (Stream::try_write) goes by Bcopy only when
    // that is certain: no measurement (automatic) and not above the zero
    // copy threshold (0: none) of a fixed mechanism. Else it is refused:
    // zero copy waits for the peer by nature.
    [[nodiscard]] bool bcopy_without_wait(std::size_t size, std::size_t threshold) const {
        return !automatic() && !(threshold > 0 && size > threshold);
    }
    // Whether a write of `size` tries zero copy (`fixed` when not
    // automatic). A write that goes by Bcopy starts its sample here.
    bool try_zcopy(std::uint64_t now, std::size_t size, bool fixed) {
        if (!chooser_) {
            return fixed;
        }
        if (chooser_->choose(size) == Choice::zcopy) {
            return true;
        }
        chooser_->begin_write(now, size, Choice::bcopy);
        return false;
    }
    // The zero-copy write of `size` went out (its queue had drained: the
    // Bcopy run before it ends here).
    void zcopy_started(std::uint64_t now, std::size_t size) {
        if (chooser_) {
            chooser_->begin_write(now, size, Choice::zcopy);
        }
    }
    // The zero-copy write was refused: it goes by Bcopy, as a new run.
    void zcopy_refused(std::uint64_t now, std::size_t size) {
        if (chooser_) {
            chooser_->restart_run(now, size);
        }
    }
    // The write ended having moved `bytes`; a failed one leaves no sample.
    void finished(std::size_t bytes, bool failed) {
        if (!chooser_) {
            return;
        }
        if (failed) {
            chooser_->discard();
        } else {
            chooser_->wrote(bytes);
        }
    }

  private:
    std::optional<MechanismChooser> chooser_;
};

}  // namespace sdp::engine
