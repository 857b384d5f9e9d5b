// SPDX-License-Identifier: Apache-2.0
// The sans-I/O SDP connection machine (draft-pinkerton-iwarp-sdp-01):
// Hello/HelloAck setup (8.1.1), Bcopy data transfer with private-buffer
// credits (9.1, 10), MSeq/MSeqAck (6.1.5-6), graceful and abortive close
// (8.2), solicited events (14.2) and out-of-band data (9.5.3).
//
// Read Zcopy (9.2) when the QueuePair can do RDMA Read and
// Config::bcopy_threshold is set: write_zcopy() advertises a buffer with
// SrcAvail, the peer pulls it with RDMA Read (read_zcopy()) and answers
// RdmaRdCompl, or forces Bcopy with SendSm (9.5.2.1); SrcAvailCancel (9.5.4)
// is answered, and sent by revoke_zcopy_write() (a writer that gives up).
//
// Flow Control Modes (11, 12; the tables are modes.hpp): both halves start
// Combined. As Data Sink able to do zero copy we set REQ_PIPE in our
// RdmaRdCompl/RdmaWrCompl Messages (6.1.2); as Data Source able to do it
// we take the hint and move our half to Pipelined with ModeChange (12.3).
// We never initiate another transition; a peer's ModeChange is applied.
// Every advertisement is checked against Figure 25 for the current pair of
// modes (mode_violation).
//
// Write Zcopy (9.3), Pipelined Mode only, one advertisement per direction:
// post_sink() lends a reader's buffer with SinkAvail (NonDiscards, 9.5.1);
// the peer RDMA-Writes queued bytes or a write_zcopy() buffer into it and
// answers RdmaWrCompl, or a message with payload makes it stale (9.5.1);
// cancel_sink() sends SinkAvailCancel and a current SinkAvail is answered
// with SinkCancelAck (9.5.5). Crossing SrcAvail/SinkAvail follow 11.3
// (Write Zcopy wins). Transactions (9.4): transact() sends a SinkAvail with
// the request as payload; a received one's payload is delivered. Not yet:
// MaxAdverts above 1. See docs/sdp-wire.md.
//
// Receive buffer resizing (10.6): a peer's ChRcvBuf is granted within
// Config::max_recv_buf_size when the QueuePair can post buffers of another
// size (ChRcvBufAck at once for less, after the old buffers for more), or
// answered with the unchanged size; request_peer_recv_size() asks the peer,
// and a Data Source with a backlog asks on its own (grow_peer_buffers).
//
// Socket duplication (13.1.1, 13.1.2): a SuspComm from the peer is answered
// as the Remote Peer (In-Process operations finish, SuspCommAck, quiet, LLP
// closed after it); the driver then connects to the SuspComm's port and
// calls restart() and connect(): unread and unsent bytes carry over, the
// rest starts afresh. suspend() is the Local Peer's side. The states are one
// transition table (duplication.hpp). See docs/sdp.md, "Socket duplication".
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sdp/engine/duplication.hpp"
#include "sdp/engine/modes.hpp"
#include "sdp/engine/qp.hpp"
#include "sdp/engine/teardown.hpp"
#include "sdp/wire/message.hpp"

