#include "workload/capture.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <sstream>

#include "core/error.hpp"

namespace scalescope::workload {

namespace {

/// Path components split on '.'.
std::vector<std::string> split_path(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, '.');) out.push_back(part);
  return out;
}

/// '*' matches one component; a pattern matches a path that ends with it.
bool matches(const std::string& pattern, const std::string& path) {
  const auto p = split_path(pattern), m = split_path(path);
  if (p.size() > m.size()) return false;
  const std::size_t off = m.size() - p.size();
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] != "*" && p[i] != m[off + i]) return false;
  return true;
}

double dtype_bytes(const std::string& t) {
  if (t == "bfloat16" || t == "float16" || t == "half") return 2;
  if (t == "float32" || t == "float" || t == "int32") return 4;
  if (t == "float64" || t == "int64" || t == "long") return 8;
  if (t == "bool" || t == "uint8" || t == "int8" || t.rfind("float8", 0) == 0) return 1;
  return 4;
}

double numel(const std::vector<std::int64_t>& shape) {
  double n = 1;
  for (std::int64_t d : shape) n *= static_cast<double>(d);
  return n;
}

std::string base_op(const std::string& op) {
  return op.substr(0, op.find('.'));
}

}  // namespace

std::string TpPlan::style_of(const std::string& module) const {
  for (const auto& [pattern, style] : rules)
    if (matches(pattern, module)) return style;
  return {};
}

TpPlan llama_tp_plan() {
  // torchtitan's Llama plan (parallelize_llama.py): q/k/v and w1/w3 column-wise, wo and w2
  // row-wise; Mixtral's experts likewise, the router replicated.
  TpPlan p;
  p.rules = {{"attention.wq", "colwise"},    {"attention.wk", "colwise"},
             {"attention.wv", "colwise"},    {"attention.wo", "rowwise"},
             {"feed_forward.w1", "colwise"}, {"feed_forward.w3", "colwise"},
             {"feed_forward.w2", "rowwise"}, {"experts.*.w1", "colwise"},
             {"experts.*.w3", "colwise"},    {"experts.*.w2", "rowwise"}};
  return p;
}

TpPlan gpt_tp_plan() {
  TpPlan p;
  p.rules = {{"attn.c_attn", "colwise"},
             {"attn.c_proj", "rowwise"},
             {"mlp.c_fc", "colwise"},
             {"mlp.c_proj", "rowwise"}};
  return p;
}

