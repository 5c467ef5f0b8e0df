#include "pdes/sequential_engine.hpp"

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

namespace scalescope::pdes {
namespace {

struct Note {
  std::uint32_t hops = 0;
};

/// Records every event it sees; LP 0 fans out events with equal timestamps to test ordering.
class Recorder final : public LogicalProcess {
 public:
  explicit Recorder(std::vector<EventKey>* log) : log_(log) {}
  void init(Context& ctx) override {
    if (ctx.self() != 0) return;
    // Same time, different priorities and destinations: delivery must follow the key order.
    ctx.send(2, 5, 1, Note{0});
    ctx.send(1, 5, 1, Note{0});
    ctx.send(1, 5, 0, Note{0});
    ctx.send(1, 3, 9, Note{0});
    ctx.send(1, 5, 0, Note{1});  // same (time, prio, dst, src): seq decides
  }
  void forward(Event& e, Context& ctx) override {
    log_->push_back(e.key);
    if (e.as<Note>().hops == 1) ctx.send(ctx.self(), ctx.now(), 0, Note{2});
  }
  void reverse(Event&, Context&) override {}
  void commit(const Event&) override {}

 private:
  std::vector<EventKey>* log_;
};

TEST(SequentialEngine, DeliversInTotalKeyOrder) {
  std::vector<EventKey> log;
  Recorder a(&log), b(&log), c(&log);
  SequentialEngine engine({&a, &b, &c});
  EngineStats stats = engine.run();
  ASSERT_EQ(log.size(), 6u);
  EXPECT_EQ(stats.events_committed, 6u);
  for (std::size_t i = 1; i < log.size(); ++i) EXPECT_TRUE(log[i - 1] < log[i]) << i;
  // Expected order, derived from (time, priority, dst, src, seq):
  // t=3 → LP1; t=5 prio 0 → LP1 seq 2, LP1 seq 4; its child (t=5, prio 0, dst 1, src 1, seq 0);
  // t=5 prio 1 → LP1 then LP2.
  EXPECT_EQ(log[0].time, 3);
  EXPECT_EQ(std::tie(log[1].dst, log[1].src, log[1].seq), std::make_tuple(1u, 0u, 2ull));
  EXPECT_EQ(std::tie(log[2].dst, log[2].src, log[2].seq), std::make_tuple(1u, 0u, 4ull));
  EXPECT_EQ(std::tie(log[3].dst, log[3].src, log[3].seq), std::make_tuple(1u, 1u, 0ull));
  EXPECT_EQ(std::tie(log[4].priority, log[4].dst), std::make_tuple(1u, 1u));
  EXPECT_EQ(std::tie(log[5].priority, log[5].dst), std::make_tuple(1u, 2u));
  EXPECT_EQ(stats.end_time, 5);
}

TEST(SequentialEngine, StopsAtEndTime) {
  std::vector<EventKey> log;
  Recorder a(&log), b(&log), c(&log);
  SequentialEngine engine({&a, &b, &c});
  EngineStats stats = engine.run(4);
  EXPECT_EQ(stats.events_processed, 1u);  // only the t = 3 event is ≤ 4
}

TEST(EventPool, ReusesReleasedEvents) {
  EventPool pool(2);
  Event* a = pool.allocate();
  Event* b = pool.allocate();
  pool.release(a);
  EXPECT_EQ(pool.allocate(), a);
  EXPECT_NE(a, b);
  EXPECT_EQ(pool.capacity(), 2u);
}

}  // namespace
}  // namespace scalescope::pdes
