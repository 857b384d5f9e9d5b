// SPDX-License-Identifier: Apache-2.0
// The public SDP stream API (blocking, socket-like).
//
//   sdp::Stream s;
//   auto ec = s.connect(*pm::Endpoint::parse("192.0.2.10:5000"));  // Port Mapper + fallback
//   s.write(bytes, ec); n = s.read_some(buf, ec); s.shutdown_write(); s.close();
//
//   sdp::Acceptor a;
//   a.open(*pm::Endpoint::parse("0.0.0.0:5001"), opts);   // SDP port (+ registration)
//   sdp::Stream peer; a.accept(peer);
//
// connect() resolves the Conventional Address through libpmclient
// (section 7.5.1), connects to the SDP Address over the soft iWARP provider
// (MPA with the SDP Hello as private data), and falls back to plain TCP to
// the Conventional Address on PMDeny, PM timeout, or when the SDP Address
// does not take the connection: refused, reset, aborted, unreachable or
// timed out, at the TCP connect or in the SDP/MPA startup (one procedure
// for every front end; the rule is in docs/protocol-notes.md, 7.5.1).
// info() says which path was used and why. See docs/sdp.md.
// StreamOptions::iwarp_provider selects the rdma-core provider (an RNIC or
// Linux siw) instead of the soft one; see docs/rdma.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "pmclient/address.hpp"