AtenClass aten_class(const std::string& op) {
  static const std::set<std::string> gemm = {"mm",      "addmm",      "bmm",
                                             "baddbmm", "_scaled_mm", "matmul"};
  static const std::set<std::string> attention = {
      "_scaled_dot_product_flash_attention",
      "_scaled_dot_product_efficient_attention",
      "_scaled_dot_product_cudnn_attention",
      "_flash_attention_forward",
      "_flash_attention_backward",
      "_scaled_dot_product_flash_attention_backward",
      "_scaled_dot_product_efficient_attention_backward"};
  static const std::set<std::string> view = {"t",
                                             "view",
                                             "_reshape_alias",
                                             "_unsafe_view",
                                             "transpose",
                                             "expand",
                                             "permute",
                                             "detach",
                                             "slice",
                                             "unsqueeze",
                                             "squeeze",
                                             "alias",
                                             "select",
                                             "split",
                                             "split_with_sizes",
                                             "chunk",
                                             "reshape",
                                             "unbind",
                                             "as_strided",
                                             "lift_fresh_copy",
                                             "getitem",
                                             "<built-in function getitem>",
                                             "view_as",
                                             "expand_as",
                                             "_to_copy_view",
                                             "is_same_size",
                                             "sym_size",
                                             "sym_numel",
                                             "size"};
  static const std::set<std::string> memory = {"add",
                                               "sub",
                                               "mul",
                                               "div",
                                               "pow",
                                               "rsqrt",
                                               "sqrt",
                                               "exp",
                                               "log",
                                               "neg",
                                               "tanh",
                                               "sigmoid",
                                               "silu",
                                               "gelu",
                                               "relu",
                                               "mean",
                                               "sum",
                                               "amax",
                                               "max",
                                               "min",
                                               "_softmax",
                                               "_log_softmax",
                                               "_softmax_backward_data",
                                               "_log_softmax_backward_data",
                                               "native_layer_norm",
                                               "native_layer_norm_backward",
                                               "nll_loss_forward",
                                               "nll_loss_backward",
                                               "embedding",
                                               "embedding_dense_backward",
                                               "cat",
                                               "clone",
                                               "copy_",
                                               "_to_copy",
                                               "zeros_like",
                                               "ones_like",
                                               "full",
                                               "zeros",
                                               "ones",
                                               "empty",
                                               "new_zeros",
                                               "new_empty",
                                               "fill_",
                                               "masked_fill",
                                               "where",
                                               "gelu_backward",
                                               "silu_backward",
                                               "tanh_backward",
                                               "sigmoid_backward",
                                               "threshold_backward",
                                               "slice_backward",
                                               "select_backward",
                                               "cos",
                                               "sin",
                                               "arange",
                                               "reciprocal",
                                               "triu",
                                               "tril",
                                               "topk",
                                               "index",
                                               "index_put",
                                               "scatter",
                                               "gather",
                                               "scatter_add",
                                               "eq",
                                               "ne",
                                               "lt",
                                               "gt",
                                               "bitwise_not",
                                               "logical_not",
                                               "rsub",
                                               "outer",
                                               "sort",
                                               "cumsum",
                                               "var_mean",
                                               "rand_like",
                                               "native_dropout",
                                               "native_dropout_backward",
                                               "pow_",
                                               "add_",
                                               "mul_",
                                               "div_",
                                               "new_ones",
                                               "scalar_tensor",
                                               "_unsafe_index",
                                               "index_select",
                                               "masked_fill_",
                                               "expand_copy",
                                               "constant_pad_nd",
                                               "fill",
                                               "zero_",
                                               "empty_like",
                                               "empty_strided",
                                               "new_empty_strided",
                                               "full_like",
                                               "rand",
                                               "randn"};
  const std::string b = base_op(op);
  if (gemm.count(b)) return AtenClass::Gemm;
  if (attention.count(b)) return AtenClass::Attention;
  if (view.count(b) || view.count(op)) return AtenClass::View;
  if (memory.count(b)) return AtenClass::MemoryBound;
  // In-place variants (add_, sub_, …) of the memory-bound ops.
  if (b.size() > 1 && b.back() == '_' && memory.count(b.substr(0, b.size() - 1)))
    return AtenClass::MemoryBound;
  return AtenClass::Unknown;
}

