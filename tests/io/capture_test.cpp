// Flint-style captures against the built-in builder (issue 11 parts 3–4): a Llama-style block
// captured from inputs/pytorch/llama.py with scripts/capture/capture.py, lowered with the TP plan,
// has the builder's GEMM FLOPs per layer and its TP all-reduces (without sequence parallelism).
// Lowerings of small hand-built graphs in capture_lowering_test.cpp.
#include "io/capture_h5.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <tuple>

#include "core/error.hpp"
#include "cost/cost_model.hpp"
#include "io/config.hpp"
#include "io/pipeline_actions.hpp"
#include "temp_dir_test.hpp"
#include "workload/transformer_builder.hpp"

namespace scalescope::io {
namespace {

/// Totals of one layer (layer 1, micro-batch 0 of a graph's first template, or a lowered block):
/// GEMM and attention FLOPs, and collectives' count and bytes by kind and role.
struct LayerTotals {
  double gemm = 0, attention = 0;
  std::map<std::pair<graph::OpKind, graph::CommRole>, std::pair<int, double>> comm;
  void add(const graph::Op& op) {
    if (op.kind == graph::OpKind::Gemm) gemm += op.flops;
    if (op.kind == graph::OpKind::Attention) attention += op.flops;
    if (graph::is_collective(op.kind)) {
      auto& [n, bytes] = comm[{op.kind, op.role}];
      ++n;
      bytes += op.comm_bytes;
    }
  }
  /// Count and bytes over the collectives of `kind` (any role) or of `role` (any kind).
  std::pair<int, double> of(std::optional<graph::OpKind> kind,
                            std::optional<graph::CommRole> role = std::nullopt) const {
    std::pair<int, double> t{0, 0.0};
    for (const auto& [key, v] : comm)
      if ((!kind || key.first == *kind) && (!role || key.second == *role)) {
        t.first += v.first;
        t.second += v.second;
      }
    return t;
  }
  static LayerTotals of_graph(const graph::SlicedGraph& g, std::size_t k = 0) {
    LayerTotals t;
    for (const auto& op : g.templates[k].ops)
      if (op.layer == 1 && op.microbatch == 0) t.add(op);
    return t;
  }
  static LayerTotals of_block(const workload::LoweredBlock& b) {
    LayerTotals t;
    for (const auto* ops : {&b.forward, &b.backward})
      for (const auto& op : *ops) t.add(op);
    return t;
  }
};

/// LowerOptions with context parallelism `cp` (its all-gather exchange or the ring) and expert
/// parallelism `ep`.
workload::LowerOptions options(std::int64_t cp, bool cp_all_gather, std::int64_t ep) {
  workload::LowerOptions o;
  o.cp = cp;
  o.cp_all_gather = cp_all_gather;
  o.ep = ep;
  return o;
}

class Capture : public TempDirTest {
 protected:
  /// The builder's description of the captured model (inputs/pytorch/llama.py at the sizes below).
  static workload::ModelSpec llama_spec() {
    workload::ModelSpec m;
    m.num_layers = 4;
    m.hidden_size = 1024;
    m.ffn_hidden_size = 2816;
    m.num_attention_heads = 8;
    m.num_query_groups = 2;
    m.vocab_size = 32000;
    m.seq_length = 512;
    m.gated_linear_unit = true;
    m.untie_embeddings = true;
    m.add_bias_linear = false;
    return m;
  }
  /// Captures llama.py:Transformer at h 1024, 8 heads, 2 KV heads, f 2816, s 512; false (and
  /// a loud skip by the caller) without PyTorch.
  bool capture(const std::string& out, std::int64_t seq = 512, const std::string& extra = "") {
    if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) return false;
    const std::string args = file("args.yaml");
    std::ofstream(args) << "{dim: 1024, n_layers: 4, n_heads: 8, n_kv_heads: 2, vocab_size: "
                           "32000, ffn_dim: 2816"
                        << extra << "}\n";
    const std::string cmd = fmt::format(
        "/usr/bin/python3 {0}/scripts/capture/capture.py {0}/inputs/pytorch/llama.py:Transformer "
        "--args {1} --seq {3} -o {2} >/dev/null",
        SCALESCOPE_SOURCE_DIR, args, out, seq);
    return std::system(cmd.c_str()) == 0;
  }
};

TEST_F(Capture, LlamaBlockMatchesTheBuilderPerLayer) {
  const std::string path = file("capture.h5");
  if (!capture(path)) GTEST_SKIP() << "SKIPPED LOUDLY: no PyTorch (scripts/setup.sh installs it)";
  const workload::Capture c = read_capture_h5(path);
  EXPECT_EQ(c.num_blocks, 4);
  EXPECT_EQ(c.seq, 512);
  workload::ModelSpec m = llama_spec();
  for (const std::int64_t tp : {1, 2, 4}) {
    SCOPED_TRACE(tp);
    const workload::LoweredBlock b = workload::lower_block(c, workload::llama_tp_plan(), tp);
    workload::ParallelPlan p;
    p.tensor_model_parallel_size = tp;
    p.data_parallel_size = 1;
    workload::TrainingSpec t;
    const graph::SlicedGraph g = workload::build_graph(m, p, t);
    double gemm = 0;
    int ar = 0;
    for (const auto& op : g.templates[0].ops) {
      if (op.layer != 1 || op.microbatch != 0) continue;
      if (op.kind == graph::OpKind::Gemm) gemm += op.flops;
      if (op.kind == graph::OpKind::AllReduce) ++ar;
    }
    // Linear GEMMs: identical (the goal: within 0.5 %).
    EXPECT_NEAR(b.linear_gemm_flops / gemm, 1.0, 0.005);
    // The attention's batched GEMMs the eager module runs: 2·2·(a/t)·s²·dh forward (the full
    // square: the eager mask is added, not skipped), twice that backward.
    EXPECT_DOUBLE_EQ(b.other_gemm_flops,
                     3 * 2 * 2 * (8.0 / static_cast<double>(tp)) * 512 * 512 * 128);
    // TP all-reduces without SP: after the out-projection and FC2 forward, on the input
    // gradients of QKV and FC1 backward — 4 per layer, as Megatron's.
    int captured_ar = 0;
    for (const auto* ops : {&b.forward, &b.backward})
      for (const auto& op : *ops) captured_ar += op.kind == graph::OpKind::AllReduce ? 1 : 0;
    EXPECT_EQ(captured_ar, tp > 1 ? 4 : 0);
    EXPECT_EQ(ar, tp > 1 ? 4 : 0);
    for (const auto& [op, count] : b.unknown_ops) ADD_FAILURE() << "unknown ATen op " << op;
    // Parameters per rank: the linear weights /t, the two RMSNorm weights whole.
    EXPECT_DOUBLE_EQ(
        b.params_on_rank,
        (1024.0 * (1024 + 2 * 256) + 1024.0 * 1024 + 3 * 1024.0 * 2816) / static_cast<double>(tp) +
            2 * 1024);
  }
}

// model.compile: inductor — the eager attention becomes one fused kernel per pass with flash
// attention's FLOPs, point-wise ops fuse into kernels that read and write each tensor once. The
// capture is taken at s = h = 1024, where only the weight read tells a dgrad from a wgrad.
TEST_F(Capture, SplitBackwardDefersTheCapturedWeightGradients) {
  // Zero bubble's split backward on a captured block (compiled), one stage, two micro-batches:
  // F0 F1 I0 I1 W0 W1. Each layer's W run holds exactly its weight-gradient GEMMs, which cost
  // what its forward GEMMs cost (the same 2·m·n·k per linear), and the layer runs go F0 F1 B0
  // B1 B0 B1 (the output layer's gradient, in the outer graph, stays with I).
  const std::string path = file("capture.h5");
  if (!capture(path)) GTEST_SKIP() << "SKIPPED LOUDLY: no PyTorch (scripts/setup.sh installs it)";
  const std::string table = file("zb.csv");
  std::ofstream(table) << "0F0,0F1,0I0,0I1,0W0,0W1\n";
  workload::ModelSpec m = llama_spec();
  m.capture = std::make_shared<const workload::Capture>(read_capture_h5(path));
  m.capture_compiled = true;
  workload::ParallelPlan p;
  p.data_parallel_size = 1;
  p.schedule = workload::Schedule::Actions;
  p.pipeline_actions = lower_pipeline_actions(read_pipeline_actions(table), 1, 1, 2, table);
  workload::TrainingSpec t;
  t.micro_batch_size = 1;
  t.global_batch_size = 2;
  const graph::SlicedGraph g = workload::build_graph(m, p, t);
  std::vector<std::tuple<int, int, double>> runs;  // micro-batch, backward, GEMM FLOPs of layer 0
  for (const graph::Op& op : g.templates[0].ops) {
    if (op.layer != 0 || op.microbatch == graph::kNoIndex) continue;
    if (op.phase != graph::Phase::Forward && op.phase != graph::Phase::Backward) continue;
    const int b = op.phase == graph::Phase::Backward ? 1 : 0;
    if (runs.empty() || std::get<0>(runs.back()) != op.microbatch || std::get<1>(runs.back()) != b)
      runs.emplace_back(op.microbatch, b, 0.0);
    if (op.kind == graph::OpKind::Gemm) std::get<2>(runs.back()) += op.flops;
  }
  ASSERT_EQ(runs.size(), 6u);
  const std::vector<std::pair<int, int>> order{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 1}, {1, 1}};
  for (std::size_t i = 0; i < 6; ++i)
    EXPECT_EQ(std::make_pair(std::get<0>(runs[i]), std::get<1>(runs[i])), order[i]) << i;
  EXPECT_GT(std::get<2>(runs[0]), 0);
  EXPECT_EQ(std::get<2>(runs[4]), std::get<2>(runs[0]));  // W0: the weight gradients
  EXPECT_EQ(std::get<2>(runs[2]), std::get<2>(runs[0]));  // I0: the data gradients
}

