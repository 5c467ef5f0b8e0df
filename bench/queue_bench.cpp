// Pending-event queues on the classic hold model (Jones 1986): pop the minimum, push an event
// later by an exponential increment, at a constant queue size. Counter: hold operations/s.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "pdes/event_queue.hpp"

using namespace scalescope;
using namespace scalescope::pdes;

template <class Queue>
void BM_Hold(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::mt19937_64 rng(42);
  std::exponential_distribution<double> inc(1.0);
  std::vector<Event> events(n);
  Queue q;
  std::uint64_t seq = 0;
  for (Event& e : events) {
    e.key = EventKey{static_cast<SimTime>(inc(rng) * 1e6), 0, static_cast<LpId>(seq % 1024), 0,
                     static_cast<std::uint32_t>(seq)};
    ++seq;
    q.push(e.key, &e);
  }
  std::uint64_t ops = 0;
  for (auto _ : state) {
    for (int i = 0; i < 1024; ++i) {
      Event* e = q.pop();
      e->key.time += static_cast<SimTime>(inc(rng) * 1e6);
      e->key.seq = static_cast<std::uint32_t>(seq++);
      q.push(e->key, e);
    }
    ops += 1024;
  }
  state.counters["holds/s"] =
      benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kIsRate);
}
BENCHMARK_TEMPLATE(BM_Hold, KeyedMinHeap<Event>)->Arg(1 << 10)->Arg(1 << 15)->Arg(1 << 20);
BENCHMARK_TEMPLATE(BM_Hold, QuaternaryTimeHeap<Event>)->Arg(1 << 10)->Arg(1 << 15)->Arg(1 << 20);
BENCHMARK_TEMPLATE(BM_Hold, LadderQueue<Event>)->Arg(1 << 10)->Arg(1 << 15)->Arg(1 << 20);
BENCHMARK_TEMPLATE(BM_Hold, PairingHeap<Event>)->Arg(1 << 10)->Arg(1 << 15)->Arg(1 << 20);

BENCHMARK_MAIN();