LoweredBlock lower_block(const Capture& c, const TpPlan& plan, std::int64_t tp, bool sp) {
  const auto& nodes = c.block;
  const std::size_t n = nodes.size();
  const double t = static_cast<double>(tp);
  LoweredBlock out;
  // The block's result: the first tensor the output node returns. Forward = its ancestors.
  std::int64_t output = -1;
  for (std::size_t i = 0; i < n; ++i)
    if (nodes[i].kind == "output") output = static_cast<std::int64_t>(i);
  if (output < 0 || nodes[static_cast<std::size_t>(output)].inputs.empty())
    throw_input("capture: the block graph has no output");
  std::vector<bool> forward(n, false);
  std::vector<std::uint32_t> stack = {nodes[static_cast<std::size_t>(output)].inputs.front()};
  while (!stack.empty()) {
    const std::uint32_t i = stack.back();
    stack.pop_back();
    if (forward[i]) continue;
    forward[i] = true;
    for (std::uint32_t j : nodes[i].inputs) stack.push_back(j);
  }
  std::vector<std::vector<std::uint32_t>> consumers(n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::uint32_t j : nodes[i].inputs) consumers[j].push_back(static_cast<std::uint32_t>(i));
  // Parameters (their module's TP style) and, through views, which node reads which weight.
  std::vector<const CapturedNode*> weight_of(n, nullptr);
  for (std::size_t i = 0; i < n; ++i) {
    const CapturedNode& d = nodes[i];
    if (d.kind == "placeholder" && !d.param.empty()) {
      const std::string style = plan.style_of(d.module);
      double p = d.shapes.empty() ? 0 : numel(d.shapes[0]);
      const bool weight = d.param.size() >= 6 && d.param.substr(d.param.size() - 6) == "weight";
      if (style == "colwise" || (style == "rowwise" && weight)) p /= t;
      out.params_on_rank += p;
    }
  }
  std::vector<bool> sharded(n, false);
  // Partial sums (a row-parallel output, a column-parallel input gradient) are all-reduced over
  // TP where something other than a sum of partials first reads them: the q, k, v input
  // gradients add up before one all-reduce, as DTensor's Replicate input does.
  std::vector<bool> partial(n, false);
  // Sequence parallelism: activations outside the TP regions are split along the sequence
  // (the block's input first); a plan GEMM gathers such an operand (once per tensor and pass),
  // partial sums are reduce-scattered back, as Megatron's SP does.
  std::vector<bool> seq(n, false);
  if (sp && tp > 1)
    for (std::size_t i = 0; i < n; ++i)
      if (nodes[i].kind == "placeholder" && nodes[i].param.empty()) {
        seq[i] = true;  // the hidden states
        break;
      }
  std::set<std::pair<std::uint32_t, bool>> gathered;
  auto tensor_bytes = [&](const CapturedNode& d) {
    double b = 0;
    for (std::size_t k = 0; k < d.shapes.size(); ++k)
      b += numel(d.shapes[k]) * dtype_bytes(k < d.dtypes.size() ? d.dtypes[k] : "float32");
    return b;
  };
  for (std::size_t i = 0; i < n; ++i) {
    const CapturedNode& d = nodes[i];
    if (d.kind != "call_function") continue;
    const bool fwd = forward[i];
    const graph::Phase phase = fwd ? graph::Phase::Forward : graph::Phase::Backward;
    bool any_sharded = false;
    for (std::uint32_t j : d.inputs) any_sharded = any_sharded || sharded[j];
    const AtenClass cls = aten_class(d.op);
    graph::Op op;
    op.phase = phase;
    op.layer = 0;
    auto emit = [&](graph::Op o) { (fwd ? out.forward : out.backward).push_back(o); };
    if (cls == AtenClass::View) {
      sharded[i] = any_sharded;
      for (std::uint32_t j : d.inputs) {
        partial[i] = partial[i] || partial[j];
        seq[i] = seq[i] || seq[j];
      }
      continue;
    }
    bool all_partial = !d.inputs.empty(), any_partial = false;
    for (std::uint32_t j : d.inputs) {
      all_partial = all_partial && partial[j];
      any_partial = any_partial || partial[j];
    }
    if (any_partial && base_op(d.op) == "add" && all_partial) {
      partial[i] = true;  // a sum of partial sums stays one
    } else if (any_partial) {
      for (std::uint32_t j : d.inputs) {
        if (!partial[j]) continue;
        graph::Op ar;
        ar.kind = sp ? graph::OpKind::ReduceScatter : graph::OpKind::AllReduce;
        ar.role = graph::CommRole::Tp;
        ar.stream = graph::Stream::TpComm;
        ar.name = sp ? graph::OpName::TpReduceScatter : graph::OpName::TpAllReduce;
        ar.phase = forward[j] ? graph::Phase::Forward : graph::Phase::Backward;
        ar.layer = 0;
        ar.comm_bytes = tensor_bytes(nodes[j]);
        if (tp > 1) (forward[j] ? out.forward : out.backward).push_back(ar);
        partial[j] = false;
        seq[j] = sp && tp > 1;
      }
    }
    if (cls == AtenClass::Gemm) {
      // Operands: the last two inputs ([b,] m × k and [b,] k × n); addmm's first is the bias.
      if (d.inputs.size() < 2 || d.shapes.empty()) continue;
      const auto& a = nodes[d.inputs[d.inputs.size() - 2]].shapes;
      const auto& o = d.shapes[0];
      if (a.empty() || o.size() < 2) continue;
      double m = static_cast<double>(o[o.size() - 2]), nn = static_cast<double>(o.back());
      double k = static_cast<double>(a[0].back());
      const double batch = o.size() == 3 ? static_cast<double>(o[0]) : 1.0;
      m *= batch;
      const std::string style = plan.style_of(d.module);
      bool reduce = false;
      // The tensor behind view-like ops: one gather serves every view of it in a pass.
      const auto root = [&](std::uint32_t j) {
        while (nodes[j].kind == "call_function" && aten_class(nodes[j].op) == AtenClass::View &&
               !nodes[j].inputs.empty())
          j = nodes[j].inputs.front();
        return j;
      };
      if (!style.empty())
        for (std::uint32_t j : d.inputs)
          if (seq[j] && gathered.insert({root(j), fwd}).second) {
            // The sequence-split operand, gathered over TP before the GEMM (S = its full size).
            graph::Op ag;
            ag.kind = graph::OpKind::AllGather;
            ag.role = graph::CommRole::Tp;
            ag.stream = graph::Stream::TpComm;
            ag.name = graph::OpName::TpAllGather;
            ag.phase = phase;
            ag.layer = 0;
            ag.comm_bytes = tensor_bytes(nodes[j]);
            emit(ag);
          }
      if (!style.empty()) {
        // nn.Linear's weight [out, in]: find it among the module's parameters.
        std::int64_t out_dim = 0, in_dim = 0;
        for (const CapturedNode& p : nodes)
          if (p.kind == "placeholder" && p.module == d.module && !p.shapes.empty() &&
              p.shapes[0].size() == 2) {
            out_dim = p.shapes[0][0];
            in_dim = p.shapes[0][1];
          }
        const bool wgrad =
            !fwd && ((o[0] == out_dim && o[1] == in_dim) || (o[0] == in_dim && o[1] == out_dim));
        if (style == "colwise") {
          if (fwd) {
            nn /= t;
            sharded[i] = true;
          } else if (wgrad) {
            (o[0] == out_dim ? m : nn) /= t;
          } else {
            k /= t;
            reduce = true;  // partial sums of the input gradient
          }
        } else {  // rowwise
          if (fwd) {
            k /= t;
            reduce = true;  // partial sums of the output
          } else if (wgrad) {
            (o[0] == in_dim ? m : nn) /= t;
          } else {
            nn /= t;
            sharded[i] = true;
          }
        }
      } else if (any_sharded) {
        m /= t;  // per-head batched GEMMs on this rank's heads
        sharded[i] = true;
      } else {
        bool any_seq = false;
        for (std::uint32_t j : d.inputs) any_seq = any_seq || seq[j];
        if (any_seq) {
          m /= t;  // a replicated GEMM (a router) on this rank's part of the sequence
          seq[i] = true;
        }
      }
      op.kind = graph::OpKind::Gemm;
      op.name = graph::OpName::AtenGemm;
      op.shape = {static_cast<std::uint32_t>(std::max(1.0, m)),
                  static_cast<std::uint32_t>(std::max(1.0, nn)),
                  static_cast<std::uint32_t>(std::max(1.0, k))};
      op.flops = 2 * m * nn * k;
      op.mem_bytes = 2 * (m * k + k * nn + m * nn);
      emit(op);
      if (style.empty())
        out.other_gemm_flops += op.flops;
      else
        out.linear_gemm_flops += op.flops;
      partial[i] = reduce && tp > 1;
      continue;
    }
    double bytes = tensor_bytes(d);
    for (std::uint32_t j : d.inputs)
      if (nodes[j].kind != "get_attr") bytes += tensor_bytes(nodes[j]);
    if (cls == AtenClass::Unknown) ++out.unknown_ops[base_op(d.op)];
    sharded[i] = any_sharded;
    bool any_seq = false;
    for (std::uint32_t j : d.inputs) any_seq = any_seq || seq[j];
    seq[i] = any_seq && !any_sharded;
    op.kind = cls == AtenClass::Attention ? graph::OpKind::Attention : graph::OpKind::Elementwise;
    op.name = cls == AtenClass::Attention ? graph::OpName::Attention : graph::OpName::AtenOp;
    op.mem_bytes = any_sharded || seq[i] ? bytes / t : bytes;
    emit(op);
  }
  // What autograd keeps: forward outputs (not views) that a backward op reads.
  for (std::size_t i = 0; i < n; ++i) {
    if (!forward[i] || nodes[i].kind != "call_function" ||
        aten_class(nodes[i].op) == AtenClass::View)
      continue;
    bool used_later = false;
    std::function<bool(std::uint32_t, int)> read_by_backward = [&](std::uint32_t j, int depth) {
      for (std::uint32_t c2 : consumers[j]) {
        if (!forward[c2]) return true;
        if (depth < 4 && aten_class(nodes[c2].op) == AtenClass::View &&
            read_by_backward(c2, depth + 1))
          return true;
      }
      return false;
    };
    used_later = read_by_backward(static_cast<std::uint32_t>(i), 0);
    if (used_later) out.saved_bytes += tensor_bytes(nodes[i]) / (sharded[i] || seq[i] ? t : 1.0);
  }
  return out;
}

}  // namespace scalescope::workload
