#pragma once
/// StageBuilder: the program of one pipeline stage of a Megatron-style training iteration, which
/// build_graph (transformer_builder.cpp) runs per stage. Internal to src/workload; its member
/// functions are split by concern over stage_builder_*.cpp. Not part of the public interface.
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "graph/sliced_graph.hpp"
#include "workload/accounting.hpp"
#include "workload/capture.hpp"
#include "workload/model_spec.hpp"
#include "workload/moe.hpp"
#include "workload/parallel_plan.hpp"

namespace scalescope::workload::detail {

using graph::CommKind;
using graph::CommRole;
using graph::Op;
using graph::OpKind;
using graph::OpName;
using graph::Phase;
using graph::Stream;

constexpr std::uint32_t kNone = 0xFFFFFFFFu;

/// A parameter tensor (or a layer's group of them) whose gradient becomes ready at one op.
struct ParamGroup {
  double params = 0;
  std::int64_t key = -1;  ///< param_key(layer, part), or -1 embedding / -2 output layer
};

/// The weights of a transformer layer in backward order, the order in which Megatron-Core's
/// param-and-grad buffer assigns them to buckets (parameters in reverse registration order).
/// MoE layers: kFc2 / kFc1 are the shared experts', kExperts the routed experts (reduced over the
/// expert-data-parallel group), kRouter the gating weights. MLA: kQkv holds every projection
/// before core attention (down and up projections, latent norms).
enum LayerPart : std::int64_t {
  kFc2,
  kExperts,
  kFc1,
  kRouter,
  kPreMlpNorm,
  kOutProj,
  kQkv,
  kInputNorm,
  kParts
};
constexpr std::int64_t param_key(std::int64_t layer, std::int64_t part) {
  return layer * kParts + part;
}
constexpr std::int64_t layer_of_key(std::int64_t key) {
  return key < 0 ? key : key / kParts;
}

/// Builds the program of one pipeline stage (every rank of the stage runs the same program).
class StageBuilder {
 public:
  /// `ep_rank`: the expert-parallel rank whose expert load this program models, or −1 when every
  /// EP rank gets the same load (no skew: one program per stage).
  StageBuilder(const ModelSpec& m, const ParallelPlan& p, const TrainingSpec& t, std::int64_t stage,
               std::int64_t ep_rank = -1);
  graph::RankProgram build();

