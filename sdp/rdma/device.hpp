// SPDX-License-Identifier: Apache-2.0
// The public probe of the rdma-core provider: is there an iWARP device
// (RNIC or Linux siw) and a usable rdma_cm, so the stream API may pick this
// provider instead of the soft one. Never throws, never blocks for long.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sdp::rdma {

struct DeviceInfo {
    std::string name;       // ibv_get_device_name(): "siw0", "iwp3s0f4", "mlx5_0"
    std::string transport;  // "iWARP", "InfiniBand/RoCE", ...
    bool iwarp = false;
    // From ibv_query_device (0 when the device could not be opened).
    int max_qp_rd_atom = 0;
    int max_qp_init_rd_atom = 0;
    int max_qp_wr = 0;
    std::string fw_ver;
};

// Every RDMA device rdma-core sees. Empty (and *why set, e.g. "no RDMA
// device: ibv_get_device_list: Function not implemented") when none.
std::vector<DeviceInfo> list_devices(std::string* why = nullptr);
// The iWARP ones. Empty with *why when there is none ("no iWARP device
// (found: mlx5_0 InfiniBand/RoCE)").
std::vector<DeviceInfo> list_iwarp_devices(std::string* why = nullptr);
// True when an iWARP device exists and rdma_cm can be opened. Otherwise
// false and *why says which of the two is missing.
bool available(std::string* why = nullptr);

}  // namespace sdp::rdma
