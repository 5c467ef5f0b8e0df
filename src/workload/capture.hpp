#pragma once
/// Flint-style captured models (issue 11): the ATen joint graph of one transformer block as
/// scripts/capture/capture.py writes it, lowered to graph ops with a tensor-parallel plan
/// (docs/flint.md).
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/op.hpp"

namespace scalescope::workload {

struct CapturedNode {
  std::string name;
  std::string kind;  ///< placeholder | call_function | output | get_attr
  std::string op;    ///< ATen overload without "aten.", e.g. "mm.default"
  std::vector<std::uint32_t> inputs;
  std::vector<std::vector<std::int64_t>> shapes;  ///< one per tensor output
  std::vector<std::string> dtypes;
  std::string module;           ///< the nn.Module path it came from ("layers.0.attention.wq")
  std::string param;            ///< placeholders: the parameter's name, if it is one
  bool causal = false;          ///< fused SDPA ops: is_causal
  std::string buffer;           ///< placeholders: the buffer's name (a causal mask), if it is one
  std::string mask;             ///< buffers: "tril" / "triu" when made by that op (a causal mask)
  std::int64_t group_size = 0;  ///< `_c10d_functional` collectives: the ranks of their group
  /// Inductor's own fusion (scripts/capture/inductor_fusion.py): the number of the generated
  /// kernel this op is in (ops of one number are one kernel), kNoKernel for an op Inductor makes
  /// no kernel of (its producers write it in place), kKernelUnread where it was not read.
  std::int64_t kernel = -2;
  static constexpr std::int64_t kNoKernel = -1, kKernelUnread = -2;
};

struct Capture {
  std::string model;
  std::int64_t num_blocks = 0, batch = 0, seq = 0, vocab_size = 0;
  std::string dtype, torch_version, blocks_attr;
  /// Set when the blocks run different ops and capture.py was told to cost all as the first
  /// (--same-blocks): how the first different block differs.
  std::string blocks_differ;
  /// Where the loss came from: "model" (returned), "model.ATTR" (kept in an attribute) or
  /// "cross_entropy(logits)" (added by capture.py).
  std::string loss;
  /// A capture PyTorch parallelized itself (capture_hf.py: "dtensor"): its graph has this rank's
  /// shapes and the collectives PyTorch issues, at TP `tp` (with SP `sp`) in a world of `world`
  /// ranks; the model's shape keys come from its config (`shapes`), and `block_parameters` is
  /// the block's before sharding. Empty: a single-device capture the lowering shards.
  std::string parallelized;
  std::string plan_source;  ///< what parallelized it (the config's plan, the user's function)
  std::int64_t tp = 1, world = 1;
  /// Expert parallelism PyTorch's plan applied (transformers' apply_expert_parallelism): the
  /// block's experts are this rank's E/ep and its all-to-alls are in the graph.
  std::int64_t ep = 1;
  bool sp = false;
  std::map<std::string, std::string> shapes;  ///< key → YAML scalar
  double block_parameters = 0;
  /// FSDP2 as the capture applied it (capture_hf.py --fsdp), read from PyTorch's FSDPParamGroup:
  /// the shard size (0: none), reshard_after_forward, and per layer the all-gather's output and
  /// the reduce-scatter's input bytes (nccl-tests size).
  std::int64_t fsdp_shard = 0;
  bool fsdp_reshard = true;
  double fsdp_all_gather_bytes = 0, fsdp_reduce_scatter_bytes = 0;
  std::vector<CapturedNode> block, outer;
  /// Where the compiled kernels' fusion comes from, per graph: "inductor" (read from Inductor's
  /// scheduler, CapturedNode::kernel) or "re-derived: WHY" (the lowering's rules, §2); empty for
  /// a capture that does not say (older captures: re-derived).
  std::string block_fusion, outer_fusion;
  /// The plan the model file declares (module pattern → parallelize_module style name, as
  /// written); empty: none.
  std::vector<std::pair<std::string, std::string>> file_tp_plan;
};

/// model.causal_mask: which captured attentions cost half the square (a kernel that skips the
/// masked blocks). Auto: those whose kernel is told (SDPA's is_causal) or whose mask was made by
/// tril / triu (a buffer, a plain attribute, or made in the forward: capture.py follows it);
/// Assume: every attention; Materialized: only is_causal ones (a mask tensor handed to the
/// kernel is applied over the whole square, as SDPA's memory-efficient kernel does).
enum class CausalMask : std::uint8_t { Auto, Assume, Materialized };
const char* causal_mask_name(CausalMask m);
/// Whether an attention is costed causal: `is_causal` (the kernel's flag), `tril_mask` (it
/// reads a mask made by tril / triu).
bool costed_causal(CausalMask m, bool is_causal, bool tril_mask);
/// One line on how the captured block's attentions are costed under `m`.
std::string describe_causal_attention(const struct Capture& c, CausalMask m);

/// PyTorch's parallelize_module plan: module-path patterns ('*' matches one path component;
/// a pattern matches the end of a path) → "colwise" | "rowwise" (ColwiseParallel /
/// RowwiseParallel of nn.Linear and nn.Embedding) | "sequence" (SequenceParallel: a norm or
/// dropout on sequence shards, what `parallel.sequence_parallel` models) | "input"
/// (PrepareModuleInput / PrepareModuleOutput: layouts only).
struct TpPlan {
  std::vector<std::pair<std::string, std::string>> rules;
  /// Where the plan came from, for the output: "model.pytorch_tp_plan", "the model file",
  /// "inferred from the capture", "model.tp_plan: llama", ...
  std::string source;
  /// The style of `module` (a path in the capture, e.g. "layers.0.attention.wq"), or "".
  std::string style_of(const std::string& module) const;
  /// Whether some rule shards a linear layer (colwise or rowwise).
  bool shards() const;
};
/// A parallelize_module style name as a plan style: ColwiseParallel → colwise, RowwiseParallel
/// → rowwise, SequenceParallel → sequence, PrepareModuleInput / PrepareModuleOutput → input
/// (also the short names colwise, rowwise, sequence, and torchao's Float8ColwiseParallel /
/// Float8RowwiseParallel); "" for anything else.
std::string tp_style(const std::string& name);
/// The plan a capture implies when none is given (docs/flint.md "Tensor-parallel plans"): a
/// linear whose output reaches an attention or an activation before another linear is
/// column-wise, and so is every linear feeding the same next linear without crossing a norm;
/// that next linear is row-wise. The embedding is row-wise (vocabulary-parallel) and the
/// linear producing the logits column-wise.
TpPlan infer_tp_plan(const Capture& c);
/// The plan a capture runs with when the experiment names none: the one its model file declares
/// (Capture::file_tp_plan; a name that is not a style is an InputError naming `path`), else
/// infer_tp_plan's.
TpPlan capture_default_plan(const Capture& c, const std::string& path);
/// The model shapes a capture shows (docs/flint.md "Shapes from the capture"); 0 / nullopt
/// where it cannot tell. Attention: heads and head size from the score GEMM (eager: its
/// [b·heads, s, d_head] operand) or the fused kernel's query [b, heads, s, d_head]; query groups
/// from what the column-wise projections into the attention output, (Σ out / d_head − heads) / 2.
/// MLP (dense blocks): the width the row-wise linear after the activation reads, gated when two
/// column-wise linears feed it. Biases: an addmm among the linears. Learned positions: a second
/// embedding lookup in the outer graph.
/// Hidden size: the last dimension of the hidden states entering the block ([b, s, h], or
/// [tokens, h] for a model whose forward takes one flattened sequence). Experts held as 3-D
/// weights ([E, out, in], `ExpertWeights`): E, the router's top-k, and the expert MLP's width.
struct CaptureShapes {
  std::int64_t hidden = 0, heads = 0, head_dim = 0, query_groups = 0, ffn = 0;
  std::int64_t experts = 0, topk = 0, expert_ffn = 0;  ///< 3-D expert weights only
  std::int64_t shared_ffn = 0;                         ///< beside 3-D experts: shared experts
  std::int64_t router_groups = 0, router_group_topk = 0;
  /// Multi-latent attention (DeepSeek-V2/V3): the attention's up projections read latents
  /// rather than the hidden states. q_lora_rank 0: queries straight from the hidden states.
  std::optional<bool> mla;  ///< known where the block's attention was found
  std::int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_head_dim = 0, qk_pos_emb_head_dim = 0,
               v_head_dim = 0;
  std::optional<bool> gated, bias, learned_positions;
};
CaptureShapes capture_shapes(const Capture& c);
/// Capture::block_fusion / outer_fusion for the output: "Inductor's own fusion (read from its
/// scheduler)" or "re-derived by the lowering's rules (WHY)".
std::string describe_fusion(const std::string& source);
/// The plan as lines "pattern  style" for the output.
std::string describe_tp_plan(const TpPlan& plan);
/// The linear layers of the captured block's forward (module path, in graph order) with the
/// style the plan gives each ("" when it leaves one replicated).
std::vector<std::pair<std::string, std::string>> planned_linears(const Capture& c,
                                                                 const TpPlan& plan);
/// Throws InputError when TP > 1 and the plan shards none of the block's linear layers (a plan
/// written for other module names would otherwise replicate everything without a word).
void check_tp_plan(const Capture& c, const TpPlan& plan, std::int64_t tp,
                   const std::string& capture_path);
/// The number of experts of a captured block (modules experts.<i>), 0 for a dense one.
std::int64_t capture_experts(const Capture& c);
/// Experts held as 3-D parameters [E, out, in] (gpt-fast's Mixtral, gpt-oss, grouped-GEMM MoE
/// layers), read by batched GEMMs directly or through a gather by the router's indices: the
/// parameters' names and shapes, E, the top-k (of the block's `topk` over the experts' scores),
/// group-limited routing, and one expert's GEMM weights (Σ out·in; a token through it costs twice
/// that forward).
struct ExpertWeights {
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> params;
  std::int64_t experts = 0, topk = 0;
  std::int64_t groups = 0, group_topk = 0;  ///< group-limited routing (0: none)
  double weights_per_expert = 0;            ///< Σ out·in over the 3-D weights (biases excluded)
};
/// `experts` is the block's own count: this rank's E/ep in a capture PyTorch parallelized with
/// EP `ep` (Capture::ep), whose router still scores all E·ep.
ExpertWeights capture_expert_weights(const Capture& c);
ExpertWeights expert_weights_of(const std::vector<CapturedNode>& nodes, std::int64_t ep = 1);
/// The captured block's parameters (each tensor once), elements.
double capture_block_parameters(const Capture& c);
/// Whether the captured block's attention is a fused kernel (PyTorch 2.x's
/// scaled_dot_product_attention ops on 4-D q, k, v), which context parallelism can split as it
/// is, eager or compiled; an eager matmul–softmax–matmul attention it cannot.
bool capture_has_fused_attention(const Capture& c);
/// Whether the capture's outer graph ties the output layer to the embedding (one parameter read
/// by the embedding lookup and by a GEMM, as `lm_head.weight = wte.weight` leaves it); nullopt
/// without an outer graph or an embedding.
std::optional<bool> capture_ties_embeddings(const Capture& c);
/// The plan shipped for inputs/pytorch/llama.py and mixtral.py, and for gpt3.py.
TpPlan llama_tp_plan();
TpPlan gpt_tp_plan();

/// How each ATen op is costed (docs/flint.md "Cost of ATen ops").
/// Collective: a collective PyTorch issued itself (`_c10d_functional.*` in a DTensor-parallelized
/// capture; its `wait_tensor` is a View).
enum class AtenClass : std::uint8_t { Gemm, Attention, MemoryBound, View, Unknown, Collective };
AtenClass aten_class(const std::string& op);
/// One ATen op an eager program ran (`op` without "aten.", e.g. "mm.default"), with its tensor
/// inputs' and outputs' shapes and dtypes, as one kernel for the cost model (the capture
/// lowering's per-op rules at TP 1): a GEMM [m, n, k] (mm, addmm, bmm, _grouped_mm: the last two
/// operands), a fused attention from its query [b, h, s, d] (the backward 2.5× the forward,
/// MODELING §1.1), a memory-bound kernel of its inputs' and outputs' bytes; nullopt for views,
/// collectives and ops that launch nothing (profiler markers, _local_scalar_dense).
struct AtenTensor {
  std::vector<std::int64_t> shape;
  std::string dtype;
};
/// `causal`: a fused attention's is_causal (half the square).
std::optional<graph::Op> eager_aten_op(const std::string& op, const std::vector<AtenTensor>& in,
                                       const std::vector<AtenTensor>& out, bool causal = false);

/// One captured block lowered for TP degree `tp`: compute ops (GEMMs sharded by the plan,
/// memory-bound ops by the bytes they read and write, /tp inside the sharded region), the TP
/// all-reduces the plan implies (after a row-parallel forward GEMM and a column-parallel dgrad),
/// forward or backward by whether the op feeds the block's output, and the bytes the forward
/// keeps for the backward.
struct LoweredBlock {
  std::vector<graph::Op> forward, backward;
  /// Per op, what it follows: kChain (a compute op: the previous compute op, and the
  /// collectives listed since), or for a collective the index of the op producing its tensor in
  /// the same list, or kPassStart (the tensor comes from the other pass). kChainOverlap: a
  /// compute op after the previous one that leaves the collectives listed since to the next
  /// kChain op (async TP: a GEMM consuming its operand's all-gather chunk by chunk).
  static constexpr std::int32_t kChain = -1, kPassStart = -2, kChainOverlap = -3;
  std::vector<std::int32_t> forward_after, backward_after;
  /// Indices in `backward` of the weight-gradient GEMMs (the planned linears', the experts',
  /// a replicated linear's under SP): what a zero-bubble W action runs.
  std::vector<std::uint32_t> backward_weight_grads;
  /// lower_outer only: per op, 0 = before the blocks, 1 = after them.
  std::vector<std::uint8_t> forward_part, backward_part;
  std::array<double, 2> saved_by_part{};
  double saved_bytes = 0;
  /// Compiled: the fused attention forward ops (to run again under selective recomputation) and
  /// what they keep for their backward (the log-sum-exp, part of saved_bytes).
  /// Each entry: the kernels of one attention forward (one op, or CP's ring steps and merges).
  std::vector<std::vector<graph::Op>> attention_forward;
  double attention_saved_bytes = 0;
  /// Compiled, under per-op selective checkpointing (recompute: op): what the forward keeps, and
  /// the GEMMs (with their operands' all-gathers and casts) that run again before the backward.
  double op_sac_saved_bytes = 0;
  std::vector<graph::Op> op_sac_recompute;
  std::vector<std::int32_t> op_sac_recompute_after;
  double params_on_rank = 0;
  std::int64_t experts = 0;      ///< the capture's experts (modules experts.<i>), 0 for none
  double linear_gemm_flops = 0;  ///< GEMMs of the plan's (or any) nn.Linear modules
  double other_gemm_flops = 0;   ///< the rest: attention's batched GEMMs, routers outside the plan
  std::map<std::string, int> unknown_ops;  ///< ATen ops costed as memory-bound by default
};
/// With `sp` (sequence parallelism) the TP all-reduces become Megatron's all-gathers before
/// column-parallel GEMMs and reduce-scatters after row-parallel ones, and the activations
/// between are split along the sequence. With `compiled` the block runs as torch.compile
/// (Inductor) runs it: the eager attention pattern becomes one fused attention kernel per pass
/// and connected point-wise ops one kernel each (docs/flint.md §2); else one kernel per ATen op,
/// as eager PyTorch runs it.
/// The parallelism lower_block applies beyond TP and SP. Context parallelism: its degree, and
/// whether the key/value exchange is one all-gather before the attention (cp_comm_type
/// all_gather) or a ring beside it (p2p). Expert parallelism: its degree (the experts are the
/// modules `experts.<i>`). fp8: float8 training of the plan's linear layers as torchao's
/// Float8Linear does it (tensorwise dynamic scaling, torchtitan's `float8` converter).
struct LowerOptions {
  std::int64_t cp = 1;
  bool cp_all_gather = false;
  std::int64_t ep = 1;
  bool fp8 = false;
  /// fp8 under FSDP (ZeRO-3): the weight is cast again for the dgrad instead of being kept
  /// (torchao's force_recompute_fp8_weight_in_bwd, which its README recommends with FSDP).
  bool fp8_recast_weight = false;
  /// Compiled with sequence parallelism: Inductor's micro-pipeline TP (torchtitan's
  /// enable_async_tensor_parallel). An all-gather whose result is a plan GEMM's row operand
  /// runs beside the GEMMs that read it (fused_all_gather_matmul), and the reduce-scatter of a
  /// plan GEMM's row-split partial sums beside that GEMM (fused_matmul_reduce_scatter): each
  /// pair costs the longer of the two.
  bool async_tp = false;
  /// MoE routing other than balanced (a load skew, a capacity factor): per local expert (the
  /// capture's experts 0 … E/ep − 1 stand for the rank's), its token copies relative to
  /// balanced routing; empty = balanced. And the all-to-alls' bytes relative to balanced (the
  /// busiest member's exchange sets them, as in the builder).
  std::vector<double> expert_tokens;
  double all_to_all_scale = 1;
  /// Expert tensor parallelism 1 with TP > 1 (torchtitan's default ETP): every TP rank runs
  /// whole experts on its own sequence share of the tokens; no TP collectives around them.
  bool experts_replicated = false;
  /// Fused attention through PyTorch's flash SDPA backend (FlashAttention-2,
  /// graph::AttentionImpl::Flash2) rather than cuDNN's.
  bool sdpa_flash = false;
  CausalMask causal_mask = CausalMask::Auto;
  /// A DTensor-parallelized capture's TP degree: the group its collectives must run over (it is
  /// lowered at tp 1: its shapes are already this rank's).
  std::int64_t parallel_tp = 0;
  /// Compiled: take Inductor's kernels where the capture read them (CapturedNode::kernel); false
  /// re-derives them (model.fusion: rederived).
  bool inductor_kernels = true;
  /// And its EP degree: the group its all-to-alls run over.
  std::int64_t parallel_ep = 0;
  /// fp8 under FSDP with torchao's float8 all-gather (enable_fsdp_float8_all_gather, with
  /// precompute_float8_dynamic_scale_for_fsdp): a weight is cast on its FSDP shard (1/fsdp_shard
  /// of it) before a 1-byte all-gather, in the forward and again for the backward's re-gather;
  /// the dgrad reads a transposed fp8 copy. No amax pass per use (one per iteration, for all
  /// weights, not modelled).
  bool fp8_fsdp_gather = false;
  double fsdp_shard = 1;
  /// Bytes per element of the main-grad buffer a weight gradient is accumulated into (Megatron's
  /// DDP and distributed optimizer: 4 with grad_reduce_in_fp32, else 2); 0: autograd's own
  /// gradient, nothing more (ZeRO-3 / FSDP).
  double main_grad_bytes = 0;
};
/// With `cp` > 1 (compiled, or eager with a fused attention): every tensor with the token dimension
/// is split over CP, the attention runs this rank's queries against the whole sequence, with the
/// builder's key / value exchange around it. With `ep` > 1: the rank runs the first E/ep experts on
/// ep× the tokens (balanced routing), between an all-to-all dispatch and combine over EP. With
/// `fp8`: the plan's GEMMs (forward, dgrad, wgrad) take fp8 operands, after the casts torchao's
/// roofline model (torchao/float8/roofline_utils.py) counts: per linear layer the weight (an amax
/// kernel, 2 B read per element, and a cast, 2 B read and 2 × 1 B written: row- and column-major),
/// the input and the output gradient (a cast each, 4 B per element, their amax fused into the op
/// that produces them; one cast per tensor and pass), and a one-element kernel per amax for
/// the second stage of its reduction. The fp8 weight is kept for the backward (saved bytes), or
/// with `fp8_recast_weight` cast again before the dgrad.
LoweredBlock lower_block(const Capture& c, const TpPlan& plan, std::int64_t tp, bool sp = false,
                         bool compiled = false, const LowerOptions& options = {});

/// The captured /outer graph (embedding, final norm, head, loss) split at the block marker
/// capture.py leaves where the blocks run: `pre` runs in the first pipeline stage before the
/// blocks (forward) and after them (backward), `post` in the last stage. Not `available` for a
/// capture without the marker (the builder's embedding and head stand in).
struct LoweredOuter {
  LoweredBlock pre, post;
  std::map<std::string, int> unknown_ops;
  bool available = false;
};
LoweredOuter lower_outer(const Capture& c, const TpPlan& plan, std::int64_t tp, bool sp = false,
                         bool compiled = false, const LowerOptions& options = {});

}  // namespace scalescope::workload
