// torch.distributed.pipelining action tables (parallel.schedule: actions): reading PyTorch's
// CSV, the lowering of a compute-only table to the transfers PyTorch's runtime posts
// (schedules.py _prepare_schedule_with_comms at torch 2.11), the checks, and the order the
// builder runs.
#include "io/pipeline_actions.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "temp_dir_test.hpp"
#include "workload/transformer_builder.hpp"

namespace scalescope::io {
namespace {

using workload::PipeAction;

class PipelineActions : public TempDirTest {
 protected:
  std::string table(const std::string& text) {
    const std::string path = file("table.csv");
    std::ofstream(path) << text;
    return path;
  }
  static std::vector<std::string> names(const std::vector<workload::PipelineAction>& row) {
    std::vector<std::string> out;
    for (const auto& a : row) out.push_back(action_name(a));
    return out;
  }
  /// A small Llama-like model of `layers` layers, and a plan running the table at `path` on
  /// PP `pp` × VP `vpp` (DP 1) over `microbatches` micro-batches a run.
  static workload::ModelSpec model(std::int64_t layers) {
    workload::ModelSpec m;
    m.num_layers = layers;
    m.hidden_size = 1024;
    m.ffn_hidden_size = 3584;
    m.num_attention_heads = 16;
    m.num_query_groups = 4;
    m.vocab_size = 32000;
    m.seq_length = 1024;
    return m;
  }
  static workload::ParallelPlan plan(const std::string& path, std::int64_t pp, std::int64_t vpp,
                                     std::int64_t microbatches) {
    workload::ParallelPlan p;
    p.pipeline_model_parallel_size = pp;
    p.virtual_pipeline_model_parallel_size = vpp;
    p.data_parallel_size = 1;
    p.schedule = workload::Schedule::Actions;
    p.pipeline_actions =
        lower_pipeline_actions(read_pipeline_actions(path), pp, vpp, microbatches, path);
    return p;
  }
};

TEST_F(PipelineActions, ComputeOnlyTableGetsPyTorchsTransfers) {
  // PP 2, one stage a rank, two micro-batches, GPipe's order as pipeline_order writes it (rank
  // 1 idles one step). By hand through _prepare_schedule_with_comms: blanks dropped; each row
  // [UNSHARD, F0, F1, B0, B1, REDUCE_GRAD, RESHARD] (one stage: unsharded before its first
  // action, reduced after its second backward, resharded at the end). _add_send_recv, one step
  // per rank and round, rank 0 first: round 1 both UNSHARD; round 2 rank 0 runs 0F0, its
  // SEND_F0 and rank 1's RECV_F0, then rank 1 runs 1F0 (its receive is placed); round 3 the
  // same for micro-batch 1; round 4 rank 0's 0B0 waits (no RECV_B0 yet), rank 1 runs 1B0 with
  // SEND_B0 and places 0RECV_B0; round 5 rank 0 runs 0B0, rank 1 1B1 (placing 0RECV_B1);
  // round 6 rank 0 runs 0B1.
  const std::string path = table("0F0,0F1,0B0,0B1\n,1F0,1F1,1B0,1B1\n");
  const PipelineTable lowered = lower_pipeline_actions(read_pipeline_actions(path), 2, 1, 2, path);
  ASSERT_EQ(lowered.size(), 2u);
  EXPECT_EQ(names(lowered[0]), (std::vector<std::string>{"0F0", "0SEND_F0", "0F1", "0SEND_F1",
                                                         "0RECV_B0", "0B0", "0RECV_B1", "0B1"}));
  EXPECT_EQ(names(lowered[1]), (std::vector<std::string>{"1RECV_F0", "1F0", "1RECV_F1", "1F1",
                                                         "1B0", "1SEND_B0", "1B1", "1SEND_B1"}));
  // The lowered table with its transfers, written back as PyTorch writes pipeline_order_with
  // _comms (with its FSDP and reduction steps), is kept as it is.
  const std::string comms = table(
      "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD,0RESHARD\n"
      "1UNSHARD,1RECV_F0,1F0,1RECV_F1,1F1,1B0,1SEND_B0,1B1,1SEND_B1,1REDUCE_GRAD,1RESHARD\n");
  const PipelineTable again = lower_pipeline_actions(read_pipeline_actions(comms), 2, 1, 2, comms);
  EXPECT_EQ(names(again[0]), names(lowered[0]));
  EXPECT_EQ(names(again[1]), names(lowered[1]));
}

TEST_F(PipelineActions, BuilderRunsTheTablesOrder) {
  // ScheduleLoopedBFS at PP 2 × VP 2, two micro-batches, as its pipeline_order writes it
  // (_calculate_single_rank_operations: `rank` blanks, the rank's stages' forwards in order,
  // 2·(PP − 1 − rank) blanks, the backwards stages reversed and micro-batches reversed). Four
  // layers, one a virtual stage: rank 0 holds layers 0 (stage 0) and 2 (stage 2). Rank 0 runs
  // F(0, L0) F(1, L0) F(0, L2) F(1, L2) B(1, L2) B(0, L2) B(1, L0) B(0, L0). Per micro-batch:
  // stage 0's forward sends, stage 2's forward receives and sends (stage 3 follows), stage 2's
  // backward receives and sends, stage 0's backward receives: 3 sends and 3 receives, 6 each.
  const std::string path = table(
      "0F0,0F1,2F0,2F1,,,2B1,2B0,0B1,0B0\n"
      ",1F0,1F1,3F0,3F1,3B1,3B0,1B1,1B0\n");
  const workload::ModelSpec m = model(4);
  const workload::ParallelPlan p = plan(path, 2, 2, 2);
  workload::TrainingSpec t;
  t.micro_batch_size = 1;
  t.global_batch_size = 2;
  const graph::SlicedGraph g = workload::build_graph(m, p, t);
  std::vector<std::tuple<int, int, int>> order;
  int sends = 0, recvs = 0;
  for (const graph::Op& op : g.templates[0].ops) {
    if (op.kind == graph::OpKind::SendRecv) (op.name == graph::OpName::PpSend ? sends : recvs)++;
    if (op.layer == 0xFFFF || graph::is_communication(op.kind)) continue;
    if (op.phase != graph::Phase::Forward && op.phase != graph::Phase::Backward) continue;
    const std::tuple<int, int, int> k{op.microbatch, op.layer,
                                      op.phase == graph::Phase::Backward ? 1 : 0};
    if (order.empty() || order.back() != k) order.push_back(k);
  }
  const std::vector<std::tuple<int, int, int>> want{{0, 0, 0}, {1, 0, 0}, {0, 2, 0}, {1, 2, 0},
                                                    {1, 2, 1}, {0, 2, 1}, {1, 0, 1}, {0, 0, 1}};
  EXPECT_EQ(order, want);
  EXPECT_EQ(sends, 6);
  EXPECT_EQ(recvs, 6);
}

TEST_F(PipelineActions, SplitBackwardIssuesWeightGradientsAtTheirWAction) {
  // Zero bubble's split backward on one stage, two micro-batches: F0 F1 I0 I1 W0 W1. The I
  // actions run the backward without its weight-gradient GEMMs, which issue at their W
  // actions. A linear's weight gradient costs what its forward GEMM costs (2·m·n·k with the
  // same m, n, k), so each W run's GEMM FLOPs equal its micro-batch's forward GEMM FLOPs (the
  // layers' linears and the output layer; core attention is no GEMM), and the I runs hold the
  // rest of the backward: data gradients costing the forward's GEMMs again, and attention. The
  // order of (micro-batch, pass) runs is F0 F1 B0 B1 B0 B1.
  const std::string path = table("0F0,0F1,0I0,0I1,0W0,0W1\n");
  const workload::ModelSpec m = model(2);
  const workload::ParallelPlan p = plan(path, 1, 1, 2);
  workload::TrainingSpec t;
  t.micro_batch_size = 1;
  t.global_batch_size = 2;
  const graph::SlicedGraph g = workload::build_graph(m, p, t);
  struct Run {
    int mb, phase;
    double gemm_flops, all_flops;
  };
  std::vector<Run> runs;
  for (const graph::Op& op : g.templates[0].ops) {
    if (op.microbatch == graph::kNoIndex) continue;
    if (op.phase != graph::Phase::Forward && op.phase != graph::Phase::Backward) continue;
    const int phase = op.phase == graph::Phase::Backward ? 1 : 0;
    if (runs.empty() || runs.back().mb != op.microbatch || runs.back().phase != phase)
      runs.push_back({op.microbatch, phase, 0, 0});
    if (op.kind == graph::OpKind::Gemm) runs.back().gemm_flops += op.flops;
    runs.back().all_flops += op.flops;
  }
  ASSERT_EQ(runs.size(), 6u);
  const std::vector<std::pair<int, int>> want{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 1}, {1, 1}};
  for (std::size_t i = 0; i < 6; ++i)
    EXPECT_EQ(std::make_pair(runs[i].mb, runs[i].phase), want[i]) << i;
  EXPECT_GT(runs[0].gemm_flops, 0);
  EXPECT_EQ(runs[4].all_flops, runs[0].gemm_flops);  // W0: the weight gradients only
  EXPECT_EQ(runs[5].all_flops, runs[1].gemm_flops);
  // I0: the data gradients, which cost the forward's GEMMs too, and core attention's backward.
  EXPECT_EQ(runs[2].gemm_flops, runs[0].gemm_flops);
  EXPECT_GT(runs[2].all_flops, runs[2].gemm_flops);