namespace sdp {

enum class Transport : std::uint8_t { none, sdp, tcp };
const char* to_string(Transport t);

// The iWARP provider that carries SDP (docs/rdma.md):
//   soft       userspace MPA/DDP/RDMAP over a kernel TCP socket; works
//              everywhere and is the default
//   rdma       rdma-core (librdmacm + libibverbs) on an iWARP device: an RNIC
//              or Linux soft-iWARP (siw). Without such a device, or when the
//              library was built without it (SDPPM_WITH_RDMA=OFF), connect()
//              and Acceptor::open() fail with std::errc::no_such_device
//              (connect() falls back to TCP when StreamOptions::fallback)
//   automatic  rdma when the probe finds an iWARP device, soft otherwise
// Both providers speak the same wire protocol.
enum class Provider : std::uint8_t { soft, rdma, automatic };
// "soft", "rdma", "auto".
const char* to_string(Provider p);
// "soft", "rdma", "auto" (or "automatic"); nullopt for anything else.
std::optional<Provider> parse_provider(std::string_view name);

// How large writes travel (StreamOptions::mechanism).
enum class Mechanism : std::uint8_t { bcopy, zcopy, automatic };
// "bcopy", "zcopy", "auto".
const char* to_string(Mechanism m);
// "bcopy", "zcopy", "auto" (or "automatic"); nullopt for anything else.
std::optional<Mechanism> parse_mechanism(std::string_view name);
// True when the rdma provider is built in and an iWARP device with a usable
// rdma_cm is present; otherwise false and *why says what is missing.
bool rdma_available(std::string* why = nullptr);

// TCP keepalive (14.3: "MUST implement by turning on the TCP keepalive
// timer"): SO_KEEPALIVE with TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT on the
// TCP socket that carries the stream (the soft provider's LLP, or the TCP
// fallback). A peer that stops answering is given up after about
// idle + interval * count; the read_some()/write() that sees it fails with
// timed_out (the kernel's ETIMEDOUT, on SDP as on TCP; over TCP later calls
// get broken_pipe / end of stream, SDP keeps answering timed_out). Not on the rdma provider (the
// LLP lives in the RNIC or the kernel's siw, and rdma_cm has no keepalive
// option): there set_keepalive() fails with operation_not_supported and a
// connect/accept with keepalive enabled fails. See docs/sdp.md, "Keepalive".
struct Keepalive {
    bool enabled = false;
    std::chrono::seconds idle{7200};    // TCP_KEEPIDLE (1..32767)
    std::chrono::seconds interval{75};  // TCP_KEEPINTVL (1..32767)
    int count = 9;                      // TCP_KEEPCNT (1..127)
};

struct StreamOptions {
    using Keepalive = sdp::Keepalive;
    // Each TCP connect attempt (rdma: RDMA address and route resolution).
    std::chrono::milliseconds connect_timeout{5000};
    // MPA startup + SDP Hello/HelloAck (rdma: until ESTABLISHED, then until
    // the HelloAck).
    std::chrono::milliseconds handshake_timeout{5000};
    // close(): how long to wait for the peer's DisConn and LLP teardown
    // before closing abortively.
    std::chrono::milliseconds linger{10000};
    // read_some()/write() fail with timed_out after this long without
    // progress; 0 waits for ever (SO_RCVTIMEO / SO_SNDTIMEO).
    std::chrono::milliseconds io_timeout{0};
    // Fall back to plain TCP to the Conventional Address (connect()).
    bool fallback = true;
    // PMSP to ask; unset: libpmclient's configuration (SDP_PMSP,
    // pmclient.yaml, else ApIPAddr:3935).
    std::optional<pm::Endpoint> pmsp;
    // Port Mapper resolution bound (PMReq retransmissions inside it).
    std::chrono::milliseconds resolve_deadline{3000};
    std::chrono::milliseconds resolve_initial_timeout{250};
    bool use_pm_cache = true;
    // Which iWARP provider carries SDP (see `Provider`). Accepted streams
    // use the acceptor's listener provider; this field selects it there.
    Provider iwarp_provider = Provider::soft;
    // Soft provider / SDP engine (crc: soft only; an RNIC or siw decides).
    bool crc = true;                          // ask for MPA CRC32c
    std::uint32_t recv_buf_size = 64 * 1024;  // SDP private buffer size
    std::uint16_t recv_buf_count = 16;        // buffers posted (initial credit)
    // Receive buffer resizing (10.6): a peer's ChRcvBuf may grow our buffers
    // up to this size (0: never beyond recv_buf_size; smaller is always
    // granted); grow_peer_buffers: with a backlog, ask a peer whose buffers
    // are smaller than recv_buf_size for that size once. Soft provider.
    std::uint32_t max_recv_buf_size = 0;
    bool grow_peer_buffers = false;
    // Bytes write() buffers beyond the peer's credit (like SO_SNDBUF). A
    // deeper queue holds data longer before it is framed and its CRC taken:
    // with the 1 MiB receive window on top, 1 MiB here measured 0.35-0.46x
    // TCP at 64 KiB on loopback against 0.70-0.76x for 256 KiB (the data
    // in flight stays in cache); see docs/performance.md.
    std::size_t send_queue_limit = 256 * 1024;
    // How large writes travel (9): bcopy, through the private buffers only;
    // zcopy, Read Zcopy (9.2) for writes larger than zcopy_threshold: the buffer
    // is advertised, the peer RDMA-Reads it straight into its reader's buffer,
    // and write() returns once the peer has read it (the caller's buffer stays
    // put until then; with io_timeout, a write the peer has not read in time is
    // revoked, SrcAvailCancel (9.5.4), and returns the bytes the peer took with
    // timed_out once it answered; no answer within another io_timeout resets the
    // stream), and reads larger than it with no io_timeout lend their buffer for
    // the peer to RDMA-Write into (Write Zcopy, 9.3; never Stream::read());
    // automatic, each write larger than zcopy_threshold by Bcopy or Read Zcopy,
    // whichever measured cheaper on this connection for writes of its size (both
    // tried first; reads never lend). Both directions: a bcopy stream also asks
    // a zero-copy peer for Bcopy (SendSm). Blocking Stream on both providers;
    // AsyncStream (reads lend with zcopy) on the soft provider. See docs/sdp.md,
    // "Zero copy".
    Mechanism mechanism = Mechanism::bcopy;
    std::size_t zcopy_threshold = 32 * 1024;
    // SO_OOBINLINE: a received urgent byte stays in the normal stream (see
    // Stream::set_oob_inline).
    bool oob_inline = false;
    // TCP keepalive (14.3), applied at connect/accept when enabled.
    Keepalive keepalive;
    // connect(): a stop requested on this token (from another thread) ends
    // the connect procedure at once with operation_canceled: a Port Mapper
    // question in flight is dropped, a TCP connect or soft SDP startup in
    // progress is aborted, and no connection is made after it (a
    // connection completed at that instant is closed). An rdma connect
    // runs to its end (connect_timeout) and is then closed.
    std::stop_token stop;
};

// Counters of one SDP stream (all zero over plain TCP).
struct StreamStats {
    std::uint64_t bytes_sent = 0;      // ULP bytes, every mechanism
    std::uint64_t bytes_received = 0;  // ULP bytes, every mechanism
    // Read Zcopy (9.2): bytes the peer RDMA-Read from our buffers, bytes we
    // RDMA-Read from the peer's; SendSm (Bcopy forced, 9.5.2.1) each way.
    std::uint64_t zcopy_bytes_sent = 0;
    std::uint64_t zcopy_bytes_received = 0;
    std::uint64_t send_sm_sent = 0;
    std::uint64_t send_sm_received = 0;
    // SrcAvailCancels sent (9.5.4): zero-copy writes given up at io_timeout,
    // and socket duplications with one in process.
    std::uint64_t src_avail_cancel_sent = 0;
    // Write Zcopy (9.3), part of the zcopy counts above: bytes we
    // RDMA-Wrote into the peer's lent buffers, bytes the peer wrote into
    // ours; buffers we lent (SinkAvail) and the peer's lent to us; our
    // revocations of lent buffers (SinkAvailCancel, 9.5.5) and our answers
    // to the peer's (SinkCancelAck).
    std::uint64_t write_zcopy_bytes_sent = 0;
    std::uint64_t write_zcopy_bytes_received = 0;
    std::uint64_t sink_avail_sent = 0;
    std::uint64_t sink_avail_received = 0;
    std::uint64_t sink_avail_cancel_sent = 0;
    std::uint64_t sink_cancel_ack_sent = 0;
    // Of those, Transactions (9.4): SinkAvails that carried a request.
    std::uint64_t transactions_sent = 0;
    // Flow Control Modes (12): ModeChange Messages we sent as Mode Master
    // (our send half to Pipelined Mode after the reader's REQ_PIPE) and
    // ModeChange Messages of the peer's that we applied.
    std::uint64_t mode_changes_sent = 0;
    std::uint64_t mode_changes_received = 0;
    // Socket duplication (13.1.1): SuspComm received, SuspCommAck sent,
    // connections resumed on a new LLP connection.
    std::uint64_t susp_comm_received = 0;
    std::uint64_t susp_comm_ack_sent = 0;
    std::uint64_t resumes = 0;
};

struct ConnectInfo {
    Transport used = Transport::none;
    pm::Endpoint peer;   // where the stream is connected
    std::string reason;  // why SDP (or the rdma provider asked for) was not used, or the failure
    std::string resolution;  // Port Mapper outcome ("accepted", "denied", ...; empty: not asked)
    bool from_cache = false;
    // What carries the bytes: "soft" or "rdma" (SDP over that provider) or
    // "tcp" (plain TCP, no SDP). After a failed connect: the one tried.
    std::string provider;
};

// Socket duplication initiated here (13.1.1, the Local Peer): what the
// Controlling Address Space hands to the address space that takes the
// connection over (step 5, "through some private means"). encode() and
// decode() are that means' byte format; decode() rejects anything malformed
// or oversized (nullopt). See docs/sdp.md, "Socket duplication".
struct Handoff {
    pm::Endpoint peer;                 // the Remote Peer's address and TCP port (step 5)
    pm::Endpoint local;                // this side's old address: the new listener's IP
    std::vector<std::uint8_t> unread;  // received, not yet read (step 5)
    std::vector<std::uint8_t> unsent;  // written, not yet sent: goes first
    bool write_shut = false;           // shutdown_write() came: DisConn after `unsent`
    // The Remote Peer was the Accepting Peer: its old port is its listener's,
    // so it may reconnect from another port of its address (only the address
    // is checked then; docs/protocol-notes.md, 13.1.1).
    bool peer_accepted = false;
    std::uint32_t recv_buf_size = 0;  // the local receive Private Buffer size (step 5)
    std::uint16_t ird = 1;            // step 5
    std::uint16_t ord = 1;

