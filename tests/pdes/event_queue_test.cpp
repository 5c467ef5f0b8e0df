#include "pdes/event_queue.hpp"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

namespace scalescope::pdes {
namespace {

/// Drives a queue with a mix of pushes and pops — monotone inserts (as the sequential engine
/// makes), inserts in the past (as rollbacks make), bursts of equal times — and checks every pop
/// against an ordered set of the same keys.
template <class Queue>
void check_against_reference(std::uint64_t seed, bool past_inserts) {
  std::mt19937_64 rng(seed);
  std::vector<Event> storage(20000);
  std::size_t used = 0;
  std::set<EventKey> reference;
  Queue q;
  SimTime now = 0;
  std::uint64_t seq = 0;
  auto push = [&](SimTime t) {
    Event& e = storage[used++];
    e.key = EventKey{t, static_cast<std::uint32_t>(rng() % 4), static_cast<LpId>(rng() % 64),
                     static_cast<LpId>(rng() % 64), static_cast<std::uint32_t>(seq++)};
    q.push(e.key, &e);
    reference.insert(e.key);
  };
  for (int i = 0; i < 200; ++i) push(static_cast<SimTime>(rng() % 1000));
  while (used < storage.size() - 10) {
    const auto r = rng() % 10;
    if (r < 4 && !reference.empty()) {
      ASSERT_EQ(q.size(), reference.size());
      const Event* e = q.pop();
      EXPECT_EQ(e->key, *reference.begin());
      now = e->key.time;
      reference.erase(reference.begin());
    } else if (r < 6) {
      for (int k = 0; k < 5; ++k) push(now);  // a burst at the current time
    } else if (r == 6 && past_inserts) {
      push(std::max<SimTime>(0, now - static_cast<SimTime>(rng() % 500)));
    } else {
      push(now + static_cast<SimTime>(rng() % (r == 9 ? 100000 : 300)));
    }
  }
  while (!reference.empty()) {
    EXPECT_EQ(q.pop()->key, *reference.begin());
    reference.erase(reference.begin());
  }
  EXPECT_TRUE(q.empty());
}

TEST(EventQueue, LadderQueuePopsInKeyOrder) {
  for (std::uint64_t seed : {1, 2, 3}) check_against_reference<LadderQueue<Event>>(seed, false);
}
TEST(EventQueue, LadderQueueHandlesInsertsInThePast) {
  for (std::uint64_t seed : {4, 5, 6}) check_against_reference<LadderQueue<Event>>(seed, true);
}
TEST(EventQueue, LadderQueuePeekShowsTheNextEventsInPopOrder) {
  // Engines prefetch from peek(k); it must show the events pop() returns next (or nothing).
  std::mt19937_64 rng(11);
  std::vector<Event> storage(3000);
  LadderQueue<Event> q;
  for (std::uint32_t i = 0; i < storage.size(); ++i) {
    // Many equal times (as a collective completing for all members), in random order.
    storage[i].key =
        EventKey{static_cast<SimTime>(rng() % 50), 0, static_cast<LpId>(rng() % 500), 0, i};
    q.push(storage[i].key, &storage[i]);
  }
  std::size_t seen = 0;
  while (!q.empty()) {
    q.top_key();  // fills the bottom
    std::vector<const Event*> ahead;
    for (std::size_t k = 0; q.peek(k) != nullptr; ++k) {
      EXPECT_EQ(q.peek(k)->key, q.peek(k)->item->key);
      ahead.push_back(q.peek(k)->item);
    }
    ASSERT_FALSE(ahead.empty());  // the top itself is in the bottom
    seen += ahead.size();
    for (const Event* e : ahead) EXPECT_EQ(q.pop(), e);
  }
  EXPECT_EQ(seen, storage.size());
}

TEST(EventKeyTest, SequenceNumbersStopAtTwoToTheThirtyTwo) {
  std::uint64_t counter = 0xFFFFFFFEull;
  EXPECT_EQ(next_sequence(counter, 3), 0xFFFFFFFEu);
  EXPECT_EQ(next_sequence(counter, 3), 0xFFFFFFFFu);
  EXPECT_THROW(next_sequence(counter, 3), ContractError);
}

TEST(EventQueue, HeapsPopInKeyOrder) {
  check_against_reference<KeyedMinHeap<Event>>(7, true);
  check_against_reference<QuaternaryTimeHeap<Event>>(8, true);
  check_against_reference<PairingHeap<Event>>(9, true);
}

}  // namespace
}  // namespace scalescope::pdes
