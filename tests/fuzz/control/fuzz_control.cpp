// SPDX-License-Identifier: Apache-2.0
// Fuzz target: one control-socket request line, handled with every access
// level against a backend that keeps registrations in memory, and the same
// bytes as a state file and as an on-demand acceptor's channel line. Any bytes must give exactly
// one JSON response line with a result code, never an exception, a crash or unbounded work.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "daemon/io/control_handler.hpp"
#include "daemon/io/state_file.hpp"

namespace {

using nlohmann::json;
using namespace pmd;
using namespace pmd::io;

class FakeBackend final : public ControlBackend {
  public:
    void status(Done<json> done) override { done(json{{"services", regs_.size()}}); }
    void cluster(Done<json> done) override { done(json{{"backend", "local"}}); }
    void services(Done<json> done) override {
        json list = json::array();
        for (const auto& r : regs_) {
            list.push_back(registration_json(r, wall_now()));
        }
        done(std::move(list));
    }
    void register_service(Registration r, Done<Reply> done) override {
        if (auto c = find_conflict(r, {}, regs_)) {
            return done(Reply{kResultConflict, *c, nullptr});
        }
        if (regs_.size() < 16) {
            regs_.push_back(r);
        }
        done(Reply{kResultOk, "registered", registration_json(r, wall_now())});
    }
    void unregister_service(const std::string& name, Done<Reply> done) override {
        for (auto it = regs_.begin(); it != regs_.end(); ++it) {
            if (it->service.name == name) {
                regs_.erase(it);
                return done(Reply{kResultOk, "unregistered", nullptr});
            }
        }
        done(Reply{kResultNotFound, "not found", nullptr});
    }
    void transactions(std::size_t, Done<json> done) override {
        done(json{{"transactions", json::array()}, {"total", 0}});
    }
    void stats(Done<json> done) override { done(json{{"requests", 0}}); }
    void reset_stats(std::function<void()> done) override { done(); }
    void reload_config(Done<Reply> done) override { done(Reply{kResultOk, "reloaded", nullptr}); }
    WallClock::time_point wall_now() override { return WallClock::time_point{}; }

  private:
    std::vector<Registration> regs_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    FakeBackend backend;
    for (Access a : {Access::none, Access::read, Access::admin}) {
        Peer peer;
        peer.uid = 1000;  // config-test only reads what uid 1000 could
        peer.access = a;
        // The fake backend answers at once: exactly one answer, now.
        int answers = 0;
        Handled h;
        handle_control_line(text, peer, backend, [&](Handled got) {
            ++answers;
            h = std::move(got);
        });
        if (answers != 1) {
            std::abort();
        }
        if (h.response.empty() || h.response.back() != '\n' ||
            h.response.find('\n') != h.response.size() - 1) {
            std::abort();  // exactly one line
        }
        json reply = json::parse(h.response, nullptr, false);
        if (reply.is_discarded() || !reply.contains("result") || reply["result"] != h.result) {
            std::abort();
        }
    }
    // The same bytes as a line from an on-demand acceptor's channel.
    if (auto m = parse_channel_line(text)) {
        if (m->port == 0 || m->error.size() > 200) {
            std::abort();
        }
    }
    StateLoad s = parse_state(text, WallClock::time_point{});
    if (!s.error) {
        // A state file that parses writes back to one that parses the same.
        StateLoad again = parse_state(state_text(s.registrations), WallClock::time_point{});
        if (again.error || again.registrations.size() != s.registrations.size()) {
            std::abort();
        }
    }
    return 0;
}
