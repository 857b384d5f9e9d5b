// SPDX-License-Identifier: Apache-2.0
// The rdma-core provider's pure translations, checked without a device:
// work requests -> ibv_send_wr / ibv_recv_wr, ibv_wc -> Completion for every
// status and opcode, access flags, SGE bounds, rdma_conn_param building and
// the rdma_cm event -> error mapping.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <system_error>
#include <vector>

#include "sdp/engine/connection.hpp"
#include "sdp/rdma/error.hpp"
#include "sdp/rdma/translate.hpp"
#include "sdp/rdma/verbs_qp.hpp"
#include "sdp/wire/message.hpp"

namespace {

using sdp::iwarp::Completion;
using sdp::iwarp::SendWr;
using sdp::iwarp::WcOpcode;
using sdp::iwarp::WcStatus;
using sdp::iwarp::WrOpcode;
namespace r = sdp::rdma;

// --- access flags --------------------------------------------------------------

TEST(RdmaTranslate, AccessFlags) {
    using sdp::iwarp::kAccessLocalWrite;
    using sdp::iwarp::kAccessRemoteRead;
    using sdp::iwarp::kAccessRemoteWrite;
    EXPECT_EQ(r::to_ibv_access(0, true), 0);
    // iWARP: an RDMA Read sink is written by the peer's Read Response.
    EXPECT_EQ(r::to_ibv_access(kAccessLocalWrite, true),
              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    EXPECT_EQ(r::to_ibv_access(kAccessLocalWrite, false), IBV_ACCESS_LOCAL_WRITE);
    // Receive buffers: never writable by the peer.
    EXPECT_EQ(r::to_ibv_access(kAccessLocalWrite | r::kAccessRecvOnly, true),
              IBV_ACCESS_LOCAL_WRITE);
    EXPECT_EQ(r::to_ibv_access(kAccessRemoteRead, true), IBV_ACCESS_REMOTE_READ);
    // Verbs require LOCAL_WRITE with REMOTE_WRITE.
    EXPECT_EQ(r::to_ibv_access(kAccessRemoteWrite, true),
              IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE);
    EXPECT_EQ(r::to_ibv_access(kAccessRemoteWrite | kAccessRemoteRead, false),
              IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
}

// --- SGEs ---------------------------------------------------------------------------

r::RegionView region(std::vector<std::uint8_t>& mem, std::uint64_t base, std::uint32_t access) {
    r::RegionView v;
    v.addr = reinterpret_cast<std::uintptr_t>(mem.data());
    v.length = mem.size();
    v.base = base;
    v.lkey = 0x1111;
    v.rkey = 0x2222;
    v.access = access;
    return v;
}

TEST(RdmaTranslate, SgeForBytes) {
    std::vector<std::uint8_t> mem(100), other(10);
    auto v = region(mem, 0, 0);
    auto s = r::sge_for_bytes(v, mem.data() + 10, 90);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->addr, reinterpret_cast<std::uintptr_t>(mem.data() + 10));
    EXPECT_EQ(s->length, 90u);
    EXPECT_EQ(s->lkey, 0x1111u);
    EXPECT_TRUE(r::sge_for_bytes(v, mem.data(), 100));
    EXPECT_TRUE(r::sge_for_bytes(v, mem.data() + 100, 0));
    EXPECT_FALSE(r::sge_for_bytes(v, mem.data() + 10, 91));
    EXPECT_FALSE(r::sge_for_bytes(v, mem.data() + 101, 0));
    EXPECT_FALSE(r::sge_for_bytes(v, other.data(), 1));
}

TEST(RdmaTranslate, SgeForTaggedOffset) {
    using sdp::iwarp::kAccessLocalWrite;
    std::vector<std::uint8_t> mem(64);
    auto v = region(mem, 0x1000, kAccessLocalWrite);
    auto s = r::sge_for_to(v, 0x1010, 16, kAccessLocalWrite);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->addr, reinterpret_cast<std::uintptr_t>(mem.data() + 0x10));
    EXPECT_EQ(s->length, 16u);
    EXPECT_EQ(s->lkey, 0x1111u);
    EXPECT_TRUE(r::sge_for_to(v, 0x1000, 64, kAccessLocalWrite));
    EXPECT_FALSE(r::sge_for_to(v, 0x1000, 65, kAccessLocalWrite));  // bounds
    EXPECT_FALSE(r::sge_for_to(v, 0xfff, 1, kAccessLocalWrite));    // below base
    EXPECT_FALSE(r::sge_for_to(v, std::numeric_limits<std::uint64_t>::max(), 2,
                               kAccessLocalWrite));  // TO wrap
    auto ro = region(mem, 0, 0);
    EXPECT_FALSE(r::sge_for_to(ro, 0, 1, kAccessLocalWrite));  // no access
}

// --- send work requests ----------------------------------------------------------

TEST(RdmaTranslate, OpcodeForEveryWrKind) {
    EXPECT_EQ(r::to_ibv_opcode(WrOpcode::send), IBV_WR_SEND);
    EXPECT_EQ(r::to_ibv_opcode(WrOpcode::send_se), IBV_WR_SEND);
    EXPECT_EQ(r::to_ibv_opcode(WrOpcode::rdma_write), IBV_WR_RDMA_WRITE);
    EXPECT_EQ(r::to_ibv_opcode(WrOpcode::rdma_read), IBV_WR_RDMA_READ);
}

TEST(RdmaTranslate, SendWr) {
    std::vector<std::uint8_t> data(40, 7);
    SendWr wr;
    wr.wr_id = 99;  // the ULP's: the QP posts its own id
    wr.opcode = WrOpcode::send;
    wr.data = data;
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(data.data()), 40, 0x55};
    ibv_send_wr w = r::make_send_wr(wr, 1234, &sge, 1, false);
    EXPECT_EQ(w.wr_id, 1234u);
    EXPECT_EQ(w.next, nullptr);
    EXPECT_EQ(w.opcode, IBV_WR_SEND);
    EXPECT_EQ(w.send_flags, static_cast<unsigned>(IBV_SEND_SIGNALED));
    EXPECT_EQ(w.num_sge, 1);
    ASSERT_EQ(w.sg_list, &sge);
    EXPECT_EQ(w.sg_list->addr, reinterpret_cast<std::uintptr_t>(data.data()));
    EXPECT_EQ(w.sg_list->length, 40u);
    EXPECT_EQ(w.sg_list->lkey, 0x55u);
    EXPECT_EQ(w.wr.rdma.rkey, 0u);
    EXPECT_EQ(w.wr.rdma.remote_addr, 0u);