 private:
  // ---- op construction --------------------------------------------------------------------
  Op base(OpKind kind, OpName name, Phase phase) const;
  Op gemm(OpName name, Phase phase, double m, double n, double k) const;
  static constexpr std::uint8_t kDeepEpSms = 20;
  /// Transformer Engine's userbuffers (`tp_comm_overlap`, TE module/base.py defaults): the SP
  /// all-gather before a column-parallel GEMM runs as a ring exchange beside the GEMM (1 SM,
  /// TP splits), the reduce-scatter after a row-parallel GEMM is pipelined with it (16 SMs,
  /// 4 splits, the GEMM on the remaining SMs), and the backward's bulk all-gather / reduce-
  /// scatter beside the column-parallel dgrad / wgrad take 16 SMs. The chunks' fill and drain
  /// (a split of the shorter of the two) are not modelled.
  static constexpr std::uint8_t kRingExchangeSms = 1;
  static constexpr std::uint8_t kPipelineSms = 16;
  static Op userbuffers(Op comm, std::uint8_t sms);
  std::uint32_t gather_beside_gemm(Phase phase, double bytes = -1);
  void wait_for_overlapped(std::uint32_t comm);
  void gemm_then_reduce(Op gemm_op, Phase phase);
  /// Context parallelism's key/value exchange around a core attention op (Megatron
  /// AttnFuncWithCPAndKVP2P, MODELING §4.2): the c − 1 ring transfers of this rank's K and V
  /// block (2·b·(s/c)·kv/t bf16 values each) are an all-gather over the CP group of c blocks
  /// (a ring all-gather moves c − 1 of them per rank). With cp_comm_type p2p it runs beside the
  /// attention (each step computes on the block it has while the next one arrives) and the op
  /// after the attention waits for it; with all_gather it completes first. The backward ring
  /// also carries dK, dV back: a reduce-scatter of the same size.
  double kv_block_bytes() const { return 2 * tokens_ * (k_w_ + v_w_) / tp_; }
  void attention_with_cp(const Op& attn, bool backward);
  void qk_norm(Phase phase, bool keep, std::int64_t& attn_alloc);
  void fp8_cast(Phase phase, double elements);
  double fp8_recipe_bytes(bool weight) const;
  /// The kernel shape of a memory-bound op (docs/kernels.md): rows × cols (× a third figure:
  /// the GLU factor of an activation, the vocabulary shard of an embedding, a rotary dim).
  /// Norm ops' third shape figure: 1 LayerNorm (models with biases, GPT), 0 RMSNorm.
  double norm_kind() const { return m_.add_bias_linear ? 1.0 : 0.0; }
  static Op shaped(Op op, double a, double b, double c = 0);
  Op memory_bound(OpKind kind, OpName name, Phase phase, double bytes, double flops = 0) const;
  Op collective(OpKind kind, CommRole role, OpName name, Phase phase, double bytes) const;
  std::uint32_t chain(Op op, std::vector<std::uint32_t> extra = {});
  void free_at_chain(double bytes);
  std::uint32_t add_free(const Op& op, std::vector<std::uint32_t> deps);

  // ---- EP overlap (Megatron's combined 1F1B, --overlap-moe-expert-parallel-comm) -------------
  void ovl_layer(std::int64_t index);
  void ovl_ends(bool pre);
  void ovl_stage(int f, int b);
  /// One combined 1F1B step: `run_f` emits the forward of a chunk of nf layers, `run_b` the
  /// backward of one of nb layers, each on its own chain from the chain before the step; the
  /// step ends when both have.
  template <class RunF, class RunB>
  void combined(std::int64_t nf, std::int64_t nb, RunF&& run_f, RunB&& run_b) {
    ++seg_;
    ovl_ = true;
    ovl_nf_ = nf;
    ovl_nb_ = nb;
    ovl_pairs_ = std::min(nf, nb);
    const std::uint32_t start = chain_;
    const std::vector<std::uint32_t> waits = wait_next_;
    ovl_fwd_ = true;
    run_f();
    const std::uint32_t f_end = chain_;
    std::vector<std::uint32_t> f_waits = std::move(wait_next_);
    chain_ = start;
    wait_next_ = waits;
    ovl_fwd_ = false;
    run_b();
    wait_next_.insert(wait_next_.end(), f_waits.begin(), f_waits.end());
    if (f_end != kNone) wait_next_.push_back(f_end);
    ovl_ = false;
    ++seg_;
  }
  std::uint32_t wgrad(const Op& op);
  std::uint32_t defer_weight_grad(const Op& op, std::vector<std::uint32_t> deps = {},
                                  double held = -1);
  std::uint32_t chain_weight_grad(const Op& op, std::vector<std::uint32_t> deps = {});
  void issue_in_key_order();
  void mark_cuda_graphs();
  std::uint32_t add_beside(const Op& op);
  bool tp_comm() const { return p_.tp() > 1; }
  void sp_gather(Phase phase, double bytes = -1);
  Op tp_reduce(Phase phase, double bytes = -1) const;

