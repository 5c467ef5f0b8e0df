// PHOLD on the sequential engine (ROSS's PHOLD: mean 1.0, lookahead 0.1, one start event per
// LP). Arguments: total LPs, remote fraction in percent. Counters: committed events per second,
// rollbacks per event (always 0 here; the counter is shared with the optimistic runs' reports).
#include <benchmark/benchmark.h>

#include "pdes/phold.hpp"

using namespace scalescope;
using namespace scalescope::pdes;

namespace {

void BM_PholdSequential(benchmark::State& state) {
  PholdParams p;
  p.num_lps = static_cast<std::uint32_t>(state.range(0));
  p.start_events = 1;
  p.remote = static_cast<double>(state.range(1)) / 100.0;
  p.mean = phold_ticks(1.0, "mean");
  p.lookahead = phold_ticks(0.1, "lookahead");
  const SimTime end = phold_ticks(50.0, "end");
  double events = 0;
  for (auto _ : state) {
    PholdRun run = run_phold_sequential(p, end);
    events += static_cast<double>(run.stats.events_committed);
    benchmark::DoNotOptimize(run.checksum);
  }
  state.counters["events/s"] = benchmark::Counter(events, benchmark::Counter::kIsRate);
  state.counters["rollbacks/event"] = 0;
}
BENCHMARK(BM_PholdSequential)
    ->Args({1024, 25})
    ->Args({32768, 10})
    ->Args({32768, 25})
    ->Args({32768, 50})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