    wr.signaled = false;
    w = r::make_send_wr(wr, 1, &sge, 1, false);
    EXPECT_EQ(w.send_flags, 0u);
}

TEST(RdmaTranslate, SendWithSolicitedEvent) {
    SendWr wr;
    wr.opcode = WrOpcode::send_se;
    ibv_sge sge{};
    ibv_send_wr w = r::make_send_wr(wr, 2, &sge, 1, false);
    EXPECT_EQ(w.opcode, IBV_WR_SEND);
    EXPECT_EQ(w.send_flags, static_cast<unsigned>(IBV_SEND_SIGNALED | IBV_SEND_SOLICITED));
    wr.signaled = false;
    EXPECT_EQ(r::to_ibv_send_flags(wr, false), static_cast<unsigned>(IBV_SEND_SOLICITED));
    EXPECT_EQ(r::to_ibv_send_flags(wr, true),
              static_cast<unsigned>(IBV_SEND_SOLICITED | IBV_SEND_INLINE));
}

// RDMAP 4.3: Send (with Solicited Event) and Invalidate of a peer STag.
TEST(RdmaTranslate, SendWithInvalidate) {
    SendWr wr;
    wr.opcode = WrOpcode::send_se;
    wr.invalidate_stag = 0x12345678;
    ibv_sge sge{};
    ibv_send_wr w = r::make_send_wr(wr, 5, &sge, 1, false);
    EXPECT_EQ(w.opcode, IBV_WR_SEND_WITH_INV);
    EXPECT_EQ(w.invalidate_rkey, 0x12345678u);
    EXPECT_EQ(w.wr.rdma.rkey, 0x12345678u);  // where libsiw reads it
    EXPECT_EQ(w.send_flags, static_cast<unsigned>(IBV_SEND_SIGNALED | IBV_SEND_SOLICITED));
    wr.opcode = WrOpcode::send;
    w = r::make_send_wr(wr, 6, &sge, 1, false);
    EXPECT_EQ(w.opcode, IBV_WR_SEND_WITH_INV);
    EXPECT_EQ(w.send_flags, static_cast<unsigned>(IBV_SEND_SIGNALED));
    // Not for RDMA Writes (no such opcode), nor a plain Send.
    wr.opcode = WrOpcode::rdma_write;
    EXPECT_EQ(r::make_send_wr(wr, 7, &sge, 1, false).opcode, IBV_WR_RDMA_WRITE);
    wr.opcode = WrOpcode::send;
    wr.invalidate_stag = 0;
    EXPECT_EQ(r::make_send_wr(wr, 8, &sge, 1, false).opcode, IBV_WR_SEND);
}

