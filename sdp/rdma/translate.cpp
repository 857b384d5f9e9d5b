// SPDX-License-Identifier: Apache-2.0
#include "sdp/rdma/translate.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace sdp::rdma {

bool is_iwarp(ibv_transport_type transport, ibv_node_type node) {
    return transport == IBV_TRANSPORT_IWARP || node == IBV_NODE_RNIC;
}

const char* transport_name(ibv_transport_type transport) {
    switch (transport) {
        case IBV_TRANSPORT_IB:
            return "InfiniBand/RoCE";
        case IBV_TRANSPORT_IWARP:
            return "iWARP";
        case IBV_TRANSPORT_USNIC:
            return "usNIC";
        case IBV_TRANSPORT_USNIC_UDP:
            return "usNIC UDP";
        case IBV_TRANSPORT_UNSPECIFIED:
            return "unspecified";
        case IBV_TRANSPORT_UNKNOWN:
            break;
    }
    return "unknown";
}

std::string transport_problem(const std::string& device, ibv_transport_type transport,
                              ibv_node_type node) {
    if (is_iwarp(transport, node)) {
        return {};
    }
    return "RDMA device " + device + " uses the " + transport_name(transport) +
           " transport; SDP runs over iWARP only (an RNIC or Linux siw), SDP over InfiniBand "
           "is out of scope";
}

int to_ibv_access(std::uint32_t access, bool iwarp) {
    int f = 0;
    if ((access & iwarp::kAccessLocalWrite) != 0) {
        f |= IBV_ACCESS_LOCAL_WRITE;
        if (iwarp && (access & kAccessRecvOnly) == 0) {
            f |= IBV_ACCESS_REMOTE_WRITE;  // Read Responses are tagged placements
        }
    }
    if ((access & iwarp::kAccessRemoteRead) != 0) {
        f |= IBV_ACCESS_REMOTE_READ;
    }
    if ((access & iwarp::kAccessRemoteWrite) != 0) {
        f |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    }
    return f;
}

std::string describe_reg_failure(int err, std::size_t len, std::uint64_t memlock_cur) {
    std::string s = "ibv_reg_mr of " + std::to_string(len) +
                    " bytes failed: " + (err != 0 ? std::strerror(err) : "unknown error");
    if ((err == EPERM || err == ENOMEM) && memlock_cur != RLIM_INFINITY) {
        s += " (RLIMIT_MEMLOCK is " + std::to_string(memlock_cur) +
             " bytes: registered memory is pinned against the lock limit, even for root; "
             "raise it, e.g. 'ulimit -l unlimited' or memlock in "
             "/etc/security/limits.conf / LimitMEMLOCK= for a systemd unit)";
    }
    return s;
}

std::string describe_reg_failure(int err, std::size_t len) {
    rlimit rl{};
    std::uint64_t cur = RLIM_INFINITY;
    if (::getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        cur = rl.rlim_cur;
    }
    return describe_reg_failure(err, len, cur);
}

std::optional<ibv_sge> sge_for_bytes(const RegionView& r, const void* p, std::size_t len) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    if (len > std::numeric_limits<std::uint32_t>::max() || a < r.addr || a - r.addr > r.length ||
        len > r.length - (a - r.addr)) {
        return std::nullopt;
    }
    ibv_sge s{};
    s.addr = static_cast<std::uint64_t>(a);
    s.length = static_cast<std::uint32_t>(len);
    s.lkey = r.lkey;
    return s;
}

std::optional<ibv_sge> sge_for_to(const RegionView& r, std::uint64_t to, std::uint32_t len,
                                  std::uint32_t need) {
    if ((r.access & need) != need) {
        return std::nullopt;
    }
    if (to > std::numeric_limits<std::uint64_t>::max() - len) {
        return std::nullopt;  // TO wrap
    }
    if (to < r.base || to - r.base > r.length || len > r.length - (to - r.base)) {
        return std::nullopt;
    }
    ibv_sge s{};
    s.addr = static_cast<std::uint64_t>(r.addr) + (to - r.base);
    s.length = len;
    s.lkey = r.lkey;
    return s;
}

ibv_wr_opcode to_ibv_opcode(iwarp::WrOpcode op) {
    switch (op) {
        case iwarp::WrOpcode::send:
        case iwarp::WrOpcode::send_se:
            return IBV_WR_SEND;
        case iwarp::WrOpcode::rdma_write:
            return IBV_WR_RDMA_WRITE;
        case iwarp::WrOpcode::rdma_read:
            return IBV_WR_RDMA_READ;
    }
    return IBV_WR_SEND;
}

