// SPDX-License-Identifier: Apache-2.0
#include "sdp/rdma/cm.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sdp::rdma {

namespace {

using Clock = std::chrono::steady_clock;

void set_why(std::string* why, std::string s) {
    if (why != nullptr) {
        *why = std::move(s);
    }
}

std::string errno_text(const char* call, int e) {
    return std::string(call) + ": " + (e != 0 ? std::strerror(e) : "failed");
}

bool set_nonblocking(int fd) {
    const int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

Errc errno_errc(int e) {
    switch (e) {
        case ENODEV:
        case ENOENT:
        case ENOSYS:
        case ENXIO:
            return Errc::no_device;
        case EINVAL:
        case EAFNOSUPPORT:
            return Errc::bad_argument;
        case EADDRNOTAVAIL:
        case EADDRINUSE:
            return Errc::address_error;
        case ENETUNREACH:
        case EHOSTUNREACH:
            return Errc::unreachable;
        case ETIMEDOUT:
            return Errc::timed_out;
        case ECONNREFUSED:
            return Errc::rejected;
        case ENOMEM:
        case ENOSPC:
            return Errc::resources;
        default:
            return Errc::cm_error;
    }
}

// One event from a non-blocking channel, waiting until `deadline`.
Errc get_event(rdma_event_channel* ch, Clock::time_point deadline, rdma_cm_event** ev,
               std::string* why) {
    while (true) {
        if (rdma_get_cm_event(ch, ev) == 0) {
            return Errc::ok;
        }
        const int e = errno;
        if (e != EAGAIN && e != EWOULDBLOCK && e != EINTR) {
            set_why(why, errno_text("rdma_get_cm_event", e));
            return Errc::cm_error;
        }
        const auto now = Clock::now();
        if (now >= deadline) {
            return Errc::timed_out;
        }
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
        pollfd p{ch->fd, POLLIN, 0};
        (void)::poll(&p, 1, static_cast<int>(std::min<long long>(left, 60'000)));
    }
}

rdma_event_channel* new_channel(std::error_code& ec, std::string* why) {
    errno = 0;
    rdma_event_channel* ch = rdma_create_event_channel();
    if (ch == nullptr) {
        const int e = errno;
        ec = errno_errc(e) == Errc::no_device ? Errc::no_device : Errc::cm_error;
        set_why(why, "no usable rdma_cm (no RDMA device?): " +
                         errno_text("rdma_create_event_channel", e));
        return nullptr;
    }
    if (!set_nonblocking(ch->fd)) {
        const int e = errno;
        rdma_destroy_event_channel(ch);
        ec = Errc::cm_error;
        set_why(why, errno_text("fcntl(O_NONBLOCK)", e));
        return nullptr;
    }
    return ch;
}

std::error_code check_transport(rdma_cm_id* id, std::string* why) {
    if (id->verbs == nullptr || id->verbs->device == nullptr) {
        set_why(why, "rdma_cm bound the id to no device");
        return Errc::no_device;
    }
    ibv_device* d = id->verbs->device;
    const char* name = ibv_get_device_name(d);
    auto problem = transport_problem(name != nullptr ? name : "?", d->transport_type, d->node_type);
    if (!problem.empty()) {
        set_why(why, problem);
        return Errc::not_iwarp;
    }
    return {};
}

std::string event_text(const rdma_cm_event* ev) {
    std::string s = rdma_event_str(ev->event);
    if (ev->status != 0) {
        const int st = ev->status < 0 ? -ev->status : ev->status;
        s += " (status " + std::to_string(ev->status) + ": " + std::strerror(st) + ")";
    }
    return s;
}

}  // namespace

// --- Connection ----------------------------------------------------------------

Connection::Connection(const CmOptions& opt) : opt_(opt) {}

Connection::~Connection() {
    if (qp_created_) {
        rdma_destroy_qp(id_);
    }
    qp_.reset();  // deregisters regions before the PD goes
    if (send_cq_ != nullptr) {
        ibv_destroy_cq(send_cq_);
    }
    if (recv_cq_ != nullptr) {
        ibv_destroy_cq(recv_cq_);
    }
    if (cc_ != nullptr) {
        ibv_destroy_comp_channel(cc_);
    }
    if (pd_ != nullptr) {
        ibv_dealloc_pd(pd_);
    }
    if (id_ != nullptr) {
        rdma_destroy_id(id_);
    }
    if (ch_ != nullptr) {
        rdma_destroy_event_channel(ch_);
    }
}

std::unique_ptr<Connection> Connection::open_id(const CmOptions& opt, std::error_code& ec,
                                                std::string* why) {
    std::unique_ptr<Connection> c(new Connection(opt));
    c->ch_ = new_channel(ec, why);
    if (c->ch_ == nullptr) {
        return nullptr;
    }
    if (rdma_create_id(c->ch_, &c->id_, nullptr, RDMA_PS_TCP) != 0) {
        const int e = errno;
        c->id_ = nullptr;
        ec = errno_errc(e);
        set_why(why, errno_text("rdma_create_id", e));
        return nullptr;
    }
    return c;
}

std::unique_ptr<Connection> Connection::create_active(const sockaddr* dst, const sockaddr* src,
                                                      const CmOptions& opt, std::error_code& ec,
                                                      std::string* why) {
    ec.clear();
    if (dst == nullptr || (dst->sa_family != AF_INET && dst->sa_family != AF_INET6)) {
        ec = Errc::bad_argument;
        set_why(why, "destination must be an IPv4 or IPv6 address");
        return nullptr;
    }
    std::unique_ptr<Connection> c =
        src != nullptr ? bind_active(src, opt, ec, why) : open_id(opt, ec, why);
    if (!c || (ec = c->resolve(dst, why))) {
        return nullptr;
    }
    return c;
}

std::unique_ptr<Connection> Connection::bind_active(const sockaddr* src, const CmOptions& opt,
                                                    std::error_code& ec, std::string* why) {
    ec.clear();
    if (src == nullptr || (src->sa_family != AF_INET && src->sa_family != AF_INET6)) {
        ec = Errc::bad_argument;
        set_why(why, "source must be an IPv4 or IPv6 address");
        return nullptr;
    }
    std::unique_ptr<Connection> c = open_id(opt, ec, why);
    if (!c) {
        return nullptr;
    }
    if (rdma_bind_addr(c->id_, const_cast<sockaddr*>(src)) != 0) {
        const int e = errno;
        ec = errno_errc(e) == Errc::cm_error ? Errc::address_error : errno_errc(e);
        set_why(why, errno_text("rdma_bind_addr", e));
        return nullptr;
    }
    if (c->id_->verbs != nullptr) {
        // Bound to one device's address: refuse a non-iWARP one now.
        if ((ec = check_transport(c->id_, why))) {
            return nullptr;
        }
    }
    return c;
}

namespace {

sockaddr_storage copy_address(const sockaddr* a) {
    sockaddr_storage ss{};
    ss.ss_family = AF_UNSPEC;
    if (a == nullptr || (a->sa_family != AF_INET && a->sa_family != AF_INET6)) {
        return ss;
    }
    std::memcpy(&ss, a, a->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    return ss;
}

}  // namespace

sockaddr_storage Connection::local_address() const {
    return copy_address(id_ != nullptr ? rdma_get_local_addr(id_) : nullptr);
}

sockaddr_storage Connection::peer_address() const {
    return copy_address(id_ != nullptr ? rdma_get_peer_addr(id_) : nullptr);
}

std::error_code Connection::resolve(const sockaddr* dst, std::string* why) {
    if (id_ == nullptr || qp_) {
        set_why(why, "resolve() needs a fresh active id");
        return Errc::bad_argument;
    }
    if (dst == nullptr || (dst->sa_family != AF_INET && dst->sa_family != AF_INET6)) {
        set_why(why, "destination must be an IPv4 or IPv6 address");
        return Errc::bad_argument;
    }
    const int resolve_ms = static_cast<int>(std::max<long long>(1, opt_.resolve_timeout.count()));
    // Our wait also covers the kernel's own timeout plus a margin.
    const auto wait = opt_.resolve_timeout + std::chrono::milliseconds(500);
    // A bound id (bind_active) resolves from its own address and port.
    if (rdma_resolve_addr(id_, nullptr, const_cast<sockaddr*>(dst), resolve_ms) != 0) {
        const int e = errno;
        set_why(why, errno_text("rdma_resolve_addr", e));
        return errno_errc(e) == Errc::cm_error ? Errc::address_error : errno_errc(e);
    }
    if (auto ec = wait_for(RDMA_CM_EVENT_ADDR_RESOLVED, wait, why)) {
        return ec;
    }
    if (auto ec = check_transport(id_, why)) {
        return ec;
    }
    if (rdma_resolve_route(id_, resolve_ms) != 0) {
        const int e = errno;
        set_why(why, errno_text("rdma_resolve_route", e));
        return Errc::route_error;
    }
    if (auto ec = wait_for(RDMA_CM_EVENT_ROUTE_RESOLVED, wait, why)) {
        return ec;
    }
    return setup_verbs(why);
}

std::error_code Connection::setup_verbs(std::string* why) {
    ibv_context* ctx = id_->verbs;
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) != 0) {
        set_why(why, errno_text("ibv_query_device", errno));
        return Errc::resources;
    }
    limits_.max_qp_rd_atom = attr.max_qp_rd_atom;
    limits_.max_qp_init_rd_atom = attr.max_qp_init_rd_atom;
    if ((pd_ = ibv_alloc_pd(ctx)) == nullptr) {
        set_why(why, errno_text("ibv_alloc_pd", errno));
        return Errc::resources;
    }
    if ((cc_ = ibv_create_comp_channel(ctx)) == nullptr || !set_nonblocking(cc_->fd)) {
        set_why(why, errno_text("ibv_create_comp_channel", errno));
        return Errc::resources;
    }
    const auto max_wr = static_cast<std::uint32_t>(std::max(attr.max_qp_wr, 1));
    const std::uint32_t sq = std::clamp<std::uint32_t>(opt_.max_send_wr, 1, max_wr);
    const std::uint32_t rq = std::clamp<std::uint32_t>(opt_.max_recv_wr, 1, max_wr);
    const int max_cqe = std::max(attr.max_cqe, 1);
    send_cq_ = ibv_create_cq(ctx, std::min(static_cast<int>(sq) + 1, max_cqe), nullptr, cc_, 0);
    recv_cq_ = ibv_create_cq(ctx, std::min(static_cast<int>(rq) + 1, max_cqe), nullptr, cc_, 0);
    if (send_cq_ == nullptr || recv_cq_ == nullptr) {
        set_why(why, errno_text("ibv_create_cq", errno));
        return Errc::resources;
    }
    ibv_qp_init_attr qa{};
    qa.send_cq = send_cq_;
    qa.recv_cq = recv_cq_;
    qa.qp_type = IBV_QPT_RC;
    qa.sq_sig_all = 0;
    qa.cap.max_send_wr = sq;
    qa.cap.max_recv_wr = rq;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = opt_.max_inline;
    if (rdma_create_qp(id_, pd_, &qa) != 0) {
        qa.cap.max_inline_data = 0;  // some devices have no inline data
        if (rdma_create_qp(id_, pd_, &qa) != 0) {
            set_why(why, errno_text("rdma_create_qp", errno));
            return Errc::resources;
        }
    }
    qp_created_ = true;
    QpResources r;
    r.pd = pd_;
    r.qp = id_->qp;
    r.send_cq = send_cq_;
    r.recv_cq = recv_cq_;
    r.channel = cc_;
    r.max_send_wr = qa.cap.max_send_wr;
    r.max_recv_wr = qa.cap.max_recv_wr;
    r.max_inline = qa.cap.max_inline_data;
    r.iwarp = true;
    qp_ = std::make_unique<RdmaQueuePair>(r);
    return {};
}

std::error_code Connection::wait_for(rdma_cm_event_type wanted, std::chrono::milliseconds timeout,
                                     std::string* why) {
    const auto deadline = Clock::now() + timeout;
    while (true) {
        rdma_cm_event* ev = nullptr;
        const Errc g = get_event(ch_, deadline, &ev, why);
        if (g == Errc::timed_out) {
            set_why(why, std::string("no ") + rdma_event_str(wanted) + " within " +
                             std::to_string(timeout.count()) + " ms");
            return g;
        }
        if (g != Errc::ok) {
            return g;
        }
        const Errc e = cm_event_error(ev->event, wanted);
        if (ev->event == RDMA_CM_EVENT_ESTABLISHED || ev->event == RDMA_CM_EVENT_REJECTED ||
            ev->event == RDMA_CM_EVENT_CONNECT_RESPONSE) {
            const auto* pd = static_cast<const std::uint8_t*>(ev->param.conn.private_data);
            if (pd != nullptr && id_ != nullptr && ev->id == id_) {
                peer_pd_.assign(pd, pd + ev->param.conn.private_data_len);
            }
        }
        if (ev->event == RDMA_CM_EVENT_ESTABLISHED && e == Errc::ok) {
            established_ = true;
        }
        if (ev->event == RDMA_CM_EVENT_DISCONNECTED || ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
            disconnected_ = true;
        }
        const rdma_cm_event_type type = ev->event;
        const std::string text = event_text(ev);
        rdma_ack_cm_event(ev);
        if (e == Errc::ok) {
            return {};
        }
        if (type == RDMA_CM_EVENT_TIMEWAIT_EXIT) {
            continue;  // a late notification of an earlier connection: not an answer
        }
        set_why(why, std::string("waiting for ") + rdma_event_str(wanted) + ": " + text);
        return e;
    }
}

std::error_code Connection::connect(std::span<const std::uint8_t> private_data, std::string* why) {
    if (id_ == nullptr || !qp_) {
        set_why(why, "connection not set up");
        return Errc::bad_argument;
    }
    auto p = make_connect_param(private_data, opt_.ird, opt_.ord, limits_);
    if (!p) {
        set_why(why, "private data of " + std::to_string(private_data.size()) +
                         " bytes exceeds the MPA limit of " + std::to_string(kMaxPrivateData));
        return p.error();
    }
    if (rdma_connect(id_, &p.value()) != 0) {
        const int e = errno;
        port_in_use_ = e == EADDRINUSE;
        set_why(why, errno_text("rdma_connect", e));
        return errno_errc(e) == Errc::cm_error ? Errc::connect_error : errno_errc(e);
    }
    return wait_for(RDMA_CM_EVENT_ESTABLISHED, opt_.establish_timeout, why);
}

std::error_code Connection::accept(std::span<const std::uint8_t> private_data, std::string* why) {
    if (id_ == nullptr || !qp_) {
        set_why(why, "connection not set up");
        return Errc::bad_argument;
    }
    auto p = make_accept_param(private_data, opt_.ird, opt_.ord, limits_, request_);
    if (!p) {
        set_why(why, "private data exceeds the MPA limit");
        return p.error();
    }
    if (rdma_accept(id_, &p.value()) != 0) {
        const int e = errno;
        set_why(why, errno_text("rdma_accept", e));
        return errno_errc(e) == Errc::cm_error ? Errc::connect_error : errno_errc(e);
    }
    return wait_for(RDMA_CM_EVENT_ESTABLISHED, opt_.establish_timeout, why);
}

std::error_code Connection::reject(std::span<const std::uint8_t> private_data) {
    if (id_ == nullptr) {
        return Errc::bad_argument;
    }
    if (private_data.size() > kMaxPrivateData) {
        return Errc::private_data_too_long;
    }
    if (rdma_reject(id_, private_data.empty() ? nullptr : private_data.data(),
                    static_cast<std::uint8_t>(private_data.size())) != 0) {
        return errno_errc(errno);
    }
    return {};
}

std::string Connection::device_name() const {
    if (id_ == nullptr || id_->verbs == nullptr) {
        return {};
    }
    const char* n = ibv_get_device_name(id_->verbs->device);
    return n != nullptr ? n : "";
}

int Connection::cm_fd() const {
    return ch_ != nullptr ? ch_->fd : -1;
}

bool Connection::poll_events() {
    if (ch_ == nullptr) {
        return disconnected_;
    }
    rdma_cm_event* ev = nullptr;
    while (rdma_get_cm_event(ch_, &ev) == 0) {
        if (ev->event == RDMA_CM_EVENT_DISCONNECTED || ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
            disconnected_ = true;
        }
        rdma_ack_cm_event(ev);
    }
    return disconnected_;
}

void Connection::disconnect() {
    if (id_ != nullptr && !disconnect_sent_) {
        disconnect_sent_ = true;
        (void)rdma_disconnect(id_);
    }
}

void Connection::abort() {
    if (qp_) {
        qp_->to_error();
    }
    disconnect();
}

void Connection::close() {
    if (!established_ || disconnected_) {
        disconnect();
        return;
    }
    disconnect();
    (void)wait_for(RDMA_CM_EVENT_DISCONNECTED, opt_.disconnect_timeout, nullptr);
}

// --- Listener ------------------------------------------------------------------

Listener::~Listener() {
    if (id_ != nullptr) {
        rdma_destroy_id(id_);
    }
    if (ch_ != nullptr) {
        rdma_destroy_event_channel(ch_);
    }
}

std::unique_ptr<Listener> Listener::listen(const sockaddr* addr, int backlog, std::error_code& ec,
                                           std::string* why) {
    ec.clear();
    if (addr == nullptr || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)) {
        ec = Errc::bad_argument;
        set_why(why, "listen address must be IPv4 or IPv6");
        return nullptr;
    }
    std::unique_ptr<Listener> l(new Listener());
    l->ch_ = new_channel(ec, why);
    if (l->ch_ == nullptr) {
        return nullptr;
    }
    if (rdma_create_id(l->ch_, &l->id_, nullptr, RDMA_PS_TCP) != 0) {
        const int e = errno;
        l->id_ = nullptr;
        ec = errno_errc(e);
        set_why(why, errno_text("rdma_create_id", e));
        return nullptr;
    }
    if (rdma_bind_addr(l->id_, const_cast<sockaddr*>(addr)) != 0) {
        const int e = errno;
        ec = errno_errc(e) == Errc::cm_error ? Errc::address_error : errno_errc(e);
        set_why(why, errno_text("rdma_bind_addr", e));
        return nullptr;
    }
    if (l->id_->verbs != nullptr) {
        // Bound to one device's address: refuse a non-iWARP one now.
        if ((ec = check_transport(l->id_, why))) {
            return nullptr;
        }
    }
    if (rdma_listen(l->id_, backlog) != 0) {
        const int e = errno;
        ec = errno_errc(e);
        set_why(why, errno_text("rdma_listen", e));
        return nullptr;
    }
    return l;
}

std::uint16_t Listener::port() const {
    return id_ != nullptr ? ntohs(rdma_get_src_port(id_)) : 0;
}

int Listener::fd() const {
    return ch_ != nullptr ? ch_->fd : -1;
}

std::unique_ptr<Connection> Listener::get_request(std::chrono::milliseconds timeout,
                                                  const CmOptions& opt, std::error_code& ec,
                                                  std::string* why) {
    ec.clear();
    const auto deadline = Clock::now() + timeout;
    while (true) {
        rdma_cm_event* ev = nullptr;
        const Errc g = get_event(ch_, deadline, &ev, why);
        if (g != Errc::ok) {
            ec = g;
            if (g == Errc::timed_out) {
                set_why(why,
                        "no connection request within " + std::to_string(timeout.count()) + " ms");
            }
            return nullptr;
        }
        if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
            rdma_ack_cm_event(ev);
            ec = Errc::device_removed;
            set_why(why, "RDMA device removed");
            return nullptr;
        }
        if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
            rdma_ack_cm_event(ev);  // e.g. a late event of a rejected request
            continue;
        }
        std::unique_ptr<Connection> c(new Connection(opt));
        c->id_ = ev->id;
        const auto* pd = static_cast<const std::uint8_t*>(ev->param.conn.private_data);
        if (pd != nullptr) {
            c->peer_pd_.assign(pd, pd + ev->param.conn.private_data_len);
        }
        c->request_ = ev->param.conn;
        c->request_.private_data = nullptr;
        c->request_.private_data_len = 0;
        rdma_ack_cm_event(ev);
        if ((ec = check_transport(c->id_, why))) {
            (void)rdma_reject(c->id_, nullptr, 0);
            return nullptr;
        }
        // Each connection gets its own channel: its events never wait behind
        // the listener's.
        c->ch_ = new_channel(ec, why);
        if (c->ch_ == nullptr) {
            (void)rdma_reject(c->id_, nullptr, 0);
            return nullptr;
        }
        if (rdma_migrate_id(c->id_, c->ch_) != 0) {
            const int e = errno;
            (void)rdma_reject(c->id_, nullptr, 0);
            ec = Errc::cm_error;
            set_why(why, errno_text("rdma_migrate_id", e));
            return nullptr;
        }
        if ((ec = c->setup_verbs(why))) {
            (void)rdma_reject(c->id_, nullptr, 0);
            return nullptr;
        }
        return c;
    }
}

}  // namespace sdp::rdma
