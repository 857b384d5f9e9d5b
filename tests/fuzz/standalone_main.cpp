// SPDX-License-Identifier: Apache-2.0
// Driver for fuzz targets in builds without libFuzzer (g++): runs every file
// given on the command line (or every file in a given directory), then a
// bounded number of deterministic mutations of them, through the target.
// Crashes and aborts fail the test; a libFuzzer build uses libFuzzer's main.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
    std::vector<std::vector<std::uint8_t>> corpus;
    long iterations = 20000;
    for (int a = 1; a < argc; ++a) {
        std::string arg = argv[a];
        if (arg.rfind("-runs=", 0) == 0) {
            iterations = std::strtol(arg.c_str() + 6, nullptr, 10);
            continue;
        }
        std::vector<std::filesystem::path> files;
        if (std::filesystem::is_directory(arg)) {
            for (const auto& e : std::filesystem::directory_iterator(arg)) {
                files.push_back(e.path());
            }
        } else {
            files.emplace_back(arg);
        }
        for (const auto& f : files) {
            std::ifstream in(f, std::ios::binary);
            corpus.emplace_back(std::istreambuf_iterator<char>(in),
                                std::istreambuf_iterator<char>());
        }
    }
    if (corpus.empty()) {
        corpus.emplace_back();
    }
    for (const auto& c : corpus) {
        LLVMFuzzerTestOneInput(c.data(), c.size());
    }
    std::mt19937_64 rng(0x5d9);
    for (long n = 0; n < iterations; ++n) {
        auto input = corpus[rng() % corpus.size()];
        int edits = 1 + static_cast<int>(rng() % 8);
        for (int e = 0; e < edits; ++e) {
            switch (rng() % 4) {
                case 0:
                    if (!input.empty())
                        input[rng() % input.size()] ^= std::uint8_t(1u << (rng() % 8));
                    break;
                case 1:
                    if (!input.empty())
                        input[rng() % input.size()] = static_cast<std::uint8_t>(rng());
                    break;
                case 2:
                    if (input.size() < 4096)
                        input.insert(input.begin() + static_cast<long>(rng() % (input.size() + 1)),
                                     static_cast<std::uint8_t>(rng()));
                    break;
                default:
                    if (!input.empty())
                        input.erase(input.begin() + static_cast<long>(rng() % input.size()));
                    break;
            }
        }
        LLVMFuzzerTestOneInput(input.data(), input.size());
    }
    std::printf("ran %zu corpus inputs and %ld mutations\n", corpus.size(), iterations);
    return 0;
}