unsigned to_ibv_send_flags(const iwarp::SendWr& wr, bool inline_data) {
    unsigned f = 0;
    if (wr.signaled) {
        f |= IBV_SEND_SIGNALED;
    }
    if (wr.opcode == iwarp::WrOpcode::send_se) {
        f |= IBV_SEND_SOLICITED;
    }
    if (inline_data && wr.opcode != iwarp::WrOpcode::rdma_read) {
        f |= IBV_SEND_INLINE;
    }
    return f;
}

ibv_send_wr make_send_wr(const iwarp::SendWr& wr, std::uint64_t ibv_wr_id, ibv_sge* sge,
                         int num_sge, bool inline_data) {
    ibv_send_wr w{};
    w.wr_id = ibv_wr_id;
    w.next = nullptr;
    w.sg_list = num_sge > 0 ? sge : nullptr;
    w.num_sge = num_sge;
    w.opcode = to_ibv_opcode(wr.opcode);
    w.send_flags = to_ibv_send_flags(wr, inline_data);
    if ((wr.opcode == iwarp::WrOpcode::send || wr.opcode == iwarp::WrOpcode::send_se) &&
        wr.invalidate_stag != 0) {
        // RDMAP Send with (Solicited Event and) Invalidate: the peer's STag
        // is invalid when the message arrives (RDMAP 4.3).
        w.opcode = IBV_WR_SEND_WITH_INV;
        w.invalidate_rkey = wr.invalidate_stag;
        // libsiw (rdma-core's siw provider) takes the STag to invalidate
        // from wr.rdma.rkey, not invalidate_rkey: without this it sent STag
        // 0 and the peer answered with a Terminate "STag cannot be
        // invalidated" (seen in the VM lab). Providers that follow the verbs
        // definition ignore wr.rdma for a Send.
        w.wr.rdma.rkey = wr.invalidate_stag;
    }
    if (wr.opcode == iwarp::WrOpcode::rdma_write || wr.opcode == iwarp::WrOpcode::rdma_read) {
        w.wr.rdma.remote_addr = wr.remote_to;
        w.wr.rdma.rkey = wr.remote_stag;
    }
    return w;
}

ibv_recv_wr make_recv_wr(std::uint64_t ibv_wr_id, ibv_sge* sge, int num_sge) {
    ibv_recv_wr w{};
    w.wr_id = ibv_wr_id;
    w.next = nullptr;
    w.sg_list = num_sge > 0 ? sge : nullptr;
    w.num_sge = num_sge;
    return w;
}

iwarp::WcStatus map_wc_status(ibv_wc_status s) {
    using iwarp::WcStatus;
    switch (s) {
        case IBV_WC_SUCCESS:
            return WcStatus::success;
        case IBV_WC_WR_FLUSH_ERR:
            return WcStatus::wr_flush_error;
        // A local buffer or key failed its check.
        case IBV_WC_LOC_PROT_ERR:
        case IBV_WC_LOC_ACCESS_ERR:
        case IBV_WC_MW_BIND_ERR:
        case IBV_WC_LOC_RDD_VIOL_ERR:
            return WcStatus::local_protection_error;
        // The peer reported a protection error (RDMAP Remote Protection).
        case IBV_WC_REM_ACCESS_ERR:
        case IBV_WC_REM_INV_RD_REQ_ERR:
            return WcStatus::remote_access_error;
        // The peer reported another error (RDMAP Remote Operation, DDP).
        case IBV_WC_REM_INV_REQ_ERR:
        case IBV_WC_REM_OP_ERR:
        case IBV_WC_REM_ABORT_ERR:
        case IBV_WC_BAD_RESP_ERR:
            return WcStatus::remote_operation_error;
        // Local stream errors: the QP terminated the stream itself (a Send
        // larger than the posted buffer, LLP retries exhausted, ...).
        case IBV_WC_LOC_LEN_ERR:
        case IBV_WC_LOC_QP_OP_ERR:
        case IBV_WC_LOC_EEC_OP_ERR:
        case IBV_WC_RETRY_EXC_ERR:
        case IBV_WC_RNR_RETRY_EXC_ERR:
        case IBV_WC_INV_EECN_ERR:
        case IBV_WC_INV_EEC_STATE_ERR:
        case IBV_WC_FATAL_ERR:
        case IBV_WC_RESP_TIMEOUT_ERR:
        case IBV_WC_GENERAL_ERR:
        case IBV_WC_TM_ERR:
        case IBV_WC_TM_RNDV_INCOMPLETE:
            return WcStatus::fatal_error;
    }
    return WcStatus::fatal_error;
}