  // ---- data-parallel buckets ----------------------------------------------------------------
  struct Bucket {
    double params = 0;
    double linear = 0;  ///< of which linear-layer weights (gathered in fp8 with fp8_param_gather)
    std::vector<std::int64_t> keys;  ///< param_key()s (−1 embedding, −2 output layer)
    std::int64_t chunk = 0;
    bool expert = false;  ///< routed-expert parameters (reduced over expert DP)
  };
  std::array<double, kParts> layer_parts(std::int64_t l) const;
  void plan_buckets();
  static bool is_linear_part(std::int64_t part);
  double gather_bytes(const Bucket& b) const;
  /// Whether a bucket's reduction communicates: its group has more than one member.
  bool reduces(const Bucket& b) const { return b.expert ? p_.edp() > 1 : p_.dp_cp() > 1; }
  Op bucket_collective(const Bucket& b, OpKind kind, Phase phase, double bytes) const;
  double vocab_shard() const { return static_cast<double>(m_.padded_vocab(p_.tp())) * h_ / tp_; }
  double head_params() const;

  // ---- pipeline communication ---------------------------------------------------------------
  double p2p_bytes() const { return 2 * tokens_ * h_ / seq_shard_; }
  void p2p(bool send, CommRole send_to, bool recv, CommRole recv_from, std::int64_t mb);
  std::uint32_t post(bool send, CommRole role, std::int64_t mb);
  /// The next op on the chain waits for `op` (a request's wait()).
  void wait_for(std::uint32_t op) { wait_next_.push_back(op); }

  // ---- forward / backward of one micro-batch ------------------------------------------------
  void forward(std::int64_t mb, std::int64_t chunk = 0);
  std::pair<std::int64_t, std::int64_t> checkpoint_of(std::int64_t l) const;
  bool checkpointed(std::int64_t l) const;
  void backward(std::int64_t mb, std::int64_t chunk = 0);
  std::uint32_t unit_gather(std::int64_t layer, Phase phase, std::int64_t chunk = 0);
  /// A ZeRO-3 unit's sharded parameters on this rank: the dense ones (over DP × CP) and the
  /// experts' (over expert DP; 0 where expert DP is 1 and the experts stay whole).
  struct Unit {
    double dense = 0, expert = 0;
    double total() const { return dense + expert; }
  };
  /// Layer `layer`'s unit; −1 the root unit of model chunk `chunk` (embedding, final norm,
  /// output layer: the part of the root that chunk holds).
  Unit unit_of(std::int64_t layer, std::int64_t chunk = 0) const;
  /// The bytes unit `u` of `layer` (−1 a root) gathers over DP × CP: its dense part in bf16,
  /// a layer's linear weights in fp8 with fp8_fsdp_gather_.
  double gathered_dense_bytes(std::int64_t layer, const Unit& u) const {
    return 2 * u.dense - (layer >= 0 ? layer_linear_ : 0.0);
  }
  void unit_reduce(std::int64_t layer, const Unit& u);
  void free_unit(std::int64_t layer, std::int64_t chunk = 0);
  std::int64_t unit_grad_bytes(const Unit& u) const;
  /// FSDP under pipeline parallelism (torch.distributed.pipelining): chunk `chunk`'s units are
  /// gathered once, in its first forward of the step, kept, and reduce-scattered and freed
  /// after its last backward.
  void pp_fsdp_reduce(std::int64_t chunk);
  void captured_outer(const LoweredBlock& part, std::int64_t key, Phase phase, std::int64_t& alloc);
  void embedding_forward();
  std::int64_t embedding_lookup(std::vector<std::uint32_t> extra = {});
  void embedding_backward();
  std::uint32_t embedding_grad(std::int64_t saved);

