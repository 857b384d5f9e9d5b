// SPDX-License-Identifier: Apache-2.0
#include "fake_verbs.hpp"

#include <cerrno>
#include <cstring>
#include <map>
#include <utility>

namespace fakeverbs {

namespace {

struct Mr {
    ibv_mr mr{};
    std::uint64_t iova = 0;
    int access = 0;
    bool valid = true;  // false after a peer's Send with Invalidate
};

std::map<std::uint32_t, Mr*>& mrs() {
    static std::map<std::uint32_t, Mr*> m;
    return m;
}
std::uint32_t next_key = 0x100;

Qp* qp_of(ibv_qp* q) {
    return static_cast<Qp*>(q->qp_context);
}
Cq* cq_of(ibv_cq* c) {
    return static_cast<Cq*>(c->cq_context);
}

void push(Cq* cq, ibv_wc wc, bool solicited = false) {
    if (cq->armed == 0 || (cq->armed == 1 && (wc.status != IBV_WC_SUCCESS || solicited))) {
        ++cq->events;
        cq->armed = -1;
    }
    cq->wcs.push_back(wc);
}

ibv_wc wc_for(std::uint64_t wr_id, ibv_wc_status st, ibv_wc_opcode op, std::uint32_t len) {
    ibv_wc wc{};
    wc.wr_id = wr_id;
    wc.status = st;
    wc.opcode = st == IBV_WC_SUCCESS ? op : static_cast<ibv_wc_opcode>(0x77);  // undefined
    wc.byte_len = st == IBV_WC_SUCCESS ? len : 0xdeadbeef;
    return wc;
}

void flush(Qp* q) {
    q->error = true;
    while (!q->rq.empty()) {
        push(q->rcq, wc_for(q->rq.front().wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0));
        q->rq.pop_front();
    }
    while (!q->held.empty()) {  // Reads whose response will not come
        push(q->scq, wc_for(q->held.front().wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RDMA_READ, 0));
        q->held.pop_front();
    }
}

void terminate(Qp* q) {
    flush(q);
    if (q->peer != nullptr) {
        flush(q->peer);
    }
}

std::vector<std::uint8_t> gather(const ibv_send_wr* wr) {
    std::vector<std::uint8_t> out;
    for (int i = 0; i < wr->num_sge; ++i) {
        const auto* p = reinterpret_cast<const std::uint8_t*>(wr->sg_list[i].addr);
        out.insert(out.end(), p, p + wr->sg_list[i].length);
    }
    return out;
}

// Bytes at a tagged address of a registered region, or null.
std::uint8_t* tagged(std::uint32_t rkey, std::uint64_t to, std::uint64_t len, int need) {
    auto it = mrs().find(rkey);
    if (it == mrs().end() || !it->second->valid || (it->second->access & need) != need) {
        return nullptr;
    }
    const Mr* m = it->second;
    if (to < m->iova || to - m->iova + len > m->mr.length) {
        return nullptr;
    }
    return static_cast<std::uint8_t*>(m->mr.addr) + (to - m->iova);
}

int post_send(ibv_qp* iq, ibv_send_wr* wr, ibv_send_wr** bad) {
    Qp* q = qp_of(iq);
    for (; wr != nullptr; wr = wr->next) {
        if (q->error) {
            *bad = wr;
            return EINVAL;
        }
        if (q->sq_depth >= q->max_send_wr) {
            *bad = wr;
            return ENOMEM;
        }
        ibv_send_wr copy = *wr;
        copy.sg_list = nullptr;
        copy.next = nullptr;
        q->sent.push_back(copy);
        const bool signaled = (wr->send_flags & IBV_SEND_SIGNALED) != 0;
        Qp* p = q->peer;
        ibv_wc_status st = IBV_WC_SUCCESS;
        ibv_wc_opcode op = IBV_WC_SEND;
        std::uint32_t len = 0;
        if (wr->opcode == IBV_WR_SEND || wr->opcode == IBV_WR_SEND_WITH_INV) {
            auto bytes = gather(wr);
            len = static_cast<std::uint32_t>(bytes.size());
            if (p->rq.empty() || p->error) {
                terminate(q);
                st = IBV_WC_REM_OP_ERR;  // the peer's "no buffer" Terminate
            } else {
                auto r = p->rq.front();
                std::size_t cap = 0;
                for (auto& s : r.sge) {
                    cap += s.length;
                }
                if (bytes.size() > cap) {
                    p->rq.pop_front();
                    push(p->rcq, wc_for(r.wr_id, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, 0));
                    terminate(q);
                    st = IBV_WC_REM_OP_ERR;
                } else {
                    p->rq.pop_front();
                    if (!bytes.empty()) {
                        std::memcpy(reinterpret_cast<void*>(r.sge[0].addr), bytes.data(),
                                    bytes.size());
                    }
                    ibv_wc wc = wc_for(r.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, len);
                    if (wr->opcode == IBV_WR_SEND_WITH_INV) {
                        // The receiver's STag dies as the message arrives.
                        if (auto m = mrs().find(wr->invalidate_rkey); m != mrs().end()) {
                            m->second->valid = false;
                        }
                        wc.wc_flags |= IBV_WC_WITH_INV;
                        wc.invalidated_rkey = wr->invalidate_rkey;
                    }
                    push(p->rcq, wc, (wr->send_flags & IBV_SEND_SOLICITED) != 0);
                }
            }
        } else if (wr->opcode == IBV_WR_RDMA_WRITE) {
            op = IBV_WC_RDMA_WRITE;
            auto bytes = gather(wr);
            len = static_cast<std::uint32_t>(bytes.size());
            std::uint8_t* dst = bytes.empty() ? nullptr
                                              : tagged(wr->wr.rdma.rkey, wr->wr.rdma.remote_addr,
                                                       bytes.size(), IBV_ACCESS_REMOTE_WRITE);
            if (!bytes.empty() && dst == nullptr) {
                terminate(q);
                st = IBV_WC_REM_ACCESS_ERR;
            } else if (!bytes.empty()) {
                std::memcpy(dst, bytes.data(), bytes.size());
            }
        } else if (wr->opcode == IBV_WR_RDMA_READ) {
            op = IBV_WC_RDMA_READ;
            len = wr->num_sge > 0 ? wr->sg_list[0].length : 0;
            const std::uint8_t* src = len == 0 ? nullptr
                                               : tagged(wr->wr.rdma.rkey, wr->wr.rdma.remote_addr,
                                                        len, IBV_ACCESS_REMOTE_READ);
            if (len > 0 && src == nullptr) {
                terminate(q);
                st = IBV_WC_REM_ACCESS_ERR;
            } else if (len > 0) {
                std::memcpy(reinterpret_cast<void*>(wr->sg_list[0].addr), src, len);
            }
        } else {
            *bad = wr;
            return EINVAL;
        }
        if (signaled || st != IBV_WC_SUCCESS) {
            ++q->sq_depth;
            if (q->hold_reads && op == IBV_WC_RDMA_READ && st == IBV_WC_SUCCESS) {
                q->held.push_back(wc_for(wr->wr_id, st, op, len));
            } else {
                push(q->scq, wc_for(wr->wr_id, st, op, len));
            }
        }
    }
    return 0;
}

int post_recv(ibv_qp* iq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
    Qp* q = qp_of(iq);
    for (; wr != nullptr; wr = wr->next) {
        if (q->error) {
            *bad = wr;
            return EINVAL;
        }
        if (q->rq.size() >= q->max_recv_wr) {
            *bad = wr;
            return ENOMEM;
        }
        q->rq.push_back(
            Qp::Recv{wr->wr_id, std::vector<ibv_sge>(wr->sg_list, wr->sg_list + wr->num_sge)});
    }
    return 0;
}

int poll_cq(ibv_cq* icq, int n, ibv_wc* out) {
    Cq* c = cq_of(icq);
    int k = 0;
    while (k < n && !c->wcs.empty()) {
        out[k++] = c->wcs.front();
        c->wcs.pop_front();
        if (c->depth != nullptr && *c->depth > 0) {
            --*c->depth;
        }
    }
    return k;
}

int req_notify(ibv_cq* icq, int solicited_only) {
    cq_of(icq)->armed = solicited_only;
    return 0;
}

}  // namespace

Pair::Pair() {
    ctx.ops.post_send = post_send;
    ctx.ops.post_recv = post_recv;
    ctx.ops.poll_cq = poll_cq;
    ctx.ops.req_notify_cq = req_notify;
    pd.context = &ctx;
    for (auto& c : cq) {
        c.cq.context = &ctx;
        c.cq.cq_context = &c;
    }
    a.qp.context = &ctx;
    b.qp.context = &ctx;
    a.qp.qp_context = &a;
    b.qp.qp_context = &b;
    cq[0].depth = &a.sq_depth;
    cq[2].depth = &b.sq_depth;
    a.peer = &b;
    b.peer = &a;
    a.scq = &cq[0];
    a.rcq = &cq[1];
    b.scq = &cq[2];
    b.rcq = &cq[3];
}

Pair::~Pair() = default;

int fail_next_reg = 0;

std::size_t invalidate_with_access(int access) {
    std::size_t n = 0;
    for (auto& [key, m] : mrs()) {
        (void)key;
        if ((m->access & access) == access && m->valid) {
            m->valid = false;
            ++n;
        }
    }
    return n;
}

std::size_t release_reads(Qp& q) {
    const std::size_t n = q.held.size();
    while (!q.held.empty()) {
        push(q.scq, q.held.front());
        q.held.pop_front();
    }
    return n;
}

std::size_t live_mrs() {
    return mrs().size();
}

}  // namespace fakeverbs

