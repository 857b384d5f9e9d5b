// SPDX-License-Identifier: Apache-2.0
// sdp-pmd: the SDP Port Mapper Service Provider daemon
// (draft-pinkerton-iwarp-sdp, section 7).
//
// Runs in the foreground and never forks: it is meant to be started by
// systemd (or any supervisor) and logs to stderr with sd-daemon priorities.
//
// Exit codes: 0 clean stop, 1 bad configuration / bind failure / fatal
// error, 2 bad command line.
#include <boost/asio/io_context.hpp>
#include <boost/program_options.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <variant>

#include "daemon/config/config.hpp"
#include "daemon/io/log.hpp"
#include "daemon/io/server.hpp"

namespace po = boost::program_options;

namespace {

constexpr const char* kDefaultConfig = "/etc/sdp-pmd/sdp-pmd.yaml";

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

void usage(std::ostream& os, const po::options_description& desc) {
    os << "Usage: sdp-pmd [OPTIONS]\n"
          "SDP Port Mapper Service Provider (draft-pinkerton-iwarp-sdp section 7).\n"
          "Answers PMReq on UDP (default port 3935); runs in the foreground.\n\n"
       << desc
       << "\nSignals: SIGHUP reloads the config file, SIGTERM/SIGINT stop, SIGUSR1 logs "
          "counters.\n";
}

}  // namespace

int main(int argc, char** argv) {
    po::options_description desc("Options");
    // clang-format off
    desc.add_options()
        ("config,c", po::value<std::string>()->default_value(kDefaultConfig)->value_name("FILE"),
         "configuration file (YAML); if the default one does not exist, built-in "
         "defaults are used")
        ("foreground,f", "accepted for compatibility: sdp-pmd never forks")
        ("workers", po::value<std::string>()->value_name("N|auto"),
         "UDP worker shards, overriding `workers:` of the configuration file")
        ("check-config", "validate the configuration file and exit (0 valid, 1 invalid)")
        ("version,V", "print the version and exit")
        ("help,h", "print this help and exit");
    // clang-format on

    po::variables_map vm;
    try {
        po::positional_options_description none;  // no operands: reject them
        po::store(po::command_line_parser(argc, argv).options(desc).positional(none).run(), vm);
        po::notify(vm);
    } catch (const std::exception& e) {
        std::cerr << "sdp-pmd: " << e.what() << " (try 'sdp-pmd --help')\n";
        return kExitUsage;
    }
    if (vm.count("help")) {
        usage(std::cout, desc);
        return kExitOk;
    }
    if (vm.count("version")) {
        std::cout << "sdp-pmd " << SDPPM_VERSION << '\n';
        return kExitOk;
    }

    const std::string path = vm["config"].as<std::string>();
    const bool default_path = vm["config"].defaulted();
    const bool check_only = vm.count("check-config") > 0;

    try {
        pmd::Config config;
        std::error_code fec;
        const bool use_defaults = default_path && !std::filesystem::exists(path, fec);
        if (use_defaults) {
            config = pmd::Config::defaults();
        } else {
            pmd::ConfigResult loaded = pmd::load_config_file(path);
            if (const auto* e = std::get_if<pmd::ConfigError>(&loaded)) {
                if (check_only) {
                    std::cerr << e->to_string() << '\n';
                } else {
                    pmd::log::err(e->to_string());
                }
                return kExitFailure;
            }
            config = std::move(std::get<pmd::Config>(loaded));
        }
        if (vm.count("workers")) {
            const std::string text = vm["workers"].as<std::string>();
            auto n = pmd::parse_workers(text);
            if (!n) {
                std::cerr << "sdp-pmd: --workers: bad value '" << text << "' (expected 1 to "
                          << pmd::kMaxWorkers << " or auto)\n";
                return kExitUsage;
            }
            config.workers = *n;
            config.workers_from_command_line = true;
        }
        if (check_only) {
            if (use_defaults) {
                std::cout << path << ": not found; sdp-pmd would run on built-in defaults\n";
            } else {
                std::cout << path << ": OK, " << config.services.size() << " services\n";
            }
            return kExitOk;
        }

        pmd::log::logger().set_level(config.log_level);
        pmd::log::notice(std::string("sdp-pmd ") + SDPPM_VERSION + " starting");
        if (use_defaults) {
            pmd::log::notice("no config file " + path + ", running on built-in defaults");
        }

        boost::asio::io_context io(1);
        pmd::io::Server server(io, std::move(config), path, use_defaults);
        if (!server.bind()) {
            return kExitFailure;
        }
        server.start();
        io.run();
        return kExitOk;
    } catch (const std::exception& e) {
        pmd::log::err(std::string("fatal: ") + e.what());
        return kExitFailure;
    }
}