namespace sdp::engine {

struct Config {
    // Size of each local receive Private Buffer (LocalRcvSz / ActRcvSz).
    std::uint32_t recv_buf_size = 16 * 1024;
    // Receive Private Buffers kept posted: the initial credit advertised.
    // Raised to at least 4 (10.3 requires 3; see docs/sdp-wire.md); 16 bits.
    std::uint16_t recv_buf_count = 16;
    // Local send buffer size: messages are at most min(this, peer's receive
    // buffer size). Sent as the DesRemRcvSz hint in Hello.
    std::uint32_t send_buf_size = 16 * 1024;
    // Bytes write() buffers before it accepts no more.
    std::size_t send_queue_limit = 256 * 1024;
    // Receive buffer resizing (10.6): a peer's ChRcvBuf asking for more is
    // granted up to this size (when the QueuePair can resize; 0 or less than
    // recv_buf_size: never beyond recv_buf_size); one asking for less is
    // granted down to its size.
    std::uint32_t max_recv_buf_size = 0;
    // As Data Source with a backlog (at least 4 of the peer's buffers'
    // worth queued) and a peer whose buffers are smaller than
    // send_buf_size: ask it once for send_buf_size (ChRcvBuf, 10.6), so
    // that fewer, larger messages carry the stream. Off after an explicit
    // request_peer_recv_size().
    bool grow_peer_buffers = false;
    // Read Zcopy (9.2): write_zcopy() takes buffers larger than this, and a
    // read_zcopy() buffer smaller than both this and the advertised rest is
    // unsuitable (SendSm). 0: Bcopy only (a peer's SrcAvail gets SendSm).
    std::size_t bcopy_threshold = 0;
    // IRD/ORD the local connection context supports (LocIRD/LocORD <= these).
    std::uint16_t ird = 1;
    std::uint16_t ord = 1;
    std::uint8_t major = wire::kMajorVersion;
    std::uint8_t minor = wire::kMinorVersion;
    // SO_OOBINLINE: a received urgent byte stays in the normal stream
    // (set_oob_inline() changes it at any time).
    bool oob_inline = false;
    // The driver can reconnect for a socket duplication (13.1.1 Remote
    // Peer). false: a SuspComm resets the connection (duplication_unsupported).
    bool duplication = true;
};

enum class Role : std::uint8_t { connecting, accepting };

// Socket duplication, Local Peer (13.1.1 step 5): the state a suspended
// connection hands to the address space that takes it over.
struct Carry {
    // What read() would still have returned, in order. An urgent byte is
    // flattened: out of line it is left out (reads skip it), inline it is a
    // normal byte; the mark itself is not carried (docs/protocol-notes.md).
    std::vector<std::uint8_t> unread;
    // Written, not sent: the queued data and the rest of a cancelled
    // SrcAvail, in stream order. Urgent bytes among them go as normal data.
    std::vector<std::uint8_t> unsent;
    bool write_shut = false;  // shutdown_write() came: DisConn after `unsent`
    std::uint32_t recv_buf_size = 0;
    std::uint16_t ird = 1;
    std::uint16_t ord = 1;
};

enum class State : std::uint8_t {
    idle,         // nothing sent yet
    connecting,   // Hello produced, waiting for HelloAck
    established,  // data may flow (subject to half-closes)
    closed,       // graceful teardown completed
    reset,        // abortive teardown (local, peer or LLP)
    failed,       // setup rejected or aborted (8.1.1 / 8.1.2)
};

enum class Error : std::uint8_t {
    none,
    version_mismatch,         // MajV differs (6.2.1.1, 6.2.2.1)
    bad_hello,                // Hello undecodable or a field out of range (8.1.1 step 3)
    bad_hello_ack,            // HelloAck undecodable or out of range (8.1.1 step 7)
    bad_message,              // an SDP Message did not decode (8.2.2 protocol violation)
    unexpected_message,       // e.g. Hello after setup, payload after DisConn
    mseq_mismatch,            // MSeq not last + 1 (10.1)
    bad_mseq_ack,             // MSeqAck acknowledges an MSeq never sent
    oversize,                 // message larger than the local receive buffer
    credit_overrun,           // a message arrived with no receive buffer posted (10.2)
    llp_lost,                 // LLP torn down without DisConn (8.2.2)
    local_abort,              // the ULP aborted
    peer_abort,               // AbortConn received
    rdma_failed,              // an RDMA Read of the peer's advertised buffer failed
    bad_susp_comm,            // SuspComm with port 0, a second one, during teardown, or an
                              // unasked SuspCommAck (6.5, 13.1.1)
    suspended_message,        // a message from a peer that sent SuspComm or SuspCommAck (13.1.1)
    duplication_unsupported,  // SuspComm to a driver that cannot reconnect (13.1)
    resume_failed,            // the new connection of a duplication failed (13.1.1 step 4)
    handed_off,               // the Local Peer handed its state over (13.1.1 step 5)
    bad_mode_change,          // a ModeChange its sender may not send (12, Figures 26, 27)
    mode_violation,           // an advertisement the half-connection's mode forbids (11, Figure 25)
};

std::string_view to_string(State s);
std::string_view to_string(Error e);

struct Stats {
    std::uint64_t messages_sent = 0;
    std::uint64_t messages_received = 0;
    std::uint64_t data_messages_sent = 0;
    std::uint64_t credit_updates_sent = 0;  // gratuitous Data without payload
    std::uint64_t bytes_sent = 0;
    std::uint64_t bytes_received = 0;
    std::uint64_t ignored = 0;                // messages for mechanisms not implemented yet
    std::uint64_t mode_changes_received = 0;  // ModeChange Messages applied (12)
    std::uint64_t mode_changes_sent = 0;      // ModeChange Messages of ours, as Mode Master
    // 11.3 crossing rules: as Data Sink, SrcAvails ignored because our
    // SinkAvail was outstanding (rule 2b); as Data Source, SrcAvails of ours
    // taken as discarded because the peer's SinkAvail came (rule 1b).
    std::uint64_t src_avail_ignored = 0;
    std::uint64_t src_avail_superseded = 0;
    // 9.5.4, as Data Source: SrcAvailCancels sent (a zero-copy write given
    // up, or a suspend with our SrcAvail in process).
    std::uint64_t src_avail_cancel_sent = 0;
    std::uint64_t sink_avail_stale = 0;  // SinkAvail discarded as stale (9.5.1)
    // Read Zcopy (9.2): as Data Source, buffers advertised and bytes the
    // peer read; as Data Sink, RDMA Reads done and bytes placed by them;
    // SendSm sent and received (Bcopy forced, 9.5.2.1).
    std::uint64_t zcopy_writes = 0;
    std::uint64_t zcopy_bytes_sent = 0;
    std::uint64_t zcopy_reads = 0;
    std::uint64_t zcopy_bytes_received = 0;
    std::uint64_t send_sm_sent = 0;
    std::uint64_t send_sm_received = 0;
    // Write Zcopy (9.3). Data Sink: SinkAvails sent, bytes the peer
    // RDMA-Wrote into them (also in zcopy_bytes_received), SinkAvails made
    // stale by a message with payload (9.5.1 step 1), SinkAvailCancels sent.
    // Data Source: current SinkAvails received, RDMA Writes posted and bytes
    // written (also in zcopy_bytes_sent), current SinkAvails used up by a
    // Data Message instead (9.5.2.2), SinkCancelAcks sent.
    std::uint64_t sink_avail_sent = 0;
    std::uint64_t transactions_sent = 0;  // of those, with a request (9.4)
    std::uint64_t sink_bytes_received = 0;
    std::uint64_t sink_avail_completed_by_data = 0;
    std::uint64_t sink_avail_cancel_sent = 0;
    std::uint64_t sink_avail_received = 0;
    std::uint64_t rdma_writes = 0;
    std::uint64_t rdma_write_bytes = 0;
    std::uint64_t sink_avail_bcopy = 0;
    std::uint64_t sink_cancel_ack_sent = 0;
    // Socket duplication (13.1.1): SuspComm received / sent, SuspCommAck
    // sent / received, SuspComms disregarded (13.1.2), connections resumed.
    std::uint64_t susp_comm_received = 0;
    std::uint64_t susp_comm_sent = 0;
    std::uint64_t susp_comm_ack_sent = 0;
    std::uint64_t susp_comm_ack_received = 0;
    std::uint64_t susp_comm_disregarded = 0;
    std::uint64_t resumes = 0;
    // Receive buffer resizing (10.6): ChRcvBufs sent and received, received
    // ones disregarded (10.6.1), our receive buffer size changed.
    std::uint64_t ch_rcv_buf_sent = 0;
    std::uint64_t ch_rcv_buf_received = 0;
    std::uint64_t ch_rcv_buf_disregarded = 0;
    std::uint64_t recv_resizes = 0;
};

class Connection {
  public:
    Connection(Role role, const Config& cfg, QueuePair& qp);
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    // --- setup (8.1.1) -----------------------------------------------------
    // Connecting Peer: posts the receive buffers (step 1c) and returns the
    // Hello Message for the MPA Request private data.
    std::vector<std::uint8_t> connect();
    // Accepting Peer: validates the Hello (step 3). On success posts the
    // receive buffers, sends HelloAck as Send with SE (steps 4-5) and is
    // established; returns Error::none. Otherwise nothing is sent: the
    // connection manager rejects the MPA request; state() is failed.
    Error accept(std::span<const std::uint8_t> hello);

