// SPDX-License-Identifier: Apache-2.0
// One SDP connection of an unmodified program: the program holds one end of
// an AF_UNIX socketpair (a real kernel descriptor: poll, epoll, select,
// FIONREAD, SIOCATMARK, MSG_OOB, dup and fork all behave as the kernel
// makes them), and two threads of the library carry bytes between the other
// end and the sdp::Stream (docs/preload.md, "How it works").
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "sdp/stream.hpp"

namespace sdp::preload {

class Bridge : public std::enable_shared_from_this<Bridge> {
  public:
    // Makes the socketpair around a connected stream. Returns the bridge and
    // the program's end in *app_fd (close-on-exec, blocking), or nullptr
    // with errno set. start() begins carrying bytes.
    static std::shared_ptr<Bridge> create(Stream stream, int* app_fd);
    // The socketpair of a bridge: both ends close-on-exec, blocking, with
    // deep buffers, remembered as the library's; false with errno.
    static bool make_pair(int* app_fd, int* pump_fd);
    // The program's end gets its deep send buffer again (a non-blocking
    // connect() shrinks it while in progress, connecting.hpp).
    static void restore_app_buffer(int app_fd);
    ~Bridge();
    Bridge(const Bridge&) = delete;
    Bridge& operator=(const Bridge&) = delete;

    void start();
    // The program's calls while the bridge runs (serialized with its end):
    // keepalive (14.3) and options of the LLP's TCP socket (soft provider).
    // After the connection ended: not_connected / ENOTCONN.
    std::error_code set_keepalive(const Keepalive& k);
    int llp_getsockopt(int level, int name, void* val, socklen_t* len);
    int llp_setsockopt(int level, int name, const void* val, socklen_t len);
    // The program writes (write, send, writev; docs/preload.md, "The
    // direct path"): the stream takes now, without waiting, what it can of
    // the buffers, in order, when nothing the program wrote before is
    // still on its way (in the socketpair, or taken by the send side and
    // not yet in the stream) and the connection runs. A write of up to
    // 64 KiB in all is taken whole or not at all. Returns the count taken
    // (the caller writes the rest to the program's end as before); `total`
    // is the buffers' sum. Never blocks, never fails.
    std::size_t direct_write(const iovec* iov, int iovcnt, std::size_t total);
    // A write of the program that goes to its end of the socketpair (the
    // kernel's way): `call` makes it and returns its result, which is
    // returned. No direct write runs meanwhile: the kernel may put a write
    // of more than about 32 KiB into the socketpair in parts, waiting for
    // room between them, and a direct write must not land between two
    // parts the send side has drained. The bytes it put there are counted
    // (see direct_may_take).
    template <typename Call>
    ssize_t kernel_write(Call&& call) {
        KernelWrite entering(*this);
        const ssize_t r = call();
        entered_pair(r);
        return r;
    }
    // False when a direct write would surely find the way taken (the send
    // side holds bytes, a write is entering the socketpair, or bytes the
    // program wrote there are not yet taken): a check without locks,
    // system calls or a signal mask, done first. direct_write() checks
    // again, under its lock, with poll() on the socketpair.
    bool direct_may_take() const {
        return !tx_holding_.load(std::memory_order_relaxed) &&
               kernel_writes_.load(std::memory_order_relaxed) == 0 &&
               pair_bytes_.load(std::memory_order_relaxed) <= 0;
    }
    // Before start() only: the stream (its TCP socket's addresses).
    const Stream& stream() const { return stream_; }

    // --- socket duplication initiated here (13.1.1, Local Peer; see
    // handoff.hpp). The program's end of the socketpair: the open file that
    // other processes (a forked child) may hold too.
    [[nodiscard]] dev_t app_dev() const { return app_dev_; }
    [[nodiscard]] ino_t app_ino() const { return app_ino_; }
    // The connection's local address (the heir listens there, step 1).
    [[nodiscard]] const pm::Endpoint& local() const { return local_; }
    // The program passed the descriptor to another process (SCM_RIGHTS):
    // at exit, holders are looked for beyond this process's children.
    void mark_passed() { passed_ = true; }
    [[nodiscard]] bool passed() const { return passed_; }
    // Hands the connection over: Stream::hand_off(port), then both threads
    // stop where they are, and the bytes they held join the state (what the
    // receive side had taken from the stream goes before its unread bytes,
    // what the send side had taken from the program after its unsent
    // bytes). Returns the state and our end of the socketpair in *pump_fd,
    // for the caller to pass on and close; the bridge is over. nullopt with
    // ec: nothing changed and the bridge runs on (invalid_argument,
    // operation_not_supported, not_connected), or the connection is lost.
    std::optional<Handoff> hand_off(std::uint16_t port, int* pump_fd, std::error_code& ec);
    // The process that takes a connection over: a bridge over the stream
    // and the socketpair end that came with it (tracked already; still the
    // caller's if this fails). start().
    static std::shared_ptr<Bridge> adopt(Stream stream, int pump_fd, dev_t app_dev, ino_t app_ino);
    // The bridges running in this process.
    static std::vector<std::shared_ptr<Bridge>> live();