    [[nodiscard]] std::vector<std::uint8_t> encode() const;
    static std::optional<Handoff> decode(std::span<const std::uint8_t> bytes);
};

class Stream {
  public:
    Stream();
    ~Stream();  // abortive if still open (like close() with SO_LINGER 0)
    Stream(Stream&&) noexcept;
    Stream& operator=(Stream&&) noexcept;
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    // Port Mapper resolution, SDP, fallback to TCP (see above).
    std::error_code connect(const pm::Endpoint& conventional, const StreamOptions& opts = {});
    // SDP straight to an SDP Address (no Port Mapper, no fallback).
    std::error_code connect_sdp(const pm::Endpoint& sdp_address, const StreamOptions& opts = {});
    // Plain TCP (no SDP), for comparisons.
    std::error_code connect_tcp(const pm::Endpoint& address, const StreamOptions& opts = {});

    // Blocks until some bytes are available. Returns 0 without error at end
    // of stream (peer's DisConn / FIN). Errors: connection_reset (peer
    // aborted, LLP lost, iWARP Terminate), not_connected.
    std::size_t read_some(std::span<std::uint8_t> buf, std::error_code& ec);
    // Reads exactly buf.size() bytes unless EOF/error; returns the count.
    std::size_t read(std::span<std::uint8_t> buf, std::error_code& ec);
    // Blocks until every byte is queued for sending. Errors: broken_pipe
    // (after shutdown_write or the peer closed), connection_reset.
    std::size_t write(std::span<const std::uint8_t> buf, std::error_code& ec);
    // Non-blocking write: queues what fits now (the peer's credit and
    // send_queue_limit; over TCP, the socket's buffer) by Bcopy and returns
    // the count, without waiting; never an error once some bytes are
    // queued (the next call reports it). Over SDP a write of up to 64 KiB
    // is taken whole or not at all (as a pipe's up to PIPE_BUF), so that
    // two threads' small messages never interleave. Nothing fits: 0 with
    // resource_unavailable_try_again. A write that mechanism zcopy sends
    // by zero copy (above zcopy_threshold), or any write with automatic:
    // 0 with operation_not_supported (zero copy waits for the peer). Else
    // the errors of write().
    std::size_t try_write(std::span<const std::uint8_t> buf, std::error_code& ec);
    static constexpr std::size_t kTryWriteWhole = 64 * 1024;  // (see try_write)
    // Non-blocking read: the bytes received now, up to the out-of-band mark
    // (the urgent byte itself only with oob_inline; with stop_at_urgent
    // nothing is read while an urgent byte stands at the read position),
    // without waiting. Nothing to read now, whatever the reason (end of
    // stream and errors included: the next read_some() reports them): 0
    // with resource_unavailable_try_again. An empty `buf`: 0, no error.
    // SDP over the soft provider only; else 0 with operation_not_supported
    // (not_connected without a stream). Never lends the buffer (zero copy).
    // Meant to follow wait_readable() (or a poll of native_handle() and
    // pump()): a loop of try_read() alone keeps the thread that polls the
    // socket from the lock.
    std::size_t try_read(std::span<std::uint8_t> buf, std::error_code& ec,
                         bool stop_at_urgent = false);
    // Blocks, without reading, until data is there for try_read() (true)
    // or read_some() has something else to do (false: end of stream, an
    // error, the urgent byte with stop_at_urgent, or a zero-copy
    // advertisement, which read_some() serves by RDMA Read or answers with
    // SendSm). Bounded by io_timeout (timed_out). Soft provider only, as
    // try_read().
    bool wait_readable(std::error_code& ec, bool stop_at_urgent = false);
    // True when every byte written before has been sent and the peer has
    // acknowledged every SDP message (MSeqAck, 6.1.6): a small write now
    // goes out at once as a message of its own. A caller with a buffer of
    // its own (the preload library's socketpair) gives writes that follow
    // each other closely to that buffer while this is false, so they go
    // out gathered in large messages, as Nagle's algorithm gathers them on
    // TCP. As far as the stream has seen: send_idle() takes no input in.
    // On the soft provider a peer's acknowledgement counts once a call
    // takes the socket's input in (a read, including one blocked in
    // another thread, wait_readable(), a write that waits, pump(),
    // urgent_pending(), at_mark(), read_oob()) or the helper thread does
    // while sends are queued; on the rdma provider the progress thread
    // takes it in without a call. False while another thread (the rdma
    // provider's progress thread included) is inside the stream, and when
    // not connected; always true over TCP (the kernel's Nagle decides
    // there).
    bool send_idle() const;
    // A request/reply exchange (9.4, Transactions): writes `request`, then
    // reads some bytes of the reply into `reply`, as write() followed by
    // read_some(). With zero copy (mechanism zcopy, no io_timeout) on the
    // soft provider, once the peer's half is in Pipelined Mode, the request
    // travels inside the SinkAvail that lends `reply`, and the peer's reply
    // write goes straight into it by RDMA Write: one message instead of
    // two. `reply` must be larger than zcopy_threshold for that; otherwise,
    // and on every other path, it is exactly write() + read_some().
    std::size_t transact(std::span<const std::uint8_t> request, std::span<std::uint8_t> reply,
                         std::error_code& ec);
    // Half-close: the peer reads EOF after the queued data.
    std::error_code shutdown_write();

