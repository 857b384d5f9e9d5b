// SPDX-License-Identifier: Apache-2.0
// Pure translations between the provider-neutral verbs of sdp/iwarp/verbs.hpp
// (and the SDP connection setup) and rdma-core's structures: ibv_send_wr,
// ibv_recv_wr, ibv_wc, ibv access flags and rdma_conn_param. No function here
// touches a device, so the unit tests check every mapping on any host.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "sdp/iwarp/result.hpp"
#include "sdp/iwarp/verbs.hpp"
#include "sdp/rdma/error.hpp"

namespace sdp::rdma {

// MPA Request/Reply private data we send: 256 bytes (the Linux limit, siw and
// cxgb4) minus the 4-byte RFC 6581 IRD/ORD block the kernel prepends. The
// SDP Hello (8.1.1) must fit in it. rdma_conn_param's length is a uint8_t.
inline constexpr std::size_t kMaxPrivateData = 252;

// --- device ---------------------------------------------------------------

// True for iWARP devices: RNICs and Linux siw (transport IWARP, node RNIC).
[[nodiscard]] bool is_iwarp(ibv_transport_type transport, ibv_node_type node);
[[nodiscard]] const char* transport_name(ibv_transport_type transport);
// Empty when the device may carry SDP; otherwise why not (for messages).
[[nodiscard]] std::string transport_problem(const std::string& device, ibv_transport_type transport,
                                            ibv_node_type node);

// --- memory regions -------------------------------------------------------

// Provider extension of the verbs.hpp access bits: the region only receives
// Sends (ibv_post_recv). With kAccessLocalWrite it maps to LOCAL_WRITE alone,
// without the REMOTE_WRITE an iWARP Read sink needs, so the peer can never
// place tagged data into receive buffers. Other providers ignore the bit.
inline constexpr std::uint32_t kAccessRecvOnly = 1u << 8;

// ibv access flags for our access bits. On iWARP an RDMA Read's sink is
// written by the peer's tagged Read Response, so kAccessLocalWrite also
// grants IBV_ACCESS_REMOTE_WRITE there; verbs require LOCAL_WRITE whenever
// REMOTE_WRITE is set, so kAccessRemoteWrite implies it.
[[nodiscard]] int to_ibv_access(std::uint32_t access, bool iwarp);

// Why ibv_reg_mr failed with errno `err` for `len` bytes, for messages.
// EPERM/ENOMEM while `memlock_cur` (RLIMIT_MEMLOCK's soft limit, bytes;
// RLIM_INFINITY when unlimited) is finite name the lock limit and the fix
// (siw and RNIC drivers pin registered pages against it, even for root).
[[nodiscard]] std::string describe_reg_failure(int err, std::size_t len, std::uint64_t memlock_cur);
// The same with the process's current RLIMIT_MEMLOCK.
[[nodiscard]] std::string describe_reg_failure(int err, std::size_t len);

// One registered region as the translation sees it.
struct RegionView {
    std::uintptr_t addr = 0;  // first byte in our address space
    std::size_t length = 0;
    std::uint64_t base = 0;  // tagged offset (iova) of the first byte
    std::uint32_t lkey = 0;
    std::uint32_t rkey = 0;  // the STag the peer uses
    std::uint32_t access = 0;
};

// The SGE for `len` bytes at `p` inside the region, or nullopt when the bytes
// are not wholly inside it.
[[nodiscard]] std::optional<ibv_sge> sge_for_bytes(const RegionView& r, const void* p,
                                                   std::size_t len);
// The SGE for `len` bytes at tagged offset `to` of the region, which must
// grant `need` (our access bits): the RDMA Read sink. nullopt on TO wrap,
// out of bounds or missing access.
[[nodiscard]] std::optional<ibv_sge> sge_for_to(const RegionView& r, std::uint64_t to,
                                                std::uint32_t len, std::uint32_t need);

// --- work requests ----------------------------------------------------------

[[nodiscard]] ibv_wr_opcode to_ibv_opcode(iwarp::WrOpcode op);
// IBV_SEND_SIGNALED when signaled, IBV_SEND_SOLICITED for send_se,
// IBV_SEND_INLINE when the payload is copied inline.
[[nodiscard]] unsigned to_ibv_send_flags(const iwarp::SendWr& wr, bool inline_data);

// Fills an ibv_send_wr for `wr` with the caller's SGE storage (num_sge 0 for
// zero-length messages); next is null. wr_id is the caller's `ibv_wr_id`
// (the QP keeps its own ids to know what an error completion was). A Send
// with invalidate_stag set becomes IBV_WR_SEND_WITH_INV.
[[nodiscard]] ibv_send_wr make_send_wr(const iwarp::SendWr& wr, std::uint64_t ibv_wr_id,
                                       ibv_sge* sge, int num_sge, bool inline_data);
[[nodiscard]] ibv_recv_wr make_recv_wr(std::uint64_t ibv_wr_id, ibv_sge* sge, int num_sge);

// --- completions ------------------------------------------------------------

// Total: every ibv_wc_status has a WcStatus (unknown values are fatal_error).
[[nodiscard]] iwarp::WcStatus map_wc_status(ibv_wc_status s);
// The iWARP opcodes; nullopt for IB-only ones (atomics, immediate, TM, ...).
[[nodiscard]] std::optional<iwarp::WcOpcode> map_wc_opcode(ibv_wc_opcode op);
// The completion for `wc`. ibv_wc's opcode and byte_len are defined only on
// success, so the caller passes what it posted (`posted`) and the ULP's
// wr_id. ibv_wc has no solicited-event flag: `solicited` is always false.
[[nodiscard]] iwarp::Completion to_completion(const ibv_wc& wc, std::uint64_t user_wr_id,
                                              iwarp::WcOpcode posted);

// --- connection parameters --------------------------------------------------

// What the device supports for RDMA Read queues (ibv_device_attr).
struct ReadLimits {
    int max_qp_rd_atom = 0;       // inbound Read Requests per QP (IRD)
    int max_qp_init_rd_atom = 0;  // outbound Read Requests per QP (ORD)
};

// rdma_connect(): private_data = the SDP Hello, responder_resources = IRD,
// initiator_depth = ORD (each capped by the device and 255). The result
// points into `private_data`, which must outlive it.
[[nodiscard]] iwarp::Result<rdma_conn_param, Errc> make_connect_param(
    std::span<const std::uint8_t> private_data, std::uint16_t ird, std::uint16_t ord,
    const ReadLimits& limits);
// rdma_accept(): also capped by the request (our IRD <= the initiator's ORD,
// our ORD <= the initiator's IRD).
[[nodiscard]] iwarp::Result<rdma_conn_param, Errc> make_accept_param(
    std::span<const std::uint8_t> private_data, std::uint16_t ird, std::uint16_t ord,
    const ReadLimits& limits, const rdma_conn_param& request);

// --- connection manager events ----------------------------------------------

// The error an unexpected or failure event means while waiting for `wanted`
// (ok when ev == wanted).
[[nodiscard]] Errc cm_event_error(rdma_cm_event_type ev, rdma_cm_event_type wanted);

}  // namespace sdp::rdma