TEST_F(Capture, CompiledBlockFusesAttentionAndPointwiseKernels) {
  const std::string path = file("capture.h5");
  if (!capture(path, 1024, ", fused_projections: true"))
    GTEST_SKIP() << "SKIPPED LOUDLY: no PyTorch (scripts/setup.sh installs it)";
  const workload::Capture c = read_capture_h5(path);
  const double s = 1024, h = 1024, f = 2816, a = 8, dh = 128;
  // The fused projections' shapes: wqkv writes q + 2·kv = (8 + 2·2)·128, w13 writes 2·f, which
  // the down projection's f halves: gated (it read "not gated" from one column-wise linear).
  const workload::CaptureShapes shapes = workload::capture_shapes(c);
  EXPECT_EQ(shapes.query_groups, 2);
  EXPECT_EQ(shapes.ffn, 2816);
  EXPECT_EQ(shapes.gated, std::optional<bool>(true));
  for (const std::int64_t tp : {1, 2}) {
    SCOPED_TRACE(tp);
    const double t = static_cast<double>(tp);
    const workload::LoweredBlock b = workload::lower_block(c, workload::llama_tp_plan(), tp,
                                                           /*sp=*/false, /*compiled=*/true);
    std::vector<const graph::Op*> attention, gemms, pointwise_fwd, pointwise_bwd;
    for (const auto* ops : {&b.forward, &b.backward})
      for (const auto& op : *ops) {
        if (op.kind == graph::OpKind::Attention) attention.push_back(&op);
        if (op.kind == graph::OpKind::Gemm) gemms.push_back(&op);
        if (op.kind == graph::OpKind::Elementwise)
          (op.phase == graph::Phase::Forward ? pointwise_fwd : pointwise_bwd).push_back(&op);
      }
    // One attention kernel per pass; no batched GEMM left: wqkv, wo, w13, w2 forward, a dgrad
    // and a wgrad each backward.
    ASSERT_EQ(attention.size(), 2u);
    EXPECT_EQ(gemms.size(), 12u);
    // Causal flash attention: half of QKᵀ and PV's 2·2·(a/t)·s²·dh; backward 2.5× (MODELING
    // §1.1), the builder's fused model.
    const double fwd = 0.5 * 2 * 2 * (a / t) * s * s * dh;
    EXPECT_DOUBLE_EQ(attention[0]->flops, fwd);
    EXPECT_DOUBLE_EQ(attention[1]->flops, 2.5 * fwd);
    EXPECT_EQ(attention[0]->shape[0], static_cast<std::uint32_t>(a / t));
    EXPECT_EQ(attention[0]->shape[1], 1024u);
    EXPECT_EQ(attention[0]->shape[2], 128u);
    // The first forward kernel is attention_norm's RMSNorm: it reads x [s, h] and the weight and
    // writes the normalised x once (bf16); its fp32 statistics stay in the kernel, and the
    // backward recomputes them from x rather than keeping them.
    ASSERT_FALSE(pointwise_fwd.empty());
    EXPECT_DOUBLE_EQ(pointwise_fwd[0]->mem_bytes, 2 * (2 * s * h) + 2 * h);
    // The SwiGLU backward reads dH, gate and up [s, f/t] and writes their two gradients: 5
    // tensors. (With gate and up's dgrad output taken for a wgrad, dH would be read whole.)
    double swiglu = 0;
    for (const graph::Op* op : pointwise_bwd) swiglu = std::max(swiglu, op->mem_bytes);
    EXPECT_DOUBLE_EQ(swiglu, 5 * 2 * s * (f / t));
    // Eager, the same block runs one kernel per ATen op: many more, and no attention kernel.
    const workload::LoweredBlock e = workload::lower_block(c, workload::llama_tp_plan(), tp);
    EXPECT_GT(e.forward.size() + e.backward.size(), 3 * (b.forward.size() + b.backward.size()));
    EXPECT_LT(b.saved_bytes, e.saved_bytes);
    // Every collective follows its producer or the pass start; compute ops follow the chain.
    ASSERT_EQ(b.forward_after.size(), b.forward.size());
    ASSERT_EQ(b.backward_after.size(), b.backward.size());
    for (std::size_t k = 0; k < b.backward.size(); ++k) {
      const bool comm = b.backward[k].kind == graph::OpKind::AllReduce;
      EXPECT_EQ(b.backward_after[k] == workload::LoweredBlock::kChain, !comm) << k;
      if (b.backward_after[k] >= 0) {
        EXPECT_LT(b.backward_after[k], static_cast<std::int32_t>(k));
      }
      // The input-gradient all-reduce starts after its dgrad and a GEMM independent of it (the
      // wgrad) is listed between: they overlap, as in Megatron's backward.
      if (comm) {
        ASSERT_GE(b.backward_after[k], 0) << k;
        bool gemm_between = false;
        for (auto m = static_cast<std::size_t>(b.backward_after[k]) + 1; m < k; ++m)
          gemm_between = gemm_between || b.backward[m].kind == graph::OpKind::Gemm;
        EXPECT_TRUE(gemm_between) << k;
      }
    }
  }
}