    // --- completions from the QP ------------------------------------------
    // Each of the three receive entry points below only says where the
    // message's payload is and hands it to the one receive path (on_message):
    // the same checks (credit, Len, MSeq/MSeqAck, DisConn, OOB) and effects.
    //
    // One receive completion: the bytes of one incoming Send (payload copied).
    // invalidated_stag: the STag a Send with Invalidate named (0: none).
    void on_recv(std::span<const std::uint8_t> message, bool solicited,
                 std::uint32_t invalidated_stag = 0);
    // The same for a message in a whole private buffer of local_recv_size()
    // bytes, the first `len` of which were received. A Data Message's buffer
    // is kept (its payload is read from it, no copy) and `buf` is replaced by
    // a spare buffer of the same size; otherwise `buf` is left as it is.
    void on_recv_buffer(std::vector<std::uint8_t>& buf, std::size_t len, bool solicited,
                        std::uint32_t invalidated_stag = 0);
    // The LLP connection is gone (FIN, RST or error).
    void on_llp_closed();

    // Direct placement (the provider puts a Data Message's payload straight
    // into a waiting reader's memory instead of the private buffer):
    // landable() says whether the message starting with `bsdh` (its first
    // wire::kBsdhSize bytes) may be placed that way now: established, no
    // unread data queued (order), a Data Message without OOB_PRES, and a
    // length that fits a private buffer. on_recv_landed() then takes its
    // completion: `buf` holds the BSDH, the payload (len - kBsdhSize bytes)
    // is in the reader's memory. The same checks and effects as
    // on_recv_buffer(), except that the payload counts as read at once.
    // Returns the payload bytes the reader may use (0 if the message broke
    // the connection), or nullopt, with nothing changed, if the message may
    // not be taken this way after all (the provider then copies the payload
    // into `buf` and calls on_recv_buffer()).
    // landable(): the payload size (BSDH Len - BSDH) if it may land, else 0.
    [[nodiscard]] std::size_t landable(std::span<const std::uint8_t> bsdh) const;
    std::optional<std::size_t> on_recv_landed(std::span<const std::uint8_t> buf, std::size_t len);

