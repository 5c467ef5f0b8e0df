#pragma once
/// One operation of a rank's program: compute kernel, collective or point-to-point transfer.
#include <array>
#include <cstdint>
#include <string_view>

namespace scalescope::graph {

enum class OpKind : std::uint8_t {
  Gemm,         ///< dense matrix multiply; shape m×n×k
  Attention,    ///< fused core attention; shape (batch·heads, seq, head_dim)
  Elementwise,  ///< memory-bound kernel (activation, residual, dropout, RoPE, cast)
  Norm,         ///< LayerNorm / RMSNorm
  Embedding,    ///< token lookup (forward) or scatter-add (backward)
  Loss,         ///< vocab-parallel cross-entropy
  Optimizer,    ///< Adam step over this rank's parameter shard
  AllReduce,
  AllGather,
  ReduceScatter,
  SendRecv,  ///< batched P2P: an optional send and an optional receive that complete together
  AllToAll,  ///< every member sends 1/n of its buffer to each member (MoE token dispatch)
};
inline constexpr int kNumOpKinds = 12;

constexpr bool is_collective(OpKind k) {
  return k == OpKind::AllReduce || k == OpKind::AllGather || k == OpKind::ReduceScatter ||
         k == OpKind::AllToAll;
}
constexpr bool is_communication(OpKind k) {
  return is_collective(k) || k == OpKind::SendRecv;
}

/// CUDA-stream-like queues: ops on one stream run in program order, streams overlap. Pipeline
/// transfers use one stream per neighbour pair, as PyTorch's NCCL process group runs the
/// point-to-point ops of each peer pair on that pair's own communicator and stream: PpComm for
/// the pair (me, next stage), PpPrevComm for (previous stage, me).
enum class Stream : std::uint8_t {
  Compute = 0,
  TpComm = 1,
  PpComm = 2,
  DpComm = 3,
  PpPrevComm = 4,
  EpComm = 5  ///< MoE dispatch / combine all-to-alls (Megatron's separate communication stream)
};
inline constexpr int kNumStreams = 6;
constexpr bool is_pipeline_stream(Stream s) {
  return s == Stream::PpComm || s == Stream::PpPrevComm;
}

/// Which communicator of the rank an op talks on. Resolved per rank through the rank → role map,
/// so one template serves every rank of a class.
enum class CommRole : std::uint8_t {
  None = 0,
  Tp = 1,           ///< tensor-parallel group
  Dp = 2,           ///< data-parallel group (gradient reduction, parameter gather)
  PpPrev = 3,       ///< pair (previous stage, me)
  PpNext = 4,       ///< pair (me, next stage)
  Embedding = 5,    ///< first + last pipeline stage, for tied-embedding gradients
  Cp = 6,           ///< context-parallel group (key/value exchange of attention)
  DpReplicate = 7,  ///< HSDP: the ranks holding the same shard in the other replicas
  Ep = 8,           ///< expert-parallel group (MoE token dispatch and combine)
  Etp = 9,          ///< expert-tensor-parallel group (one expert's FFN split)
  Edp = 10,         ///< expert-data-parallel group (expert gradient reduction)
  TpEp = 11,        ///< expert TP × EP group (the all-gather token dispatcher)
};
inline constexpr int kNumRoles = 12;

/// The stream a role's communication runs on: TP collectives on their own stream, pipeline
/// transfers on their pair's, DP and tied-embedding gradient reductions on the DP stream.
constexpr Stream stream_of(CommRole r) {
  switch (r) {
    case CommRole::Ep:  // MoE dispatch / combine: a stream of its own, so that the EP overlap
                        // (combined 1F1B) runs one micro-batch's all-to-all beside the other's
                        // TP collectives, as Megatron's communication stream does
      return Stream::EpComm;
    case CommRole::Tp:
    case CommRole::Cp:  // CP's exchange runs inside attention, between the SP collectives
    case CommRole::Etp:
    case CommRole::TpEp:
      return Stream::TpComm;
    case CommRole::PpPrev:
      return Stream::PpPrevComm;
    case CommRole::PpNext:
      return Stream::PpComm;
    default:
      return Stream::DpComm;
  }
}

enum class Phase : std::uint8_t { Forward, Backward, Recompute, Optimizer, Other };

/// How core attention is computed, which sets the kernels the cost model charges
/// (docs/cost-model.md §1.4): one fused kernel (cuDNN's, as Transformer Engine and PyTorch's
/// cuDNN SDPA backend run it, at FlashAttention-3's rates), the unfused path (batched QKᵀ GEMM,
/// softmax, dropout, PV GEMM, each a pass over the s² scores), or one FlashAttention-2 kernel
/// (PyTorch's flash SDPA backend).
enum class AttentionImpl : std::uint8_t { Fused = 0, Unfused = 1, Flash2 = 2 };
inline constexpr int kNumAttentionImpls = 3;

/// Names shown in traces; an op's `name` indexes this table.
enum class OpName : std::uint8_t {
  Embedding,
  InputNorm,
  QkvGemm,
  Rope,
  Attention,
  OutProjGemm,
  BiasDropoutAdd,
  PreMlpNorm,
  Fc1Gemm,
  Activation,
  Fc2Gemm,
  FinalNorm,
  LogitsGemm,
  CrossEntropy,
  TpAllReduce,
  TpAllGather,
  TpReduceScatter,
  CeAllReduce,
  PpSend,
  PpRecv,
  PpSendRecv,
  DpAllReduce,
  DpReduceScatter,
  DpAllGather,
  EmbAllReduce,
  NormAllReduce,
  OptimizerStep,
  Fp8Cast,            ///< Transformer Engine's cast to fp8 (activations, gradients, weights)
  GradUnscale,        ///< fp16: unscale the main grads and look for inf/NaN
  FoundInfAllReduce,  ///< fp16: the found-inf flag reduced over the model-parallel ranks
  CpKvExchange,       ///< context parallelism: keys/values (and their gradients) among CP ranks
  Router,             ///< MoE router: the [T, h]·[h, E] gating GEMM
  RouterTopk,         ///< MoE router: softmax / sigmoid, top-k and the aux loss over [T, E]
  MoePermute,         ///< MoE: tokens gathered into expert order (k copies of each)
  MoeUnpermute,       ///< MoE: expert outputs scattered back and summed with the router weights
  EpDispatch,         ///< MoE: tokens to their experts' ranks (all-to-all / all-gather over EP)
  EpCombine,          ///< MoE: expert outputs back (all-to-all / reduce-scatter over EP)
  EtpAllGather,       ///< MoE: received tokens gathered over the expert-TP group
  EtpReduceScatter,   ///< MoE: expert outputs reduce-scattered over the expert-TP group
  ExpertFc1Gemm,      ///< MoE: grouped FC1 GEMM of the rank's local experts
  ExpertActivation,   ///< MoE: the experts' SwiGLU / GELU
  ExpertFc2Gemm,      ///< MoE: grouped FC2 GEMM of the rank's local experts
  SharedFc1Gemm,      ///< MoE: shared experts' FC1
  SharedFc2Gemm,      ///< MoE: shared experts' FC2
  QDownGemm,          ///< MLA: h → q_lora_rank
  KvDownGemm,         ///< MLA: h → kv_lora_rank + rotary key
  LatentNorm,         ///< MLA: RMSNorms on the query and key/value latents
  QUpGemm,            ///< MLA: q_lora_rank → heads · (dqk + dpe) (or h → that, no q LoRA)
  KvUpGemm,           ///< MLA: kv_lora_rank → heads · (dqk + dv)
  EdpAllReduce,       ///< MoE: expert gradients over the expert-data-parallel group
  EdpReduceScatter,   ///< MoE: the same with the distributed optimizer
  EdpAllGather,       ///< MoE: updated expert parameters gathered over expert DP
  AtenGemm,           ///< a captured model's matrix multiply (mm, addmm, bmm, …)
  AtenOp,             ///< a captured model's memory-bound ATen op
  CpMerge,            ///< context parallelism: ring attention's per-step output / gradient merge
  QkNorm,             ///< the norms over each query and key head (--qk-layernorm)
  MtpNorm,            ///< MTP: the norms over the hidden states and the next tokens' embeddings
  MtpProjGemm,        ///< MTP: the [T, 2h]·[2h, h/t] projection of their concatenation
  MoeSortChunks,      ///< MoE all-to-all dispatcher: received tokens sorted by local expert / back
  Count
};
std::string_view op_name(OpName n);
std::string_view op_kind_name(OpKind k);
std::string_view stream_name(Stream s);
std::string_view phase_name(Phase p);

/// Operand precision of a GEMM: bf16/fp16 tensor cores, fp8 (Transformer Engine's E4M3/E5M2
/// GEMMs at the GPU's fp8 rate), MXFP8 (fp8 operands with a scale per 32 values, Blackwell's
/// block-scaled GEMMs: the fp8 rate × their measured ratio to per-tensor fp8, cost/compute_model)
/// or NVFP4 (E2M1 operands with an E4M3 scale per 16 values: likewise, its measured ratio).
enum class GemmDtype : std::uint8_t { Bf16 = 0, Fp8 = 1, Mxfp8 = 2, Nvfp4 = 3 };
inline constexpr int kNumGemmDtypes = 4;
inline bool is_fp8(GemmDtype d) {
  return d != GemmDtype::Bf16;
}

/// An op as stored in a template. Plain data, 88 bytes; the cost model turns it into a duration.
struct Op {
  OpKind kind = OpKind::Elementwise;
  Stream stream = Stream::Compute;
  CommRole role = CommRole::None;   ///< collectives: the group; SendRecv: where the send goes
  CommRole role2 = CommRole::None;  ///< SendRecv only: where the receive comes from
  Phase phase = Phase::Other;
  OpName name = OpName::Embedding;
  std::uint16_t layer = 0xFFFF;       ///< transformer layer (global index), 0xFFFF if none
  std::uint16_t microbatch = 0xFFFF;  ///< micro-batch index, 0xFFFF if none
  AttentionImpl attention_impl = AttentionImpl::Fused;  ///< Attention ops only
  GemmDtype gemm_dtype = GemmDtype::Bf16;               ///< GEMM ops only
  std::array<std::uint32_t, 3> shape{};  ///< GEMM m,n,k; attention (b·heads, seq, head_dim)
  double flops = 0;                      ///< floating-point operations executed on this rank
  double mem_bytes = 0;                  ///< bytes moved through HBM (roofline memory term)
  double comm_bytes = 0;       ///< collectives: nccl-tests size S; SendRecv: bytes of each transfer
  std::int64_t mem_alloc = 0;  ///< bytes allocated when issued and kept after the op
  std::int64_t mem_free = 0;   ///< bytes released when the op ends
  std::int64_t mem_transient = 0;  ///< workspace alive only while the op runs
  /// Instance index of this op on its role (k-th op on that role in program order), filled by
  /// RankProgram::finalize(); for SendRecv, `instance` counts sends and `instance2` receives.
  std::uint32_t instance = 0;
  std::uint32_t instance2 = 0;
  /// GEMM ops: SMs a communication kernel overlapped with this GEMM takes from it (Transformer
  /// Engine's userbuffers, `tp_comm_overlap`; DeepEP): the GEMM runs on the rest.
  /// Communication ops: nonzero when the collective runs in such a kernel (userbuffers), whose
  /// SMs are charged on its GEMM, rather than in NCCL's (docs/cost-model.md §1.7).
  std::uint8_t comm_sms = 0;
  /// 1: the host waits for this op to finish before it issues the next op of the program (a
  /// device-to-host synchronization, e.g. MoE token counts copied to the host before the
  /// dispatch; docs/model.md "Host issue"). 0: the host issues on without waiting.
  std::uint8_t host_sync = 0;
  /// Attention ops only: the value head dimension when it differs from the query/key one
  /// (MLA's d_v); 0 = the same as shape[2].
  std::uint16_t value_dim = 0;
  /// The kernels the op launches, its whole count, where the framework's code runs more than one
  /// for it (a Megatron MoE router's top-k, aux-loss and bookkeeping kernels; docs/cost-model.md
  /// §1.6): each costs the host one launch and a memory-bound op's GPU one kernel overhead. 0:
  /// the derived count (one; a grouped GEMM one per expert; unfused attention one per pass).
  std::uint16_t kernels = 0;
  /// CUDA graphs (Megatron's --cuda-graph-scope): 0 launched eagerly; 1 replayed inside a graph
  /// whose launch an earlier op paid (the host launches nothing for it); 2 the first op of a
  /// graph replay (the host launches the graph: one launch for all its kernels).
  std::uint8_t cuda_graph = 0;
};
static_assert(sizeof(Op) == 88, "Op layout: plain data, 88 bytes");

constexpr std::uint16_t kNoIndex = 0xFFFF;

/// A flex-dispatcher all-to-all's third shape figure: group-limited routing's groups (high 16
/// bits) and the groups a token may use (low 16 bits); 0 = no limit.
constexpr std::uint32_t routing_groups(std::uint32_t groups, std::uint32_t group_topk) {
  return groups << 16 | group_topk;
}

}  // namespace scalescope::graph
