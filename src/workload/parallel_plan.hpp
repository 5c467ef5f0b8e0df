#pragma once
/// How the job is parallelised and trained. Key names follow Megatron-LM's arguments.
#include <cstdint>
#include <string>
#include <vector>

namespace scalescope::workload {

/// Activation recomputation: none; Megatron's selective (core attention) or full; Op, the per-op
/// selective checkpointing torchtitan applies (`selective_ac_option: op`), captured models only.
enum class Recompute : std::uint8_t { None, Selective, Full, Op };
/// The submodules selective recomputation reruns (Megatron's --recompute-modules, a bit set):
/// core attention (checkpointed: its inputs kept, the kernel rerun before its backward); the
/// MoE experts' activation, the norms that are not fused into a linear layer and MLA's
/// up-projections with their rotary embedding (output-discarding: the output is freed after its
/// consumer ran and recomputed before the consumer's backward); the dense MLP, an MoE block, its
/// shared experts (checkpointed).
enum RecomputeModule : std::uint8_t {
  kRecomputeCoreAttn = 1,
  kRecomputeMoeAct = 2,
  kRecomputeLayerNorm = 4,
  kRecomputeMlaUpProj = 8,
  kRecomputeMlp = 16,
  kRecomputeMoe = 32,            ///< a whole MoE block (router, dispatch, experts, shared experts)
  kRecomputeSharedExperts = 64,  ///< an MoE block's shared experts
};
/// The modules Megatron's --cuda-graph-scope captures in CUDA graphs that the model tells apart
/// (transformer_config.py CudaGraphScope at d98e8a6): a layer's self-attention block (its input
/// norm through the output projection), an MoE layer's router, and its dispatch preprocessing
/// (token counts, their gather and the first permutation). A bit set.
enum CudaGraphScope : std::uint8_t {
  kCudaGraphAttn = 1,
  kCudaGraphMoeRouter = 2,
  kCudaGraphMoePreprocess = 4,
};
/// How context-parallel attention exchanges keys and values (Megatron's --cp-comm-type): a ring
/// of point-to-point transfers overlapped with the attention blocks, one all-gather first, or
/// all-to-alls that trade the sequence split for a head split around the attention (Ulysses).
enum class CpCommType : std::uint8_t { P2p, AllGather, A2a };
/// Which layers full recomputation checkpoints (Megatron's --recompute-method, with
/// --recompute-num-layers N, per model chunk of a pipeline stage): uniform, the chunk's layers in
/// groups of N, each group keeping only its input and recomputed as a whole before its backward;
/// block, the chunk's first N layers one by one, the others keeping all their activations;
/// interval, every N-th layer of the chunk one by one (the N-th, 2N-th, …: torchtitan's
/// layer-wise selective checkpointing, `selective_ac_option: N`).
enum class RecomputeMethod : std::uint8_t { Uniform, Block, Interval };
/// OneFOneB: Megatron's 1F1B (interleaved with VP > 1); GPipe; LoopedBfs: torch's
/// ScheduleLoopedBFS (breadth-first: every micro-batch of a model chunk before the next chunk);
/// Actions: a torch.distributed.pipelining action table (ParallelPlan::pipeline_actions).
enum class Schedule : std::uint8_t { OneFOneB, GPipe, LoopedBfs, Actions };
/// An action of a pipeline rank, as torch.distributed.pipelining's `_Action` writes it ("2F0":
/// stage 2's forward of micro-batch 0; "1B3": stage 1's full backward of micro-batch 3; "3SEND_F0"
/// stage 3 sends micro-batch 0's output; "4RECV_F0" stage 4 receives it; "1I0" / "1W0" the two
/// halves of a split backward (zero-bubble schedules: the input gradient, then the weight
/// gradients); Idle: a blank cell, a step of a compute-only table in which the rank waits).
enum class PipeAction : std::uint8_t {
  Forward,
  Backward,
  SendF,
  RecvF,
  SendB,
  RecvB,
  Idle,
  BackwardInput,
  BackwardWeight
};
struct PipelineAction {
  std::int32_t stage = 0;       ///< the virtual stage: chunk · PP + rank (PyTorch's loop style)
  std::int32_t microbatch = 0;  ///< within one run of the schedule
  PipeAction kind = PipeAction::Forward;
  bool compute() const {
    return kind == PipeAction::Forward || kind == PipeAction::Backward ||
           kind == PipeAction::BackwardInput || kind == PipeAction::BackwardWeight;
  }
};
/// GEMM precision of the linear layers: bf16 / fp16, Transformer Engine's fp8 (a recipe below),
/// or NVFP4 (TE's NVFP4BlockScaling on Blackwell: E2M1 values with an E4M3 scale per 16 and a
/// per-tensor fp32 scale; Megatron's --fp4-format e2m1 --fp4-recipe nvfp4).
enum class Precision : std::uint8_t { Bf16, Fp16, Fp8, Nvfp4 };
/// Transformer Engine's fp8 scaling (Megatron's --fp8-recipe): delayed (amax history, one pass
/// per cast), tensorwise (current scaling: the amax of the tensor first, then the cast),
/// mxfp8 (Blackwell: one E8M0 scale per 32 values, computed in the cast) and blockwise
/// (DeepSeek-V3's: one fp32 scale per 128 values).
enum class Fp8Recipe : std::uint8_t { Delayed, Tensorwise, Mxfp8, Blockwise };
/// Core attention: fused (Transformer Engine's cuDNN kernels, `flash` for Megatron's name), the
/// unfused path, or FlashAttention-2 (TE's flash-attn backend with NVTE_FUSED_ATTN=0, as older
/// Transformer Engine picked on Hopper, or PyTorch's flash SDPA).
enum class AttentionBackend : std::uint8_t { Flash, Unfused, Flash2 };
/// Megatron's --moe-token-dispatcher-type: all-to-all among the EP ranks, or an all-gather of
/// every token to every EP rank (each keeps its experts' tokens) and a reduce-scatter back, or
/// flex: DeepEP's / HybridEP's fused kernels, which send a token once to each node holding one of
/// its experts (cost::CostModel::ep_dispatch_ns).
enum class MoeDispatcher : std::uint8_t { AllToAll, AllGather, Flex };

struct ParallelPlan {
  std::int64_t tensor_model_parallel_size = 1;
  std::int64_t pipeline_model_parallel_size = 1;
  std::int64_t data_parallel_size = 0;  ///< 0 → derived from the GPU count
  /// Context parallelism (--context-parallel-size): each sequence split over c ranks, causal
  /// load-balanced (DualChunkSwap), attention exchanging keys and values among them.
  std::int64_t context_parallel_size = 1;
  CpCommType cp_comm_type = CpCommType::P2p;
  bool sequence_parallel = false;
  /// Megatron's --moe-shared-expert-overlap: the shared experts beside the EP all-to-alls.
  bool moe_shared_expert_overlap = false;
  /// Megatron's --overlap-moe-expert-parallel-comm ("1F1B overlap", combined_1f1b.py): in the
  /// steady state one micro-batch's forward and another's backward run layer by layer together,
  /// each one's EP all-to-alls beside the other's compute.
  bool moe_a2a_overlap = false;
  /// Megatron's --delay-wgrad-compute (with moe_a2a_overlap): the experts' weight gradients run
  /// beside the backward's dispatch all-to-all instead of before it.
  bool delay_wgrad_compute = false;
  Recompute recompute = Recompute::None;
  RecomputeMethod recompute_method = RecomputeMethod::Uniform;  ///< recompute: full only
  std::int64_t recompute_num_layers = 1;                        ///< recompute: full only
  std::uint8_t recompute_modules = kRecomputeCoreAttn;          ///< recompute: selective only
  /// Selective recomputation reruns module `m` (a RecomputeModule).
  bool recomputes(std::uint8_t m) const {
    return recompute == Recompute::Selective && (recompute_modules & m) != 0;
  }
  bool use_distributed_optimizer = false;
  /// ZeRO stage (Rajbhandari et al. SC'20, §5): 0 plain DDP, 1 optimizer state sharded over
  /// DP × CP (Megatron's distributed optimizer; use_distributed_optimizer is its Megatron name),
  /// 2 gradients too (reduce-scattered every micro-batch), 3 parameters too (gathered per
  /// transformer layer, FSDP's schedule). zero() reads the stage from either key.
  std::int64_t zero_stage = 0;
  /// PyTorch FSDP2 (fully_shard per transformer layer and on the root module): ZeRO-3.
  bool fsdp = false;
  /// FSDP's reshard_after_forward: true frees a layer's gathered parameters after its forward
  /// and gathers them again for its backward (FULL_SHARD); false keeps them (SHARD_GRAD_OP).
  bool reshard_after_forward = true;
  /// ZeRO-3 with gradient accumulation: reduce-scatter every micro-batch, as both PyTorch FSDP2
  /// (FSDPParamGroup.reduce_grads = True unless set_requires_gradient_sync(False); torchtitan
  /// keeps it) and Megatron-FSDP (megatron_fsdp.py: grad_reduce_every_bprop for optim_grads /
  /// optim_grads_params) do; false reduces only on the last micro-batch (FSDP1's no_sync),
  /// keeping unsharded gradients between micro-batches. docs/config.md cites the lines.
  bool fsdp_reduce_every_microbatch = true;
  Schedule schedule = Schedule::OneFOneB;
  /// schedule: actions — each pipeline rank's actions in order with their transfers (PyTorch's
  /// pipeline_order_with_comms; a compute-only table is lowered as PyTorch lowers it), and the
  /// file they came from.
  std::vector<std::vector<PipelineAction>> pipeline_actions;
  std::string pipeline_actions_path;
  /// Whether the action table splits backwards (zero bubble's I and W actions).
  bool splits_backwards() const {
    for (const auto& row : pipeline_actions)
      for (const PipelineAction& a : row)
        if (a.kind == PipeAction::BackwardInput) return true;
    return false;
  }
  bool overlap_grad_reduce = false;   ///< DP reduction overlapped with the last backward
  bool overlap_param_gather = false;  ///< param all-gather overlapped with the next forward
  /// fp8 training with fp8 primary weights (Megatron's --fp8-param-gather, TE's fp8_model_init):
  /// the distributed optimizer all-gathers the linear layers' weights in fp8 (1 B a parameter),
  /// and no bf16 copy of them is kept beside the fp8 data and its transpose.
  bool fp8_param_gather = false;
  /// Layers on the first / last pipeline stage, 0 = an even split (Megatron's
  /// --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers). The other stages
  /// share the remaining layers evenly (Llama 3 405B: 126 layers, PP 16, 7 on each end stage).
  std::int64_t decoder_first_pipeline_num_layers = 0;
  std::int64_t decoder_last_pipeline_num_layers = 0;
  /// The embedding / the loss counts as one layer in the even split, so the first / last
  /// virtual stage builds one transformer layer fewer (--account-for-embedding-in-pipeline-split,
  /// --account-for-loss-in-pipeline-split).
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;
  /// Megatron's --pipeline-model-parallel-layout (e.g. DeepSeek-V3's "Et|(tt|)*30mL"): the
  /// decoder layers of each virtual stage v = chunk·PP + stage, in place of the splits above;
  /// its segments fix PP × VP. The embedding is in the first, the loss and any MTP modules in
  /// the last (io/config checks it). Empty = not given.
  std::vector<std::int64_t> layout_layers;
  std::string pipeline_layout;  ///< the layout as given
  /// Interleaved 1F1B: model chunks per pipeline rank (v; 1 = non-interleaved), micro-batches per
  /// group that run one chunk before moving to the next (0 → PP, Megatron's default), and
  /// asynchronous pipeline transfers overlapped with compute (--overlap-p2p-communication, on by
  /// default in Megatron-LM for the interleaved schedule).
  std::int64_t virtual_pipeline_model_parallel_size = 1;
  std::int64_t microbatch_group_size_per_vp_stage = 0;
  bool overlap_p2p_comm = true;
  /// Gradient buffer, its accumulation and its DP reduction in fp32 (Megatron-Core's
  /// DistributedDataParallelConfig.grad_reduce_in_fp32, on unless --grad-reduce-in-bf16); false
  /// keeps them in bf16/fp16: 2 bytes per parameter instead of 4 in memory and on the wire.
  bool grad_reduce_in_fp32 = true;
  /// Transformer Engine's TP communication overlap (--tp-comm-overlap, userbuffers): the SP
  /// all-gathers and reduce-scatters run chunk by chunk beside the linear GEMMs, taking SMs from
  /// them. Needs sequence parallelism.
  bool tp_comm_overlap = false;
  /// Parameters per DP gradient bucket (--ddp-bucket-size); 0 = Megatron's max(4e7, 1e6·DP).
  std::int64_t ddp_bucket_size = 0;
  /// Parameters of the first gradient bucket (0: as the others): PyTorch DDP's smaller first
  /// bucket, dist._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB of gradients.
  std::int64_t ddp_first_bucket_size = 0;
  /// Expert parallelism (MoE): experts split over expert_model_parallel_size ranks, each
  /// expert's FFN over expert_tensor_parallel_size (0 → tensor_model_parallel_size, Megatron's
  /// default). Megatron-Core lays the expert dimensions out as etp-ep-edp within each pipeline
  /// stage (parallel_state.py, expert_decoder_rank_generator, order tp-cp-ep-dp-pp); expert
  /// gradients reduce over the expert-data-parallel group of size (TP·CP·DP) / (ETP·EP).
  std::int64_t expert_model_parallel_size = 1;
  std::int64_t expert_tensor_parallel_size = 0;
  MoeDispatcher moe_token_dispatcher_type = MoeDispatcher::AllToAll;
  /// Megatron's --moe-router-fusion (Transformer Engine's fused top-k, aux-loss score and aux-loss
  /// kernels) and --moe-permute-fusion (TE's Triton permute / unpermute / chunk sort); both off
  /// by default, as in Megatron-Core's TransformerConfig. They set the MoE layer's kernel counts
  /// (workload/moe_kernels.hpp).
  bool moe_router_fusion = false;
  bool moe_permute_fusion = false;
  /// Megatron's --cuda-graph-scope (with --cuda-graph-impl transformer_engine): the modules
  /// captured in CUDA graphs, whose kernels the host launches as one graph (kCudaGraph* bits).
  std::uint8_t cuda_graph_scope = 0;
  std::int64_t ep() const { return expert_model_parallel_size; }
  std::int64_t etp() const {
    return expert_tensor_parallel_size > 0 ? expert_tensor_parallel_size : tp();
  }
  std::int64_t edp() const { return tp() * cp() * dp() / (etp() * ep()); }
  double grad_bytes() const { return grad_reduce_in_fp32 ? 4.0 : 2.0; }
  /// The ZeRO stage in effect: zero_stage, or 1 when only use_distributed_optimizer is set.
  std::int64_t zero() const {
    return zero_stage > 0 ? zero_stage : (use_distributed_optimizer ? 1 : 0);
  }
  /// HSDP (ZeRO-3 only): parameters, gradients and optimizer states shard over groups of
  /// fsdp_shard_size ranks of DP × CP and replicate across the dp_cp / fsdp_shard_size groups
  /// (torchtitan's dp_shard × dp_replicate mesh); 0 = shard over all of DP × CP.
  std::int64_t fsdp_shard_size = 0;
  std::int64_t zero_shard() const {
    return zero() >= 3 && fsdp_shard_size > 0 ? fsdp_shard_size : dp() * cp();
  }
  std::int64_t zero_replicas() const { return dp() * cp() / zero_shard(); }
  /// The group the experts shard over: expert DP, or under HSDP its ranks in one replica
  /// (torchtitan's dp_shard_mod_ep within a dp_replicate slice; io/config checks that the
  /// replicas divide expert DP).
  std::int64_t expert_shard() const {
    return zero() >= 3 && zero_replicas() > 1 ? edp() / zero_replicas() : edp();
  }