// --- exported libibverbs functions, replaced for this executable ------------------

extern "C" {

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                         unsigned int access) {
    if (addr == nullptr || length == 0) {
        errno = EINVAL;
        return nullptr;
    }
    if (fakeverbs::fail_next_reg != 0) {
        errno = std::exchange(fakeverbs::fail_next_reg, 0);
        return nullptr;
    }
    // The kernel (ib_umem) needs the iova and the address to share their
    // offset within a page.
    if (((reinterpret_cast<std::uintptr_t>(addr) ^ iova) & 0xfffu) != 0) {
        errno = EINVAL;
        return nullptr;
    }
    // Verbs: remote write needs local write.
    if ((access & IBV_ACCESS_REMOTE_WRITE) != 0 && (access & IBV_ACCESS_LOCAL_WRITE) == 0) {
        errno = EINVAL;
        return nullptr;
    }
    auto* m = new fakeverbs::Mr();
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = addr;
    m->mr.length = length;
    m->mr.lkey = fakeverbs::next_key;
    m->mr.rkey = fakeverbs::next_key;
    ++fakeverbs::next_key;
    m->iova = iova;
    m->access = static_cast<int>(access);
    fakeverbs::mrs()[m->mr.rkey] = m;
    return &m->mr;
}

int ibv_dereg_mr(ibv_mr* mr) {
    auto it = fakeverbs::mrs().find(mr->rkey);
    if (it == fakeverbs::mrs().end()) {
        return EINVAL;
    }
    delete it->second;
    fakeverbs::mrs().erase(it);
    return 0;
}

int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
    if ((mask & IBV_QP_STATE) != 0 && attr->qp_state == IBV_QPS_ERR) {
        fakeverbs::flush(fakeverbs::qp_of(qp));
    }
    return 0;
}

}  // extern "C"