    // --- Out-of-band data (9.5.3), with the semantics of Linux TCP, over
    // SDP as over the TCP fallback (there: the socket calls themselves).
    // See docs/sdp.md, "Out-of-band data".
    //
    // send(fd, &byte, 1, MSG_OOB): `byte` becomes the urgent byte, in order
    // in the stream after everything written before. Blocks like write().
    std::error_code send_oob(std::uint8_t byte);
    // recv(fd, &b, 1, MSG_OOB): the urgent byte once it has arrived (out of
    // line). Errors: invalid_argument (no urgent byte, it was already read,
    // the reader has read past its mark, or oob_inline),
    // resource_unavailable_try_again (announced by OOB_PEND, not arrived
    // yet; never blocks).
    std::uint8_t read_oob(std::error_code& ec);
    // ioctl(SIOCATMARK): the read position is at the mark: the next byte
    // read_some() returns is the one after the urgent byte (out of line) or
    // the urgent byte itself (oob_inline).
    bool at_mark() const;
    // An urgent byte is announced (OOB_PEND) or arrived and not yet read
    // (select()'s exceptional condition / POLLPRI). Over TCP: POLLPRI, which
    // Linux raises only once the byte has arrived.
    bool urgent_pending() const;
    // SO_OOBINLINE: the urgent byte stays in the normal stream (read_oob then
    // fails with invalid_argument). Also StreamOptions::oob_inline. Decided
    // at read time, as on Linux: it applies to a byte already received.
    std::error_code set_oob_inline(bool on);
    // read_some() never returns bytes from both sides of the mark (as TCP:
    // a read stops at the mark). This overload also returns when the read
    // position reaches an urgent byte not yet read with read_oob(): 0 bytes
    // and ec = std::errc::interrupted (like a read interrupted by SIGURG).
    // Without it (the plain overload) the out-of-line urgent byte is simply
    // skipped by reads, and then gone, as on TCP.
    std::size_t read_some(std::span<std::uint8_t> buf, std::error_code& ec, bool stop_at_urgent);