// Context parallelism (compiled): at TP 2 · CP 2 with SP the captured block has the builder's
// GEMM and attention FLOPs per layer, its key/value exchange (an all-gather forward, an
// all-gather and a reduce-scatter backward, of the whole sequence's K and V) and its TP
// collectives with this rank's half of the tokens.
TEST_F(Capture, ContextParallelMatchesTheBuilder) {
  const std::string path = file("capture.h5");
  if (!capture(path, 1024, ", fused_projections: true"))
    GTEST_SKIP() << "SKIPPED LOUDLY: no PyTorch (scripts/setup.sh installs it)";
  const workload::Capture c = read_capture_h5(path);
  workload::ModelSpec m = llama_spec();
  m.seq_length = 1024;
  workload::ParallelPlan p;
  p.tensor_model_parallel_size = 2;
  p.context_parallel_size = 2;
  p.data_parallel_size = 1;
  p.sequence_parallel = true;
  const LayerTotals builder =
      LayerTotals::of_graph(workload::build_graph(m, p, workload::TrainingSpec{}));
  const workload::LoweredBlock b =
      workload::lower_block(c, workload::llama_tp_plan(), 2, true, true, options(2, false, 1));
  const LayerTotals captured = LayerTotals::of_block(b);
  EXPECT_NEAR(captured.gemm / builder.gemm, 1.0, 1e-12);
  EXPECT_NEAR(captured.attention / builder.attention, 1.0, 1e-12);
  // The same key/value gathers; PyTorch's ring sends the dK, dV blocks in fp32, twice
  // Transformer Engine's bf16 bytes.
  for (const graph::OpKind kind : {graph::OpKind::AllGather, graph::OpKind::ReduceScatter}) {
    const auto kv = captured.of(kind, graph::CommRole::Cp);
    const auto te = builder.of(kind, graph::CommRole::Cp);
    EXPECT_EQ(kv.first, te.first);
    EXPECT_NEAR(kv.second / te.second, kind == graph::OpKind::AllGather ? 1.0 : 2.0, 1e-12);
  }
  EXPECT_EQ(captured.of(std::nullopt, graph::CommRole::Cp).first, 3);
  // PyTorch's ring (torch/distributed/tensor/experimental/_attention.py, ring_attention.hpp):
  // each pass runs c = 2 steps, one op of the attention's FLOPs, then one op of their merges.
  // This rank's output: 4 heads × L = 512 queries × 128 = 262,144 elements; one K plus V block:
  // 2 × 1 head × 512 × 128 = 131,072. Forward: the fp32 copy of step 0 (6 B per element), the
  // merge of step 1 (38 B, or 19 + 8 B on half-query steps: 32.5 on average), the cast back
  // (6 B). Backward: step 0 adds dq (10 B per element) and dK, dV (18 B); step 1 at the average
  // of full-query (10 B; 13 B) and half-query (13 B; 18 B) steps; the casts (6 B per element of
  // both).
  const double o = 4 * 512 * 128, kv = 2 * 512 * 128;
  std::vector<double> forward, backward;
  int steps = 0;
  for (const auto* ops : {&b.forward, &b.backward})
    for (const graph::Op& op : *ops) {
      steps += op.kind == graph::OpKind::Attention;
      if (op.name == graph::OpName::CpMerge)
        (ops == &b.forward ? forward : backward).push_back(op.mem_bytes);
    }
  EXPECT_EQ(steps, 2);
  EXPECT_EQ(forward, (std::vector<double>{6 * o + 32.5 * o + 6 * o}));
  EXPECT_EQ(backward,
            (std::vector<double>{(10 * o + 18 * kv) + (11.5 * o + 15.5 * kv) + 6 * (o + kv)}));
  ASSERT_EQ(b.attention_forward.size(), 1u);
  EXPECT_EQ(b.attention_forward[0].size(), 2u);  // the steps and their merges
  // The kernel: cuDNN's fused attention unless PyTorch's flash backend (FlashAttention-2) runs it.
  workload::LowerOptions flash = options(2, false, 1);
  flash.sdpa_flash = true;
  for (const auto& [opts, impl] : {std::pair{options(2, false, 1), graph::AttentionImpl::Fused},
                                   std::pair{flash, graph::AttentionImpl::Flash2}}) {
    const workload::LoweredBlock lowered =
        workload::lower_block(c, workload::llama_tp_plan(), 2, true, true, opts);
    for (const auto* ops : {&lowered.forward, &lowered.backward})
      for (const graph::Op& op : *ops)
        if (op.kind == graph::OpKind::Attention) {
          EXPECT_EQ(op.attention_impl, impl);
        }
  }
  EXPECT_NEAR(captured.of(std::nullopt, graph::CommRole::Tp).second /
                  builder.of(std::nullopt, graph::CommRole::Tp).second,
              1.0, 1e-12);
  // Eager has no fused attention to run the exchange around.
  EXPECT_THROW(
      workload::lower_block(c, workload::llama_tp_plan(), 2, true, false, options(2, false, 1)),
      InputError);
}