TEST(RdmaTranslate, RdmaWrite) {
    std::vector<std::uint8_t> data(8);
    SendWr wr;
    wr.opcode = WrOpcode::rdma_write;
    wr.data = data;
    wr.remote_stag = 0xabcdef01;
    wr.remote_to = 0x1122334455667788ull;
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(data.data()), 8, 0};
    ibv_send_wr w = r::make_send_wr(wr, 3, &sge, 1, true);
    EXPECT_EQ(w.opcode, IBV_WR_RDMA_WRITE);
    EXPECT_EQ(w.send_flags, static_cast<unsigned>(IBV_SEND_SIGNALED | IBV_SEND_INLINE));
    EXPECT_EQ(w.wr.rdma.rkey, 0xabcdef01u);
    EXPECT_EQ(w.wr.rdma.remote_addr, 0x1122334455667788ull);
}

TEST(RdmaTranslate, RdmaRead) {
    SendWr wr;
    wr.opcode = WrOpcode::rdma_read;
    wr.remote_stag = 0x77;
    wr.remote_to = 0x4000;
    wr.local_stag = 0x88;
    wr.local_to = 0x10;
    wr.read_length = 512;
    ibv_sge sge{0x9000, 512, 0x88};
    // Inline never applies to a Read (its sge is the sink).
    ibv_send_wr w = r::make_send_wr(wr, 4, &sge, 1, true);
    EXPECT_EQ(w.opcode, IBV_WR_RDMA_READ);
    EXPECT_EQ(w.send_flags, static_cast<unsigned>(IBV_SEND_SIGNALED));
    EXPECT_EQ(w.wr.rdma.rkey, 0x77u);
    EXPECT_EQ(w.wr.rdma.remote_addr, 0x4000u);
    EXPECT_EQ(w.sg_list->length, 512u);
}

TEST(RdmaTranslate, ZeroLengthHasNoSgList) {
    SendWr wr;
    wr.opcode = WrOpcode::rdma_write;  // e.g. a zero-length Write
    ibv_send_wr w = r::make_send_wr(wr, 5, nullptr, 0, false);
    EXPECT_EQ(w.num_sge, 0);
    EXPECT_EQ(w.sg_list, nullptr);
    ibv_recv_wr rw = r::make_recv_wr(6, nullptr, 0);
    EXPECT_EQ(rw.num_sge, 0);
    EXPECT_EQ(rw.sg_list, nullptr);
}

TEST(RdmaTranslate, RecvWr) {
    ibv_sge sge{0x1000, 4096, 0x42};
    ibv_recv_wr w = r::make_recv_wr(77, &sge, 1);
    EXPECT_EQ(w.wr_id, 77u);
    EXPECT_EQ(w.next, nullptr);
    EXPECT_EQ(w.num_sge, 1);
    EXPECT_EQ(w.sg_list, &sge);
}

// --- completions ------------------------------------------------------------------

