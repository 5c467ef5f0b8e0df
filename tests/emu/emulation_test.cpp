#include "emu/emulation.hpp"

#include <gtest/gtest.h>

#include <set>

#include "emu/model_data.hpp"
#include "workload/moe.hpp"
#include "workload/transformer_builder.hpp"

namespace scalescope::emu {
namespace {

using workload::ModelSpec;
using workload::ParallelPlan;
using workload::TrainingSpec;

struct Job {
  ModelSpec m;
  ParallelPlan p;
  TrainingSpec t;
};

Job pipeline_job(std::int64_t pp, std::int64_t microbatches, workload::Schedule schedule) {
  Job j;
  j.m.num_layers = 2 * pp;
  j.m.hidden_size = 512;
  j.m.num_attention_heads = 8;
  j.m.vocab_size = 1000;
  j.m.seq_length = 256;
  j.p.pipeline_model_parallel_size = pp;
  j.p.data_parallel_size = 1;
  j.p.schedule = schedule;
  j.t.micro_batch_size = 1;
  j.t.global_batch_size = microbatches;
  return j;
}

/// Costs for the closed-form checks: every transformer-layer op costs 1 µs in the forward and
/// 2 µs in the backward; embedding, head, optimizer and all communication cost nothing.
Costs uniform_layer_costs() {
  Costs c;
  c.compute = [](const graph::Op& op) -> SimTime {
    if (op.layer == graph::kNoIndex) return 0;
    return op.phase == graph::Phase::Forward ? 1000 : 2000;
  };
  c.collective = [](graph::OpKind, double, const cost::CommShape&) -> SimTime { return 0; };
  c.p2p = [](double, bool) -> SimTime { return 0; };
  c.shape = [](const std::uint32_t* b, const std::uint32_t* e) {
    return cost::CommShape{static_cast<std::uint32_t>(e - b), 1, static_cast<std::uint32_t>(e - b)};
  };
  c.gpu = "test";
  c.peak_flops = 1e12;
  return c;
}

/// Per-stage forward and backward time of one micro-batch under uniform_layer_costs().
std::pair<SimTime, SimTime> stage_times(const graph::RankProgram& p, const Costs& c) {
  SimTime f = 0, b = 0;
  for (const graph::Op& op : p.ops)
    if (op.microbatch == 0 && !graph::is_communication(op.kind))
      (op.phase == graph::Phase::Forward ? f : b) += c.compute(op);
  return {f, b};
}

class PipelineClosedForm
    : public ::testing::TestWithParam<std::tuple<int, int, workload::Schedule>> {};

TEST_P(PipelineClosedForm, IterationTimeIsMPlusPMinusOneTimesStageTime) {
  // With p uniform stages, m micro-batches and free communication, both 1F1B and GPipe take
  // (m + p − 1)·(t_f + t_b): the first micro-batch needs p·t_f to reach the last stage, the
  // last stage then is busy for m·(t_f + t_b) minus the t_f already counted, and the last
  // gradient needs (p − 1)·t_b to get back (Narayanan et al. SC'21 §2.2).
  auto [p, m, schedule] = GetParam();
  Job j = pipeline_job(p, m, schedule);
  graph::SlicedGraph g = workload::build_graph(j.m, j.p, j.t);
  Costs c = uniform_layer_costs();
  auto [tf, tb] = stage_times(g.templates[0], c);
  ASSERT_EQ(stage_times(g.templates.back(), c), std::make_pair(tf, tb));  // uniform stages
  RunResults r = emulate(g, c, EmulationOptions{});
  // "Free" communication still takes the 1 ns minimum of a transfer (messages.hpp); the
  // critical path has 2·(m + p − 1) stage steps, each behind at most a blocking receive and a
  // blocking send, so it crosses fewer than 4·(m + p) transfers: the tolerance in ns.
  const double slack = 4.0 * (m + p);
  EXPECT_NEAR(static_cast<double>(r.summary.iteration_time),
              static_cast<double>((m + p - 1) * (tf + tb)), slack);
  // The bubble shows up as idle time waiting for peers, (p − 1)·(t_f + t_b) on every stage;
  // the transfers themselves (1 ns each) are the exposed pipeline communication.
  EXPECT_NEAR(static_cast<double>(r.ranks[0].bubble), static_cast<double>((p - 1) * (tf + tb)),
              slack);
  EXPECT_LE(static_cast<double>(r.ranks[0].exposed_pp + r.ranks[0].other_wait), slack);
  EXPECT_EQ(r.ranks[0].compute, m * (tf + tb));
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineClosedForm,
                         ::testing::Values(std::make_tuple(2, 2, workload::Schedule::OneFOneB),
                                           std::make_tuple(4, 8, workload::Schedule::OneFOneB),
                                           std::make_tuple(4, 3, workload::Schedule::OneFOneB),
                                           std::make_tuple(8, 16, workload::Schedule::OneFOneB),
                                           std::make_tuple(4, 8, workload::Schedule::GPipe),
                                           std::make_tuple(3, 5, workload::Schedule::GPipe)));

/// p stages of v model chunks, two layers per chunk, m micro-batches (interleaved 1F1B).
Job interleaved_job(int p, int v, int m, bool overlap_p2p) {
  Job j = pipeline_job(p, m, workload::Schedule::OneFOneB);
  j.m.num_layers = 2 * p * v;
  j.p.virtual_pipeline_model_parallel_size = v;
  j.p.overlap_p2p_comm = overlap_p2p;
  return j;
}

class InterleavedClosedForm : public ::testing::TestWithParam<std::tuple<int, int, int, bool>> {};

TEST_P(InterleavedClosedForm, BubbleIsPMinusOneOverVOfTheStageTime) {
  // Narayanan et al. SC'21 §2.2.2: with v model chunks per rank the pipeline fills and drains in
  // steps of one chunk, (t_f + t_b)/v, so the bubble is (p − 1)·(t_f + t_b)/v — a fraction
  // (p − 1)/(v·m) of the ideal m·(t_f + t_b) — and the iteration takes
  // (m + (p − 1)/v)·(t_f + t_b), t_f and t_b being a whole stage's (all its chunks') times.
  auto [p, v, m, overlap] = GetParam();
  const Job j = interleaved_job(p, v, m, overlap);
  graph::SlicedGraph g = workload::build_graph(j.m, j.p, j.t);
  Costs c = uniform_layer_costs();
  auto [tf, tb] = stage_times(g.templates[0], c);
  ASSERT_EQ(stage_times(g.templates.back(), c), std::make_pair(tf, tb));
  RunResults r = emulate(g, c, EmulationOptions{});
  // Transfers take the 1 ns minimum; the critical path crosses fewer than 4·(m·v + p) of them.
  const double slack = 4.0 * (m * v + p);
  const double bubble = static_cast<double>((p - 1) * (tf + tb)) / v;
  EXPECT_NEAR(static_cast<double>(r.summary.iteration_time),
              static_cast<double>(m * (tf + tb)) + bubble, slack);
  EXPECT_NEAR(static_cast<double>(r.ranks[0].bubble), bubble, slack);
  EXPECT_EQ(r.ranks[0].compute, m * (tf + tb));
}

INSTANTIATE_TEST_SUITE_P(
    Interleaved, InterleavedClosedForm,
    ::testing::Values(std::make_tuple(2, 2, 4, true), std::make_tuple(4, 2, 8, true),
                      std::make_tuple(4, 4, 8, true), std::make_tuple(2, 3, 6, true),
                      std::make_tuple(4, 2, 8, false), std::make_tuple(4, 2, 12, true)));

TEST(InterleavedBubble, FourStagesTwoChunksEightMicrobatchesByHand) {
  // Issue 36 item 5: the bubble of Megatron-Core's interleaved 1F1B at p = 4, v = 2, m = 8 with
  // zero-cost communication, derived by hand. 16 layers: each rank holds 4, 2 per chunk. Every
  // transformer-layer op costs 1 µs forward and 2 µs backward (uniform_layer_costs), so a
  // rank's forward of one micro-batch (both chunks) is t_f = 4·n_f µs and its backward
  // t_b = 8·n_b µs, n_f / n_b being a layer's forward / backward op counts; t = t_f + t_b.
  // Fill: rank k's first forward starts after ranks 0 … k − 1 ran their chunk-0 forwards of
  // micro-batch 0, k·t_f/v. Drain: rank k's last backward (chunk 0 of micro-batch 7) ends
  // (p − 1 − k)·t_b/v after rank p − 1's, and rank 0's ends the iteration. In between every
  // rank is busy, so the iteration takes m·t + (p − 1)·t/v (Narayanan et al. SC'21 §2.2.2)
  // and rank 0 idles (p − 1)·t/v = 3·t/2, the fraction (p − 1)/(v·m) = 3/16 of its compute
  // m·t. Rank k < p − 1 finishes k·t_b/v before rank 0 and so idles 3·t/2 − k·t_b/2; the last
  // rank waits at the end for the tied-embedding gradient all-reduce with rank 0 and idles
  // 3·t/2 too. Transfers take the 1 ns quantum (messages.hpp), fewer than 4·(m·v + p) = 80 of
  // them on any path, so the replay's figures equal the hand values once rounded down to µs.
  constexpr int p = 4, v = 2, m = 8;
  const Job j = interleaved_job(p, v, m, true);
  graph::SlicedGraph g = workload::build_graph(j.m, j.p, j.t);
  Costs c = uniform_layer_costs();
  SimTime n_f = 0, n_b = 0;  // one layer's forward / backward op counts, from rank 0's program
  for (const graph::Op& op : g.templates[0].ops)
    if (op.microbatch == 0 && op.layer == 0 && !graph::is_communication(op.kind))
      ++(op.phase == graph::Phase::Forward ? n_f : n_b);
  ASSERT_GT(n_f, 0);
  ASSERT_GT(n_b, 0);
  const SimTime tf = 4 * 1000 * n_f, tb = 4 * 2000 * n_b, t = tf + tb;  // ns
  ASSERT_EQ(stage_times(g.templates[0], c), std::make_pair(tf, tb));
  const RunResults r = emulate(g, c, EmulationOptions{});
  const auto us = [](SimTime ns) { return ns / 1000; };
  const SimTime idle0 = (p - 1) * t / v;
  EXPECT_EQ(idle0 * v * m, (p - 1) * (m * t));  // the fraction (p − 1)/(v·m) = 3/16
  EXPECT_EQ(us(r.summary.iteration_time), us(m * t + idle0));
  ASSERT_EQ(r.ranks.size(), static_cast<std::size_t>(p));
  for (int k = 0; k < p; ++k) {
    EXPECT_EQ(r.ranks[k].compute, m * t) << "rank " << k;
    // The pipeline idle (bubble + exposed PP, each transfer's 1 ns) by hand, as above.
    const SimTime idle = k == p - 1 ? idle0 : idle0 - k * tb / v;
    EXPECT_EQ(us(r.ranks[k].bubble + r.ranks[k].exposed_pp), us(idle)) << "rank " << k;
  }
}

TEST(CriticalPath, TwoStagePipelineByHand) {
  // 1F1B on 2 stages, 4 micro-batches, every transformer op 1 µs forward / 2 µs backward and
  // free communication (1 ns a transfer). Stage 1 (the last) is busy from the moment the first
  // micro-batch reaches it: stage 0's F1, a transfer, stage 1's F1 B1 F2 B2 F3 B3 F4 B4 back to
  // back (each of its forwards has its input before its previous backward ends), a transfer,
  // stage 0's B4. Between B_k and F_k+1 stage 1 runs Megatron's send_backward_recv_forward,
  // one exchange that takes 1 ns even when free: m − 1 = 3 more transfers on the path. So the
  // path is t_f + 4(t_f + t_b) + t_b of compute on ranks 0 and 1 and 2 + 3 = 5 pipeline
  // transfers of 1 ns; the iteration then ends with the tied-embedding gradient all-reduce of
  // the two stages (1 ns). The path tiles [0, iteration time].
  Job j = pipeline_job(2, 4, workload::Schedule::OneFOneB);
  graph::SlicedGraph g = workload::build_graph(j.m, j.p, j.t);
  Costs c = uniform_layer_costs();
  const auto [tf, tb] = stage_times(g.templates[0], c);
  const RunResults r = emulate(g, c, EmulationOptions{});
  const CriticalPath& p = r.critical_path;
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p.segments.front().start, 0);
  EXPECT_EQ(p.segments.back().end, r.summary.iteration_time);
  for (std::size_t i = 1; i < p.segments.size(); ++i)
    EXPECT_EQ(p.segments[i].start, p.segments[i - 1].end) << "segment " << i;
  EXPECT_EQ(p.totals[static_cast<int>(PathKind::Compute)], tf + 4 * (tf + tb) + tb);
  EXPECT_EQ(p.totals[static_cast<int>(PathKind::Pp)], 5);
  EXPECT_EQ(p.totals[static_cast<int>(PathKind::Embedding)], 1);
  EXPECT_EQ(r.summary.iteration_time, tf + 4 * (tf + tb) + tb + 5 + 1);
  EXPECT_EQ(p.segments.front().rank, 0u);
  EXPECT_EQ(p.segments.back().rank, 0u);
  std::set<std::uint32_t> ranks;
  for (const PathSegment& s : p.segments) ranks.insert(s.rank);
  EXPECT_EQ(ranks, (std::set<std::uint32_t>{0, 1}));
}

TEST(InterleavedDeferredSendWait, TwoStagesVp2ByHand) {
  // Megatron-Core's interleaved 1F1B with overlap_p2p_comm waits a backward send's handle one
  // step later (pp_post_backward waits the previous step's send_prev after posting this step's
  // transfers; the last steady one after the cool-down loop), a forward send's at once.
  // p = 2, v = 2, m = 2 (G = 2), one layer per chunk: per chunk F forward, B backward; every
  // transfer takes P once both ends are posted (rendezvous), everything else is free.
  // Virtual stages vs0 = r0 c0, vs1 = r1 c0, vs2 = r0 c1, vs3 = r1 c1. Rank 0 warms up all four
  // virtual micro-batches (w = 2·1 + 1·2 = 4); rank 1 does 2, then 2 steady steps, 2 cool-down.
  // By hand, with F > P and B ≥ P (stream order on each pair's stream included):
  //   r0 F(0,c0) 0..F, send → r1's first receive: F + P; r0 F(1,c0) and r1 F(0,c0) run
  //   F+P..2F+P, exchange until 2F+2P; r0 F(0,c1), r1 F(1,c0) until 3F+2P, exchange to 3F+3P;
  //   r0 F(1,c1) and r1 F(0,c1) until 4F+3P; r1 posts the receive of (1,c1) (done 4F+4P), runs
  //   B(0,c1) to 4F+3P+B and posts its send, which meets r0's posted receive: done 4F+4P+B.
  //   Deferred: r1 runs F(1,c1), B(1,c1) at once (4F+3P+B..5F+3P+2B); r0 runs B(0,c1) from
  //   4F+4P+B to 4F+4P+2B and exchanges with r1's step-1 transfers, posted at 5F+3P+2B
  //   (later, as F > P): done 5F+4P+2B. Both then run B(·,c0)/B(1,c1) to 5F+4P+3B, exchange
  //   to 5F+5P+3B, r1's B(1,c0) and r0's B(0,c0) end at 5F+5P+4B, r0 receives (1,c0)'s
  //   gradient at 5F+6P+4B and its last backward ends the iteration at 5F + 6P + 5B.
  //   Waiting at once (the old rule) holds r1's F(1,c1) until its send is done (4F+4P+B),
  //   which delays everything after by P: 5F + 7P + 5B.
  // With P = 0 this is the closed form (m + (p − 1)/v)·(t_f + t_b) = 2.5·(2F + 2B) above.
  Job j = pipeline_job(2, 2, workload::Schedule::OneFOneB);
  j.m.num_layers = 4;
  j.p.virtual_pipeline_model_parallel_size = 2;
  j.p.overlap_p2p_comm = true;
  graph::SlicedGraph g = workload::build_graph(j.m, j.p, j.t);
  Costs c = uniform_layer_costs();
  const SimTime P = 3000;
  c.p2p = [P](double, bool) -> SimTime { return P; };
  auto [tf, tb] = stage_times(g.templates[0], c);
  ASSERT_EQ(stage_times(g.templates.back(), c), std::make_pair(tf, tb));
  const SimTime F = tf / 2, B = tb / 2;  // per chunk
  ASSERT_GT(F, P);
  ASSERT_GE(B, P);
  RunResults r = emulate(g, c, EmulationOptions{});
  // Tolerance: the free collectives (tied-embedding all-reduce) take the 1 ns minimum.
  EXPECT_NEAR(static_cast<double>(r.summary.iteration_time),
              static_cast<double>(5 * F + 6 * P + 5 * B), 8.0);
}

class TpCommOverlap : public ::testing::TestWithParam<std::pair<SimTime, SimTime>> {};

TEST_P(TpCommOverlap, EachOverlappedPairSavesTheShorterOfGemmAndCollective) {
  // One layer, one micro-batch, TP 2 with sequence parallelism. GEMMs of the layer cost G, SP
  // all-gathers and reduce-scatters C, everything else nothing. Without overlap the forward
  // runs AG → QKV, out-proj → RS, AG → FC1, FC2 → RS one after another, and the backward runs
  // AG → dgrad for out-proj and FC2 (the column-parallel dgrad/wgrad overlap their collectives
  // either way). Under tp_comm_overlap each of these 6 pairs takes max(G, C) instead of G + C,
  // so the iteration is 6·min(G, C) shorter (hand calculation; the SM share an overlapped
  // GEMM gives up is the cost model's, not these test costs').
  const auto [gemm, coll] = GetParam();
  Job j = pipeline_job(1, 1, workload::Schedule::OneFOneB);
  j.m.num_layers = 1;
  j.p.tensor_model_parallel_size = 2;
  j.p.sequence_parallel = true;
  Costs c = uniform_layer_costs();
  c.compute = [gemm = gemm](const graph::Op& op) -> SimTime {
    return op.kind == graph::OpKind::Gemm && op.layer != graph::kNoIndex ? gemm : 0;
  };
  c.collective = [coll = coll](graph::OpKind k, double, const cost::CommShape&) -> SimTime {
    return k == graph::OpKind::AllReduce ? 0 : coll;
  };
  auto time = [&](bool overlap) {
    j.p.tp_comm_overlap = overlap;
    return emulate(workload::build_graph(j.m, j.p, j.t), c, EmulationOptions{})
        .summary.iteration_time;
  };
  EXPECT_NEAR(static_cast<double>(time(false) - time(true)),
              static_cast<double>(6 * std::min(gemm, coll)), 10.0);
}

INSTANTIATE_TEST_SUITE_P(GemmLongerOrShorter, TpCommOverlap,
                         ::testing::Values(std::make_pair(SimTime{10000}, SimTime{4000}),
                                           std::make_pair(SimTime{3000}, SimTime{5000})));

EmulationOptions options(bool coalesce, std::vector<std::uint32_t> trace) {
  EmulationOptions o;
  o.coalesce_local_ops = coalesce;
  o.trace_ranks = std::move(trace);
  return o;
}

/// A realistic mix: TP with SP, PP, DP with overlapped reduce-scatter, size-dependent costs.
Costs synthetic_costs() {
  Costs c = uniform_layer_costs();
  c.compute = [](const graph::Op& op) -> SimTime {
    return 500 + static_cast<SimTime>(op.flops / 1e5 + op.mem_bytes / 1e3);
  };
  c.collective = [](graph::OpKind k, double bytes, const cost::CommShape& s) -> SimTime {
    return 3000 +
           static_cast<SimTime>(bytes / 5e2) * (k == graph::OpKind::AllReduce ? 2 : 1) * s.nodes;
  };
  c.p2p = [](double bytes, bool same) -> SimTime {
    return 2000 + static_cast<SimTime>(bytes / (same ? 2e3 : 5e2));
  };
  c.shape = [](const std::uint32_t* b, const std::uint32_t* e) {
    const auto n = static_cast<std::uint32_t>(e - b);
    return cost::CommShape{n, (b[n - 1] / 4) - (b[0] / 4) + 1, std::min(n, 4u)};
  };
  return c;
}

Job mixed_job() {
  Job j = pipeline_job(2, 6, workload::Schedule::OneFOneB);
  j.m.num_query_groups = 4;
  j.m.gated_linear_unit = true;
  j.p.tensor_model_parallel_size = 2;
  j.p.data_parallel_size = 2;
  j.p.sequence_parallel = true;
  j.p.use_distributed_optimizer = true;
  j.p.overlap_grad_reduce = true;
  j.t.global_batch_size = 12;
  return j;
}

TEST(Emulation, CoalescedLocalOpsGiveTheSameResultsAsOpByOpReplay) {
  Job j = mixed_job();
  graph::SlicedGraph g = workload::build_graph(j.m, j.p, j.t);
  Costs c = synthetic_costs();
  EmulationOptions coalesced = options(true, {0, 7});
  EmulationOptions op_by_op = options(false, {0, 7});
  RunResults a = emulate(g, c, coalesced);
  RunResults b = emulate(g, c, op_by_op);
  EXPECT_EQ(a.summary.iteration_time, b.summary.iteration_time);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (std::size_t r = 0; r < a.ranks.size(); ++r) {
    EXPECT_EQ(a.ranks[r].finish, b.ranks[r].finish) << r;
    EXPECT_EQ(a.ranks[r].compute, b.ranks[r].compute) << r;
    EXPECT_EQ(a.ranks[r].exposed_tp, b.ranks[r].exposed_tp) << r;
    EXPECT_EQ(a.ranks[r].exposed_pp, b.ranks[r].exposed_pp) << r;
    EXPECT_EQ(a.ranks[r].bubble, b.ranks[r].bubble) << r;
    EXPECT_EQ(a.ranks[r].straggler_wait, b.ranks[r].straggler_wait) << r;
    EXPECT_EQ(a.ranks[r].exposed_embedding, b.ranks[r].exposed_embedding) << r;
    EXPECT_EQ(a.ranks[r].exposed_dp, b.ranks[r].exposed_dp) << r;
  }
  for (std::uint32_t r : {0u, 7u}) {
    ASSERT_EQ(a.timelines[r].size(), b.timelines[r].size());
    for (std::size_t i = 0; i < a.timelines[r].size(); ++i) {
      EXPECT_EQ(a.timelines[r][i].start, b.timelines[r][i].start);
      EXPECT_EQ(a.timelines[r][i].end, b.timelines[r][i].end);
    }
  }
  // Coalescing removes one event per compute op.
  EXPECT_LT(a.engine.events_committed, b.engine.events_committed);
}

TEST(Emulation, TimeBreakdownAddsUpAndEveryTracedOpIsRecorded) {
  Job j = mixed_job();
  graph::SlicedGraph g = workload::build_graph(j.m, j.p, j.t);
  RunResults r = emulate(g, synthetic_costs(), options(true, {0, 7}));
  for (const RankResult& x : r.ranks)
    EXPECT_EQ(x.finish, x.compute + x.exposed_tp + x.exposed_pp + x.exposed_dp +
                            x.exposed_embedding + x.exposed_cp + x.exposed_ep + x.bubble +
                            x.straggler_wait + x.host_wait + x.other_wait);
  EXPECT_EQ(r.timelines[0].size(), g.templates[0].size());
  EXPECT_EQ(r.timelines[7].size(), g.templates[1].size());
  for (const TimelineRecord& t : r.timelines[0]) EXPECT_LE(t.start, t.end);
  // TP communication is exposed (SP collectives sit on the critical path), and so is DP.
  EXPECT_GT(r.ranks[0].exposed_tp, 0);
  // Ranks of one class in a symmetric job finish together.
  EXPECT_EQ(r.ranks[0].finish, r.ranks[1].finish);
  EXPECT_EQ(r.summary.peak_memory_bytes, std::max(r.ranks[0].peak_memory, r.ranks[7].peak_memory));
}

TEST(Emulation, ExpectedEventCountIsExact) {
  // Per rank: START, and ARRIVE + COMPLETE per collective or transfer part; op-by-op replay adds
  // one OP_DONE per compute op (emulation.hpp). Progress reports divide by this count.
  Job j = mixed_job();
  graph::SlicedGraph g = workload::build_graph(j.m, j.p, j.t);
  for (bool coalesce : {true, false}) {
    RunResults r = emulate(g, synthetic_costs(), options(coalesce, {}));
    EXPECT_EQ(r.engine.events_committed, expected_events(g, coalesce));
  }
}

TEST(Emulation, WaitDepsAreTheOtherStreamDependenciesAndWakesTheirReverse) {
  Job j = mixed_job();
  graph::SlicedGraph g = workload::build_graph(j.m, j.p, j.t);
  for (const graph::RankProgram& p : g.templates) {
    const WaitDeps w = wait_deps(p);
    std::size_t same_stream = 0;
    std::vector<std::vector<std::uint32_t>> wakes(p.size());
    for (std::uint32_t i = 0; i < p.size(); ++i) {
      std::vector<std::uint32_t> expected;
      for (const std::uint32_t* d = p.deps_begin(i); d != p.deps_end(i); ++d)
        if (p.ops[*d].stream != p.ops[i].stream)
          expected.push_back(*d), wakes[*d].push_back(i);
        else
          ++same_stream;
      EXPECT_EQ(std::vector<std::uint32_t>(w.begin(i), w.end(i)), expected) << i;
    }
    for (std::uint32_t d = 0; d < p.size(); ++d)
      EXPECT_EQ(std::vector<std::uint32_t>(w.wakes.begin(d), w.wakes.end(d)), wakes[d]) << d;
    EXPECT_GT(same_stream, 0u);  // the filter has something to drop
  }
}

TEST(Emulation, RankStateIsOneCacheLinePlusAFinishTimePerOp) {
  // Untraced ranks keep an 8-byte finish time per op of their template; the object is 64 bytes.
  Job j = mixed_job();
  graph::SlicedGraph g = workload::build_graph(j.m, j.p, j.t);
  RunResults r = emulate(g, synthetic_costs(), options(true, {}));
  double bytes = 0;
  for (std::uint32_t rank = 0; rank < g.world_size; ++rank)
    bytes += 64.0 + 8.0 * static_cast<double>(g.program_of(rank).size());
  EXPECT_DOUBLE_EQ(r.engine.lp_bytes_per_rank, bytes / g.world_size);
}

TEST(Emulation, ResultsAreDeterministic) {
  Job j = mixed_job();
  graph::SlicedGraph g = workload::build_graph(j.m, j.p, j.t);
  RunResults a = emulate(g, synthetic_costs(), options(true, {3}));
  RunResults b = emulate(g, synthetic_costs(), options(true, {3}));
  EXPECT_EQ(a.engine.events_committed, b.engine.events_committed);
  for (std::size_t r = 0; r < a.ranks.size(); ++r) EXPECT_EQ(a.ranks[r].finish, b.ranks[r].finish);
}

TEST(Emulation, SkewedRouterMakesTheBusiestExpertsRankSetTheIterationTime) {
  // One pipeline stage of 4 ranks, EP 4 (2 of 8 experts each), top-2, 2 micro-batches. Costs:
  // the grouped expert GEMMs take 1 ns per 1000 FLOPs, every other compute op 1 µs, communication
  // free (1 ns minimum). Every all-to-all waits for the EP rank with the most token copies, so
  // the iteration grows by that rank's extra expert work: per layer and micro-batch the forward
  // FC1 + FC2 and the backward's dgrad + wgrad of both, 3·2·N·h·f·(2 + 1) FLOPs for N copies
  // (SwiGLU FC1 2f wide, FC2 f), N = EP·T·k·(its experts' share) against T·k balanced.
  Job j;
  j.m.num_layers = 2;
  j.m.hidden_size = 512;
  j.m.num_attention_heads = 8;
  j.m.vocab_size = 1000;
  j.m.seq_length = 256;
  j.m.gated_linear_unit = true;
  j.m.num_experts = 8;
  j.m.moe_router_topk = 2;
  j.m.moe_ffn_hidden_size = 1024;
  j.p.data_parallel_size = 4;
  j.p.expert_model_parallel_size = 4;
  j.t.global_batch_size = 8;
  Costs c = uniform_layer_costs();
  c.compute = [](const graph::Op& op) -> SimTime {
    if (op.name == graph::OpName::ExpertFc1Gemm || op.name == graph::OpName::ExpertFc2Gemm)
      return static_cast<SimTime>(std::llround(op.flops / 1000));
    return 1000;
  };
  const RunResults balanced = emulate(workload::build_graph(j.m, j.p, j.t), c, EmulationOptions{});
  j.t.moe_expert_load_skew = 1.0;
  j.t.moe_expert_load_seed = 5;
  const RunResults skewed = emulate(workload::build_graph(j.m, j.p, j.t), c, EmulationOptions{});
  const auto w = workload::expert_load_shares(8, 1.0, 5);
  std::uint32_t busiest = 0;
  for (std::uint32_t r = 1; r < 4; ++r)
    if (w[2 * r] + w[2 * r + 1] > w[2 * busiest] + w[2 * busiest + 1]) busiest = r;
  const double T = 256, k = 2, h = 512, f = 1024;
  const double extra_copies = 4 * T * k * (w[2 * busiest] + w[2 * busiest + 1]) - T * k;
  const double expected = 2 * 2 * 3 * 2 * extra_copies * h * f * 3 / 1000;  // layers · mbs · …
  const SimTime grown = skewed.summary.iteration_time - balanced.summary.iteration_time;
  // Rounding: each of the 2·2·4 expert GEMMs is rounded to 1 ns; the free collectives 1 ns.
  EXPECT_NEAR(static_cast<double>(grown), expected, 64) << "busiest EP rank " << busiest;
  // The busiest rank computes the most and never waits at an all-to-all for its peers: the
  // others' wait is a straggler wait (one stage: no pipeline bubble at all).
  for (std::uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(skewed.ranks[r].bubble, 0) << r;
    if (r == busiest) continue;
    EXPECT_GT(skewed.ranks[busiest].compute, skewed.ranks[r].compute);
    EXPECT_GT(skewed.ranks[r].straggler_wait + skewed.ranks[r].exposed_ep,
              skewed.ranks[busiest].straggler_wait + skewed.ranks[busiest].exposed_ep);
    EXPECT_GT(skewed.ranks[r].straggler_wait, 0) << r;
  }
}

/// Host issue (docs/engine.md "Host issue"): the finish time of a program whose ops all run on
/// the compute stream, by the host recurrence written out: the host issues op i at its prefix
/// sum H_i of issue times, or, after it synchronized on op s, at finish(s) + H_i - H_s; the GPU
/// starts op i at max(its issue, the previous op's finish).
SimTime host_recurrence(const graph::RankProgram& p, const Costs& c) {
  SimTime H = 0, finish = 0, offset = 0;
  for (const graph::Op& op : p.ops) {
    EXPECT_EQ(op.stream, graph::Stream::Compute);
    H += c.host(op);
    finish = std::max(finish, H + offset) + c.compute(op);
    if (op.host_sync) offset = finish - H;
  }
  return finish;
}

Job one_rank_moe() {
  Job j = pipeline_job(1, 3, workload::Schedule::OneFOneB);
  j.m.gated_linear_unit = true;
  j.m.num_experts = 4;
  j.m.moe_router_topk = 2;
  j.m.moe_ffn_hidden_size = 256;
  return j;
}

TEST(HostIssue, AHostSlowerThanTheGpuSetsThePaceOfTheProgram) {
  // One rank, no communication. Every op costs the host 3 µs; the layers' ops run 1 µs
  // forward, 2 µs backward on the GPU, the others 0. With no synchronization the host never
  // waits, so op i is issued at 3·(i + 1) µs and the GPU, faster than that, finishes each op
  // its own time after the host issued it: the last op (the optimizer, 0 µs) ends at 3·n µs.
  Job j = pipeline_job(1, 3, workload::Schedule::OneFOneB);
  const graph::SlicedGraph g = workload::build_graph(j.m, j.p, j.t);
  ASSERT_EQ(g.templates.size(), 1u);
  const graph::RankProgram& p = g.templates[0];
  Costs c = uniform_layer_costs();
  c.host = [](const graph::Op&) -> SimTime { return 3000; };
  const RunResults r = emulate(g, c, EmulationOptions{});
  EXPECT_EQ(p.ops.back().name, graph::OpName::OptimizerStep);
  EXPECT_EQ(r.summary.iteration_time, 3000 * static_cast<SimTime>(p.size()));
  // The GPU's idle time is the host's: what the ops did not fill of the iteration.
  SimTime busy = 0;
  for (const graph::Op& op : p.ops) busy += c.compute(op);
  EXPECT_EQ(r.ranks[0].compute, busy);
  EXPECT_EQ(r.ranks[0].host_wait, r.summary.iteration_time - busy);
}

TEST(HostIssue, ASynchronizationMakesTheHostWaitForTheGpuToDrain) {
  // One rank, MoE layers (4 experts, EP 1): each forward's permute is a host synchronization.
  // The host issues an op per 0.4 µs, faster than the GPU (1–2 µs per layer op), so without the
  // synchronizations it would run far ahead and the GPU never idle; with them, it waits for the
  // GPU to drain at each permute and the GPU then idles 0.4 µs while the next op is issued.
  const Job j = one_rank_moe();
  const graph::SlicedGraph g = workload::build_graph(j.m, j.p, j.t);
  ASSERT_EQ(g.templates.size(), 1u);
  const graph::RankProgram& p = g.templates[0];
  std::int64_t syncs = 0;
  for (const graph::Op& op : p.ops) syncs += op.host_sync;
  EXPECT_EQ(syncs, 2 * 3);  // a forward permute per MoE layer and micro-batch
  Costs c = uniform_layer_costs();
  c.host = [](const graph::Op&) -> SimTime { return 400; };
  const RunResults r = emulate(g, c, EmulationOptions{});
  EXPECT_EQ(r.summary.iteration_time, host_recurrence(p, c));
  SimTime busy = 0;
  for (const graph::Op& op : p.ops) busy += c.compute(op);
  // The first layer op waits for its own issue and the embedding's (0.8 µs: the embedding
  // costs the GPU nothing here), and after each synchronization the next op (an expert GEMM)
  // waits 0.4 µs: the GPU idles (2 + syncs) · 0.4 µs, all of it the host's.
  EXPECT_EQ(p.ops[0].name, graph::OpName::Embedding);
  EXPECT_EQ(p.ops[1].layer, 0);
  EXPECT_EQ(r.summary.iteration_time, busy + (2 + syncs) * 400);
  EXPECT_EQ(r.ranks[0].host_wait, (2 + syncs) * 400);
  // Without host costs the replay is the GPU's work alone.
  Costs free_host = uniform_layer_costs();
  EXPECT_EQ(emulate(g, free_host, EmulationOptions{}).summary.iteration_time, busy);
}

TEST(HostIssue, CoalescedOpByOpAndReversedReplaysAgreeWithTheHostModelled) {
  // The host's issue times read only finish times, so undoing an event restores them: the
  // coalesced and op-by-op replays of a job with TP, PP, DP and MoE synchronizations give
  // identical results, and so does one that reverses and redoes every event (rollback_check).
  Job j = mixed_job();
  j.m.num_experts = 4;
  j.m.moe_router_topk = 2;
  j.m.moe_ffn_hidden_size = 512;
  j.p.expert_model_parallel_size = 2;
  const graph::SlicedGraph g = workload::build_graph(j.m, j.p, j.t);
  Costs c = synthetic_costs();
  c.host = [](const graph::Op& op) -> SimTime { return 300 + 100 * (op.layer & 3); };
  const RunResults a = emulate(g, c, options(true, {0, 5}));
  const RunResults b = emulate(g, c, options(false, {0, 5}));
  EmulationOptions reversed = options(true, {0, 5});
  reversed.rollback_check = true;
  EXPECT_EQ(emulate(g, c, reversed).summary.iteration_time, a.summary.iteration_time);
  EXPECT_EQ(a.summary.iteration_time, b.summary.iteration_time);
  for (std::size_t r = 0; r < a.ranks.size(); ++r) {
    EXPECT_EQ(a.ranks[r].finish, b.ranks[r].finish) << "rank " << r;
    EXPECT_EQ(a.ranks[r].host_wait, b.ranks[r].host_wait) << "rank " << r;
    EXPECT_EQ(a.ranks[r].finish,
              a.ranks[r].compute + a.ranks[r].exposed_tp + a.ranks[r].exposed_pp +
                  a.ranks[r].exposed_dp + a.ranks[r].exposed_embedding + a.ranks[r].exposed_cp +
                  a.ranks[r].exposed_ep + a.ranks[r].bubble + a.ranks[r].straggler_wait +
                  a.ranks[r].host_wait + a.ranks[r].other_wait);
  }
  EXPECT_GT(a.summary.iteration_time,
            emulate(g, synthetic_costs(), options(true, {})).summary.iteration_time);
}

}  // namespace
}  // namespace scalescope::emu