// Per-op checkpointing of an eager capture (torchtitan's default: no compile, selective_ac_option
// op), same block and layout as below: torch.utils.checkpoint caches the output of every op on the
// save list — the odd-numbered forward mms wq (1), wv (3), w1 (5), w2 (7), and the reduce-scatter
// shards of wo and w2 — and keeps the block input; its recompute runs the forward again but for
// those: every forward kernel but the 4 cached mms, every all-gather, no reduce-scatter.
TEST_F(Capture, EagerPerOpCheckpointingRecomputesAllButTheCachedOps) {
  const std::string path = file("capture.h5");
  if (!capture(path)) GTEST_SKIP() << "SKIPPED LOUDLY: no PyTorch (scripts/setup.sh installs it)";
  const workload::Capture c = read_capture_h5(path);
  const workload::LoweredBlock b =
      workload::lower_block(c, workload::llama_tp_plan(), 2, true, false);
  // By hand, bf16, s = 512, h = 1024, 8 heads of 128 (2 for k and v), f = 2816, t = 2:
  const double x = 512 / 2 * 1024 * 2.0;                                 // the block input
  const double wq = 512 * (1024 / 2) * 2.0, wv = 512 * (256 / 2) * 2.0;  // colwise outputs
  const double w1 = 512 * (2816 / 2) * 2.0;
  const double w2 = 512 * 1024 * 2.0;             // rowwise: the [s, h] partial sums
  const double scattered = 512 / 2 * 1024 * 2.0;  // wo's and w2's shards, each
  EXPECT_DOUBLE_EQ(b.op_sac_saved_bytes, x + wq + wv + w1 + w2 + 2 * scattered);
  std::map<graph::OpKind, int> forward, again;
  for (const graph::Op& op : b.forward) ++forward[op.kind];
  for (const graph::Op& op : b.op_sac_recompute) ++again[op.kind];
  EXPECT_EQ(again[graph::OpKind::Gemm], forward[graph::OpKind::Gemm] - 4);
  EXPECT_EQ(again[graph::OpKind::Elementwise], forward[graph::OpKind::Elementwise]);
  EXPECT_EQ(again[graph::OpKind::AllGather], forward[graph::OpKind::AllGather]);
  EXPECT_EQ(forward[graph::OpKind::AllGather], 2);  // the two norm outputs (SP)
  EXPECT_EQ(again[graph::OpKind::ReduceScatter], 0);
  EXPECT_EQ(b.op_sac_recompute.size(), b.op_sac_recompute_after.size());
}

