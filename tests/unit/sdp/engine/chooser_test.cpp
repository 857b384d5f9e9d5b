// SPDX-License-Identifier: Apache-2.0
// The adaptive mechanism choice (chooser.hpp), fed with synthetic costs.
#include <gtest/gtest.h>

#include <vector>

#include "sdp/engine/chooser.hpp"

namespace {

using sdp::engine::Choice;
using sdp::engine::MechanismChooser;
using sdp::engine::WriteChoice;

// Runs `n` writes of `size` bytes whose cost per mechanism is given in ns;
// returns the choices made.
std::vector<Choice> run(MechanismChooser& m, std::size_t size, int n, std::uint64_t bcopy_ns,
                        std::uint64_t zcopy_ns) {
    std::vector<Choice> out;
    for (int i = 0; i < n; ++i) {
        const Choice c = m.choose(size);
        m.record(size, c, c == Choice::zcopy ? zcopy_ns : bcopy_ns);
        out.push_back(c);
    }
    return out;
}

int count(const std::vector<Choice>& v, Choice c) {
    int n = 0;
    for (Choice x : v)
        n += x == c ? 1 : 0;
    return n;
}

TEST(MechanismChooser, AtOrBelowTheThresholdAlwaysBcopy) {
    MechanismChooser m(32 * 1024);
    const auto v = run(m, 32 * 1024, 50, 1000000, 1);
    EXPECT_EQ(count(v, Choice::zcopy), 0);
    EXPECT_EQ(m.cost(32 * 1024, Choice::zcopy), 0u) << "nothing recorded below it";
    MechanismChooser off(0);
    EXPECT_EQ(off.choose(1 << 20), Choice::bcopy) << "threshold 0: Bcopy only";
}

TEST(MechanismChooser, TriesBothThenUsesTheCheaper) {
    MechanismChooser m(32 * 1024);
    const auto v = run(m, 1 << 20, 6, 2000000, 1000000);
    EXPECT_EQ(count(v, Choice::bcopy), 3) << "warm-up: both, alternately";
    EXPECT_EQ(count(v, Choice::zcopy), 3);
    for (std::size_t i = 1; i < v.size(); ++i)
        EXPECT_NE(v[i], v[i - 1]);
    // The 15 writes after the warm-up: all zero copy (the first trial of
    // Bcopy is the 16th).
    const auto next = run(m, 1 << 20, 15, 2000000, 1000000);
    EXPECT_EQ(count(next, Choice::zcopy), 15);
    EXPECT_EQ(m.choose(1 << 20), Choice::bcopy) << "the 16th: a trial";
    MechanismChooser slow(32 * 1024);
    run(slow, 1 << 16, 6, 100000, 400000);
    EXPECT_EQ(count(run(slow, 1 << 16, 15, 100000, 400000), Choice::bcopy), 15);
}

TEST(MechanismChooser, TrialsBackOffWhileTheChoiceHoldsAndFollowAChange) {
    MechanismChooser m(32 * 1024);
    run(m, 1 << 20, 6, 2000000, 1000000);  // zcopy wins
    // Trials after 16, then 32, 64, 128 more writes while they confirm it.
    const auto v = run(m, 1 << 20, 16 + 32 + 64 + 128, 2000000, 1000000);
    EXPECT_EQ(count(v, Choice::bcopy), 4);
    EXPECT_EQ(v[15], Choice::bcopy);
    EXPECT_EQ(v[15 + 32], Choice::bcopy);
    const auto many = run(m, 1 << 20, 10000, 2000000, 1000000);
    EXPECT_LE(count(many, Choice::bcopy), 12) << "at most one in 1024 at the end";
    EXPECT_GE(count(many, Choice::bcopy), 9);
    // Zero copy becomes slow: its own samples show it at once.
    const auto after = run(m, 1 << 20, 64, 2000000, 8000000);
    const auto tail = std::vector<Choice>(after.end() - 16, after.end());
    EXPECT_EQ(count(tail, Choice::bcopy), 16);
    // Bcopy wins, then zero copy becomes far cheaper: only the trials see
    // it (three of them move the mean past Bcopy's), and then it is used.
    MechanismChooser f(32 * 1024);
    run(f, 1 << 20, 6, 1000000, 2000000);
    const auto w = run(f, 1 << 20, 400, 1000000, 1);
    const auto last = std::vector<Choice>(w.end() - 100, w.end());
    EXPECT_GE(count(last, Choice::zcopy), 95);
    EXPECT_LT(f.cost(1 << 20, Choice::zcopy), f.cost(1 << 20, Choice::bcopy));
}

TEST(MechanismChooser, SizeClassesAreSeparate) {
    MechanismChooser m(32 * 1024);
    run(m, 1 << 20, 6, 2000000, 1000000);  // 1 MiB: zcopy cheaper
    run(m, 1 << 16, 6, 100000, 400000);    // 64 KiB: bcopy cheaper
    EXPECT_EQ(m.choose((1 << 20) + 100), Choice::zcopy) << "same class (2^20..2^21-1)";
    EXPECT_EQ(m.choose(1 << 16), Choice::bcopy);
    EXPECT_GT(m.cost(1 << 16, Choice::zcopy), m.cost(1 << 16, Choice::bcopy));
    EXPECT_EQ(m.choose(1 << 18), Choice::bcopy) << "a new class starts with Bcopy";
}

// A mechanism whose warm-up writes left no sample (they fell back or were
// not measured) is tried again rather than never.
TEST(MechanismChooser, UnmeasuredWarmUpIsTriedAgain) {
    MechanismChooser m(32 * 1024);
    for (int i = 0; i < 6; ++i) {
        const Choice c = m.choose(1 << 20);
        if (c == Choice::bcopy)
            m.record(1 << 20, c, 1000000);  // only Bcopy is ever measured
    }
    EXPECT_EQ(m.choose(1 << 20), Choice::zcopy);
    m.record(1 << 20, Choice::zcopy, 100000);
    EXPECT_EQ(m.choose(1 << 20), Choice::zcopy) << "now measured: ten times cheaper";
}

TEST(MechanismChooser, HugeDurationsDoNotOverflow) {
    MechanismChooser m(32 * 1024);
    m.record(1 << 20, Choice::zcopy, UINT64_MAX);
    EXPECT_GT(m.cost(1 << 20, Choice::zcopy), 0u);
    m.record(SIZE_MAX, Choice::bcopy, 5);  // the last class; 0 ps per byte
    EXPECT_EQ(m.cost(SIZE_MAX, Choice::bcopy), 0u);
    EXPECT_EQ(m.choose(SIZE_MAX), Choice::bcopy) << "warm-up: Bcopy first";
    EXPECT_EQ(m.choose(SIZE_MAX), Choice::zcopy) << "then alternately";
}

// The sample a driver's writes make (begin_write/wrote): a zero-copy write
// is measured from its start to the next write's start; a run of Bcopy
// writes (small ones and the same class joining it) until the next
// zero-copy write starts; a run cut by another class, a refused zero-copy
// write or a failure gives no sample.
TEST(MechanismChooser, DriverSamplesRunsAndZeroCopyWrites) {
    constexpr std::size_t kT = 32 * 1024;
    constexpr std::size_t kBig = 1 << 20;
    MechanismChooser m(kT);
    // A Bcopy run: a 100-byte header and two bodies, then a zero-copy write
    // ends it at t=5000 ns: 2 MiB + 100 B in 5000 ns.
    m.begin_write(1000, kBig, Choice::bcopy);
    m.wrote(kBig);
    m.begin_write(2000, 100, Choice::bcopy);
    m.wrote(100);
    m.begin_write(3000, kBig + 5, Choice::bcopy);
    m.wrote(kBig);
    EXPECT_EQ(m.cost(kBig, Choice::bcopy), 0u) << "the run goes on";
    m.begin_write(6000, kBig, Choice::zcopy);
    const std::uint64_t bcopy_ps = 5000ull * 1000 / (2 * kBig + 100);
    EXPECT_EQ(m.cost(kBig, Choice::bcopy), bcopy_ps);
    m.wrote(kBig);
    // The zero-copy write ends when the next write starts: 1 MiB in 8000 ns.
    m.begin_write(14000, kBig, Choice::bcopy);
    EXPECT_EQ(m.cost(kBig, Choice::zcopy), 8000ull * 1000 / kBig);
    // A write of another class above the threshold cuts the run: no sample.
    m.wrote(kBig);
    m.begin_write(20000, 4 * kBig, Choice::bcopy);
    m.wrote(4 * kBig);
    m.begin_write(30000, 4 * kBig, Choice::zcopy);
    EXPECT_EQ(m.cost(kBig, Choice::bcopy), bcopy_ps) << "the cut run is not recorded";
    EXPECT_GT(m.cost(4 * kBig, Choice::bcopy), 0u) << "the new class's run is";
    // Refused zero copy: a new Bcopy run; a failed write: nothing.
    m.restart_run(40000, 4 * kBig);
    m.wrote(4 * kBig);
    m.discard();
    const auto before = m.cost(4 * kBig, Choice::zcopy);
    m.begin_write(50000, 4 * kBig, Choice::zcopy);
    EXPECT_EQ(m.cost(4 * kBig, Choice::zcopy), before) << "nothing after a failure";
    EXPECT_EQ(m.cost(4 * kBig, Choice::bcopy), 10000ull * 1000 / (4 * kBig));
}

// The driver's sequence (WriteChoice): a fixed mechanism records nothing;
// automatic feeds the chooser exactly as the calls above do.
TEST(WriteChoice, FixedRecordsNothingAutomaticSamples) {
    constexpr std::size_t kT = 32 * 1024;
    constexpr std::size_t kBig = 1 << 20;
    WriteChoice fixed(false, kT);
    EXPECT_FALSE(fixed.automatic());
    EXPECT_EQ(fixed.chooser(), nullptr);
    EXPECT_TRUE(fixed.try_zcopy(0, kBig, true));
    EXPECT_FALSE(fixed.try_zcopy(0, kBig, false));
    EXPECT_FALSE(WriteChoice(true, 0).automatic()) << "no threshold: nothing to choose";

    WriteChoice a(true, kT);
    ASSERT_NE(a.chooser(), nullptr);
    EXPECT_FALSE(a.try_zcopy(0, 100, true)) << "at or below the threshold: Bcopy";
    // Warm-up alternates; whatever it picks, a Bcopy write is a run that a
    // zero-copy start ends, and a zero-copy write ends at the next write.
    bool saw_z = false;
    bool saw_b = false;
    std::uint64_t t = 1'000'000;
    for (int i = 0; i < 8; ++i, t += 1'000'000) {  // 1 ms per MiB
        if (a.try_zcopy(t, kBig, false)) {
            saw_z = true;
            a.zcopy_started(t, kBig);
        } else {
            saw_b = true;
        }
        a.finished(kBig, false);
    }
    EXPECT_TRUE(saw_z && saw_b);
    EXPECT_GT(a.chooser()->cost(kBig, Choice::zcopy), 0u);
    EXPECT_GT(a.chooser()->cost(kBig, Choice::bcopy), 0u);
    // A refused zero copy starts a new Bcopy run; a failed write leaves none.
    const auto before = a.chooser()->cost(4 * kBig, Choice::bcopy);
    a.zcopy_refused(t, 4 * kBig);
    a.finished(4 * kBig, true);
    a.zcopy_started(t + 5'000'000, 4 * kBig);
    EXPECT_EQ(a.chooser()->cost(4 * kBig, Choice::bcopy), before);
}

}  // namespace
