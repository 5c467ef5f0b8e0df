// The capture lowering on small hand-built graphs, no PyTorch needed: fused SDPA ops, transient
// memory, eager loss parallelism, fp8 (torchao's Float8Linear, FSDP and TP gathers in fp8) and
// async TP.
#include "io/capture_h5.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>

#include "core/error.hpp"
#include "cost/cost_model.hpp"
#include "io/config.hpp"
#include "temp_dir_test.hpp"
#include "workload/transformer_builder.hpp"

namespace scalescope::io {
namespace {

// A fused SDPA op (PyTorch 2.x captures) is costed from its shapes: 4·b·h·s·sk·dh FLOPs, half of
// it when is_causal; hand-built graph, no PyTorch needed.
/// PyTorch 2.x's fused attention op on the block's first three nodes (q, k, v) of shape `q`.
workload::CapturedNode sdpa_node(const std::vector<std::int64_t>& q, bool causal) {
  return {"sdpa",
          "call_function",
          "_scaled_dot_product_flash_attention.default",
          {0, 1, 2},
          {q},
          {"bfloat16"},
          "attn",
          "",
          causal,
          "",
          ""};
}

TEST(CaptureSdpa, FusedAttentionOpTakesItsFlopsFromItsShapes) {
  workload::Capture c;
  const std::vector<std::int64_t> q = {2, 8, 512, 64};
  for (const char* name : {"q", "k", "v"})
    c.block.push_back({name, "placeholder", "", {}, {q}, {"bfloat16"}, "", "", false, "", ""});
  for (const bool causal : {false, true}) {
    c.block.resize(3);
    c.block.push_back(sdpa_node(q, causal));
    c.block.push_back({"out", "output", "", {3}, {}, {}, "", "", false, "", ""});
    const workload::LoweredBlock b = workload::lower_block(c, workload::llama_tp_plan(), 1);
    ASSERT_EQ(b.forward.size(), 1u);
    EXPECT_EQ(b.forward[0].kind, graph::OpKind::Attention);
    EXPECT_DOUBLE_EQ(b.forward[0].flops, (causal ? 0.5 : 1.0) * 4 * 2 * 8 * 512.0 * 512 * 64);
    EXPECT_EQ(b.forward[0].shape[0], 16u);
  }
}

TEST(CaptureSdpa, EagerContextParallelismSplitsAFusedAttention) {
  // torchtitan's eager mode with CP (no torch.compile): PyTorch 2.x captures attention as one
  // fused SDPA op, which CP splits as it does under Inductor: this rank's 512/2 queries against
  // all 512 keys, 1/2 of the causal FLOPs 0.5·4·b·h·s·s·dh, the ring's K/V exchange beside it.
  // An eager matmul–softmax–matmul attention (the 1.13 reference modules) stays refused.
  workload::Capture c;
  const std::vector<std::int64_t> q = {2, 8, 512, 64};
  for (const char* name : {"q", "k", "v"})
    c.block.push_back({name, "placeholder", "", {}, {q}, {"bfloat16"}, "", "", false, "", ""});
  c.block.push_back(sdpa_node(q, true));
  c.block.push_back({"out", "output", "", {3}, {}, {}, "", "", false, "", ""});
  EXPECT_TRUE(workload::capture_has_fused_attention(c));
  workload::LowerOptions o;
  o.cp = 2;
  const workload::LoweredBlock b =
      workload::lower_block(c, workload::llama_tp_plan(), 1, false, /*compiled=*/false, o);
  double flops = 0;
  int exchanges = 0;
  for (const graph::Op& op : b.forward) {
    if (op.kind == graph::OpKind::Attention) flops += op.flops;
    exchanges += op.name == graph::OpName::CpKvExchange;
  }
  for (const auto& rest : b.attention_forward)
    for (std::size_t i = 1; i < rest.size(); ++i)
      if (rest[i].kind == graph::OpKind::Attention) flops += rest[i].flops;
  EXPECT_DOUBLE_EQ(flops, 0.5 * 4 * 2 * 8 * 512.0 * 512 * 64 / 2);
  EXPECT_EQ(exchanges, 1);
  c.block[3].op = "bmm.default";  // no fused attention left
  EXPECT_FALSE(workload::capture_has_fused_attention(c));
  EXPECT_THROW(workload::lower_block(c, workload::llama_tp_plan(), 1, false, false, o), InputError);
}

TEST(CaptureSdpa, BackwardOpsReadQueryKeyValueAfterTheOutputGradient) {
  // PyTorch ≥ 2.2 on CPU: _scaled_dot_product_flash_attention_for_cpu(query, key, value, …) and
  // its backward (grad_out, query, key, value, out, logsumexp, …). Cross-attention: 512 queries
  // against 1024 keys, so reading the key where the query is would count half the FLOPs.
  workload::Capture c;
  const std::vector<std::int64_t> q = {2, 8, 512, 64}, kv = {2, 8, 1024, 64};
  const std::vector<std::string> bf16 = {"bfloat16"};
  c.block.push_back({"q", "placeholder", "", {}, {q}, bf16, "", "", false, "", ""});
  c.block.push_back({"k", "placeholder", "", {}, {kv}, bf16, "", "", false, "", ""});
  c.block.push_back({"v", "placeholder", "", {}, {kv}, bf16, "", "", false, "", ""});
  c.block.push_back({"sdpa",
                     "call_function",
                     "_scaled_dot_product_flash_attention_for_cpu.default",
                     {0, 1, 2},
                     {q, {2, 8, 512}},
                     {"bfloat16", "float32"},
                     "attn",
                     "",
                     false,
                     "",
                     ""});
  c.block.push_back({"dout", "placeholder", "", {}, {q}, bf16, "", "", false, "", ""});
  c.block.push_back({"bwd",
                     "call_function",
                     "_scaled_dot_product_flash_attention_for_cpu_backward.default",
                     {4, 0, 1, 2, 3},
                     {q, kv, kv},
                     {"bfloat16", "bfloat16", "bfloat16"},
                     "attn",
                     "",
                     false,
                     "",
                     ""});
  c.block.push_back({"out", "output", "", {3, 5}, {}, {}, "", "", false, "", ""});
  const workload::LoweredBlock b = workload::lower_block(c, workload::llama_tp_plan(), 1);
  ASSERT_EQ(b.forward.size(), 1u);
  ASSERT_EQ(b.backward.size(), 1u);
  const double fwd = 4 * 2 * 8 * 512.0 * 1024 * 64;  // 4·b·h·s·sk·dh
  EXPECT_EQ(b.forward[0].kind, graph::OpKind::Attention);
  EXPECT_DOUBLE_EQ(b.forward[0].flops, fwd);
  EXPECT_EQ(b.backward[0].kind, graph::OpKind::Attention);
  EXPECT_DOUBLE_EQ(b.backward[0].flops, 2.5 * fwd);
  EXPECT_EQ(workload::aten_class("_safe_softmax.default"), workload::AtenClass::MemoryBound);
}

/// Appends a bf16 node of one output to a hand-built block graph.
void add_node(workload::Capture& c, const std::string& name, const std::string& kind,
              const std::string& op, std::vector<std::uint32_t> in, std::vector<std::int64_t> shape,
              const std::string& module = "", const std::string& param = "") {
  c.block.push_back({name,
                     kind,
                     op,
                     std::move(in),
                     {std::move(shape)},
                     {"bfloat16"},
                     module,
                     param,
                     false,
                     "",
                     ""});
}

/// One nn.Linear [k → n] on m tokens, forward and backward, as make_fx traces it: x [m, k] and
/// the weight [n, k] (module "lin", colwise in the plan), the output gradient dy [m, n] given;
/// y = x · wᵀ, dx = dy · w, dw = dyᵀ · x.
workload::Capture linear_capture(std::int64_t m, std::int64_t k, std::int64_t n) {
  workload::Capture c;
  add_node(c, "x", "placeholder", "", {}, {m, k});
  add_node(c, "w", "placeholder", "", {}, {n, k}, "lin", "lin.weight");
  add_node(c, "wt", "call_function", "t.default", {1}, {k, n}, "lin");
  add_node(c, "dy", "placeholder", "", {}, {m, n});
  add_node(c, "y", "call_function", "mm.default", {0, 2}, {m, n}, "lin");
  add_node(c, "dx", "call_function", "mm.default", {3, 1}, {m, k});
  add_node(c, "dyt", "call_function", "t.default", {3}, {n, m});
  add_node(c, "dw", "call_function", "mm.default", {6, 0}, {n, k});
  c.block.push_back({"out", "output", "", {4, 5, 7}, {}, {}, "", "", false, "", ""});
  return c;
}

TEST(CaptureSp, InputGradientThroughAGatheredWeightIsNoWeightGradient) {
  // A replicated linear whose weight arrives through a gather (an expert weight picked by the
  // router's indices): y = x · index(w, idx)ᵀ, dx = dy · index(w, idx). At TP 2 with SP, dx is
  // an input gradient on this rank's half of the sequence: m/2 rows, bf16 operands and result,
  // 2·(m/2·n + n·k + m/2·k) bytes. It was taken for a weight gradient (it reads no parameter
  // directly): its reduction split instead, and an fp32 main-grad read and write of m·k added.
  const std::int64_t m = 1024, k = 256, n = 512;
  workload::Capture c;
  add_node(c, "x", "placeholder", "", {}, {m, k});
  add_node(c, "w", "placeholder", "", {}, {n, k}, "r", "r.weight");
  add_node(c, "idx", "placeholder", "", {}, {n});
  add_node(c, "gw", "call_function", "index.Tensor", {1, 2}, {n, k}, "r");
  add_node(c, "gwt", "call_function", "t.default", {3}, {k, n}, "r");
  add_node(c, "y", "call_function", "mm.default", {0, 4}, {m, n}, "r");
  add_node(c, "dy", "call_function", "ones_like.default", {5}, {m, n});  // as capture.py seeds it
  add_node(c, "dx", "call_function", "mm.default", {6, 3}, {m, k});
  c.block.push_back({"out", "output", "", {5, 7}, {}, {}, "", "", false, "", ""});
  workload::TpPlan plan;
  plan.rules = {{"lin", "colwise"}};  // "r" stays replicated
  workload::LowerOptions o;
  o.main_grad_bytes = 4;
  const workload::LoweredBlock b = workload::lower_block(c, plan, 2, true, false, o);
  std::vector<graph::Op> gemms;
  for (const graph::Op& op : b.backward)
    if (op.kind == graph::OpKind::Gemm) gemms.push_back(op);
  ASSERT_EQ(gemms.size(), 1u);
  EXPECT_EQ(gemms[0].shape[0], static_cast<std::uint32_t>(m / 2));
  EXPECT_DOUBLE_EQ(gemms[0].flops, 2.0 * (m / 2) * k * n);
  EXPECT_DOUBLE_EQ(gemms[0].mem_bytes, 2.0 * ((m / 2) * n + n * k + (m / 2) * k));
}

/// linear_capture(m, k, n) lowered compiled with "lin" column-parallel at `tp` (with SP when
/// tp > 1).
workload::LoweredBlock lower_linear(std::int64_t m, std::int64_t k, std::int64_t n, std::int64_t tp,
                                    const workload::LowerOptions& o = {}) {
  workload::TpPlan plan;
  plan.rules = {{"lin", "colwise"}};
  return workload::lower_block(linear_capture(m, k, n), plan, tp, tp > 1, true, o);
}

/// x [m, k] → s = x + x → each op of `chain` on the one before ([m, k] bf16) → y = last · wᵀ
/// ("lin", column-parallel in llama's plan), the block's output; forward only.
workload::Capture pointwise_then_linear(std::int64_t m, std::int64_t k, std::int64_t n,
                                        const std::vector<std::string>& chain) {
  workload::Capture c;
  const std::vector<std::string> bf16 = {"bfloat16"};
  c.block.push_back({"x", "placeholder", "", {}, {{m, k}}, bf16, "", "", false, "", ""});
  c.block.push_back(
      {"w", "placeholder", "", {}, {{n, k}}, bf16, "lin", "lin.weight", false, "", ""});
  c.block.push_back(
      {"wt", "call_function", "t.default", {1}, {{k, n}}, bf16, "lin", "", false, "", ""});
  c.block.push_back(
      {"s", "call_function", "add.Tensor", {0, 0}, {{m, k}}, bf16, "", "", false, "", ""});
  for (const std::string& op : chain) {
    const auto last = static_cast<std::uint32_t>(c.block.size() - 1);
    c.block.push_back({op, "call_function", op, {last}, {{m, k}}, bf16, "", "", false, "", ""});
  }
  const auto last = static_cast<std::uint32_t>(c.block.size() - 1);
  c.block.push_back(
      {"y", "call_function", "mm.default", {last, 2}, {{m, n}}, bf16, "lin", "", false, "", ""});
  c.block.push_back({"out", "output", "", {last + 1}, {}, {}, "", "", false, "", ""});
  return c;
}

TEST(CaptureMemory, TemporariesLiveFromTheirWriterToTheirLastReader) {
  // x [m, k] → s = x + x → u = −s → y = u · wᵀ, forward only (nothing is kept for a backward).
  // Eager, one kernel per op: s lives over add and neg, u over neg and the GEMM; y, the block's
  // output, is held beyond the block (counted with the saved bytes). Compiled, add and neg fuse:
  // s never leaves the kernel, and u lives from the fused kernel to the GEMM.
  const std::int64_t m = 1024, k = 512, n = 256;
  const workload::Capture c = pointwise_then_linear(m, k, n, {"neg.default"});
  const double mk = 2.0 * m * k;  // bf16 bytes of [m, k]
  const workload::LoweredBlock eager = workload::lower_block(c, workload::llama_tp_plan(), 1);
  ASSERT_EQ(eager.forward.size(), 3u);
  EXPECT_EQ(eager.forward[0].mem_transient, static_cast<std::int64_t>(mk));
  EXPECT_EQ(eager.forward[1].mem_transient, static_cast<std::int64_t>(2 * mk));
  EXPECT_EQ(eager.forward[2].mem_transient, static_cast<std::int64_t>(mk));
  const workload::LoweredBlock compiled =
      workload::lower_block(c, workload::llama_tp_plan(), 1, false, true);
  ASSERT_EQ(compiled.forward.size(), 2u);
  EXPECT_EQ(compiled.forward[0].mem_transient, static_cast<std::int64_t>(mk));
  EXPECT_EQ(compiled.forward[1].mem_transient, static_cast<std::int64_t>(mk));
}

TEST(CaptureInductor, KernelsReadFromInductorReplaceTheRederivedFusion) {
  // x [m, k] → s = x + x → u = −s → e = exp(u) → y = e · wᵀ. The lowering's rules fuse the three
  // point-wise ops into one kernel (reads x once, writes e: 2·2·m·k bytes). When the capture says
  // Inductor's scheduler put s and u in kernel 0 and e in kernel 1 (CapturedNode::kernel), the
  // block has those two kernels: the first reads x and writes u (2·2·m·k bytes), the second
  // reads u and writes e (2·2·m·k). A cat Inductor makes no kernel of (kernel −1) joins its
  // producer's kernel.
  const std::int64_t m = 1024, k = 512, n = 256;
  const auto block = [&](std::int64_t ks, std::int64_t ku, std::int64_t ke) {
    workload::Capture c = pointwise_then_linear(m, k, n, {"neg.default", "exp.default"});
    c.block[3].kernel = ks;
    c.block[4].kernel = ku;
    c.block[5].kernel = ke;
    return workload::lower_block(c, workload::llama_tp_plan(), 1, false, true);
  };
  const double mk = 2.0 * m * k;
  const auto pointwise = [](const workload::LoweredBlock& b) {
    std::vector<double> bytes;
    for (const graph::Op& op : b.forward)
      if (op.kind != graph::OpKind::Gemm) bytes.push_back(op.mem_bytes);
    return bytes;
  };
  using K = workload::CapturedNode;
  EXPECT_EQ(pointwise(block(K::kKernelUnread, K::kKernelUnread, K::kKernelUnread)),
            (std::vector<double>{2 * mk}));
  EXPECT_EQ(pointwise(block(0, 0, 1)), (std::vector<double>{2 * mk, 2 * mk}));
  EXPECT_EQ(pointwise(block(0, 1, 2)), (std::vector<double>{2 * mk, 2 * mk, 2 * mk}));
  EXPECT_EQ(pointwise(block(0, K::kNoKernel, 1)), (std::vector<double>{2 * mk, 2 * mk}));
}

TEST(CaptureMemory, EagerLossParallelHoldsTheDecompositionsIntermediates) {
  // The head and loss of an eager outer graph at TP 2: logits = h · wᵀ (colwise "output": this
  // rank's V/2 columns), their fp32 copy x, log_softmax, nll_loss; backward nll_loss_backward,
  // _log_softmax_backward_data, the bf16 cast, the head's dgrad and wgrad. DTensor's
  // loss_parallel (torch/distributed/tensor/parallel/loss.py) replaces the loss ops with
  // torch._decomp's decompositions on the local shard, B = m · V/2 fp32 bytes:
  // - _log_softmax: amax, x − max, exp, sum, − log(sum): 7·B moved; `shifted` lives beside
  //   exp's output and then beside the result. Alive at the op: x (B) and that intermediate
  //   (B); its result is kept for the backward (saved, not transient).
  // - nll_loss_backward: (zeros + exp(x)) · grad: 8·B moved; at the add the zeros, exp(x) and
  //   their sum are alive: its output (B) + two more B, + the 4-byte loss gradient it reads.
  // - _log_softmax_backward_data returns that gradient as it is: no op; the gradient lives on
  //   to the bf16 cast, which holds it (B) and its own output (B/2).
  const std::int64_t m = 1024, k = 512, v = 4096;
  const double b = 4.0 * m * (v / 2);
  workload::Capture c;
  const std::vector<std::string> bf16 = {"bfloat16"}, f32 = {"float32"};
  const auto node = [&](const char* name, const char* kind, const char* op,
                        std::vector<std::uint32_t> in, std::vector<std::vector<std::int64_t>> sh,
                        std::vector<std::string> dt, const char* module = "",
                        const char* param = "") {
    c.block.push_back({name, kind, op, std::move(in), std::move(sh), std::move(dt), module, param,
                       false, "", ""});
  };
  node("h", "placeholder", "", {}, {{m, k}}, bf16);                             // 0
  node("w", "placeholder", "", {}, {{v, k}}, bf16, "output", "output.weight");  // 1
  node("wt", "call_function", "t.default", {1}, {{k, v}}, bf16, "output");      // 2
  node("y", "call_function", "mm.default", {0, 2}, {{m, v}}, bf16, "output");   // 3
  node("x", "call_function", "_to_copy.default", {3}, {{m, v}}, f32);           // 4
  node("labels", "placeholder", "", {}, {{m}}, {"int64"});                      // 5
  node("ls", "call_function", "_log_softmax.default", {4}, {{m, v}}, f32);      // 6
  node("nll", "call_function", "nll_loss_forward.default", {6, 5}, {{}, {}},
       {"float32", "float32"});
  node("loss", "call_function", "<built-in function getitem>", {7}, {{}}, f32);  // 8
  node("tw", "call_function", "<built-in function getitem>", {7}, {{}}, f32);    // 9
  node("one", "call_function", "ones_like.default", {8}, {{}}, f32);             // 10
  node("g", "call_function", "nll_loss_backward.default", {10, 6, 5, 9}, {{m, v}}, f32);
  node("gx", "call_function", "_log_softmax_backward_data.default", {11, 6}, {{m, v}}, f32);
  node("gy", "call_function", "_to_copy.default", {12}, {{m, v}}, bf16);         // 13
  node("gyt", "call_function", "t.default", {13}, {{v, m}}, bf16);               // 14
  node("dw", "call_function", "mm.default", {14, 0}, {{v, k}}, bf16, "output");  // 15
  node("dh", "call_function", "mm.default", {13, 1}, {{m, k}}, bf16, "output");  // 16
  c.block.push_back({"out", "output", "", {8, 15, 16}, {}, {}, "", "", false, "", ""});
  workload::TpPlan plan;
  plan.rules = {{"output", "colwise"}};
  const workload::LoweredBlock lp = workload::lower_block(c, plan, 2);
  const auto find = [](const std::vector<graph::Op>& ops, double bytes) -> const graph::Op* {
    for (const graph::Op& op : ops)
      if (op.kind == graph::OpKind::Elementwise && op.mem_bytes == bytes) return &op;
    return nullptr;
  };
  const graph::Op* log_softmax = find(lp.forward, 7 * b);
  ASSERT_NE(log_softmax, nullptr);
  EXPECT_EQ(log_softmax->mem_transient, static_cast<std::int64_t>(2 * b));
  const graph::Op* nll_backward = find(lp.backward, 8 * b);
  ASSERT_NE(nll_backward, nullptr);
  EXPECT_EQ(nll_backward->mem_transient, static_cast<std::int64_t>(3 * b + 4));
  // Backward kernels: ones_like, nll_loss_backward, the cast, two GEMMs; no
  // _log_softmax_backward_data.
  std::size_t kernels = 0;
  for (const graph::Op& op : lp.backward) kernels += graph::is_communication(op.kind) ? 0 : 1;
  EXPECT_EQ(kernels, 5u);
  const graph::Op* cast = find(lp.backward, b + b / 2);
  ASSERT_NE(cast, nullptr);
  EXPECT_EQ(cast->mem_transient, static_cast<std::int64_t>(b + b / 2));
  // Compiled (Inductor fuses the decomposition), or without TP, the loss is the plain ops.
  const workload::LoweredBlock fused = workload::lower_block(c, plan, 2, false, true);
  EXPECT_EQ(find(fused.forward, 7 * b), nullptr);
  EXPECT_EQ(find(fused.backward, 8 * b), nullptr);
}

TEST(CaptureFp8, Float8LinearSpeedupAsTorchaoMeasuredIt) {
  // torchao's float8 README (torchao/float8/README.md, "Performance"): a compiled Float8Linear
  // (tensorwise dynamic scaling), forward and backward, against bf16 on an H100: M, K, N =
  // 1024, 2048, 1024 → 0.80×; 4096, 8192, 16384 → 1.39×. Nothing in the model was fitted to
  // these (the casts' bytes are torchao's roofline_utils.py, the kernel rates the cluster
  // preset's calibration on other data): they are held out. Checked: the small linear is slower
  // in fp8 and the large one faster, the large within 10 % (measured here: 1.42×, +2 %; the
  // small one 0.67×, −16 %: its five extra kernels weigh more in the model than on the GPU).
  const io::ExperimentConfig cfg = io::load_experiment(std::string(SCALESCOPE_SOURCE_DIR) +
                                                       "/inputs/experiments/quickstart.yaml");
  const cost::CostModel cost(cfg.cluster);
  const auto seconds = [&](const workload::LoweredBlock& b) {
    double s = 0;
    for (const auto* ops : {&b.forward, &b.backward})
      for (const graph::Op& op : *ops) s += static_cast<double>(cost.compute_ns(op)) * 1e-9;
    return s;
  };
  struct Case {
    std::int64_t m, k, n;
    double measured;
  };
  for (const Case& x : {Case{1024, 2048, 1024, 0.80}, Case{4096, 8192, 16384, 1.39}}) {
    workload::LowerOptions fp8;
    fp8.fp8 = true;
    const workload::LoweredBlock b16 = lower_linear(x.m, x.k, x.n, 1);
    const workload::LoweredBlock b8 = lower_linear(x.m, x.k, x.n, 1, fp8);
    // bf16: the three GEMMs. fp8: the same GEMMs in fp8, after the input's cast and the weight's
    // amax and cast (forward), the output gradient's cast (dgrad), each amax's second stage.
    ASSERT_EQ(b16.forward.size() + b16.backward.size(), 3u);
    ASSERT_EQ(b8.forward.size(), 6u);
    ASSERT_EQ(b8.backward.size(), 4u);
    double cast_bytes = 0;
    for (const auto* ops : {&b8.forward, &b8.backward})
      for (const graph::Op& op : *ops) {
        if (op.kind == graph::OpKind::Gemm) {
          EXPECT_EQ(op.gemm_dtype, graph::GemmDtype::Fp8);
        }
        if (op.name == graph::OpName::Fp8Cast) cast_bytes += op.mem_bytes;
      }
    const double mk = static_cast<double>(x.m * x.k), kn = static_cast<double>(x.k * x.n),
                 mn = static_cast<double>(x.m * x.n);
    EXPECT_DOUBLE_EQ(cast_bytes, 4 * mk + 6 * kn + 4 * mn + 3 * 4);
    const double speedup = seconds(b16) / seconds(b8);
    std::printf("float8 linear %ld×%ld×%ld: %.2f× (torchao measured %.2f×)\n",
                static_cast<long>(x.m), static_cast<long>(x.k), static_cast<long>(x.n), speedup,
                x.measured);
    if (x.measured < 1) {
      EXPECT_LT(speedup, 1.0);
    } else {
      EXPECT_NEAR(speedup, x.measured, 0.10 * x.measured);
    }
  }
}

TEST(CaptureFp8, FsdpFloat8AllGatherCastsTheShard) {
  // torchao's enable_fsdp_float8_all_gather with precomputed scales, FSDP over 8 ranks, one
  // linear m × k → n: the weight is cast on its shard (k·n/8 values, read 2 B, write 1 B) before
  // each fp8 all-gather, in the forward and for the backward's re-gather; the dgrad reads a
  // transposed fp8 copy (read and write 1 B per value); no per-use amax. The input and the output
  // gradient are cast as without (4 B per value, plus a one-element second amax stage each).
  const std::int64_t m = 4096, k = 2048, n = 1024;
  workload::LowerOptions o;
  o.fp8 = true;
  o.fp8_recast_weight = true;
  o.fp8_fsdp_gather = true;
  o.fsdp_shard = 8;
  const workload::LoweredBlock b = lower_linear(m, k, n, 1, o);
  double cast_bytes = 0;
  for (const auto* ops : {&b.forward, &b.backward})
    for (const graph::Op& op : *ops)
      if (op.name == graph::OpName::Fp8Cast) cast_bytes += op.mem_bytes;
  const double mk = static_cast<double>(m * k), kn = static_cast<double>(k * n),
               mn = static_cast<double>(m * n);
  EXPECT_DOUBLE_EQ(cast_bytes, 4 * mk + 4 * mn + 2 * (3 * kn / 8) + 2 * kn + 2 * 4);
}

TEST(CaptureAsyncTp, GatheredGemmRunsInChunksBesideItsAllGather) {
  // Inductor's micro-pipeline TP at TP 2 with SP: x [m, k] is split along the sequence and
  // all-gathered for the colwise GEMM, which runs as 2 chunks of m/2 rows: the first beside the
  // gather (kChainOverlap: it does not wait for it), the last after it (kChain).
  const std::int64_t m = 4096, k = 2048, n = 1024;
  workload::LowerOptions o;
  o.async_tp = true;
  const workload::LoweredBlock b = lower_linear(m, k, n, 2, o);
  ASSERT_EQ(b.forward.size(), 3u);
  EXPECT_EQ(b.forward[0].kind, graph::OpKind::AllGather);
  EXPECT_DOUBLE_EQ(b.forward[0].comm_bytes, 2.0 * m * k);  // bf16 [m, k], nccl-tests' size
  const double flops = 2.0 * m * (n / 2) * k;              // the rank's n/2 columns
  for (std::size_t i : {1, 2}) {
    EXPECT_EQ(b.forward[i].kind, graph::OpKind::Gemm);
    EXPECT_EQ(b.forward[i].shape[0], static_cast<std::uint32_t>(m / 2));
    EXPECT_DOUBLE_EQ(b.forward[i].flops, flops / 2);
  }
  EXPECT_EQ(b.forward_after[1], workload::LoweredBlock::kChainOverlap);
  EXPECT_EQ(b.forward_after[2], workload::LoweredBlock::kChain);
  // Without async TP: one GEMM that waits for the gather.
  const workload::LoweredBlock plain = lower_linear(m, k, n, 2);
  ASSERT_EQ(plain.forward.size(), 2u);
  EXPECT_DOUBLE_EQ(plain.forward[1].flops, flops);
  EXPECT_EQ(plain.forward_after[1], workload::LoweredBlock::kChain);
}

TEST(CaptureFp8, TensorParallelGathersTheCastShardInFp8) {
  // torchao's Float8ColwiseParallel at TP 2 with SP: the rank casts its sequence shard of x
  // (m/2 × k elements, 4 B each) and all-gathers it in fp8 (1 B per element: m·k bytes), then
  // casts the weight and runs the fp8 GEMM.
  const std::int64_t m = 4096, k = 2048, n = 1024;
  workload::LowerOptions o;
  o.fp8 = true;
  const workload::LoweredBlock b = lower_linear(m, k, n, 2, o);
  ASSERT_EQ(b.forward.size(), 7u);  // amax stage 2, cast; gather; weight amax, stage 2, cast; GEMM
  EXPECT_EQ(b.forward[1].name, graph::OpName::Fp8Cast);
  EXPECT_DOUBLE_EQ(b.forward[1].mem_bytes, 4.0 * m / 2 * k);
  EXPECT_EQ(b.forward[2].kind, graph::OpKind::AllGather);
  EXPECT_DOUBLE_EQ(b.forward[2].comm_bytes, 1.0 * m * k);
  EXPECT_EQ(b.forward_after[2], 1);                           // after the cast
  EXPECT_DOUBLE_EQ(b.forward[3].mem_bytes, 2.0 * n / 2 * k);  // the weight shard's amax
  EXPECT_EQ(b.forward[6].kind, graph::OpKind::Gemm);
  EXPECT_EQ(b.forward[6].gemm_dtype, graph::GemmDtype::Fp8);
}

}  // namespace
}  // namespace scalescope::io