// Per-op selective checkpointing (torchtitan's `selective_ac_option: op`), compiled, at TP 2 with
// SP on the Llama block with separate projections. Forward mms in order: wq 1, wk 2, wv 3, wo 4,
// w1 5, w3 6, w2 7; the odd ones are kept, with the attention's output and the reduce-scatter
// results. What the backward needs otherwise is recomputed: wk (k feeds the attention's
// backward) and w3 (SwiGLU's); wo and w2 are not needed (their scattered results are kept).
TEST_F(Capture, PerOpCheckpointingKeepsOddMatmulsAttentionAndScatters) {
  const std::string path = file("capture.h5");
  if (!capture(path)) GTEST_SKIP() << "SKIPPED LOUDLY: no PyTorch (scripts/setup.sh installs it)";
  const workload::Capture c = read_capture_h5(path);
  const workload::LoweredBlock b =
      workload::lower_block(c, workload::llama_tp_plan(), 2, true, true);
  // By hand, bf16, s = 512, h = 1024, 8 heads of 128 (2 for k and v), f = 2816, t = 2:
  const double x = 512 / 2 * 1024 * 2.0;  // the block input, split along the sequence
  const double wq = 512 * (1024 / 2) * 2.0, wv = 512 * (256 / 2) * 2.0;
  const double attention = 4 * 512 * 128 * 2.0, lse = 4.0 * 4 * 512;  // 4 heads on this rank
  const double scattered = 512 / 2 * 1024 * 2.0;                      // wo's and w2's, each
  const double w1 = 512 * (2816 / 2) * 2.0;
  EXPECT_DOUBLE_EQ(b.op_sac_saved_bytes, x + wq + wv + attention + lse + 2 * scattered + w1);
  double flops = 0;
  int gemms = 0, gathers = 0;
  for (const graph::Op& op : b.op_sac_recompute) {
    gemms += op.kind == graph::OpKind::Gemm;
    gathers += op.kind == graph::OpKind::AllGather;
    if (op.kind == graph::OpKind::Gemm) flops += op.flops;
  }
  EXPECT_EQ(gemms, 2);
  EXPECT_EQ(gathers, 2);  // their gathered inputs (the two norms' outputs), gathered again
  EXPECT_DOUBLE_EQ(flops, 2.0 * 512 * (256 / 2) * 1024 + 2.0 * 512 * (2816 / 2) * 1024);
}