    // --- ULP -----------------------------------------------------------------
    // Queues up to send_queue_limit bytes; returns how many were taken
    // (0 after shutdown_write(), on a closed connection, or when full).
    std::size_t write(std::span<const std::uint8_t> bytes);
    // True when write() would take `size` bytes now, or as many as the send
    // queue can hold for a larger write: the test of a write that is taken
    // whole or not at all.
    bool takes_whole(std::size_t size) const {
        return write_space() >= std::min(size, send_queue_limit());
    }
    // Queues one byte of out-of-band data (9.5.3): it goes in order in the
    // stream, as the last byte of a Data Message with OOB_PRES; OOB_PEND
    // goes exactly once, on a message at most 65535 bytes before it. False
    // when not writable (or a Read Zcopy advertisement is in process).
    bool write_oob(std::uint8_t byte);
    // Copies delivered in-order bytes; 0 when none are ready (check eof()).
    //
    // Out-of-band data on the receive side follows Linux TCP (see
    // docs/protocol-notes.md, 9.5.3): the urgent byte stays in the receive
    // stream at its position, the mark. A read never returns bytes from
    // both sides of the mark: it stops in front of it, and a read starting
    // at it skips the urgent byte (out of line, the default) or returns it
    // first (oob_inline), then reads on. Once the read position has passed
    // the mark the urgent byte is gone (read_oob() has nothing).
    std::size_t read(std::span<std::uint8_t> out);
    // recv(MSG_OOB): the urgent byte once, out of line only; nullopt when
    // there is none, it was read, the reader passed it, oob_inline, or a
    // newer one is announced and not arrived (oob_not_yet()).
    std::optional<std::uint8_t> read_oob();
    // read_oob() would fail with EAGAIN: announced by OOB_PEND, not arrived.
    [[nodiscard]] bool oob_not_yet() const { return !oob_inline_ && oob_pending_ > 0; }
    // SIOCATMARK: the next byte of the stream is the urgent byte.
    [[nodiscard]] bool at_mark() const { return urg_ && urg_->pos == rx_pos_; }
    // At the mark, out of line, and the urgent byte not read with
    // read_oob() (a read with stop_at_urgent is interrupted here).
    [[nodiscard]] bool at_urgent() const { return at_mark() && !oob_inline_ && !urg_->taken; }
    // POLLPRI: an urgent byte announced (OOB_PEND) or arrived and unread.
    [[nodiscard]] bool urgent_pending() const { return oob_pending_ > 0 || (urg_ && !urg_->taken); }
    void set_oob_inline(bool on) { oob_inline_ = on; }
    [[nodiscard]] bool oob_inline() const { return oob_inline_; }
    // --- zero copy: Read Zcopy (9.2) -----------------------------------------
    // Data Source: advertises `buf` with a SrcAvail (carrying its first bytes
    // in Combined Mode, 11.2, none in Pipelined Mode, 11.3); the peer
    // RDMA-Reads the rest (in Pipelined Mode a crossing SinkAvail of the
    // peer's takes it by Write Zcopy instead, 11.3 rule 1). True if started: `buf` must stay valid
    // and unchanged until zcopy_write_pending() is false, and write() takes
    // nothing meanwhile (11.2: no payload while a SrcAvail is in process).
    // False, nothing done: not possible now (data still queued, a transfer
    // in process, buf not larger than bcopy_threshold, no RDMA-capable QP,
    // registration refused); use write().
    bool write_zcopy(std::span<const std::uint8_t> buf);
    // A driver's zero-copy write of `buf`, the same steps for every driver:
    // false: write() it (at most the threshold, no RDMA-capable QP, not
    // established, half-closed, a duplication running, or write_zcopy()
    // refused); nullopt: wait, the bytes queued before it go first (11.2);
    // true: started (write_zcopy()). The cheap refusals come before the
    // wait, so a write that cannot go zero copy never waits for a drain.
    std::optional<bool> start_zcopy_write(std::span<const std::uint8_t> buf);
    [[nodiscard]] bool zcopy_write_pending() const { return src_out_.has_value(); }
    // The writer gives up on its zero-copy write (io_timeout): once
    // advertised, SrcAvailCancel (9.5.4) and the buffer stays lent until the
    // peer Processed it (its RdmaRdCompls, then SendSm for the rest, or a
    // crossing SinkAvail); not advertised yet, withdrawn at once; after a
    // SendSm, the part not yet queued is dropped. The bytes the peer did not
    // take are not sent.
    void revoke_zcopy_write();
    // A zero-copy write that ended (zcopy_write_pending() false) with the
    // connection established or handed off: how many of its `size` bytes
    // are the stream's, once: all, unless revoke_zcopy_write() cut it short.
    std::size_t take_zcopy_write_count(std::size_t size);
    [[nodiscard]] std::size_t bcopy_threshold() const { return cfg_.bcopy_threshold; }
    // Data Sink: the next bytes of the stream are in the peer's advertised
    // buffer and nothing is readable() before them: how many.
    [[nodiscard]] std::size_t zcopy_readable() const;
    // RDMA-Reads up to out.size() of them straight into `out`, which must
    // stay valid until take_zcopy_read() has a value. False: not started;
    // if `out` was too small for zero copy (below bcopy_threshold and the
    // rest), the peer was asked for Bcopy (SendSm) and the bytes arrive
    // for read().
    bool read_zcopy(std::span<std::uint8_t> out);
    [[nodiscard]] bool zcopy_read_pending() const { return zread_.has_value(); }
    // The byte count a finished read_zcopy() (or an RdmaWrCompl for a
    // post_sink() buffer) placed, once; nullopt while it runs (or none ran).
    // A failed read resets the connection.
    std::optional<std::size_t> take_zcopy_read();
    // The reader will not take the peer's advertised buffer (closing, or
    // it gave up): the peer sends the rest by Bcopy (SendSm).
    void decline_zcopy();
    // Closing: unread input is discarded as it arrives, as close(2) does,
    // and a buffer the peer advertised is declined (its rest comes by
    // Bcopy, to be discarded, so the peer can close too).
    void discard_input();
    // Completion of QueuePair::post_rdma_read().
    void on_rdma_read_done(std::uint64_t id, bool ok);