    // TCP keepalive (14.3) on the stream's TCP socket, at any time while
    // open (see `Keepalive`). Errors: not_connected, invalid_argument (a
    // value out of range), operation_not_supported (rdma provider).
    std::error_code set_keepalive(const Keepalive& k);

    // Graceful close, bounded by options().linger (then abortive: timed_out).
    std::error_code close();
    // Abortive close: the peer gets connection_reset. After our DisConn the
    // AbortConn (8.2.2) goes out and is acknowledged first, which may take
    // up to a second when it waits for the peer's credit; then the LLP is
    // torn down (RST only if that time ran out).
    void abort();

    bool is_open() const;
    Transport used() const;
    // How the stream is connected; after a failed connect*(), the reason
    // and the provider tried (reset by the next connect).
    const ConnectInfo& info() const;
    // The TCP socket (for poll()); use pump() when it is ready.
    int native_handle() const;
    // Event-loop helper: non-blocking service of the SDP machines; returns
    // the poll events to wait for next (POLLIN/POLLOUT). TCP: POLLIN.
    short pump();
    // Details of the SDP connection (MSS, CRC, errors) for messages.
    std::string describe() const;
    // The SDP counters (zeros over TCP or when not connected).
    StreamStats stats() const;

    // --- Socket duplication initiated here (13.1.1, Local Peer; soft
    // provider). The remote side answers SuspComm on every provider that
    // supports duplication (docs/sdp.md).
    //
    // In the Controlling Address Space (steps 2 and 5): waits for In-Process
    // transfers, sends SuspComm with `new_port`, waits (handshake_timeout)
    // for the SuspCommAck and lets the LLP close. The state comes back and
    // the stream is done: a read_some()/write() blocked in another thread
    // returns operation_canceled (write: with the count it queued, which is
    // sent or in `unsent`), and so does every later call; close() releases
    // it without error (the descriptor stays open until then). Urgent data
    // is flattened into `unread` (docs/sdp.md). Errors:
    // operation_not_supported (TCP fallback, rdma provider), not_connected,
    // invalid_argument (port 0, a close has begun), timed_out (no SuspCommAck:
    // the stream is reset), connection_reset.
    std::optional<Handoff> hand_off(std::uint16_t new_port, std::error_code& ec);
    // In the address space that takes over (steps 1, 6, 7): accepts on
    // `listen_fd` (a listening TCP socket on h.local's IP whose port went
    // into hand_off(); not closed here) the Remote Peer's new connection;
    // a connection from any other address or port is closed (step 1). Runs
    // the Accepting Peer's startup with h.recv_buf_size; then read_some()
    // returns h.unread first, h.unsent goes out first (and DisConn if
    // h.write_shut). Bounded by opts.handshake_timeout. Errors (reason in
    // info()): timed_out (no connection from h.peer, or its startup),
    // invalid_argument (h.recv_buf_size outside [kMinPrivateBufferSize,
    // 16 MiB], IRD/ORD 0), operation_not_supported (provider not soft),
    // already_connected (this stream is open), the startup's errors.
    std::error_code take_over(int listen_fd, const Handoff& h, const StreamOptions& opts = {});