  // ---- multi-token prediction (multi_token_prediction.py MultiTokenPredictionLayer) ---------
  void mtp_input_forward(std::int64_t l);
  void mtp_input_backward(std::int64_t l);
  void captured_forward(std::int64_t l, Phase phase);
  void captured_pass(const std::vector<Op>& ops, const std::vector<std::int32_t>& after,
                     std::int64_t l, std::int64_t mb, std::int64_t alloc, Phase phase);
  void captured_backward(std::int64_t l, std::int64_t mb);
  void layer_forward(std::int64_t l, Phase phase, bool first_microbatch);
  void mlp_forward(double f, Phase phase, bool keep, double out_bytes, std::int64_t& mlp_alloc,
                   OpName fc1_name, OpName fc2_name);
  void mlp_fc1(double f, Phase phase, bool keep, double out_bytes, std::int64_t& mlp_alloc,
               OpName fc1_name);
  void mlp_fc2(double f, Phase phase, OpName fc2_name);
  std::pair<std::uint32_t, std::uint32_t> mlp_backward(double f, OpName fc1_name, OpName fc2_name);
  std::uint32_t mlp_fc2_backward(double f, OpName fc2_name);
  std::uint32_t mlp_fc1_backward(double f, OpName fc1_name);
  void mla_projections_forward(Phase phase, bool keep, std::int64_t& attn_alloc);
  void mla_projections_backward(std::int64_t l);
  bool ep_comm() const { return p_.ep() > 1; }
  bool etp_comm() const;
  bool allgather_dispatch() const;
  Op grouped_gemm(OpName name, Phase phase, double tokens, double n, double k) const;
  std::uint32_t ep_exchange(Phase phase, OpName name, bool towards_experts, bool beside = false);
  double overlapped_shared() const;
  void sort_chunks(Phase phase, bool dispatch_side);
  void moe_forward(Phase phase, bool keep, double out_bytes, std::int64_t& mlp_alloc);
  void moe_backward(std::int64_t l);
  /// Bytes per element of a linear layer's input as a norm or activation writes it and the GEMM
  /// keeps it: fp8 under fp8 (Transformer Engine writes it cast), else bf16.
  double gemm_input_bytes() const { return t_.gemm_operand_bytes(); }
  Op layer_norm(OpName name, Phase phase) const;
  Op expert_activation(Phase phase, double N, double f) const;
  bool discards_input_norm() const;
  bool discards_pre_mlp_norm(std::int64_t l) const;
  bool checkpoints_moe(std::int64_t l) const;
  bool checkpoints_shared(std::int64_t l) const;
  bool checkpoints_mlp(std::int64_t l) const;
  void rerun_norm(OpName name);
  void mla_up_proj_rerun();
  double attention_saved() const;
  Op attention(Phase phase, double factor, double saved, std::int64_t& attn_alloc) const;
  std::uint32_t column_backward(OpName name, double m, double n, double k, double input_bytes = -1);
  std::uint32_t row_backward(OpName name, double m, double n, double k);
  std::vector<std::uint32_t> take_reduce();
  void layer_backward(std::int64_t l, std::int64_t mb);
  void head_forward(std::int64_t layer = -1);
  void head_backward(std::int64_t layer = -1);

  // ---- schedules -------------------------------------------------------------------------
  void one_f_one_b();
  void gpipe();
  void interleaved();
  void looped_bfs();
  void run_actions(const std::vector<PipelineAction>& actions);
  std::vector<std::uint32_t> reduce_buckets(std::int64_t chunk, std::uint32_t end_of_backward);
  void finish_iteration();

  const ModelSpec& m_;
  const ParallelPlan& p_;
  const TrainingSpec& t_;
  std::int64_t stage_;
  graph::RankProgram prog_;
  bool first_ = false, last_ = false;
  /// Micro-batches per schedule run, per iteration, and the first of the current run (the
  /// schedules number theirs from 0; forward, backward and the transfers add mb_base_).
  std::int64_t layers_ = 0, num_mb_ = 0, total_mb_ = 0, mb_base_ = 0;
  std::vector<std::int64_t> chunk_layers_, chunk_first_;  ///< per model chunk
  std::vector<std::uint32_t> wait_next_;  ///< ops the next chained op also waits for
  double tokens_ = 0, seq_shard_ = 1, tp_ = 1, cp_ = 1, h_ = 0, hidden_bytes_ = 0;
  double qk_w_ = 0, o_w_ = 0, k_w_ = 0, v_w_ = 0;  ///< attention widths (all heads)
  MoeLoad load_;                                   ///< MoE: this rank's tokens per layer
  LoweredBlock lowered_;                           ///< captured models: the lowered block
  LoweredOuter outer_;  ///< captured models: embedding, head and loss, when the capture has them
  double local_experts_ = 0;
  MoeKernels moe_kernels_;  ///< MoE: kernels of the layer's ops beyond their own (Op::kernels)

