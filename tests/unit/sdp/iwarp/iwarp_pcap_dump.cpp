// SPDX-License-Identifier: Apache-2.0
// Runs two soft-iWARP endpoints back to back in memory and writes both
// directions as one TCP session (Ethernet/IPv4/TCP, one FPDU per segment) to
// a pcap file, for tshark's MPA/DDP/RDMAP dissectors to judge.
//
// usage: iwarp_pcap_dump OUT.pcap [--crc] [--p2p-write|--p2p-read]
//                                 [--terminate] [--corrupt-crc]
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "iwarp_pair.hpp"
#include "sdp/bytes/byte_order.hpp"
#include "sdp/iwarp/fpdu.hpp"

using namespace sdp::iwarp;
using iwarp_test::Bytes;
using iwarp_test::EnginePair;

namespace {

constexpr std::size_t kMss = 1460;

using sdp::bytes::Order;
using sdp::bytes::store16;
using sdp::bytes::store32;

void put_le32(std::ostream& o, std::uint32_t v) {
    std::uint8_t b[4];
    store32<Order::little>(b, v);
    o.write(reinterpret_cast<const char*>(b), 4);
}
void put_le16(std::ostream& o, std::uint16_t v) {
    std::uint8_t b[2];
    store16<Order::little>(b, v);
    o.write(reinterpret_cast<const char*>(b), 2);
}
std::uint16_t inet_checksum(const std::uint8_t* p, std::size_t n, std::uint32_t sum = 0) {
    for (std::size_t i = 0; i + 1 < n; i += 2) {
        sum += sdp::bytes::get16(p + i);
    }
    if (n & 1) {
        sum += static_cast<std::uint32_t>(p[n - 1] << 8);
    }
    while (sum >> 16) {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    return static_cast<std::uint16_t>(~sum);
}

class PcapWriter {
  public:
    explicit PcapWriter(const std::string& path) : out_(path, std::ios::binary) {
        put_le32(out_, 0xA1B2C3D4u);
        put_le16(out_, 2);
        put_le16(out_, 4);
        put_le32(out_, 0);
        put_le32(out_, 0);
        put_le32(out_, 262144);
        put_le32(out_, 1);  // Ethernet
    }
    [[nodiscard]] bool ok() const { return static_cast<bool>(out_); }

    // One TCP segment; from_client selects direction. Tracks seq/ack.
    void segment(bool from_client, std::uint8_t flags, std::span<const std::uint8_t> payload) {
        const std::uint32_t src_ip = from_client ? 0x0A000001 : 0x0A000002;
        const std::uint32_t dst_ip = from_client ? 0x0A000002 : 0x0A000001;
        const std::uint16_t sport = from_client ? 45678 : 7174;
        const std::uint16_t dport = from_client ? 7174 : 45678;
        std::uint32_t& seq = from_client ? cseq_ : sseq_;
        const std::uint32_t ack = from_client ? sseq_ : cseq_;
        Bytes f(14 + 20 + 20 + payload.size(), 0);
        // Ethernet
        const std::uint8_t mac_c[6] = {2, 0, 0, 0, 0, 1};
        const std::uint8_t mac_s[6] = {2, 0, 0, 0, 0, 2};
        std::memcpy(&f[0], from_client ? mac_s : mac_c, 6);
        std::memcpy(&f[6], from_client ? mac_c : mac_s, 6);
        store16(&f[12], 0x0800);
        // IPv4
        const std::size_t ip = 14;
        f[ip] = 0x45;
        store16(&f[ip + 2], static_cast<std::uint16_t>(40 + payload.size()));
        store16(&f[ip + 4], ip_id_++);
        store16(&f[ip + 6], 0x4000);  // DF
        f[ip + 8] = 64;
        f[ip + 9] = 6;
        store32(&f[ip + 12], src_ip);
        store32(&f[ip + 16], dst_ip);
        store16(&f[ip + 10], inet_checksum(&f[ip], 20));
        // TCP
        const std::size_t t = ip + 20;
        store16(&f[t], sport);
        store16(&f[t + 2], dport);
        store32(&f[t + 4], seq);
        store32(&f[t + 8], (flags & 0x10) ? ack : 0);
        f[t + 12] = 0x50;
        f[t + 13] = flags;
        store16(&f[t + 14], 65535);
        if (!payload.empty()) {
            std::memcpy(&f[t + 20], payload.data(), payload.size());
        }
        std::uint32_t pseudo = (src_ip >> 16) + (src_ip & 0xFFFF) + (dst_ip >> 16) +
                               (dst_ip & 0xFFFF) + 6 +
                               static_cast<std::uint32_t>(20 + payload.size());
        store16(&f[t + 16], inet_checksum(&f[t], 20 + payload.size(), pseudo));
        seq += static_cast<std::uint32_t>(payload.size()) + ((flags & 0x02) ? 1 : 0);
        // record
        ++usec_;
        put_le32(out_, 1700000000u);
        put_le32(out_, usec_);
        put_le32(out_, static_cast<std::uint32_t>(f.size()));
        put_le32(out_, static_cast<std::uint32_t>(f.size()));
        out_.write(reinterpret_cast<const char*>(f.data()), static_cast<std::streamsize>(f.size()));
    }

  private:
    std::ofstream out_;
    std::uint32_t cseq_ = 1000;
    std::uint32_t sseq_ = 500000;
    std::uint16_t ip_id_ = 1;
    std::uint32_t usec_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr,
                     "usage: %s OUT.pcap [--crc] [--p2p-write|--p2p-read] [--terminate] "
                     "[--corrupt-crc]\n",
                     argv[0]);
        return 2;
    }
    MpaConfig ci;
    MpaConfig cr;
    bool terminate = false;
    bool corrupt = false;
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--crc") {
            ci.crc = true;
        } else if (a == "--p2p-write" || a == "--p2p-read") {
            ci.p2p = cr.p2p = true;
            ci.rtr_write = a == "--p2p-write";
        } else if (a == "--terminate") {
            terminate = true;
        } else if (a == "--corrupt-crc") {
            corrupt = true;
        } else {
            std::fprintf(stderr, "unknown option %s\n", a.c_str());
            return 2;
        }
    }
    ci.private_data = {'S', 'D', 'P', ' ', 'H', 'e', 'l', 'l', 'o'};
    auto p = EnginePair::connect(ci, cr, kMss, Bytes{'A', 'c', 'k'});
    if (!p) {
        std::fprintf(stderr, "MPA negotiation failed\n");
        return 1;
    }
    p->keep_log = true;

    Bytes rbuf_i(8192), rbuf_r(8192);
    p->ini->post_recv(RecvWr{1, rbuf_i});
    p->res->post_recv(RecvWr{2, rbuf_r});
    p->res->post_recv(RecvWr{3, rbuf_r});
    Bytes small(100, 0x11), big(3000, 0x22), wdata(5000, 0x33);
    Bytes wsink(6000), rsrc(4000, 0x44), rsink(4000);
    auto wmr = p->res->reg_mr(wsink, 0x10000, kAccessRemoteWrite);
    auto smr = p->ini->reg_mr(rsrc, 0x20000, kAccessRemoteRead);
    auto dmr = p->res->reg_mr(rsink, 0x30000, kAccessLocalWrite);

    SendWr s1;
    s1.data = small;
    p->ini->post_send(s1);
    SendWr w;
    w.opcode = WrOpcode::rdma_write;
    w.data = wdata;
    w.remote_stag = wmr->stag;
    w.remote_to = 0x10000;
    p->ini->post_send(w);
    SendWr s0;
    p->ini->post_send(s0);  // zero-length Send
    p->pump();
    SendWr s2;
    s2.opcode = WrOpcode::send_se;
    s2.data = big;
    p->res->post_send(s2);
    SendWr rd;
    rd.opcode = WrOpcode::rdma_read;
    rd.remote_stag = smr->stag;
    rd.remote_to = 0x20000;
    rd.local_stag = dmr->stag;
    rd.local_to = 0x30000;
    rd.read_length = 4000;
    p->res->post_send(rd);
    p->pump();
    if (terminate) {
        SendWr bad;
        bad.opcode = WrOpcode::rdma_write;
        bad.data = small;
        bad.remote_stag = 0xDEAD00;
        p->ini->post_send(bad);
        p->pump();
    }
    const auto ci_done = p->ini->poll_all();
    const auto cr_done = p->res->poll_all();
    std::fprintf(stderr, "completions: initiator %zu, responder %zu; states %d %d\n",
                 ci_done.size(), cr_done.size(), static_cast<int>(p->ini->state()),
                 static_cast<int>(p->res->state()));

    PcapWriter pcap(argv[1]);
    pcap.segment(true, 0x02, {});   // SYN
    pcap.segment(false, 0x12, {});  // SYN ACK
    pcap.segment(true, 0x10, {});   // ACK
    bool first[2] = {true, true};
    bool corrupted = false;
    std::size_t segments = 0;
    for (auto& [from_client, bytes] : p->log) {
        const int d = from_client ? 0 : 1;
        if (first[d]) {  // the MPA Request / Reply
            first[d] = false;
            pcap.segment(from_client, 0x18, bytes);
            ++segments;
            continue;
        }
        std::size_t off = 0;
        while (off + 2 <= bytes.size()) {
            const std::size_t len = static_cast<std::size_t>(bytes[off] << 8 | bytes[off + 1]);
            const std::size_t n = fpdu_size(len);
            if (off + n > bytes.size()) {
                std::fprintf(stderr, "FPDU crosses a write\n");
                return 1;
            }
            if (corrupt && !corrupted && from_client) {
                bytes[off + n - 1] ^= 0x5A;
                corrupted = true;
            }
            pcap.segment(from_client, 0x18, std::span<const std::uint8_t>(bytes).subspan(off, n));
            ++segments;
            off += n;
        }
    }
    std::printf("%zu\n", segments);
    return pcap.ok() ? 0 : 1;
}