    // --- zero copy: Write Zcopy (9.3) ---------------------------------------
    // Data Sink: lends `out` for the peer to RDMA-Write the next bytes of the
    // stream into (registered for remote write, advertised with SinkAvail
    // and NonDiscards, 9.5.1). True if started: `out` must stay valid until
    // sink_pending() is false; then take_zcopy_read() has the byte count the
    // peer wrote (RdmaWrCompl), or nothing: a message with payload came
    // first (9.5.1 step 1: its bytes are readable()), the peer's SrcAvail
    // came while our SinkAvail was not sent yet (11.3 rule 2a: withdrawn,
    // the SrcAvail's data is read instead), the peer acknowledged
    // cancel_sink() (9.5.5), a DisConn came, or the connection ended.
    // False, nothing done: not possible now (our receive half not in
    // Pipelined Mode (Figure 25; the peer moves it there after our REQ_PIPE
    // hint), something readable, the peer's SrcAvail in process, a sink
    // pending, `out` not larger than both
    // bcopy_threshold and the private buffer size (9.3 step 1), no RDMA,
    // DisConn received, registration refused). A reader that needs its
    // buffer filled (MSG_WAITALL) must not call this (9.3).
    bool post_sink(std::span<std::uint8_t> out);
    // Transaction (9.4): post_sink(reply) whose SinkAvail also carries
    // `request`, the next bytes of our outgoing stream (a command whose
    // reply the peer may RDMA-Write into `reply`). Besides post_sink()'s
    // conditions: Figure 25 permits it (our receive half Pipelined),
    // nothing queued or advertised before it (stream order, 11.2/11.3), no
    // urgent byte pending, writable, and `request` fits one message
    // (max_transaction_request()). False, nothing done: write() the request
    // and post_sink() (or read) as usual. True also when the peer's credits
    // allow no message with payload (10.5): then the request goes as Data
    // first and the SinkAvail alone after it (the reply may still come
    // into `reply`); the caller sees no difference.
    bool transact(std::span<const std::uint8_t> request, std::span<std::uint8_t> reply);
    [[nodiscard]] std::size_t max_transaction_request() const;
    [[nodiscard]] bool sink_pending() const { return sink_out_.has_value(); }
    // The reader gives up on its post_sink() buffer (timeout, close): not
    // advertised yet, it is withdrawn at once; otherwise SinkAvailCancel
    // (9.5.5), and the buffer stays lent until sink_pending() is false.
    void cancel_sink();

    // --- receive buffer resizing (10.6) -------------------------------------
    // Local Peer: asks the peer to change its receive private buffers to
    // `size` (ChRcvBuf). Smaller: our messages are at most `size` from now
    // on; larger: from the peer's ChRcvBufAck on (peer_recv_size()). False,
    // nothing sent: not established, duplicating, after shutdown_write(),
    // one unacknowledged already, the current size, outside 37..2^31, or a
    // change the peer refused before in that direction. A request still
    // waiting for credit when the peer's ChRcvBuf comes is withdrawn
    // (10.6.1): peer_recv_size() goes back, peer_resize_pending() is false,
    // and the caller may ask again.
    bool request_peer_recv_size(std::uint32_t size);
    [[nodiscard]] bool peer_resize_pending() const { return asked_.has_value(); }

    // --- socket duplication (13.1.1, 13.1.2) ---------------------------------
    // Local Peer (step 2): In-Process operations finish (an advertised
    // SrcAvail of ours is cancelled, 9.5.4), then SuspComm with `dest_port`
    // and nothing more; duplication() is local_done when the SuspCommAck
    // came. False: not now (not established, teardown begun, already
    // suspending, port 0).
    bool suspend(std::uint16_t dest_port);
    [[nodiscard]] Dup duplication() const { return dup_; }

    // --- Flow Control Modes (11, 12; tables in modes.hpp) ------------------
    // The mode of the half-connection this end sends on (Data Source) and
    // of the one it receives on (Data Sink); Combined at setup (12, 8).
    [[nodiscard]] Mode mode_out() const { return mode_out_; }
    [[nodiscard]] Mode mode_in() const { return mode_in_; }
    // Remote Peer: the port of the peer's SuspComm (step 4), 0 if none.
    [[nodiscard]] std::uint16_t resume_port() const { return resume_port_; }
    // Starts over on a new LLP connection (steps 4/6): in duplication()
    // reconnecting (Remote Peer, role connecting) or local_done with the
    // LLP gone (Local Peer). Unread bytes stay readable, unsent bytes (and
    // the rest of a cancelled SrcAvail) are sent first, a pending
    // shutdown_write() stays; credits, sequence numbers, advertisements,
    // the version and IRD/ORD start afresh: the state is idle in `role`,
    // for connect() or accept(). False: not in such a state.
    bool restart(Role role);
    // The driver could not set the new connection up: reset (resume_failed).
    void resume_failed();
    // Local Peer, duplication() local_done (the LLP closed or not): the
    // remaining state comes out (Carry) and the connection is done: state
    // reset with Error::handed_off, nothing more is sent (the LLP is closed
    // gracefully if it is still up), read()/write() take nothing. Bytes a
    // finished read_zcopy() placed stay the reader's (take_zcopy_read()).
    // nullopt, nothing changed: not in local_done.
    std::optional<Carry> hand_over();
    // The taking-over side (steps 6-7): a fresh connection (idle, before
    // accept() or connect()) starts with `unread` readable first and
    // `unsent` queued first, DisConn after it if `write_shut`; its setup
    // counts as a resume (Stats::resumes). The carried bytes occupy no
    // private buffer: reading them posts none. False: not idle.
    bool carry_in(std::span<const std::uint8_t> unread, std::span<const std::uint8_t> unsent,
                  bool write_shut);

    // Graceful half-close: DisConn after all queued data (8.2.1).
    void shutdown_write();
    // Abortive close (8.2.2).
    void abort();