  std::uint32_t chain_ = kNone;
  std::uint32_t pending_reduce_ = kNone;
  // EP overlap: whether a combined step is being emitted, and which part; its chunks' layers;
  // the current slot and position; the step counter; each op's issue key (moe_a2a_overlap).
  bool ovl_ = false, ovl_fwd_ = false;
  std::int64_t ovl_nf_ = 0, ovl_nb_ = 0, ovl_pairs_ = 0, ovl_slot_ = 0;
  int ovl_pos_ = 0;
  std::uint64_t seg_ = 0;
  /// Ops carry issue keys (keys_) and the program is put in their order after the schedule: EP
  /// overlap's combined steps, or an action table's split backwards (zero bubble).
  bool keyed_ = false;
  /// A split backward's input half (an I action) is being emitted: weight-gradient ops go to
  /// its W action's position (defer_seg_) instead of the chain.
  bool defer_wgrad_ = false;
  std::uint64_t defer_seg_ = 0;
  std::uint32_t last_deferred_ = kNone;  ///< a captured layer's last deferred weight gradient
  std::vector<std::uint32_t> deferred_;  ///< every deferred weight gradient of the iteration
  double held_ = 0;  ///< bytes the deferred GEMMs of the current I action hold until their W
  std::vector<std::uint64_t> keys_;
  std::int64_t cur_layer_ = -1, cur_mb_ = -1;
  std::int64_t emb_alloc_ = 0, head_alloc_ = 0, ce_alloc_ = 0, mtp_alloc_ = 0;
  bool fp8_ = false;
  bool zero3_ = false;    ///< ZeRO-3 / FSDP with a DP × CP group to shard over
  bool pp_fsdp_ = false;  ///< … under pipeline parallelism, reduced once a schedule run
  /// ZeRO-3: per model chunk, whether its layer units / its root unit are gathered now, and
  /// its backwards so far.
  std::vector<bool> layers_gathered_, root_gathered_;
  std::vector<std::int64_t> chunk_backwards_;
  double layer_unit_ = 0, root_unit_ = 0;  ///< parameters of a layer unit, of the root unit
  bool fp8_fsdp_gather_ = false;    ///< torchao's FSDP float8 all-gather (captured fp8 under FSDP)
  double layer_linear_ = 0;         ///< … the linear weights of a layer unit it gathers in fp8
  std::int64_t pending_alloc_ = 0;  ///< bytes the next chained op allocates
  std::int64_t rerun_alloc_ = 0;    ///< bytes the current half-layer's recompute ops hold
  std::vector<std::uint32_t> zero3_reductions_;
  bool ub_ = false;                  ///< TE userbuffers TP overlap (tp_comm_overlap)
  mutable std::uint8_t ub_sms_ = 0;  ///< SMs the next GEMM gives to an overlapped gather
  std::vector<Bucket> buckets_;
  /// Global layer (−1 embedding, −2 output layer) → the parameter gathers its first forward
  /// waits for.
  std::map<std::int64_t, std::vector<std::uint32_t>> gather_of_;
  /// param_key → the op that finished its gradient (the last micro-batch's, once built).
  std::map<std::int64_t, std::uint32_t> ready_;
  std::map<std::pair<std::int64_t, std::int64_t>, std::pair<std::int64_t, std::int64_t>>
      layer_saved_;
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> saved_input_;
};

}  // namespace scalescope::workload::detail