    struct Impl;

  private:
    friend class Acceptor;
    std::error_code fail(std::error_code ec, ConnectInfo info);
    // A connected Impl becomes this stream's, with StreamOptions::keepalive
    // and oob_inline applied to its socket (a failure closes it).
    std::error_code opened(std::unique_ptr<Impl> im);
    std::unique_ptr<Impl> impl_;
    // info() after a failed connect: the reason and the provider tried.
    ConnectInfo failed_;
};

struct AcceptorOptions {
    // For accepted streams (handshake timeout, buffers, linger), and
    // stream.iwarp_provider selects the listener: soft (TCP socket), rdma
    // (rdma_cm listener on an iWARP device) or automatic (rdma when the
    // probe finds a device, else soft). One provider per acceptor.
    StreamOptions stream;
    int backlog = 128;
    // Registration with the local sdp-pmd (docs/control-protocol.md). Unset
    // control_socket: no registration.
    std::optional<std::string> control_socket;
    std::string service_name;                 // default: "sdp-" + port
    std::optional<std::string> conventional;  // "IP:PORT" or "*:PORT"
    std::optional<std::string> sdp_address;  // default: the listening "IP:PORT" ("*:P" for 0.0.0.0)
    std::optional<std::string> pm_time;      // e.g. "30s", "permanent"
    // The registration lives as long as this process: sdp-pmd watches the
    // process that registered (its pid as the kernel gives it, SO_PEERCRED)
    // and removes the mapping as soon as it exits, however it exits. Off:
    // the mapping stays until close() unregisters it (a crash leaves it).
    bool registration_follows_process = true;
    // How sdp-pmd checks this SDP Address ("listener", "connect" or "off";
    // unset: the daemon's `health:` defaults). A listener kept in an RNIC,
    // invisible to the kernel's socket tables, wants "connect" or "off".
    std::optional<std::string> health_check;
    std::chrono::milliseconds control_timeout{2000};
    // On-demand SDP ports (docs/sdp.md, "On-demand ports"; section 7.4): no
    // fixed listener. open() registers the pool with sdp-pmd over a control
    // connection it keeps (the registration lives as long as it), and a
    // service thread opens a listener on a port of the pool when the daemon
    // asks (one per client PMReq) and closes it when told (PMAck timer out,
    // the client connected for a single-use mapping, or its PmTime over).
    // accept() returns the connections of every such listener. Needs
    // control_socket and conventional, and the soft provider; the port of
    // the address given to open() is ignored (its IP is where they listen).
    struct OnDemandPorts {
        std::vector<std::uint16_t> ports;  // the pool (at most 1024)
        bool single_use = false;           // closed after the first connection
    };
    std::optional<OnDemandPorts> on_demand;
    // MPA/SDP startups in progress at once, plus established streams not
    // yet returned by accept(). Beyond it a new TCP connection is closed at
    // once and counted (AcceptorStats::over_limit).
    std::size_t max_pending_handshakes = 64;
    // Called for each failed startup with "peer: error: why" (from the
    // thread that calls accept(), or the async acceptor's executor).
    std::function<void(const std::string&)> on_handshake_error;
};

// Counters of an acceptor (blocking or async).
struct AcceptorStats {
    std::uint64_t tcp_accepted = 0;        // TCP connections taken from the listen queue
    std::uint64_t established = 0;         // startups that completed
    std::uint64_t handshake_failures = 0;  // garbage, timeout, reset, rejected
    std::uint64_t over_limit = 0;          // closed: max_pending_handshakes reached
    std::size_t pending = 0;               // startups running now
    std::size_t ready = 0;                 // established, waiting for accept()
};

class Acceptor {
  public:
    Acceptor();
    ~Acceptor();  // close()
    Acceptor(const Acceptor&) = delete;
    Acceptor& operator=(const Acceptor&) = delete;
    // A moved-from acceptor is closed: its accessors answer as for a
    // closed acceptor and open() opens it afresh.
    Acceptor(Acceptor&&) noexcept;
    Acceptor& operator=(Acceptor&&) noexcept;