    // Process exit: every bridge sends what the program wrote and closes
    // (DisConn), waiting at most `budget` in total for the peers.
    static void finish_all(std::chrono::milliseconds budget);
    // fork(): the registry is locked across it; in the child every bridge
    // of the parent is forgotten without being touched (they run on in the
    // parent).
    static void fork_prepare();
    static void fork_parent();
    static void fork_child();

  private:
    // The count of writes entering the socketpair, as a guard, so that a
    // write the program's thread is cancelled in (pthread_cancel unwinds
    // through it) does not leave it raised.
    class KernelWrite {
      public:
        explicit KernelWrite(Bridge& b) : b_(b) { b_.kernel_writes_.fetch_add(1); }
        ~KernelWrite() { b_.kernel_writes_.fetch_sub(1); }
        KernelWrite(const KernelWrite&) = delete;
        KernelWrite& operator=(const KernelWrite&) = delete;

      private:
        Bridge& b_;
    };
    // n bytes of a program's write went into the socketpair (the kernel's
    // way). A hint only: bytes that reach it by other calls (sendfile) are
    // not counted, so it may drift below zero, never above.
    void entered_pair(ssize_t n) {
        if (n > 0) {
            pair_bytes_.fetch_add(n, std::memory_order_relaxed);
        }
    }
    enum class End : std::uint8_t { running, eof, app_gone, reset, handed };
    // A hand_off() in this process: none, running (Stream::hand_off called),
    // and its outcome.
    enum class Handing : std::uint8_t { none, running, done, failed };
    Bridge() = default;
    // The eventfds, and the program's end's file; false with errno.
    bool init(int pump_fd, dev_t app_dev, ino_t app_ino);
    // An error of the stream came from a hand_off() (waits for its outcome).
    bool handed_over();
    void rx_loop();
    void tx_loop();
    // Waits while the program still holds its end after our DisConn went
    // out, until the receive side ends (bounded).
    void linger_after_tx_eof();
    enum class Sent : std::uint8_t { all, app_gone, handed };
    // Blocks until the program's end took it, unless a hand_off() succeeded
    // meanwhile: then what is left is kept for the state (rx_rest_).
    Sent send_to_app(const std::uint8_t* p, std::size_t n, int flags);
    // The program's urgent byte is next in our end of the socketpair.
    bool at_urgent_mark() const;
    void ended(bool rx, End how);
    void wake();

    Stream stream_;
    int pump_fd_ = -1;     // our end of the socketpair
    int wake_fd_ = -1;     // eventfd: the receive side ended, the process exits, a hand-off
    int rx_wake_fd_ = -1;  // eventfd: a hand-off (the receive side waits for the program)
    dev_t app_dev_ = 0;
    ino_t app_ino_ = 0;
    pm::Endpoint local_;
    std::atomic<bool> passed_{false};
    std::mutex mu_;
    std::condition_variable cv_;
    // Held by direct_write() from its checks to the end of its write;
    // hand_off() and ended() take it once after they changed the state, so
    // no direct write runs into a hand-off or a closing stream.
    std::mutex direct_mu_;
    // The send side took bytes from the socketpair that are not yet in the
    // stream (set before its recv() under direct_mu_, so never during a
    // direct write; cleared after the write).
    std::atomic<bool> tx_holding_{false};
    std::atomic<int> kernel_writes_{0};  // program writes on their way into the socketpair
    // Bytes of the program's writes in the socketpair, as far as counted
    // (entered_pair() less what the send side took): see direct_may_take.
    std::atomic<std::int64_t> pair_bytes_{0};
    End rx_ = End::running;
    End tx_ = End::running;
    bool exiting_ = false;
    bool closing_ = false;  // ended(): the stream is being closed
    Handing handing_ = Handing::none;
    std::vector<std::uint8_t> rx_rest_;  // taken from the stream, not given to the program
    std::vector<std::uint8_t> tx_rest_;  // taken from the program, not queued in the stream
};

}  // namespace sdp::preload
