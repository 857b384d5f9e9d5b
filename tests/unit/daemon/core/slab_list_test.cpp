// SPDX-License-Identifier: Apache-2.0
// The index-linked list of the daemon's bounded tables: order after pushes
// at both ends and unlinks of the head, the tail and the middle, walked in
// both directions so that a broken prev or next link shows.
#include "daemon/core/slab_list.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace {

using pmd::kSlabNil;
using pmd::SlabList;

struct Node {
    int value = 0;
    std::uint32_t prev = kSlabNil;
    std::uint32_t next = kSlabNil;
};

// The values from head to tail; checks that walking back gives the reverse.
std::vector<int> walk(const SlabList& l, const std::vector<Node>& slab) {
    std::vector<int> forward;
    std::uint32_t last = kSlabNil;
    for (std::uint32_t i = l.head; i != kSlabNil; i = slab[i].next) {
        forward.push_back(slab[i].value);
        last = i;
    }
    EXPECT_EQ(last, l.tail);
    std::vector<int> back;
    for (std::uint32_t i = l.tail; i != kSlabNil; i = slab[i].prev) {
        back.insert(back.begin(), slab[i].value);
    }
    EXPECT_EQ(forward, back);
    return forward;
}

TEST(SlabList, PushesAtBothEndsAndUnlinksAnywhere) {
    std::vector<Node> slab(5);
    for (int i = 0; i < 5; ++i) {
        slab[static_cast<std::size_t>(i)].value = i;
    }
    SlabList l;
    EXPECT_TRUE(walk(l, slab).empty());
    l.push_back(slab, 0);
    l.push_back(slab, 1);
    l.push_front(slab, 2);
    l.push_back(slab, 3);
    l.push_front(slab, 4);
    EXPECT_EQ(walk(l, slab), (std::vector<int>{4, 2, 0, 1, 3}));
    l.unlink(slab, 0);  // the middle
    EXPECT_EQ(walk(l, slab), (std::vector<int>{4, 2, 1, 3}));
    EXPECT_EQ(slab[0].prev, kSlabNil);
    EXPECT_EQ(slab[0].next, kSlabNil);
    l.unlink(slab, 4);  // the head
    l.unlink(slab, 3);  // the tail
    EXPECT_EQ(walk(l, slab), (std::vector<int>{2, 1}));
    l.unlink(slab, 1);  // a move to the front, as an LRU touch does
    l.push_front(slab, 1);
    EXPECT_EQ(walk(l, slab), (std::vector<int>{1, 2}));
    l.unlink(slab, 1);
    l.unlink(slab, 2);
    EXPECT_EQ(l.head, kSlabNil);
    EXPECT_EQ(l.tail, kSlabNil);
    l.push_front(slab, 3);  // an emptied list takes nodes again
    EXPECT_EQ(walk(l, slab), (std::vector<int>{3}));
}

}  // namespace