  // Gradient accumulation runs the table twice (micro-batches 0-1, then 2-3): the second run
  // follows the first whole, its W actions included: F0 F1 B0 B1 B0 B1 F2 F3 B2 B3 B2 B3.
  t.global_batch_size = 4;
  t.gradient_accumulation_steps = 2;
  const graph::SlicedGraph twice = workload::build_graph(m, p, t);
  std::vector<std::pair<int, int>> order;
  for (const graph::Op& op : twice.templates[0].ops) {
    if (op.microbatch == graph::kNoIndex) continue;
    if (op.phase != graph::Phase::Forward && op.phase != graph::Phase::Backward) continue;
    const std::pair<int, int> k{op.microbatch, op.phase == graph::Phase::Backward ? 1 : 0};
    if (order.empty() || order.back() != k) order.push_back(k);
  }
  const std::vector<std::pair<int, int>> runs_twice{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 1}, {1, 1},
                                                    {2, 0}, {3, 0}, {2, 1}, {3, 1}, {2, 1}, {3, 1}};
  EXPECT_EQ(order, runs_twice);

  // With data parallelism the gradient reductions wait for the weight gradients: every DP
  // collective depends (through its dependencies) on the last op of the last W run, overlapped
  // with the backward or not (issue order alone would not hold a collective back: it runs on
  // its own stream).
  t.gradient_accumulation_steps = 1;  // DP 2: two micro-batches a replica
  for (const bool overlap : {true, false}) {
    workload::ParallelPlan dp = p;
    dp.data_parallel_size = 2;
    dp.overlap_grad_reduce = overlap;
    const graph::SlicedGraph g2 = workload::build_graph(m, dp, t);
    const graph::RankProgram& prog = g2.templates[0];
    std::uint32_t last_w = 0;  // the last backward op of micro-batch 1: W1's last GEMM
    for (std::uint32_t i = 0; i < prog.size(); ++i)
      if (prog.ops[i].phase == graph::Phase::Backward && prog.ops[i].microbatch == 1) last_w = i;
    ASSERT_EQ(prog.ops[last_w].kind, graph::OpKind::Gemm) << overlap;
    int reductions = 0;
    for (std::uint32_t i = 0; i < prog.size(); ++i) {
      if (prog.ops[i].role != graph::CommRole::Dp || !graph::is_communication(prog.ops[i].kind))
        continue;
      ++reductions;
      std::vector<char> seen(prog.size(), 0);
      std::vector<std::uint32_t> todo{i};
      while (!todo.empty()) {
        const std::uint32_t x = todo.back();
        todo.pop_back();
        for (const std::uint32_t* d = prog.deps_begin(x); d != prog.deps_end(x); ++d)
          if (!seen[*d]) {
            seen[*d] = 1;
            todo.push_back(*d);
          }
      }
      EXPECT_TRUE(seen[last_w]) << overlap << " reduction " << i;
    }
    EXPECT_GT(reductions, 0) << overlap;
  }
}