    // Listens (SO_REUSEADDR) and, with a control socket, registers the
    // mapping. A failed registration closes the listener and returns the
    // error; registration_error() has the daemon's text. After a successful
    // open() a non-empty registration_error() is a warning: the daemon
    // could not tie the mapping to this process (registration_follows_process)
    // and it was registered without the tie.
    std::error_code open(const pm::Endpoint& local, const AcceptorOptions& opts = {});
    // Returns the next connection whose MPA/SDP startup completed. Startups
    // run concurrently (one thread each, at most max_pending_handshakes),
    // so a silent or slow client never delays the others; a startup already
    // running goes on between accept() calls, while new TCP connections are
    // taken from the listen backlog only inside accept(). A failed startup
    // is counted (stats()), reported through on_handshake_error and
    // last_error(), and never returned here; accept() fails only with
    // timed_out (timeout passed) or when the listener itself fails.
    std::error_code accept(Stream& out, std::optional<std::chrono::milliseconds> timeout = {});
    // Unregisters (if registered) and closes the listener.
    std::error_code close();

    bool is_open() const;
    // The provider the listener uses (soft or rdma) once open.
    Provider listener_provider() const;
    pm::Endpoint local_endpoint() const;
    bool registered() const;
    const std::string& registration_error() const;
    // Why open() failed before registering (no iWARP device for provider
    // rdma, rdma_cm listen errors), empty otherwise.
    const std::string& open_error() const;
    // The last startup failure ("peer: error: why"), empty if none.
    std::string last_error() const;
    AcceptorStats stats() const;
    // The listening TCP socket (soft), or the rdma_cm event channel (rdma);
    // -1 for an on-demand acceptor.
    int native_handle() const;
    // On-demand: listeners open now (the daemon's pool ports in use here).
    std::size_t on_demand_listeners() const;

    struct Impl;

  private:
    const Impl& state() const;
    std::unique_ptr<Impl> impl_;
};

}  // namespace sdp