  std::int64_t tp() const { return tensor_model_parallel_size; }
  std::int64_t pp() const { return pipeline_model_parallel_size; }
  std::int64_t dp() const { return data_parallel_size; }
  std::int64_t vpp() const { return virtual_pipeline_model_parallel_size; }
  std::int64_t cp() const { return context_parallel_size; }
  /// The gradient-reduction and optimizer-sharding group: DP × CP (Megatron's dp-cp group).
  std::int64_t dp_cp() const { return dp() * cp(); }
  std::int64_t world() const { return tp() * cp() * pp() * dp(); }
  bool interleaved() const { return vpp() > 1; }
  std::int64_t microbatch_group_size() const {
    return microbatch_group_size_per_vp_stage > 0 ? microbatch_group_size_per_vp_stage : pp();
  }

  /// Number of stages that take an even share of the layers not pinned to the end stages.
  std::int64_t middle_stages() const {
    if (pp() == 1) return 1;
    return pp() - (decoder_first_pipeline_num_layers > 0 ? 1 : 0) -
           (decoder_last_pipeline_num_layers > 0 ? 1 : 0);
  }
  /// Layers (counting the embedding / loss pseudo-layers when accounted for) of pipeline rank
  /// `stage`, over all its chunks (megatron/core/transformer/transformer_block.py::
  /// get_num_layers_to_build before the per-chunk split).
  std::int64_t split_layers_on_stage(std::int64_t stage, std::int64_t layers) const {
    if (pp() > 1 && stage == 0 && decoder_first_pipeline_num_layers > 0)
      return decoder_first_pipeline_num_layers;
    if (pp() > 1 && stage == pp() - 1 && decoder_last_pipeline_num_layers > 0)
      return decoder_last_pipeline_num_layers;
    if (decoder_first_pipeline_num_layers > 0 || decoder_last_pipeline_num_layers > 0) {
      const std::int64_t rest = layers - (pp() > 1 ? decoder_first_pipeline_num_layers : 0) -
                                (pp() > 1 ? decoder_last_pipeline_num_layers : 0);
      return middle_stages() > 0 ? rest / middle_stages() : 0;
    }
    const std::int64_t total = layers + (account_for_embedding_in_pipeline_split ? 1 : 0) +
                               (account_for_loss_in_pipeline_split ? 1 : 0);
    return total / pp();
  }
  /// Transformer layers built in model chunk `chunk` of pipeline rank `stage`: the rank's
  /// split / v, less the embedding on the first virtual stage and the loss on the last when they
  /// are accounted for.
  std::int64_t layers_in_chunk(std::int64_t stage, std::int64_t chunk, std::int64_t layers) const {
    if (!layout_layers.empty())
      return layout_layers[static_cast<std::size_t>(chunk * pp() + stage)];
    std::int64_t n = split_layers_on_stage(stage, layers) / vpp();
    if (stage == 0 && chunk == 0 && account_for_embedding_in_pipeline_split) --n;
    if (stage == pp() - 1 && chunk == vpp() - 1 && account_for_loss_in_pipeline_split) --n;
    return n;
  }
  /// Transformer layers on pipeline stage `stage` of a `layers`-layer model, all chunks.
  std::int64_t layers_on_stage(std::int64_t stage, std::int64_t layers) const {
    std::int64_t n = 0;
    for (std::int64_t c = 0; c < vpp(); ++c) n += layers_in_chunk(stage, c, layers);
    return n;
  }
  /// Global index of the first layer of chunk `chunk` on `stage`: virtual stage c·PP + stage
  /// follows every virtual stage with a smaller index (get_transformer_layer_offset).
  std::int64_t first_layer_of_chunk(std::int64_t stage, std::int64_t chunk,
                                    std::int64_t layers) const {
    std::int64_t first = 0;
    for (std::int64_t c = 0; c <= chunk; ++c)
      for (std::int64_t s = 0; s < pp() && (c < chunk || s < stage); ++s)
        first += layers_in_chunk(s, c, layers);
    return first;
  }
  /// Transformer layers of the whole pipeline (equals the model's when the split is valid).
  std::int64_t total_layers(std::int64_t layers) const {
    std::int64_t n = 0;
    for (std::int64_t s = 0; s < pp(); ++s) n += layers_on_stage(s, layers);
    return n;
  }
};

struct TrainingSpec {
  std::int64_t micro_batch_size = 1;
  std::int64_t global_batch_size = 1;
  Precision precision = Precision::Bf16;
  Fp8Recipe fp8_recipe = Fp8Recipe::Delayed;  ///< precision fp8 only
  /// The linear layers' GEMMs run quantized (fp8 or NVFP4), with TE's casts before them.
  bool quantized() const { return precision == Precision::Fp8 || precision == Precision::Nvfp4; }
  /// Bytes per value of a quantized GEMM operand: fp8 1; NVFP4 half a byte plus an E4M3 scale
  /// per 16 values (TE docs/features/low_precision_training/nvfp4: "1 scaling factor per 16
  /// elements"), 0.5625. bf16 / fp16 2.
  double gemm_operand_bytes() const {
    return precision == Precision::Fp8 ? 1.0 : precision == Precision::Nvfp4 ? 0.5625 : 2.0;
  }
  AttentionBackend attention = AttentionBackend::Flash;
  /// The software stack whose defaults the configuration used (training.stack; "" = none).
  std::string stack;
  /// Host work per iteration outside the kernels' issue (the training loop's logging, norms,
  /// synchronizing .item() calls): the GPUs idle this long at the iteration boundary.
  double host_iteration_ms = 0;
  /// MoE router load imbalance: expert popularity drawn as exp(σ·z), z standard normal from a
  /// seeded generator (σ = moe_expert_load_skew, 0 = every expert gets T·k/E tokens), so the
  /// busiest expert's rank shows in the timeline. Same draw for every layer and micro-batch.
  double moe_expert_load_skew = 0;
  std::int64_t moe_expert_load_seed = 1;
  /// PyTorch-native trainers with pipeline parallelism (torchtitan, NeMo AutoModel) call the
  /// pipeline schedule's step() once per gradient-accumulation step: the iteration runs the
  /// schedule this many times, each over num_microbatches / gradient_accumulation_steps
  /// micro-batches, with a pipeline flush between. 1 = one schedule over all (Megatron).
  std::int64_t gradient_accumulation_steps = 1;
  /// Micro-batches per iteration on one pipeline: GBS / (MBS · DP).
  std::int64_t num_microbatches(std::int64_t dp) const {
    return global_batch_size / (micro_batch_size * dp);
  }
  /// Micro-batches per run of the pipeline schedule.
  std::int64_t microbatches_per_run(std::int64_t dp) const {
    return num_microbatches(dp) / gradient_accumulation_steps;
  }
};

}  // namespace scalescope::workload