TEST_F(PipelineActions, BadTablesAreOneLineErrorsNamingTheRankAndAction) {
  struct Case {
    std::string csv;
    std::int64_t pp, vpp, mb;
    std::string words;
  };
  const std::vector<Case> cases{
      {"0F0,0B0\n", 2, 1, 1, "1 rows (pipeline ranks) but pipeline_model_parallel_size is 2"},
      {"0F0,0W0,0I0\n", 1, 1, 1, "rank 0 runs 0W0 before its input gradient (0I0)"},
      {"0F0,0I0\n", 1, 1, 1, "rank 0 never runs 0W0"},
      {"0F0,0I0,0B0,0W0\n", 1, 1, 1, "rank 0 runs both 0B0 and 0I0"},
      {"(0F1;1B0)OVERLAP_F_B\n", 1, 1, 1, "OVERLAP_F_B"},
      {"0F0,0X0\n", 1, 1, 1, "cell 2 '0X0': not an action"},
      {"0F0,0B0,1F0\n1F0,1B0\n", 2, 1, 1, "rank 0 runs 1F0, an action of rank 1"},
      {"0F0,0F0,0B0\n", 1, 1, 1, "rank 0 runs 0F0 twice"},
      {"0B0,0F0\n", 1, 1, 1, "rank 0 runs 0B0 before its forward"},
      {"0F0\n", 1, 1, 1, "rank 0 never runs 0B0"},
      {"0F0,0B0,0F1,0B1\n", 1, 1, 1, "0F1 but a run of the schedule has 1 micro-batches"},
      {"0F0,2F0,2B0,0B0\n1F0,1B0,3F0,3B0\n", 2, 2, 1,
       "the table cannot run to its end: rank 0 waits forever at 2B0"},
      {"0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1RECV_F0,1B0,1SEND_B0\n", 2, 1, 1,
       "rank 1 runs 1F0 without receiving its input first (1RECV_F0)"},
  };
  for (const Case& c : cases) {
    const std::string path = table(c.csv);
    try {
      (void)lower_pipeline_actions(read_pipeline_actions(path), c.pp, c.vpp, c.mb, path);
      ADD_FAILURE() << c.csv << " accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(c.words), std::string::npos) << what;
      EXPECT_NE(what.find(path), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace scalescope::io
