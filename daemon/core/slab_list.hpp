// SPDX-License-Identifier: Apache-2.0
// An intrusive doubly linked list threaded through a slab (a vector of nodes
// addressed by 32-bit index): unlink and push at either end in O(1), no
// allocation. The daemon's bounded tables keep their order with it: the
// per-source LRU of SourceTable (limiter.hpp) and the PMSP's transactions
// by PMAck deadline (pmsp.cpp). A node has `std::uint32_t prev, next`,
// kSlabNil when it is on no list.
#pragma once
#include <cstdint>
#include <vector>

namespace pmd {

inline constexpr std::uint32_t kSlabNil = 0xffffffffu;

struct SlabList {
    std::uint32_t head = kSlabNil;  // first (most recent for an LRU, oldest for a FIFO)
    std::uint32_t tail = kSlabNil;

    template <typename Node>
    void unlink(std::vector<Node>& slab, std::uint32_t i) {
        Node& n = slab[i];
        (n.prev == kSlabNil ? head : slab[n.prev].next) = n.next;
        (n.next == kSlabNil ? tail : slab[n.next].prev) = n.prev;
        n.prev = n.next = kSlabNil;
    }
    template <typename Node>
    void push_front(std::vector<Node>& slab, std::uint32_t i) {
        push(slab, i, head, tail, &Node::next, &Node::prev);
    }
    template <typename Node>
    void push_back(std::vector<Node>& slab, std::uint32_t i) {
        push(slab, i, tail, head, &Node::prev, &Node::next);
    }

  private:
    // Links i in at the end `end` (head or tail; `other` is the opposite
    // end): its `inward` link points at the old end node, its `outward`
    // link is nil.
    template <typename Node>
    static void push(std::vector<Node>& slab, std::uint32_t i, std::uint32_t& end,
                     std::uint32_t& other, std::uint32_t Node::*inward,
                     std::uint32_t Node::*outward) {
        Node& n = slab[i];
        n.*outward = kSlabNil;
        n.*inward = end;
        (end == kSlabNil ? other : slab[end].*outward) = i;
        end = i;
    }
};

}  // namespace pmd
