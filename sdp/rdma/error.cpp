// SPDX-License-Identifier: Apache-2.0
#include "sdp/rdma/error.hpp"

namespace sdp::rdma {

namespace {

class Category final : public std::error_category {
  public:
    [[nodiscard]] const char* name() const noexcept override { return "sdp-rdma"; }

    [[nodiscard]] std::string message(int v) const override {
        switch (static_cast<Errc>(v)) {
            case Errc::ok:
                return "success";
            case Errc::no_device:
                return "no RDMA device";
            case Errc::not_iwarp:
                return "RDMA device is not iWARP (SDP over InfiniBand/RoCE is not supported)";
            case Errc::bad_argument:
                return "invalid argument";
            case Errc::address_error:
                return "RDMA address resolution failed";
            case Errc::route_error:
                return "RDMA route resolution failed";
            case Errc::unreachable:
                return "RDMA peer unreachable";
            case Errc::rejected:
                return "RDMA connection rejected";
            case Errc::connect_error:
                return "RDMA connection error";
            case Errc::timed_out:
                return "RDMA connection manager timed out";
            case Errc::disconnected:
                return "RDMA connection disconnected";
            case Errc::device_removed:
                return "RDMA device removed";
            case Errc::private_data_too_long:
                return "private data longer than the MPA limit";
            case Errc::resources:
                return "RDMA resource allocation failed";
            case Errc::cm_error:
                return "rdma_cm call failed";
            case Errc::hello_rejected:
                return "SDP Hello rejected";
        }
        return "unknown sdp-rdma error";
    }

    [[nodiscard]] std::error_condition default_error_condition(int v) const noexcept override {
        switch (static_cast<Errc>(v)) {
            case Errc::ok:
                return {};
            case Errc::no_device:
            case Errc::device_removed:
                return std::errc::no_such_device;
            case Errc::not_iwarp:
                return std::errc::operation_not_supported;
            case Errc::bad_argument:
                return std::errc::invalid_argument;
            case Errc::address_error:
                return std::errc::address_not_available;
            case Errc::route_error:
            case Errc::unreachable:
                return std::errc::host_unreachable;
            case Errc::rejected:
            case Errc::hello_rejected:
                return std::errc::connection_refused;
            case Errc::connect_error:
                return std::errc::connection_aborted;
            case Errc::timed_out:
                return std::errc::timed_out;
            case Errc::disconnected:
                return std::errc::connection_reset;
            case Errc::private_data_too_long:
                return std::errc::message_size;
            case Errc::resources:
                return std::errc::not_enough_memory;
            case Errc::cm_error:
                return std::errc::io_error;
        }
        return std::error_condition(v, *this);
    }
};

}  // namespace

const std::error_category& category() {
    // Never destroyed: error codes of this category may be made and read by
    // threads that run on while the process exits.
    static const auto* const c = new Category;
    return *c;
}

std::error_code make_error_code(Errc e) {
    return {static_cast<int>(e), category()};
}

}  // namespace sdp::rdma