// Recomputation of a captured layer, as the builder does it: full — the first forward keeps only
// the layer input and the whole forward runs again (phase Recompute) before the backward;
// selective (compiled) — the fused attention runs again before its backward and keeps no
// log-sum-exp.
TEST_F(Capture, RecomputationAsTheBuilderDoesIt) {
  const std::string path = file("capture.h5");
  if (!capture(path, 1024, ", fused_projections: true"))
    GTEST_SKIP() << "SKIPPED LOUDLY: no PyTorch (scripts/setup.sh installs it)";
  workload::ModelSpec m = llama_spec();
  m.seq_length = 1024;
  m.capture = std::make_shared<const workload::Capture>(read_capture_h5(path));
  m.capture_plan = workload::llama_tp_plan();
  workload::ParallelPlan p;
  p.tensor_model_parallel_size = 2;
  p.data_parallel_size = 1;
  const workload::LoweredBlock b =
      workload::lower_block(*m.capture, m.capture_plan, 2, false, true);
  ASSERT_EQ(b.attention_forward.size(), 1u);
  // Per phase of layer 1, micro-batch 0: op counts, attention FLOPs, and the bytes the layer's
  // first forward op allocates.
  struct Layer {
    std::map<graph::Phase, int> ops;
    std::map<graph::Phase, double> attention;
    std::int64_t first_alloc = -1;
  };
  const auto layer = [&](workload::Recompute r) {
    p.recompute = r;
    const graph::SlicedGraph g = workload::build_graph(m, p, workload::TrainingSpec{});
    Layer x;
    for (const auto& op : g.templates[0].ops) {
      if (op.layer != 1 || op.microbatch != 0) continue;
      if (x.first_alloc < 0) x.first_alloc = op.mem_alloc;
      ++x.ops[op.phase];
      if (op.kind == graph::OpKind::Attention) x.attention[op.phase] += op.flops;
    }
    return x;
  };
  const int fwd = static_cast<int>(b.forward.size()), bwd = static_cast<int>(b.backward.size());
  const Layer none = layer(workload::Recompute::None);
  EXPECT_EQ(none.ops.at(graph::Phase::Forward), fwd);
  EXPECT_EQ(none.ops.at(graph::Phase::Backward), bwd);
  EXPECT_EQ(none.first_alloc, static_cast<std::int64_t>(b.saved_bytes));
  const Layer full = layer(workload::Recompute::Full);
  EXPECT_EQ(full.ops.at(graph::Phase::Forward), fwd);
  EXPECT_EQ(full.ops.at(graph::Phase::Recompute), fwd);
  EXPECT_EQ(full.first_alloc, static_cast<std::int64_t>(2 * 1024 * 1024));  // [s, h] bf16
  const Layer selective = layer(workload::Recompute::Selective);
  EXPECT_EQ(selective.ops.at(graph::Phase::Recompute), 1);
  EXPECT_DOUBLE_EQ(selective.attention.at(graph::Phase::Recompute),
                   b.attention_forward[0][0].flops);
  // Without the log-sum-exp: 4 bytes per query row of the rank's a/t heads.
  EXPECT_EQ(selective.first_alloc, static_cast<std::int64_t>(b.saved_bytes - 4.0 * (8 / 2) * 1024));
}