TEST(RdmaTranslate, EveryWcStatus) {
    struct Row {
        ibv_wc_status in;
        WcStatus out;
    };
    const Row rows[] = {
        {IBV_WC_SUCCESS, WcStatus::success},
        {IBV_WC_LOC_LEN_ERR, WcStatus::fatal_error},
        {IBV_WC_LOC_QP_OP_ERR, WcStatus::fatal_error},
        {IBV_WC_LOC_EEC_OP_ERR, WcStatus::fatal_error},
        {IBV_WC_LOC_PROT_ERR, WcStatus::local_protection_error},
        {IBV_WC_WR_FLUSH_ERR, WcStatus::wr_flush_error},
        {IBV_WC_MW_BIND_ERR, WcStatus::local_protection_error},
        {IBV_WC_BAD_RESP_ERR, WcStatus::remote_operation_error},
        {IBV_WC_LOC_ACCESS_ERR, WcStatus::local_protection_error},
        {IBV_WC_REM_INV_REQ_ERR, WcStatus::remote_operation_error},
        {IBV_WC_REM_ACCESS_ERR, WcStatus::remote_access_error},
        {IBV_WC_REM_OP_ERR, WcStatus::remote_operation_error},
        {IBV_WC_RETRY_EXC_ERR, WcStatus::fatal_error},
        {IBV_WC_RNR_RETRY_EXC_ERR, WcStatus::fatal_error},
        {IBV_WC_LOC_RDD_VIOL_ERR, WcStatus::local_protection_error},
        {IBV_WC_REM_INV_RD_REQ_ERR, WcStatus::remote_access_error},
        {IBV_WC_REM_ABORT_ERR, WcStatus::remote_operation_error},
        {IBV_WC_INV_EECN_ERR, WcStatus::fatal_error},
        {IBV_WC_INV_EEC_STATE_ERR, WcStatus::fatal_error},
        {IBV_WC_FATAL_ERR, WcStatus::fatal_error},
        {IBV_WC_RESP_TIMEOUT_ERR, WcStatus::fatal_error},
        {IBV_WC_GENERAL_ERR, WcStatus::fatal_error},
        {IBV_WC_TM_ERR, WcStatus::fatal_error},
        {IBV_WC_TM_RNDV_INCOMPLETE, WcStatus::fatal_error},
    };
    // The table covers the whole enum (IBV_WC_SUCCESS .. IBV_WC_TM_RNDV_INCOMPLETE).
    EXPECT_EQ(std::size(rows), static_cast<std::size_t>(IBV_WC_TM_RNDV_INCOMPLETE) + 1);
    for (const auto& row : rows) {
        EXPECT_EQ(r::map_wc_status(row.in), row.out) << ibv_wc_status_str(row.in);
    }
    // Total: a status from a newer rdma-core is a fatal error, not a crash.
    EXPECT_EQ(r::map_wc_status(static_cast<ibv_wc_status>(200)), WcStatus::fatal_error);
}

TEST(RdmaTranslate, EveryWcOpcode) {
    EXPECT_EQ(r::map_wc_opcode(IBV_WC_SEND), WcOpcode::send);
    EXPECT_EQ(r::map_wc_opcode(IBV_WC_RDMA_WRITE), WcOpcode::rdma_write);
    EXPECT_EQ(r::map_wc_opcode(IBV_WC_RDMA_READ), WcOpcode::rdma_read);
    EXPECT_EQ(r::map_wc_opcode(IBV_WC_RECV), WcOpcode::recv);
    for (ibv_wc_opcode op : {IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD, IBV_WC_BIND_MW, IBV_WC_LOCAL_INV,
                             IBV_WC_TSO, IBV_WC_ATOMIC_WRITE, IBV_WC_RECV_RDMA_WITH_IMM,
                             IBV_WC_TM_ADD, IBV_WC_TM_DEL, IBV_WC_TM_SYNC, IBV_WC_TM_RECV,
                             IBV_WC_TM_NO_TAG, IBV_WC_DRIVER1, IBV_WC_DRIVER2, IBV_WC_DRIVER3}) {
        EXPECT_FALSE(r::map_wc_opcode(op)) << op;
    }
}

