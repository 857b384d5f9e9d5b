// SPDX-License-Identifier: Apache-2.0
// Errors of the rdma-core provider, as a std::error_code category whose
// conditions compare equal to the std::errc values the stream API reports
// (a rejected connection is std::errc::connection_refused, and so on).
#pragma once

#include <string>
#include <system_error>

namespace sdp::rdma {

enum class Errc {
    ok = 0,
    no_device = 1,          // no RDMA device at all, or rdma_cm unusable
    not_iwarp,              // the device that owns the route is not iWARP (IB, RoCE)
    bad_argument,           // address family, sizes, options
    address_error,          // RDMA_CM_EVENT_ADDR_ERROR / rdma_resolve_addr failed
    route_error,            // RDMA_CM_EVENT_ROUTE_ERROR / rdma_resolve_route failed
    unreachable,            // RDMA_CM_EVENT_UNREACHABLE (iWARP: TCP connect timed out)
    rejected,               // RDMA_CM_EVENT_REJECTED (MPA reject, TCP refused)
    connect_error,          // RDMA_CM_EVENT_CONNECT_ERROR
    timed_out,              // our own deadline passed while waiting for an event
    disconnected,           // RDMA_CM_EVENT_DISCONNECTED before/while in use
    device_removed,         // RDMA_CM_EVENT_DEVICE_REMOVAL
    private_data_too_long,  // more than kMaxPrivateData bytes (the SDP Hello)
    resources,              // PD / CQ / QP / MR creation failed
    cm_error,               // another rdma_cm call failed (see the detail text)
    hello_rejected,         // the SDP engine refused the peer's Hello
};

const std::error_category& category();
std::error_code make_error_code(Errc e);

}  // namespace sdp::rdma

template <>
struct std::is_error_code_enum<sdp::rdma::Errc> : std::true_type {};