std::optional<iwarp::WcOpcode> map_wc_opcode(ibv_wc_opcode op) {
    switch (op) {
        case IBV_WC_SEND:
            return iwarp::WcOpcode::send;
        case IBV_WC_RDMA_WRITE:
            return iwarp::WcOpcode::rdma_write;
        case IBV_WC_RDMA_READ:
            return iwarp::WcOpcode::rdma_read;
        case IBV_WC_RECV:
            return iwarp::WcOpcode::recv;
        default:
            return std::nullopt;
    }
}

iwarp::Completion to_completion(const ibv_wc& wc, std::uint64_t user_wr_id,
                                iwarp::WcOpcode posted) {
    iwarp::Completion c;
    c.wr_id = user_wr_id;
    c.opcode = posted;
    c.status = map_wc_status(wc.status);
    if (c.status == iwarp::WcStatus::success) {
        c.byte_len = wc.byte_len;
        if (posted == iwarp::WcOpcode::recv && (wc.wc_flags & IBV_WC_WITH_INV) != 0) {
            c.invalidated_stag = wc.invalidated_rkey;
        }
    }
    return c;
}

namespace {

std::uint8_t cap(std::uint16_t want, int device_max, int peer_max = 255) {
    const int m = std::min({static_cast<int>(want), std::max(device_max, 0), peer_max, 255});
    return static_cast<std::uint8_t>(m);
}

iwarp::Result<rdma_conn_param, Errc> base_param(std::span<const std::uint8_t> private_data) {
    if (private_data.size() > kMaxPrivateData) {
        return iwarp::unexpected(Errc::private_data_too_long);
    }
    rdma_conn_param p{};
    p.private_data = private_data.empty() ? nullptr : private_data.data();
    p.private_data_len = static_cast<std::uint8_t>(private_data.size());
    p.flow_control = 1;
    p.retry_count = 7;      // IB only; iWARP retransmits in TCP
    p.rnr_retry_count = 7;  // likewise
    return p;
}

}  // namespace

iwarp::Result<rdma_conn_param, Errc> make_connect_param(std::span<const std::uint8_t> private_data,
                                                        std::uint16_t ird, std::uint16_t ord,
                                                        const ReadLimits& limits) {
    auto p = base_param(private_data);
    if (p) {
        p->responder_resources = cap(ird, limits.max_qp_rd_atom);
        p->initiator_depth = cap(ord, limits.max_qp_init_rd_atom);
    }
    return p;
}

iwarp::Result<rdma_conn_param, Errc> make_accept_param(std::span<const std::uint8_t> private_data,
                                                       std::uint16_t ird, std::uint16_t ord,
                                                       const ReadLimits& limits,
                                                       const rdma_conn_param& request) {
    auto p = base_param(private_data);
    if (p) {
        p->responder_resources = cap(ird, limits.max_qp_rd_atom, request.initiator_depth);
        p->initiator_depth = cap(ord, limits.max_qp_init_rd_atom, request.responder_resources);
    }
    return p;
}

Errc cm_event_error(rdma_cm_event_type ev, rdma_cm_event_type wanted) {
    if (ev == wanted) {
        return Errc::ok;
    }
    switch (ev) {
        case RDMA_CM_EVENT_ADDR_ERROR:
            return Errc::address_error;
        case RDMA_CM_EVENT_ROUTE_ERROR:
            return Errc::route_error;
        case RDMA_CM_EVENT_UNREACHABLE:
            return Errc::unreachable;
        case RDMA_CM_EVENT_REJECTED:
            return Errc::rejected;
        case RDMA_CM_EVENT_CONNECT_ERROR:
            return Errc::connect_error;
        case RDMA_CM_EVENT_DISCONNECTED:
        case RDMA_CM_EVENT_TIMEWAIT_EXIT:
            return Errc::disconnected;
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            return Errc::device_removed;
        case RDMA_CM_EVENT_ADDR_CHANGE:
            return Errc::address_error;
        default:
            return Errc::cm_error;
    }
}

}  // namespace sdp::rdma