// Expert parallelism: the captured Mixtral block (4 experts, top-2) at TP 2 · EP 2 with SP has,
// per layer, the builder's GEMM and attention FLOPs, its all-to-all dispatch and combine (two per
// pass, k·T_l·h bf16 each) and its TP / ETP all-gather and reduce-scatter bytes.
TEST_F(Capture, ExpertParallelMatchesTheBuilder) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "SKIPPED LOUDLY: no PyTorch (scripts/setup.sh installs it)";
  const std::string args = file("mixtral.yaml"), path = file("mixtral.h5");
  std::ofstream(args) << "{dim: 1024, n_layers: 4, n_heads: 8, n_kv_heads: 2, vocab_size: 32000, "
                         "ffn_dim: 2048, num_experts: 4, top_k: 2}\n";
  ASSERT_EQ(std::system(fmt::format("/usr/bin/python3 {0}/scripts/capture/capture.py "
                                    "{0}/inputs/pytorch/mixtral.py:Mixtral --args {1} --seq 512 "
                                    "-o {2} >/dev/null",
                                    SCALESCOPE_SOURCE_DIR, args, path)
                            .c_str()),
            0);
  const workload::Capture c = read_capture_h5(path);
  EXPECT_EQ(workload::capture_experts(c), 4);
  workload::ModelSpec m = llama_spec();
  m.ffn_hidden_size = 2048;
  m.num_experts = 4;
  m.moe_router_topk = 2;
  m.moe_ffn_hidden_size = 2048;
  workload::ParallelPlan p;
  p.tensor_model_parallel_size = 2;
  p.expert_model_parallel_size = 2;
  p.data_parallel_size = 2;
  p.sequence_parallel = true;
  workload::TrainingSpec t;
  t.global_batch_size = 2;
  const LayerTotals builder = LayerTotals::of_graph(workload::build_graph(m, p, t));
  const LayerTotals captured = LayerTotals::of_block(
      workload::lower_block(c, workload::llama_tp_plan(), 2, true, true, options(1, false, 2)));
  EXPECT_NEAR(captured.gemm / builder.gemm, 1.0, 1e-12);
  EXPECT_NEAR(captured.attention / builder.attention, 1.0, 1e-12);
  const auto a2a = captured.of(graph::OpKind::AllToAll);
  EXPECT_EQ(a2a.first, 4);
  EXPECT_EQ(builder.of(graph::OpKind::AllToAll).first, 4);
  // k·T_l·h·2 bytes with T_l = s/t under SP: 2·256·1024·2 per all-to-all, by hand.
  EXPECT_DOUBLE_EQ(a2a.second, 4 * 2.0 * 256 * 1024 * 2);
  EXPECT_NEAR(a2a.second / builder.of(graph::OpKind::AllToAll).second, 1.0, 1e-12);
  for (const auto kind : {graph::OpKind::AllGather, graph::OpKind::ReduceScatter})
    EXPECT_NEAR(captured.of(kind).second / builder.of(kind).second, 1.0, 1e-3);
  // An EP degree that does not divide the experts is one line.
  EXPECT_THROW(
      workload::lower_block(c, workload::llama_tp_plan(), 2, true, true, options(1, false, 3)),
      InputError);

  // A router load skew: one program per EP rank, whose experts take their own token copies. The
  // captured model's EP-rank programs have the builder's GEMM FLOPs and all-to-all bytes (the
  // busiest member's exchange), rank by rank, and the two ranks differ.
  t.moe_expert_load_skew = 1.0;
  const graph::SlicedGraph skewed = workload::build_graph(m, p, t);
  workload::ModelSpec mc = m;
  mc.capture = std::make_shared<const workload::Capture>(c);
  mc.capture_plan = workload::llama_tp_plan();
  mc.capture_compiled = true;
  const graph::SlicedGraph skewed_capture = workload::build_graph(mc, p, t);
  ASSERT_EQ(skewed.templates.size(), 2u);
  ASSERT_EQ(skewed_capture.templates.size(), 2u);
  for (std::size_t e = 0; e < 2; ++e) {
    const LayerTotals b = LayerTotals::of_graph(skewed, e);
    const LayerTotals k = LayerTotals::of_graph(skewed_capture, e);
    EXPECT_NEAR(k.gemm / b.gemm, 1.0, 1e-12) << "EP rank " << e;
    EXPECT_NEAR(k.of(graph::OpKind::AllToAll).second / b.of(graph::OpKind::AllToAll).second, 1.0,
                1e-12)
        << "EP rank " << e;
  }
  EXPECT_NE(LayerTotals::of_graph(skewed_capture, 0).gemm,
            LayerTotals::of_graph(skewed_capture, 1).gemm);

  // ETP 1 (torchtitan's default): whole experts on every TP rank, each on its sequence share;
  // the builder's GEMM FLOPs, all-to-all bytes and TP collectives (the attention's only).
  t.moe_expert_load_skew = 0;
  p.expert_tensor_parallel_size = 1;
  const LayerTotals etp1 = LayerTotals::of_graph(workload::build_graph(m, p, t));
  const LayerTotals etp1_capture = LayerTotals::of_graph(workload::build_graph(mc, p, t));
  EXPECT_NEAR(etp1_capture.gemm / etp1.gemm, 1.0, 1e-12);
  EXPECT_NEAR(
      etp1_capture.of(graph::OpKind::AllToAll).second / etp1.of(graph::OpKind::AllToAll).second,
      1.0, 1e-12);
  for (const auto kind : {graph::OpKind::AllGather, graph::OpKind::ReduceScatter}) {
    EXPECT_EQ(etp1_capture.of(kind, graph::CommRole::Tp).first,
              etp1.of(kind, graph::CommRole::Tp).first);
    EXPECT_NEAR(etp1_capture.of(kind).second / etp1.of(kind).second, 1.0, 1e-3);
  }
  // Fewer TP collectives than at ETP 2 (the experts' gathers and reductions are gone).
  EXPECT_LT(etp1_capture.of(graph::OpKind::AllGather).first,
            captured.of(graph::OpKind::AllGather).first);
}

// The outer graph (embedding, final norm, output layer, loss) splits at the block marker: before
// the blocks the vocabulary-parallel lookup (reads the rows it returns and the ids) with its
// reduce-scatter under SP, and its backward after the output gradient's gather; after them the
// output GEMMs with the builder's FLOPs and loss parallelism's three all-reduces of one fp32 per
// token.
TEST_F(Capture, OuterGraphSplitsAtTheBlocks) {
  const std::string path = file("capture.h5");
  if (!capture(path, 1024, ", fused_projections: true"))
    GTEST_SKIP() << "SKIPPED LOUDLY: no PyTorch (scripts/setup.sh installs it)";
  const workload::Capture c = read_capture_h5(path);
  const double s = 1024, h = 1024, V = 32000, t = 2;
  const workload::LoweredOuter o =
      workload::lower_outer(c, workload::llama_tp_plan(), 2, /*sp=*/true, /*compiled=*/true);
  ASSERT_TRUE(o.available);
  const auto kinds = [](const std::vector<graph::Op>& ops) {
    std::vector<graph::OpKind> k;
    for (const auto& op : ops)
      if (op.kind != graph::OpKind::Elementwise || op.mem_bytes > 0) k.push_back(op.kind);
    return k;
  };
  // Before the blocks: the lookup, then its partial sums reduce-scattered.
  ASSERT_EQ(kinds(o.pre.forward),
            (std::vector<graph::OpKind>{graph::OpKind::Elementwise, graph::OpKind::ReduceScatter}));
  EXPECT_DOUBLE_EQ(o.pre.forward[0].mem_bytes, 2 * (2 * s * h) + 8 * s);
  EXPECT_DOUBLE_EQ(o.pre.forward[1].comm_bytes, 2 * s * h);
  ASSERT_EQ(kinds(o.pre.backward),
            (std::vector<graph::OpKind>{graph::OpKind::AllGather, graph::OpKind::Elementwise}));
  // After: the output layer's forward, dgrad and wgrad, each 2·s·h·V/t FLOPs; the three
  // all-reduces of loss parallelism.
  double gemm = 0;
  int gemms = 0, loss_reduces = 0;
  for (const auto* ops : {&o.post.forward, &o.post.backward})
    for (const auto& op : *ops) {
      if (op.kind == graph::OpKind::Gemm) {
        gemm += op.flops;
        ++gemms;
      }
      if (op.name == graph::OpName::CeAllReduce) {
        ++loss_reduces;
        EXPECT_DOUBLE_EQ(op.comm_bytes, 4 * s);
      }
    }
  EXPECT_EQ(gemms, 3);
  EXPECT_DOUBLE_EQ(gemm, 3 * 2 * s * h * V / t);
  EXPECT_EQ(loss_reduces, 3);
  EXPECT_GT(o.post.saved_bytes, 0);
}