    // --- queries ---------------------------------------------------------------
    State state() const { return state_; }
    Error error() const { return error_; }
    Role role() const { return role_; }
    // Bytes read() returns from here on (an out-of-line urgent byte not
    // counted: reads skip it).
    std::size_t readable() const { return rx_bytes_ - (urg_ && !oob_inline_ ? 1 : 0); }
    // True when the peer sent DisConn and every byte before it was read,
    // unless the connection was reset since (then unread data was lost).
    bool eof() const;
    std::size_t write_space() const;
    std::size_t send_queued() const { return tx_bytes_; }
    std::size_t send_queue_limit() const { return cfg_.send_queue_limit; }
    bool disconn_sent() const { return engine::disconn_sent(send_); }
    // shutdown_write() (or a close) came: DisConn is queued or sent, and no
    // write is taken any more.
    bool write_shut() const { return send_ != SendTeardown::open; }
    bool disconn_received() const { return engine::disconn_received(recv_); }
    // The two teardown machines (teardown.hpp).
    SendTeardown send_teardown() const { return send_; }
    RecvTeardown recv_teardown() const { return recv_; }
    // OOB_PEND flags received and not yet matched by their OOB byte.
    std::uint32_t oob_pending() const { return oob_pending_; }
    // Credits this side may use now (10.2), reservations not subtracted.
    std::uint32_t send_credits() const;
    // Nothing written is queued or being sent (no zero-copy write either),
    // and the peer has acknowledged every message sent (its MSeqAck,
    // 6.1.6): a small write now goes out at once, alone, instead of joining
    // a stream in progress (the state in which Nagle's algorithm lets a
    // small TCP segment go).
    bool send_idle() const;
    // Bufs this side would advertise now (6.1.3).
    std::uint32_t local_bufs() const;
    // The size of the receive buffers posted from now on (10.6 may change
    // it; buffers posted before keep theirs).
    std::uint32_t local_recv_size() const { return cfg_.recv_buf_size; }
    std::uint32_t peer_recv_size() const { return peer_recv_size_; }
    std::uint16_t ird() const { return ird_; }
    std::uint16_t ord() const { return ord_; }
    std::uint8_t minor_version() const { return minor_; }
    std::uint16_t peer_max_adverts() const { return peer_max_adverts_; }
    std::uint32_t next_mseq() const { return next_mseq_; }
    std::uint32_t last_received_mseq() const { return last_rx_mseq_; }
    // The MSeqAck of the last message received (6.1.6): every message of
    // ours up to this MSeq has reached the peer. all_acked(): all of them
    // (used to hold a graceful LLP teardown until the peer has our DisConn).
    std::uint32_t peer_mseq_ack() const { return peer_ack_; }
    bool all_acked() const { return peer_ack_ == next_mseq_ - 1; }
    const Stats& stats() const { return stats_; }
    // One line for logs and error messages, e.g.
    // "established, send draining, recv open" or "reset (peer_abort), ...".
    std::string describe() const;

  private:
    struct Chunk {
        std::vector<std::uint8_t> bytes;
        std::size_t off = 0;  // next byte to read
        std::size_t end = 0;  // one past the last payload byte
        // Carried over a duplication (carry_in(), restart()): its buffer is
        // not one posted on this LLP, so reading it reposts none.
        bool carried = false;
    };

    // Where a received message's payload is; the receive path is the same.
    struct Placement {
        enum class Kind : std::uint8_t {
            copy,    // in the caller's bytes: copied out if kept
            own,     // in *buffer, a whole private buffer: kept, *buffer replaced
            landed,  // already in the reader's memory: read at once
        };
        Kind kind = Kind::copy;
        std::vector<std::uint8_t>* buffer = nullptr;  // own only
        std::uint32_t invalidated = 0;                // Send with Invalidate's STag
    };
    // A message's ULP payload: `size` bytes, in `bytes` unless landed.
    struct Payload {
        std::size_t size = 0;
        std::span<const std::uint8_t> bytes;
        Placement where;
    };