TEST(RdmaTranslate, SuccessfulCompletions) {
    ibv_wc wc{};
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_RECV;
    wc.byte_len = 321;
    Completion c = r::to_completion(wc, 17, WcOpcode::recv);
    EXPECT_EQ(c, (Completion{17, WcOpcode::recv, WcStatus::success, 321, false, 0}));

    wc.wc_flags = IBV_WC_WITH_INV;
    wc.invalidated_rkey = 0xdeadbeef;
    c = r::to_completion(wc, 18, WcOpcode::recv);
    EXPECT_EQ(c.invalidated_stag, 0xdeadbeefu);

    for (auto [op, posted] : {std::pair{IBV_WC_SEND, WcOpcode::send},
                              std::pair{IBV_WC_RDMA_WRITE, WcOpcode::rdma_write},
                              std::pair{IBV_WC_RDMA_READ, WcOpcode::rdma_read}}) {
        ibv_wc s{};
        s.status = IBV_WC_SUCCESS;
        s.opcode = op;
        s.byte_len = 9;
        s.wc_flags = IBV_WC_WITH_INV;  // meaningless on a send: ignored
        s.invalidated_rkey = 5;
        c = r::to_completion(s, 1, posted);
        EXPECT_EQ(c, (Completion{1, posted, WcStatus::success, 9, false, 0}));
    }
}

TEST(RdmaTranslate, ErrorCompletionsUseWhatWasPosted) {
    // On error ibv_wc's opcode and byte_len are undefined: garbage in them
    // must not leak into the completion.
    ibv_wc wc{};
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = static_cast<ibv_wc_opcode>(0x55);
    wc.byte_len = 0xffffffff;
    Completion c = r::to_completion(wc, 3, WcOpcode::rdma_read);
    EXPECT_EQ(c, (Completion{3, WcOpcode::rdma_read, WcStatus::wr_flush_error, 0, false, 0}));
    wc.status = IBV_WC_REM_ACCESS_ERR;
    c = r::to_completion(wc, 4, WcOpcode::send);
    EXPECT_EQ(c, (Completion{4, WcOpcode::send, WcStatus::remote_access_error, 0, false, 0}));
}

// --- connection parameters ----------------------------------------------------------

struct NullQp : sdp::engine::QueuePair {
    void post_send(std::span<const std::uint8_t>, bool) override {}
    void post_recv(std::uint32_t) override {}
    void disconnect(bool) override {}
};

TEST(RdmaTranslate, ConnectParamCarriesTheSdpHello) {
    NullQp qp;
    sdp::engine::Config cfg;
    sdp::engine::Connection conn(sdp::engine::Role::connecting, cfg, qp);
    const std::vector<std::uint8_t> hello = conn.connect();
    ASSERT_LE(hello.size(), r::kMaxPrivateData);
    r::ReadLimits lim{16, 16};
    auto p = r::make_connect_param(hello, 4, 2, lim);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->private_data, hello.data());
    EXPECT_EQ(p->private_data_len, hello.size());
    EXPECT_EQ(p->responder_resources, 4);  // IRD
    EXPECT_EQ(p->initiator_depth, 2);      // ORD
    EXPECT_EQ(p->flow_control, 1);
}

TEST(RdmaTranslate, ConnectParamLimits) {
    r::ReadLimits lim{8, 3};
    std::vector<std::uint8_t> pd(r::kMaxPrivateData, 0xab);
    auto p = r::make_connect_param(pd, 100, 100, lim);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->private_data_len, 252);
    EXPECT_EQ(p->responder_resources, 8);  // capped by max_qp_rd_atom
    EXPECT_EQ(p->initiator_depth, 3);      // capped by max_qp_init_rd_atom
    // 16-bit IRD/ORD never wrap into the 8-bit fields.
    p = r::make_connect_param(pd, 0xffff, 0x1ff, r::ReadLimits{1000, 1000});
    ASSERT_TRUE(p);
    EXPECT_EQ(p->responder_resources, 255);
    EXPECT_EQ(p->initiator_depth, 255);

    pd.push_back(0);  // 253 bytes: no room next to the MPA v2 IRD/ORD block
    auto bad = r::make_connect_param(pd, 1, 1, lim);
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error(), r::Errc::private_data_too_long);
    std::vector<std::uint8_t> huge(300);
    EXPECT_FALSE(r::make_connect_param(huge, 1, 1, lim));

    auto empty = r::make_connect_param({}, 1, 1, lim);
    ASSERT_TRUE(empty);
    EXPECT_EQ(empty->private_data, nullptr);
    EXPECT_EQ(empty->private_data_len, 0);
}