TEST_F(Capture, SequenceParallelCollectivesMatchMegatrons) {
  // With SP the builder runs, per layer, all-gathers before QKV and FC1 and reduce-scatters after
  // the out-projection and FC2 forward; backward, gathers of the FC2 / out-projection output
  // gradients and re-gathers of the QKV / FC1 inputs, reduce-scatters of their input gradients:
  // 6 all-gathers and 4 reduce-scatters of [T, h] each. The captured block lowered with SP must
  // issue the same, with the same bytes.
  const std::string path = file("capture.h5");
  if (!capture(path)) GTEST_SKIP() << "SKIPPED LOUDLY: no PyTorch (scripts/setup.sh installs it)";
  const workload::Capture c = read_capture_h5(path);
  workload::ModelSpec m = llama_spec();
  for (const std::int64_t tp : {2, 4}) {
    SCOPED_TRACE(tp);
    workload::ParallelPlan p;
    p.tensor_model_parallel_size = tp;
    p.sequence_parallel = true;
    p.data_parallel_size = 1;
    const graph::SlicedGraph g = workload::build_graph(m, p, workload::TrainingSpec{});
    std::map<graph::OpKind, std::pair<int, double>> builder, captured;
    for (const auto& op : g.templates[0].ops)
      if (op.layer == 1 && op.microbatch == 0 && graph::is_collective(op.kind)) {
        ++builder[op.kind].first;
        builder[op.kind].second += op.comm_bytes;
      }
    const workload::LoweredBlock b = workload::lower_block(c, workload::llama_tp_plan(), tp, true);
    for (const auto* ops : {&b.forward, &b.backward})
      for (const auto& op : *ops)
        if (graph::is_collective(op.kind)) {
          ++captured[op.kind].first;
          captured[op.kind].second += op.comm_bytes;
        }
    EXPECT_EQ(builder[graph::OpKind::AllGather].first, 6);
    EXPECT_EQ(builder[graph::OpKind::ReduceScatter].first, 4);
    EXPECT_EQ(captured, builder);
  }
}

TEST_F(Capture, CapturedModelBuildsAValidPipelineGraph) {
  // The lowered block replaces the built-in layer in every stage; the graph validates (matched
  // collectives and transfers) and each layer carries the block's ops and GEMM FLOPs.
  const std::string path = file("capture.h5");
  if (!capture(path)) GTEST_SKIP() << "SKIPPED LOUDLY: no PyTorch (scripts/setup.sh installs it)";
  workload::ModelSpec m = llama_spec();
  m.capture = std::make_shared<const workload::Capture>(read_capture_h5(path));
  m.capture_plan = workload::llama_tp_plan();
  m.capture_compiled = false;  // eager: every GEMM of the capture stays a GEMM op
  workload::ParallelPlan p;
  p.tensor_model_parallel_size = 2;
  p.pipeline_model_parallel_size = 2;
  p.data_parallel_size = 2;
  workload::TrainingSpec t;
  t.global_batch_size = 8;
  const graph::SlicedGraph g = workload::build_graph(m, p, t);  // validates
  const workload::LoweredBlock b = workload::lower_block(*m.capture, m.capture_plan, 2);
  for (const auto& prog : g.templates) {
    double flops = 0;
    std::size_t ops = 0;
    const std::uint16_t first_layer = prog.name == "pp_stage_0" ? 0 : 2;
    for (const auto& op : prog.ops)
      if (op.layer == first_layer && op.microbatch == 0) {
        ++ops;
        if (op.kind == graph::OpKind::Gemm) flops += op.flops;
      }
    EXPECT_EQ(ops, b.forward.size() + b.backward.size()) << prog.name;
    EXPECT_DOUBLE_EQ(flops, b.linear_gemm_flops + b.other_gemm_flops) << prog.name;
  }
}

TEST_F(Capture, BadFilesNameThemselves) {
  const std::string path = file("x.h5");
  std::ofstream(path) << "not hdf5";
  try {
    read_capture_h5(path);
    FAIL() << "accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("x.h5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace scalescope::io