    void established();
    void handle_hello_ack(std::span<const std::uint8_t> bytes);
    // The one receive path. `bytes`: the message (landed: its BSDH only);
    // `len`: its length. True if the message was taken and the connection
    // is still established.
    bool on_message(std::span<const std::uint8_t> bytes, std::size_t len, Placement where);
    void on_credit_only(std::span<const std::uint8_t> bytes);
    bool check_sequence(const wire::Message& m);
    // The per-MID handling of a validated message; false: a violation.
    bool dispatch(wire::Message& m, const Payload& payload);
    void deliver(const Payload& payload, std::uint8_t flags);
    // A newer urgent byte is announced: the mark goes (9.5.3, as Linux TCP).
    void supersede_mark();
    // Takes up to `max` bytes from the front of rx_ (copied to dst unless
    // null); counts the private buffers emptied in `freed`.
    std::size_t consume(std::uint8_t* dst, std::size_t max, std::uint32_t& freed);
    // Private buffers read empty: posted again.
    void release(std::uint32_t freed);
    void pump();
    // block: a Data Message's bytes (headroom + payload; body is Data{}).
    // invalidate: Send with Invalidate of the peer's STag.
    bool send(wire::Body body, std::uint8_t flags = 0, std::vector<std::uint8_t>* block = nullptr,
              std::uint32_t invalidate = 0);
    // Read Zcopy pieces (9.2).
    bool on_src_avail(const wire::SrcAvail& v, const Payload& inline_payload);
    bool on_rdma_rd_compl(const wire::RdmaRdCompl& v, std::uint32_t invalidated);
    void on_send_sm();
    void on_src_avail_cancel(std::uint32_t mseq);
    // Write Zcopy pieces (9.3, 9.5.1, 9.5.5).
    bool on_sink_avail(const wire::SinkAvail& v);
    bool on_rdma_wr_compl(const wire::RdmaWrCompl& v, std::uint32_t invalidated);
    void on_sink_avail_cancel();
    void on_sink_cancel_ack();
    // Data Sink: a message with ULP payload arrived (NonDiscards, 9.5.1).
    void payload_received();
    // Data Source: a message with ULP payload goes (PotentialNonDiscards).
    void payload_sent();
    // Data Source: RDMA-Writes into the peer's SinkAvail if there is
    // something to write; true if it did.
    bool write_into_sink();
    // post_sink() and transact(): `out` lent, with `request` as the
    // SinkAvail's payload if not empty.
    bool lend(std::span<std::uint8_t> out, std::span<const std::uint8_t> request);
    // Data Sink: the advertisement is done; `placed` bytes are the reader's.
    void finish_sink(std::size_t placed);
    void force_bcopy();  // Data Sink: SendSm for the advertisement in process
    void feed_forced_rest();
    void drop_zcopy();
    // Socket duplication: the SuspComm/SuspCommAck handling, the sends of
    // the waiting states (true: nothing else may go), the SrcAvail of ours
    // that the transition cancels (its rest becomes queued data).
    bool on_susp_comm(const wire::SuspComm& v);
    bool on_susp_comm_ack();
    bool pump_duplication();
    // Receive buffer resizing (10.6): a ChRcvBuf / ChRcvBufAck received;
    // false: a violation.
    bool on_ch_rcv_buf(const wire::ChRcvBuf& v);
    bool on_ch_rcv_buf_ack(const wire::ChRcvBufAck& v);
    bool ask_peer_resize(std::uint32_t size);  // request_peer_recv_size() without pump()
    // The largest message the buffer consumed last may hold.
    [[nodiscard]] std::uint32_t consumed_buffer_size() const;
    // The size the peer knows for our buffers (10.6: SinkAvail decisions).
    [[nodiscard]] std::uint32_t announced_recv_size() const;
    void ack_resize_if_due();
    // A received ModeChange (12): applied, or false (bad_mode_change).
    bool on_mode_change_msg(const wire::ModeChange& m);
    // What Figure 25 allows this end now.
    [[nodiscard]] Permitted allowed() const { return permitted(mode_out_, mode_in_); }
    // RDMA and a Bcopy threshold: this end can do zero copy at all.
    [[nodiscard]] bool zcopy_capable() const;
    // 6.1.2: a completion's REQ_PIPE, the Data Sink of our send half asking
    // for Pipelined Mode (12.3).
    void on_req_pipe();
    bool in_process() const;
    void cancel_src_out();
    void queue_tx(std::span<const std::uint8_t> bytes);
    std::size_t tx_block_payload() const;
    std::uint32_t peer_credit_estimate() const;
    bool needs_credit_update() const;
    void arm() {
        armed_ = true;
        replied_ = false;
    }
    void repost(std::uint32_t n);
    bool take_buffer();
    void go_reset(Error e);
    void teardown_if_done();
    void fail_setup(Error e);
    std::uint8_t take_pend_flag(bool carries_oob_byte);
    void drop_queues();
    bool llp_closed() const { return engine::llp_closed(recv_); }
    bool writable() const;

    Role role_;
    Config cfg_;
    QueuePair& qp_;
    State state_ = State::idle;
    Error error_ = Error::none;

    // Setup results.
    std::uint8_t minor_ = wire::kMinorVersion;
    std::uint16_t ird_ = 1;
    std::uint16_t ord_ = 1;
    std::uint16_t peer_max_adverts_ = 0;
    std::uint32_t peer_recv_size_ = 0;

    // Sequence numbers (6.1.5, 6.1.6).
    std::uint32_t next_mseq_ = 1;     // MSeq of the next message after setup
    std::uint32_t last_rx_mseq_ = 0;  // MSeqAck we send
    std::uint64_t sent_after_setup_ = 0;

    // Send credit (10.2): from the last message received.
    std::uint32_t peer_bufs_ = 0;
    std::uint32_t peer_ack_ = 0;

    // Receive side (6.1.3): Bufs = posted_ - consumed_.
    std::uint64_t posted_ = 0;
    std::uint64_t consumed_ = 0;
    std::uint32_t last_adv_bufs_ = 0;
    std::uint64_t consumed_at_last_send_ = 0;
    // Something other than a peer's gratuitous update happened since our
    // last send (see needs_credit_update()).
    bool armed_ = false;
    // Our last message was an update answering only the peer's pure update.
    bool replied_ = false;

    // Outbound stream and OOB marks (absolute stream offsets).
    // Queued bytes in blocks of at most one message payload, each after
    // wire::kBsdhSize bytes of headroom: the front block becomes a Data
    // Message in place (BSDH written in front, the vector handed to the QP)
    // without copying its payload again.
    std::deque<std::vector<std::uint8_t>> tx_;
    std::size_t tx_bytes_ = 0;
    std::uint64_t tx_stream_pos_ = 0;      // stream offset of the first queued byte
    std::deque<std::uint64_t> oob_marks_;  // OOB bytes not yet sent
    std::size_t oob_flagged_ = 0;          // leading marks whose OOB_PEND went out
    struct Control {
        wire::Body body;
        std::uint32_t invalidate = 0;  // Send with Invalidate of this STag
    };
    std::deque<Control> control_;  // replies waiting for credit

