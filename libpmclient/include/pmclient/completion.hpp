// SPDX-License-Identifier: Apache-2.0
// pmclient::ErasedHandler: a type-erased, move-only completion handler for
// Boost.Asio initiating functions. Boost 1.74 (Debian 12) has no
// boost::asio::any_completion_handler; this is the project's one stand-in,
// used by pmclient::Resolver and meant for the SDP stream API as well.
//
//   ErasedHandler<void(Result)> h(std::move(handler), io.get_executor());
//   ...
//   h(result);  // posts handler(result) to the handler's executor
//
// Construction takes the completion handler and a fallback executor (used
// when the handler has no associated executor) and keeps the handler's
// executor busy (an executor_work_guard) until the handler is invoked, so an
// io_context::run() does not return while a completion is outstanding.
// Invoking it posts the handler with its arguments to that executor: the
// handler never runs inside the caller. It is invoked at most once;
// afterwards (and when default-constructed) it is empty and invoking it does
// nothing. Not thread-safe: one owner invokes it.
#pragma once

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include <memory>
#include <type_traits>
#include <utility>

namespace pmclient {

template <typename Signature>
class ErasedHandler;

template <typename... Args>
class ErasedHandler<void(Args...)> {
  public:
    ErasedHandler() = default;
    template <typename Handler, typename Executor>
    ErasedHandler(Handler&& handler, const Executor& fallback)
        : p_(std::make_unique<Impl<std::decay_t<Handler>, Executor>>(std::forward<Handler>(handler),
                                                                     fallback)) {}

    explicit operator bool() const { return p_ != nullptr; }

    // Posts the handler with `args`; empties *this.
    void operator()(Args... args) {
        auto p = std::move(p_);
        if (p) {
            p->post(std::move(args)...);
        }
    }

  private:
    struct Base {
        virtual ~Base() = default;
        virtual void post(Args... args) = 0;
    };
    template <typename Handler, typename Executor>
    struct Impl final : Base {
        Impl(Handler h, const Executor& fallback)
            : handler(std::move(h)),
              work(boost::asio::get_associated_executor(handler, fallback)) {}
        void post(Args... args) override {
            auto ex = work.get_executor();
            boost::asio::post(ex, [h = std::move(handler), ... a = std::move(args)]() mutable {
                std::move(h)(std::move(a)...);
            });
            work.reset();
        }
        Handler handler;
        boost::asio::executor_work_guard<boost::asio::associated_executor_t<Handler, Executor>>
            work;
    };
    std::unique_ptr<Base> p_;
};

}  // namespace pmclient
