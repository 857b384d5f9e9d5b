// SPDX-License-Identifier: Apache-2.0
// The soft iWARP provider's sans-I/O queue pair: RDMAP/DDP over MPA FPDUs.
// on_bytes() takes the TCP byte stream after the MPA frames; take_output()
// returns FPDUs to write. No sockets, clocks or threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "sdp/iwarp/ddp_rdmap.hpp"
#include "sdp/iwarp/fpdu.hpp"
#include "sdp/iwarp/mpa.hpp"
#include "sdp/iwarp/verbs.hpp"

namespace sdp::iwarp {

struct QpConfig {
    MpaRole role = MpaRole::initiator;
    bool crc = false;
    std::size_t mss = 1460;  // TCP MSS: FPDUs are sized to fit one segment
    bool p2p = false;
    RtrMode rtr = RtrMode::none;
    std::uint16_t ird = 128;  // inbound Read Requests served at once
    std::uint16_t ord = 128;  // outbound Read Requests outstanding
    std::size_t max_send_wr = 1024;
    std::size_t max_recv_wr = 1024;
    // Randomness for STags (the driver draws it from the OS): STags are not
    // guessable or sequential (RFC 5040 8.2, RDDP security).
    std::uint64_t stag_seed = 0;
};

// The QP settings MPA agreed on (call when the negotiator is established).
[[nodiscard]] QpConfig qp_config_from(const MpaNegotiator& mpa, std::size_t mss);

// Registered regions and their checks (RFC 5041 section 7.1 / 9.1 order:
// STag, access, TO wrap, bounds).
class MrTable {
  public:
    enum class Check : std::uint8_t { ok, invalid_stag, access, to_wrap, bounds };
    explicit MrTable(std::uint64_t seed = 0) : rng_(seed) {}
    MemoryRegion add(std::span<std::uint8_t> mem, std::uint64_t base, std::uint32_t access);
    bool remove(std::uint32_t stag);
    // On ok, *where points at the byte for `to`.
    Check check(std::uint32_t stag, std::uint64_t to, std::uint64_t len, std::uint32_t access,
                std::uint8_t** where) const;

  private:
    struct Entry {
        MemoryRegion mr;
        std::uint8_t* mem;
    };
    std::uint32_t next_stag();
    std::map<std::uint32_t, Entry> regions_;
    std::uint64_t rng_;  // splitmix64 state
};

// Where QpEngine::take_output_to() puts FPDUs (gathered writes).
class FpduSink {
  public:
    virtual ~FpduSink() = default;
    // One FPDU: header + payload as its ULPDU. `payload_stable`: the bytes
    // stay valid until the Send's buffer is released by its owner (a posted
    // Send's data); otherwise (registered memory) the sink must copy them.
    virtual void fpdu(std::span<const std::uint8_t> header, std::span<const std::uint8_t> payload,
                      bool payload_stable, bool crc) = 0;
    // A ready-made FPDU (RTR, Terminate).
    virtual void raw(std::vector<std::uint8_t>&& bytes) = 0;
    // Bytes handed to the sink so far.
    [[nodiscard]] virtual std::size_t size() const = 0;
};

// Optional placement of untagged Send payloads somewhere other than the
// posted receive buffer (the soft provider's direct placement into a waiting
// reader's buffer). Segments arrive in order, each after the DDP checks
// (queue, MSN, MO and length within wr.buffer) and the MPA CRC.
class UntaggedPlacer {
  public:
    virtual ~UntaggedPlacer() = default;
    // One segment of the Send being placed into `wr`, at message offset mo.
    // True: the placer stored the bytes; false: they go to wr.buffer + mo.
    virtual bool place(const RecvWr& wr, std::uint32_t mo,
                       std::span<const std::uint8_t> payload) = 0;
};

struct RxResult {
    std::size_t new_completions = 0;
    bool entered_error = false;
};

class QpEngine final : public QueuePair {
  public:
    explicit QpEngine(QpConfig cfg);

