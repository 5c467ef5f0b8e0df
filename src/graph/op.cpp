#include "graph/op.hpp"

#include <array>
#include <iterator>

namespace scalescope::graph {

std::string_view op_name(OpName n) {
  static constexpr std::string_view kNames[] = {"embedding",
                                                "input_norm",
                                                "qkv_gemm",
                                                "rope",
                                                "attention",
                                                "out_proj_gemm",
                                                "bias_dropout_add",
                                                "pre_mlp_norm",
                                                "fc1_gemm",
                                                "activation",
                                                "fc2_gemm",
                                                "final_norm",
                                                "logits_gemm",
                                                "cross_entropy",
                                                "tp_all_reduce",
                                                "tp_all_gather",
                                                "tp_reduce_scatter",
                                                "ce_all_reduce",
                                                "pp_send",
                                                "pp_recv",
                                                "pp_send_recv",
                                                "dp_all_reduce",
                                                "dp_reduce_scatter",
                                                "dp_all_gather",
                                                "emb_all_reduce",
                                                "norm_all_reduce",
                                                "optimizer_step",
                                                "fp8_cast",
                                                "grad_unscale",
                                                "found_inf_all_reduce",
                                                "cp_kv_exchange",
                                                "router",
                                                "router_topk",
                                                "moe_permute",
                                                "moe_unpermute",
                                                "ep_dispatch",
                                                "ep_combine",
                                                "etp_all_gather",
                                                "etp_reduce_scatter",
                                                "expert_fc1_gemm",
                                                "expert_activation",
                                                "expert_fc2_gemm",
                                                "shared_fc1_gemm",
                                                "shared_fc2_gemm",
                                                "q_down_gemm",
                                                "kv_down_gemm",
                                                "latent_norm",
                                                "q_up_gemm",
                                                "kv_up_gemm",
                                                "edp_all_reduce",
                                                "edp_reduce_scatter",
                                                "edp_all_gather",
                                                "aten_gemm",
                                                "aten_op",
                                                "cp_merge",
                                                "qk_norm",
                                                "mtp_norm",
                                                "mtp_proj_gemm",
                                                "moe_sort_chunks"};
  static_assert(std::size(kNames) == static_cast<std::size_t>(OpName::Count),
                "one name per OpName");
  auto i = static_cast<std::size_t>(n);
  return i < std::size(kNames) ? kNames[i] : "?";
}

std::string_view op_kind_name(OpKind k) {
  static constexpr std::array<std::string_view, kNumOpKinds> kNames = {
      "gemm",      "attention",  "elementwise", "norm",           "embedding", "loss",
      "optimizer", "all_reduce", "all_gather",  "reduce_scatter", "send_recv", "all_to_all"};
  auto i = static_cast<std::size_t>(k);
  return i < kNames.size() ? kNames[i] : "?";
}

std::string_view stream_name(Stream s) {
  static constexpr std::array<std::string_view, kNumStreams> kNames = {
      "compute", "tp_comm", "pp_comm", "dp_comm", "pp_prev_comm", "ep_comm"};
  auto i = static_cast<std::size_t>(s);
  return i < kNames.size() ? kNames[i] : "?";
}

std::string_view phase_name(Phase p) {
  static constexpr std::array<std::string_view, 5> kNames = {"fwd", "bwd", "recompute", "optim",
                                                             "other"};
  auto i = static_cast<std::size_t>(p);
  return i < kNames.size() ? kNames[i] : "?";
}

}  // namespace scalescope::graph
