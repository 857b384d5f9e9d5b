// SPDX-License-Identifier: Apache-2.0
// Asking the worker shards without blocking the main loop: answers are
// collected on the main thread, a silent worker is given up on after
// kWorkerReplyTimeout, and the main loop keeps running meanwhile.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <future>

#include "daemon/io/gather.hpp"

namespace pmd::io {
namespace {

using namespace std::chrono_literals;

std::vector<std::unique_ptr<Worker>> make_workers(unsigned n) {
    auto registry = std::make_shared<const Registry>(std::vector<Service>{});
    std::vector<std::unique_ptr<Worker>> out;
    for (unsigned i = 0; i < n; ++i) {
        out.push_back(std::make_unique<Worker>(i, Limits{}, registry, i + 1));
    }
    return out;
}

TEST(Gather, DirectWhenTheWorkersDoNotRun) {
    boost::asio::io_context main;
    auto workers = make_workers(2);
    bool called = false;
    gather<unsigned>(
        main, workers, false, [](Worker& w) { return w.index() * 10; },
        [&](std::vector<std::optional<unsigned>> answers) {
            called = true;
            ASSERT_EQ(answers.size(), 2u);
            EXPECT_EQ(answers[0], 0u);
            EXPECT_EQ(answers[1], 10u);
        });
    EXPECT_TRUE(called);  // before gather() returned
}

TEST(Gather, AnswersArriveOnTheMainThread) {
    boost::asio::io_context main;
    auto workers = make_workers(3);
    for (auto& w : workers) {
        w->start();
    }
    const auto main_thread = std::this_thread::get_id();
    std::optional<std::vector<std::optional<unsigned>>> got;
    gather<unsigned>(
        main, workers, true,
        [main_thread](Worker& w) {
            EXPECT_NE(std::this_thread::get_id(), main_thread);
            return w.index() + 1;
        },
        [&](std::vector<std::optional<unsigned>> answers) {
            EXPECT_EQ(std::this_thread::get_id(), main_thread);
            got = std::move(answers);
        });
    EXPECT_FALSE(got);  // not before the workers answered
    main.run_for(5s);
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, (std::vector<std::optional<unsigned>>{1u, 2u, 3u}));
    for (auto& w : workers) {
        w->stop();
    }
}

TEST(Gather, ASilentWorkerIsGivenUpOnWithoutBlockingTheLoop) {
    boost::asio::io_context main;
    auto workers = make_workers(2);
    for (auto& w : workers) {
        w->start();
    }
    // Worker 1 is busy until released.
    std::promise<void> release;
    auto released = release.get_future().share();
    workers[1]->post([released] { released.wait(); });

    const auto start = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::duration> answered_after;
    std::optional<std::vector<std::optional<unsigned>>> got;
    gather<unsigned>(
        main, workers, true, [](Worker& w) { return w.index() + 1; },
        [&](std::vector<std::optional<unsigned>> answers) {
            answered_after = std::chrono::steady_clock::now() - start;
            got = std::move(answers);
        });
    // Other work on the main loop runs meanwhile.
    std::optional<std::chrono::steady_clock::duration> other_after;
    boost::asio::steady_timer other(main, 50ms);
    other.async_wait([&](const boost::system::error_code&) {
        other_after = std::chrono::steady_clock::now() - start;
    });
    main.run_for(5s);
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, (std::vector<std::optional<unsigned>>{1u, std::nullopt}));
    ASSERT_TRUE(answered_after && other_after);
    EXPECT_GE(*answered_after, kWorkerReplyTimeout);
    EXPECT_LT(*other_after, kWorkerReplyTimeout / 2);

    // The late answer, once the worker runs again, is dropped.
    release.set_value();
    main.restart();
    main.run_for(200ms);
    for (auto& w : workers) {
        w->stop();
    }
}

}  // namespace
}  // namespace pmd::io