    // Inbound stream: one chunk per received message with payload, each
    // holding its private buffer until read.
    std::deque<Chunk> rx_;
    // Private buffers read empty, handed back by on_recv_buffer().
    std::vector<std::vector<std::uint8_t>> spare_;
    std::size_t rx_bytes_ = 0;
    // Stream offset of the next byte read() takes (urgent bytes counted).
    std::uint64_t rx_pos_ = 0;
    // The mark (9.5.3): the urgent byte, still in rx_ at stream offset pos
    // (>= rx_pos_); gone once the reader passes it or a newer one is
    // announced. taken: read_oob() returned it.
    struct Urgent {
        std::uint64_t pos = 0;
        std::uint8_t byte = 0;
        bool taken = false;
    };
    std::optional<Urgent> urg_;
    bool oob_inline_ = false;
    // OOB_PEND received and not yet matched by an OOB_PRES.
    std::uint32_t oob_pending_ = 0;

    // Read Zcopy (9.2), Combined Mode: at most one advertisement in process
    // per direction. Ours, as Data Source:
    struct SrcOut {
        std::span<const std::uint8_t> buf;
        Region region;
        std::size_t inline_n = 0;  // bytes sent in the SrcAvail
        std::size_t acked = 0;     // bytes the peer's RdmaRdCompls counted
        bool advertised = false;   // SrcAvail sent
        bool forced = false;       // SendSm: the rest goes as Data
        std::size_t fed = 0;       // forced: bytes of buf queued so far
        // Bytes of the caller's buffer RDMA-Written into the peer's
        // SinkAvails before it was advertised (11.3 rule 1a; buf is the rest).
        std::size_t written = 0;
        bool revoking = false;     // revoke_zcopy_write(): the rest is not sent
        bool cancel_sent = false;  // our SrcAvailCancel (9.5.4) is out: once
    };
    std::optional<SrcOut> src_out_;
    // The count of a write that revoke_zcopy_write() ended (taken once).
    std::optional<std::size_t> zwrite_revoked_;
    void end_revoked(std::size_t taken);
    // The peer's, as Data Sink:
    struct SrcIn {
        std::uint32_t stag = 0;
        std::uint64_t va = 0;
        std::uint32_t len = 0;
        std::uint32_t inline_n = 0;
        std::uint32_t done = 0;  // bytes read and acknowledged
        bool cancelled = false;  // SrcAvailCancel while a read runs (9.5.4)
    };
    std::optional<SrcIn> src_in_;
    struct ZRead {
        Region region;
        std::uint64_t id = 0;
        std::uint32_t len = 0;
    };
    std::optional<ZRead> zread_;
    std::optional<std::size_t> zread_result_;
    std::uint64_t next_rdma_id_ = 1;
    // 9.5.4: MSeqAck stays below a SrcAvailCancel until its read completed.
    std::optional<std::uint32_t> ack_hold_;

    // 9.5.1: messages with ULP payload sent that might not make a SinkAvail
    // stale (Data Source side).
    std::uint32_t potential_non_discards_ = 0;
    // 6.3.3.4: messages with ULP payload received that did not make a
    // SinkAvail of ours stale (Data Sink side).
    std::uint32_t non_discards_ = 0;

    // Write Zcopy (9.3), one advertisement per direction as Read Zcopy's.
    // The peer's current SinkAvail, as Data Source, not used yet:
    struct SinkIn {
        std::uint32_t stag = 0;
        std::uint64_t va = 0;
        std::uint32_t len = 0;
    };
    std::optional<SinkIn> sink_in_;
    // Ours, as Data Sink:
    struct SinkOut {
        std::span<std::uint8_t> buf;
        Region region;
        bool advertised = false;  // SinkAvail sent
        bool cancelled = false;   // SinkAvailCancel sent
        // A Transaction's request (9.4): ULP payload of the SinkAvail.
        std::vector<std::uint8_t> request;
    };
    std::optional<SinkOut> sink_out_;
    // 9.5.2.1: the stream offset up to which queued bytes are the rest of a
    // SrcAvail the peer answered with SendSm: they go as Data Messages.
    std::uint64_t bcopy_until_ = 0;

    // Teardown (8.2), one machine per half-connection.
    SendTeardown send_ = SendTeardown::open;
    RecvTeardown recv_ = RecvTeardown::open;

    // Socket duplication (13.1.1): the machine, the peer's SuspComm port,
    // ours, and ours to send again after the new connection (13.1.2).
    // Receive buffer resizing (10.6). Ours: buffers posted before the change
    // (the first old_until_ ever posted) hold old_size_ bytes; an increase
    // is acknowledged once they are all consumed (ack_due_), and until then
    // the peer knows announced_ (SinkAvail decisions use it).
    std::uint64_t old_until_ = 0;
    std::uint32_t old_size_ = 0;
    std::optional<std::uint32_t> ack_due_;
    std::uint32_t announced_ = 0;
    // The peer's, asked by us: the size asked and the size before.
    std::optional<std::uint32_t> asked_;
    std::uint32_t asked_from_ = 0;
    bool no_more_increase_ = false;  // 10.6: refused once, never again
    bool no_more_decrease_ = false;
    bool sized_by_caller_ = false;  // request_peer_recv_size() ran: no policy

    // Flow Control Modes (12): ours as Data Source, ours as Data Sink.
    Mode mode_out_ = Mode::combined;
    Mode mode_in_ = Mode::combined;

    Dup dup_ = Dup::none;
    std::uint16_t resume_port_ = 0;
    std::uint16_t local_port_ = 0;
    std::optional<std::uint16_t> resend_port_;
    bool resumed_ = false;  // restart() ran: established() counts a resume
    // A violation's specific reason for on_message()'s reset.
    Error violation_ = Error::none;

    Stats stats_;
};

}  // namespace sdp::engine
