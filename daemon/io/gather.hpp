// SPDX-License-Identifier: Apache-2.0
// Asking every worker shard something without blocking the main loop: f runs
// on each worker's thread, each answer is posted back to the main thread,
// and done(answers) runs on the main thread once every worker answered or
// kWorkerReplyTimeout passed, whichever comes first (nullopt for a worker
// that did not answer, logged, rate limited). The main loop keeps serving
// meanwhile. Before the workers run (or after they stopped) f runs directly
// and done is called before gather() returns.
//
// Work posted to one worker runs in the order it was posted, so a gather
// posted after a change (a new registry) sees that change.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/io/log.hpp"
#include "daemon/io/worker.hpp"

namespace pmd::io {

// How long the main thread waits for a worker to answer (counters, a new
// registry); a worker that does not answer in time is reported as such.
inline constexpr std::chrono::milliseconds kWorkerReplyTimeout{1000};

namespace detail {

void log_worker_timeout(std::size_t index);
void log_worker_error(std::size_t index, const char* what);
void log_completion_error(const char* what);

template <class R>
struct Gathering {
    Gathering(boost::asio::io_context& io, std::size_t n,
              std::function<void(std::vector<std::optional<R>>)> d)
        : timer(io), answers(n), answered(n, false), left(n), done(std::move(d)) {}

    void finish() {
        if (finished) {
            return;
        }
        finished = true;
        timer.cancel();
        for (std::size_t i = 0; i < answered.size(); ++i) {
            if (!answered[i]) {
                log_worker_timeout(i);
            }
        }
        auto d = std::move(done);
        // This runs from the main loop's timer or a posted answer: an
        // exception here (out of memory while rendering) must not leave
        // io_context::run() and stop the daemon.
        try {
            d(std::move(answers));
        } catch (const std::exception& e) {
            log_completion_error(e.what());
        }
    }

    boost::asio::steady_timer timer;
    std::vector<std::optional<R>> answers;
    std::vector<bool> answered;
    std::size_t left;
    bool finished = false;
    std::function<void(std::vector<std::optional<R>>)> done;
};

template <class R>
std::optional<R> ask(Worker& w, const std::function<R(Worker&)>& f) {
    try {
        return f(w);
    } catch (const std::exception& e) {
        log_worker_error(w.index(), e.what());
    }
    return std::nullopt;
}

}  // namespace detail

template <class R>
void gather(boost::asio::io_context& main, const std::vector<std::unique_ptr<Worker>>& workers,
            bool running, std::function<R(Worker&)> f,
            std::function<void(std::vector<std::optional<R>>)> done) {
    if (!running || workers.empty()) {
        std::vector<std::optional<R>> answers;
        for (const auto& w : workers) {
            answers.push_back(detail::ask(*w, f));
        }
        done(std::move(answers));
        return;
    }
    auto g = std::make_shared<detail::Gathering<R>>(main, workers.size(), std::move(done));
    g->timer.expires_after(kWorkerReplyTimeout);
    g->timer.async_wait([g](const boost::system::error_code& ec) {
        if (!ec) {
            g->finish();
        }
    });
    for (std::size_t i = 0; i < workers.size(); ++i) {
        Worker* w = workers[i].get();
        w->post([g, w, f, i, &main] {
            auto answer = detail::ask(*w, f);
            boost::asio::post(main, [g, i, answer = std::move(answer)]() mutable {
                if (g->finished) {
                    return;
                }
                g->answers[i] = std::move(answer);
                g->answered[i] = true;
                if (--g->left == 0) {
                    g->finish();
                }
            });
        });
    }
}

}  // namespace pmd::io