TEST(RdmaTranslate, AcceptParamIsCappedByTheRequest) {
    rdma_conn_param req{};
    req.responder_resources = 2;  // initiator's IRD
    req.initiator_depth = 5;      // initiator's ORD
    auto p = r::make_accept_param({}, 16, 16, r::ReadLimits{16, 16}, req);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->responder_resources, 5);  // our IRD <= their ORD
    EXPECT_EQ(p->initiator_depth, 2);      // our ORD <= their IRD
    p = r::make_accept_param({}, 1, 1, r::ReadLimits{16, 16}, req);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->responder_resources, 1);
    EXPECT_EQ(p->initiator_depth, 1);
    std::vector<std::uint8_t> pd(253);
    EXPECT_FALSE(r::make_accept_param(pd, 1, 1, r::ReadLimits{16, 16}, req));
}

// --- devices and events -------------------------------------------------------------

TEST(RdmaTranslate, OnlyIwarpDevicesCarrySdp) {
    EXPECT_TRUE(r::is_iwarp(IBV_TRANSPORT_IWARP, IBV_NODE_RNIC));  // RNIC, siw
    EXPECT_TRUE(r::is_iwarp(IBV_TRANSPORT_UNKNOWN, IBV_NODE_RNIC));
    EXPECT_FALSE(r::is_iwarp(IBV_TRANSPORT_IB, IBV_NODE_CA));  // IB HCA, RoCE, rxe
    EXPECT_FALSE(r::is_iwarp(IBV_TRANSPORT_USNIC, IBV_NODE_USNIC));
    EXPECT_TRUE(r::transport_problem("siw0", IBV_TRANSPORT_IWARP, IBV_NODE_RNIC).empty());
    const std::string why = r::transport_problem("mlx5_0", IBV_TRANSPORT_IB, IBV_NODE_CA);
    EXPECT_NE(why.find("mlx5_0"), std::string::npos);
    EXPECT_NE(why.find("InfiniBand"), std::string::npos);
    EXPECT_NE(why.find("iWARP"), std::string::npos);
}

TEST(RdmaTranslate, CmEventErrors) {
    EXPECT_EQ(r::cm_event_error(RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_ESTABLISHED), r::Errc::ok);
    EXPECT_EQ(r::cm_event_error(RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ADDR_RESOLVED),
              r::Errc::ok);
    const auto w = RDMA_CM_EVENT_ESTABLISHED;
    EXPECT_EQ(r::cm_event_error(RDMA_CM_EVENT_ADDR_ERROR, w), r::Errc::address_error);
    EXPECT_EQ(r::cm_event_error(RDMA_CM_EVENT_ROUTE_ERROR, w), r::Errc::route_error);
    EXPECT_EQ(r::cm_event_error(RDMA_CM_EVENT_UNREACHABLE, w), r::Errc::unreachable);
    EXPECT_EQ(r::cm_event_error(RDMA_CM_EVENT_REJECTED, w), r::Errc::rejected);
    EXPECT_EQ(r::cm_event_error(RDMA_CM_EVENT_CONNECT_ERROR, w), r::Errc::connect_error);
    EXPECT_EQ(r::cm_event_error(RDMA_CM_EVENT_DISCONNECTED, w), r::Errc::disconnected);
    EXPECT_EQ(r::cm_event_error(RDMA_CM_EVENT_DEVICE_REMOVAL, w), r::Errc::device_removed);
    EXPECT_EQ(r::cm_event_error(RDMA_CM_EVENT_ADDR_CHANGE, w), r::Errc::address_error);
    EXPECT_EQ(r::cm_event_error(RDMA_CM_EVENT_MULTICAST_JOIN, w), r::Errc::cm_error);
}