    // Bytes from the peer (after its MPA frame). In the error state bytes are
    // ignored.
    RxResult on_bytes(std::span<const std::uint8_t> in);
    // FPDUs to write: at least one if any is ready, then more while the
    // total stays below max_bytes. Empty if nothing can be sent now.
    std::vector<std::uint8_t> take_output(std::size_t max_bytes = 64 * 1024);
    // The same, appended to `out` (no intermediate vector); returns the
    // number of bytes appended.
    std::size_t take_output_into(std::vector<std::uint8_t>& out, std::size_t max_bytes);
    // The same, handed to a sink as header/payload/trailer pieces (no copy
    // of the payload); returns the number of bytes handed over.
    std::size_t take_output_to(FpduSink& sink, std::size_t max_bytes);
    [[nodiscard]] bool has_output() const;
    // The LLP stream is gone: move to error, flush.
    void on_llp_closed();

    Result<MemoryRegion, VerbsError> reg_mr(std::span<std::uint8_t> mem, std::uint64_t base,
                                            std::uint32_t access) override;
    bool dereg_mr(std::uint32_t stag) override;
    std::optional<VerbsError> post_send(const SendWr& wr) override;
    std::optional<VerbsError> post_recv(const RecvWr& wr) override;
    std::size_t poll_cq(std::span<Completion> out) override;
    [[nodiscard]] QpState state() const override { return state_; }

    std::vector<Completion> poll_all();
    [[nodiscard]] const std::optional<TerminateHeader>& terminate_sent() const { return term_tx_; }
    [[nodiscard]] const std::optional<TerminateHeader>& terminate_received() const {
        return term_rx_;
    }
    [[nodiscard]] std::size_t max_ulpdu() const { return max_ulpdu_; }
    // nullptr (the default): every payload goes to its posted buffer.
    void set_untagged_placer(UntaggedPlacer* p) { placer_ = p; }

  private:
    enum class TxKind : std::uint8_t { send, write, read_request, read_response };
    struct TxMsg {
        TxKind kind = TxKind::send;
        SendWr wr;                    // send / write / read request
        std::uint32_t sink_stag = 0;  // read response
        std::uint64_t sink_to = 0;
        std::uint32_t src_stag = 0;
        std::uint64_t src_to = 0;
        std::uint32_t total = 0;
        std::uint32_t offset = 0;
        bool started = false;
    };
    struct OutstandingRead {
        std::uint64_t wr_id = 0;
        bool signaled = true;
        bool rtr = false;
        std::uint32_t sink_stag = 0;
        std::uint64_t sink_to = 0;
        std::uint32_t length = 0;
    };

    bool handle_ulpdu(std::span<const std::uint8_t> u);
    bool handle_untagged(const DdpHeader& h, std::span<const std::uint8_t> u,
                         std::span<const std::uint8_t> payload);
    bool handle_tagged(const DdpHeader& h, std::span<const std::uint8_t> u,
                       std::span<const std::uint8_t> payload);
    bool place_tagged(const DdpHeader& h, std::span<const std::uint8_t> u,
                      std::span<const std::uint8_t> payload, std::uint32_t access);
    // Sends a Terminate and enters the error state; always returns false.
    bool terminate(TermLayer layer, std::uint8_t etype, std::uint8_t ecode,
                   std::span<const std::uint8_t> ulpdu, bool with_ddp,
                   std::span<const std::uint8_t> rdma_header = {});
    void enter_error(WcStatus flush_status);
    void emit_segment(FpduSink& out);
    void queue_rtr();
    void complete(const Completion& c);

    QpConfig cfg_;
    std::size_t max_ulpdu_;
    QpState state_ = QpState::rts;
    bool hold_tx_;  // responder: no FPDU before the initiator's first one
    UntaggedPlacer* placer_ = nullptr;
    FpduReceiver rx_;
    MrTable mrs_;
    std::uint32_t tx_msn_[3] = {1, 1, 1};
    std::uint32_t rx_msn_[3] = {1, 1, 1};
    std::deque<SendWr> sq_;
    std::deque<RecvWr> rq_;
    std::deque<TxMsg> irq_;  // Read Responses to generate
    std::deque<OutstandingRead> orq_;
    std::optional<TxMsg> cur_;
    std::deque<std::vector<std::uint8_t>> ctrl_;  // ready FPDUs (RTR, Terminate)
    std::deque<Completion> cq_;
    std::size_t cq_added_ = 0;
    std::optional<TerminateHeader> term_tx_;
    std::optional<TerminateHeader> term_rx_;
};

}  // namespace sdp::iwarp
