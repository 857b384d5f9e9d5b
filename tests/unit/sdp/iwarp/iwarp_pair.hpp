// SPDX-License-Identifier: Apache-2.0
// Two soft-iWARP endpoints wired back to back in memory: MPA negotiation,
// then two QP engines exchanging bytes. Records both directions' streams.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "sdp/iwarp/mpa.hpp"
#include "sdp/iwarp/qp.hpp"

namespace iwarp_test {

using Bytes = std::vector<std::uint8_t>;

struct EnginePair {
    std::unique_ptr<sdp::iwarp::QpEngine> ini;  // MPA initiator (active side)
    std::unique_ptr<sdp::iwarp::QpEngine> res;  // MPA responder
    Bytes ini_to_res;                           // everything either side wrote
    Bytes res_to_ini;
    std::vector<std::size_t> ini_writes;  // size of each take_output() chunk
    std::vector<std::size_t> res_writes;
    std::mt19937 split_rng{1};
    bool random_splits = false;               // deliver each write in random pieces
    bool keep_log = false;                    // record every write in order (for pcaps)
    std::vector<std::pair<bool, Bytes>> log;  // (from initiator?, bytes)

    // Negotiates MPA (fails the optional on error) and builds the engines.
    static std::unique_ptr<EnginePair> connect(sdp::iwarp::MpaConfig ci, sdp::iwarp::MpaConfig cr,
                                               std::size_t mss, const Bytes& reply_pd = {}) {
        using namespace sdp::iwarp;
        auto p = std::make_unique<EnginePair>();
        MpaNegotiator a(MpaRole::initiator, std::move(ci));
        MpaNegotiator b(MpaRole::responder, std::move(cr));
        if (a.start()) {
            return nullptr;
        }
        Bytes req = a.take_output();
        p->ini_to_res = req;
        p->ini_writes.push_back(req.size());
        p->log.emplace_back(true, req);
        b.on_bytes(req);
        if (b.state() != MpaState::request_received || b.accept(reply_pd)) {
            return nullptr;
        }
        Bytes rep = b.take_output();
        p->res_to_ini = rep;
        p->res_writes.push_back(rep.size());
        p->log.emplace_back(false, rep);
        a.on_bytes(rep);
        if (a.state() != MpaState::established) {
            return nullptr;
        }
        p->ini = std::make_unique<QpEngine>(qp_config_from(a, mss));
        p->res = std::make_unique<QpEngine>(qp_config_from(b, mss));
        return p;
    }

    void deliver(sdp::iwarp::QpEngine& to, const Bytes& b) {
        if (!random_splits) {
            to.on_bytes(b);
            return;
        }
        std::size_t off = 0;
        while (off < b.size()) {
            const std::size_t n = std::min<std::size_t>(1 + split_rng() % 3000, b.size() - off);
            to.on_bytes(std::span<const std::uint8_t>(b).subspan(off, n));
            off += n;
        }
    }

    // Moves bytes both ways until neither side has anything to send.
    void pump(std::size_t chunk = 16 * 1024) {
        for (;;) {
            Bytes x = ini->take_output(chunk);
            Bytes y = res->take_output(chunk);
            if (x.empty() && y.empty()) {
                return;
            }
            if (!x.empty()) {
                ini_to_res.insert(ini_to_res.end(), x.begin(), x.end());
                ini_writes.push_back(x.size());
                if (keep_log) {
                    log.emplace_back(true, x);
                }
                deliver(*res, x);
            }
            if (!y.empty()) {
                res_to_ini.insert(res_to_ini.end(), y.begin(), y.end());
                res_writes.push_back(y.size());
                if (keep_log) {
                    log.emplace_back(false, y);
                }
                deliver(*ini, y);
            }
        }
    }
};

}  // namespace iwarp_test