TEST(RdmaError, ConditionsMatchTheStreamApi) {
    EXPECT_EQ(std::error_code(r::Errc::rejected), std::errc::connection_refused);
    EXPECT_EQ(std::error_code(r::Errc::hello_rejected), std::errc::connection_refused);
    EXPECT_EQ(std::error_code(r::Errc::timed_out), std::errc::timed_out);
    EXPECT_EQ(std::error_code(r::Errc::unreachable), std::errc::host_unreachable);
    EXPECT_EQ(std::error_code(r::Errc::no_device), std::errc::no_such_device);
    EXPECT_EQ(std::error_code(r::Errc::not_iwarp), std::errc::operation_not_supported);
    EXPECT_EQ(std::error_code(r::Errc::disconnected), std::errc::connection_reset);
    EXPECT_EQ(std::error_code(r::Errc::private_data_too_long), std::errc::message_size);
    EXPECT_FALSE(std::error_code(r::Errc::ok));
    for (int v = 1; v <= static_cast<int>(r::Errc::hello_rejected); ++v) {
        const std::error_code ec(static_cast<r::Errc>(v));
        EXPECT_TRUE(ec);
        EXPECT_FALSE(ec.message().empty());
        EXPECT_NE(ec.message(), "unknown sdp-rdma error") << v;
        EXPECT_NE(ec.default_error_condition().category(), r::category()) << v;
    }
}

TEST(RdmaTranslate, RegistrationFailuresNameTheLockLimit) {
    for (int e : {EPERM, ENOMEM}) {
        const std::string t = r::describe_reg_failure(e, 4096, 65536);
        EXPECT_NE(t.find("ibv_reg_mr of 4096 bytes failed"), std::string::npos) << t;
        EXPECT_NE(t.find("RLIMIT_MEMLOCK is 65536 bytes"), std::string::npos) << t;
        EXPECT_NE(t.find("ulimit -l"), std::string::npos) << t;
    }
    // Unlimited, or another errno: no lock-limit advice.
    EXPECT_EQ(r::describe_reg_failure(ENOMEM, 10, RLIM_INFINITY).find("RLIMIT_MEMLOCK"),
              std::string::npos);
    const std::string inval = r::describe_reg_failure(EINVAL, 10, 65536);
    EXPECT_EQ(inval.find("RLIMIT_MEMLOCK"), std::string::npos) << inval;
    EXPECT_NE(inval.find(std::strerror(EINVAL)), std::string::npos) << inval;
}

// --- the QP without a device ----------------------------------------------------------

TEST(RdmaQueuePair, WithoutResourcesEveryCallFailsCleanly) {
    r::RdmaQueuePair qp(r::QpResources{});
    std::vector<std::uint8_t> mem(64);
    auto mr = qp.reg_mr(mem, 0, sdp::iwarp::kAccessLocalWrite);
    ASSERT_FALSE(mr);
    EXPECT_EQ(mr.error(), sdp::iwarp::VerbsError::invalid_region);
    EXPECT_FALSE(qp.dereg_mr(1));
    SendWr wr;
    wr.data = mem;
    EXPECT_EQ(qp.post_send(wr), sdp::iwarp::VerbsError::qp_error);
    EXPECT_EQ(qp.post_recv(sdp::iwarp::RecvWr{1, mem}), sdp::iwarp::VerbsError::qp_error);
    Completion out[4];
    EXPECT_EQ(qp.poll_cq(out), 0u);
    EXPECT_EQ(qp.fd(), -1);
    EXPECT_EQ(qp.consume_events(), 0);
    EXPECT_TRUE(qp.arm(true));
    qp.to_error();
    EXPECT_EQ(qp.state(), sdp::iwarp::QpState::error);
}

}  // namespace
