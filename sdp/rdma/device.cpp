// SPDX-License-Identifier: Apache-2.0
#include "sdp/rdma/device.hpp"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstring>

#include "sdp/rdma/translate.hpp"

namespace sdp::rdma {

namespace {

void set(std::string* why, std::string text) {
    if (why != nullptr) {
        *why = std::move(text);
    }
}

}  // namespace

std::vector<DeviceInfo> list_devices(std::string* why) {
    std::vector<DeviceInfo> out;
    errno = 0;
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) {
        const int e = errno;
        set(why, std::string("no RDMA device: ibv_get_device_list: ") +
                     (e != 0 ? std::strerror(e) : "failed"));
        return out;
    }
    for (int i = 0; i < n; ++i) {
        ibv_device* d = list[i];
        DeviceInfo info;
        info.name = ibv_get_device_name(d) != nullptr ? ibv_get_device_name(d) : "?";
        info.transport = transport_name(d->transport_type);
        info.iwarp = is_iwarp(d->transport_type, d->node_type);
        if (ibv_context* ctx = ibv_open_device(d)) {
            ibv_device_attr attr{};
            if (ibv_query_device(ctx, &attr) == 0) {
                info.max_qp_rd_atom = attr.max_qp_rd_atom;
                info.max_qp_init_rd_atom = attr.max_qp_init_rd_atom;
                info.max_qp_wr = attr.max_qp_wr;
                info.fw_ver = attr.fw_ver;
            }
            ibv_close_device(ctx);
        }
        out.push_back(std::move(info));
    }
    ibv_free_device_list(list);
    if (out.empty()) {
        set(why,
            "no RDMA device (no RNIC and no siw link: see docs/rdma.md, "
            "'rdma link add siw0 type siw netdev eth0')");
    }
    return out;
}

std::vector<DeviceInfo> list_iwarp_devices(std::string* why) {
    std::vector<DeviceInfo> all = list_devices(why);
    std::vector<DeviceInfo> out;
    std::string others;
    for (auto& d : all) {
        if (d.iwarp) {
            out.push_back(std::move(d));
        } else {
            others += (others.empty() ? "" : ", ") + d.name + " " + d.transport;
        }
    }
    if (out.empty() && !all.empty()) {
        set(why, "no iWARP device (found: " + others + "); SDP over InfiniBand is out of scope");
    }
    return out;
}

bool available(std::string* why) {
    if (list_iwarp_devices(why).empty()) {
        return false;
    }
    errno = 0;
    rdma_event_channel* ch = rdma_create_event_channel();
    if (ch == nullptr) {
        const int e = errno;
        set(why, std::string("rdma_cm unusable: rdma_create_event_channel: ") +
                     (e != 0 ? std::strerror(e) : "failed") + " (is the rdma_ucm module loaded?)");
        return false;
    }
    rdma_destroy_event_channel(ch);
    set(why, {});
    return true;
}

}  // namespace sdp::rdma
