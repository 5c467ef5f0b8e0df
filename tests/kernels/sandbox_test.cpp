// Hybrid runs: memoized measurement, sandbox durations in the replay, and the caching
// allocator model (docs/kernels.md "Sandbox ranks").
#include "kernels/sandbox.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "cost/kernel_signature.hpp"
#include "emu/emulation.hpp"
#include "workload/transformer_builder.hpp"

namespace scalescope::kernels {
namespace {

/// Every kernel takes 1 µs; counts its runs.
class FakeExecutor final : public Executor {
 public:
  std::string backend() const override { return "fake"; }
  std::string device() const override { return "fake device"; }
  std::string versions() const override { return "0"; }
  double op_scale() const override { return 1; }
  std::optional<Measurement> measure(const cost::KernelSig& sig) override {
    if (!sig.measurable()) return std::nullopt;
    ++runs;
    Measurement m;
    m.median_s = m.p10_s = m.p90_s = 1e-6;
    m.reps = 1;
    m.impl = "fake";
    return m;
  }
  int runs = 0;
};

graph::SlicedGraph small_graph() {
  workload::ModelSpec m;
  m.num_layers = 4;
  m.hidden_size = 512;
  m.num_attention_heads = 8;
  m.vocab_size = 1000;
  m.seq_length = 256;
  m.gated_linear_unit = true;
  workload::ParallelPlan p;
  p.tensor_model_parallel_size = 2;
  p.sequence_parallel = true;
  p.pipeline_model_parallel_size = 2;
  p.data_parallel_size = 2;
  workload::TrainingSpec t;
  t.global_batch_size = 8;
  return workload::build_graph(m, p, t);
}

/// Costs whose compute time depends on the kernel signature alone: 1 µs per measurable kernel
/// run (× the grouped repeat), 7 ns for the rest; communication 100 ns.
emu::Costs signature_costs() {
  emu::Costs c;
  c.compute = [](const graph::Op& op) -> SimTime {
    const cost::KernelSig s = cost::kernel_signature(op);
    return s.measurable() ? static_cast<SimTime>(std::llround(1000 * s.repeat)) : 7;
  };
  c.collective = [](graph::OpKind, double, const cost::CommShape&) -> SimTime { return 100; };
  c.p2p = [](double, bool) -> SimTime { return 100; };
  c.shape = [](const std::uint32_t* b, const std::uint32_t* e) {
    return cost::CommShape{static_cast<std::uint32_t>(e - b), 1, static_cast<std::uint32_t>(e - b)};
  };
  c.gpu = "test";
  c.peak_flops = 1e12;
  return c;
}

TEST(Sandbox, EachSignatureRunsOnceAndNeverAgain) {
  const graph::SlicedGraph g = small_graph();
  FakeExecutor exec;
  SandboxMeasurements m;
  const auto& prog = g.program_of(0);
  std::set<std::string> distinct;
  for (const auto& op : prog.ops)
    if (const auto s = cost::kernel_signature(op); s.measurable()) distinct.insert(s.key());
  EXPECT_EQ(measure_template(prog, exec, m), distinct.size());
  EXPECT_EQ(exec.runs, static_cast<int>(distinct.size()));
  EXPECT_EQ(measure_template(prog, exec, m), 0u);  // memoized
  EXPECT_EQ(exec.runs, static_cast<int>(distinct.size()));
  EXPECT_EQ(m.executions, distinct.size());
}

TEST(Sandbox, FixedDurationExecutorReproducesThePureReplayBitForBit) {
  // The pure replay's compute time is 1 µs per kernel run, the fake executor measures 1 µs: a
  // hybrid run with sandbox rank 0 (and, calibrated, its whole class) gives the same results.
  const graph::SlicedGraph g = small_graph();
  const emu::Costs costs = signature_costs();
  const emu::RunResults pure = emu::emulate(g, costs, emu::EmulationOptions{});
  FakeExecutor exec;
  SandboxMeasurements m;
  measure_template(g.program_of(0), exec, m);
  double measured = 0, total = 0;
  emu::EmulationOptions opt;
  opt.rank_durations[0] =
      sandbox_durations(g.program_of(0), as_profile(m), costs.compute, &measured, &total);
  opt.class_durations[g.rank_class[0]] = opt.rank_durations[0];
  EXPECT_GT(measured, 0);
  EXPECT_LE(measured, total);
  opt.rollback_check = true;  // every event also run in reverse: no kernel runs again
  const emu::RunResults hybrid = emu::emulate(g, costs, opt);
  EXPECT_EQ(exec.runs, static_cast<int>(m.by_signature.size()));
  ASSERT_EQ(pure.ranks.size(), hybrid.ranks.size());
  for (std::size_t r = 0; r < pure.ranks.size(); ++r) {
    EXPECT_EQ(pure.ranks[r].finish, hybrid.ranks[r].finish) << r;
    EXPECT_EQ(pure.ranks[r].compute, hybrid.ranks[r].compute) << r;
    EXPECT_EQ(pure.ranks[r].bubble, hybrid.ranks[r].bubble) << r;
  }
  // A slower device on the sandbox rank alone delays its pipeline: rank 0 computes longer.
  SandboxMeasurements slow = m;
  for (auto& [sig, e] : slow.by_signature) e.median_s = 2e-6;
  emu::EmulationOptions opt2;
  opt2.rank_durations[0] = sandbox_durations(g.program_of(0), as_profile(slow), costs.compute);
  const emu::RunResults slower = emu::emulate(g, costs, opt2);
  EXPECT_GT(slower.ranks[0].compute, pure.ranks[0].compute);
  EXPECT_EQ(slower.ranks[1].compute, pure.ranks[1].compute);
  EXPECT_GT(slower.summary.iteration_time, pure.summary.iteration_time);
}

TEST(CachingAllocator, RoundsPoolsSplitsAndReuses) {
  constexpr std::int64_t MiB = 1 << 20;
  CachingAllocator a;
  // 1000 B → 1024 B from a new 2 MiB small-pool segment.
  const auto x = a.allocate(1000);
  EXPECT_EQ(a.allocated(), 1024);
  EXPECT_EQ(a.reserved(), 2 * MiB);
  // 100 B → 512 B split off the same segment: nothing new reserved.
  const auto y = a.allocate(100);
  EXPECT_EQ(a.allocated(), 1536);
  EXPECT_EQ(a.reserved(), 2 * MiB);
  // 3 MiB (large, < 10 MiB) opens a 20 MiB segment; the 17 MiB rest stays free in it.
  const auto big = a.allocate(3 * MiB);
  EXPECT_EQ(a.reserved(), 22 * MiB);
  // 12 MiB + 1 B → 12 MiB + 512 B, best fit in that 17 MiB rest: still 22 MiB reserved.
  const auto huge = a.allocate(12 * MiB + 1);
  EXPECT_EQ(a.reserved(), 22 * MiB);
  EXPECT_EQ(a.allocated(), 1536 + 3 * MiB + 12 * MiB + 512);
  // The freed 3 MiB block serves 2 MiB whole (a 1 MiB rest is not split off in the large pool).
  a.release(big);
  const auto again = a.allocate(2 * MiB);
  EXPECT_EQ(a.allocated(), 1536 + 3 * MiB + 12 * MiB + 512);
  // Freeing everything merges each segment back into one block: 20 MiB then fits in place.
  a.release(again);
  a.release(x);
  a.release(y);
  a.release(huge);
  EXPECT_EQ(a.allocated(), 0);
  (void)a.allocate(20 * MiB);
  EXPECT_EQ(a.reserved(), 22 * MiB);
  // The 20 MiB segment is full: 12 MiB + 1 B now needs its own segment, rounded to 14 MiB.
  (void)a.allocate(12 * MiB + 1);
  EXPECT_EQ(a.reserved(), 36 * MiB);
  EXPECT_EQ(a.peak_reserved(), 36 * MiB);
  EXPECT_EQ(a.peak_allocated(), 20 * MiB + 12 * MiB + 512);
}

TEST(CachingAllocator, TemplateReplayReservesAtLeastWhatItAllocates) {
  const graph::SlicedGraph g = small_graph();
  for (const auto& prog : g.templates) {
    const AllocatorPeaks p = replay_allocator(prog);
    EXPECT_GE(p.allocated, prog.static_memory);
    EXPECT_GE(p.reserved, p.allocated);
  }
}

}  // namespace
}  // namespace scalescope::kernels
