// The lowering of a captured graph (workload/capture_lowering.hpp): each node's op on this rank
// and the collectives it waits for. TP / SP / CP / EP sharding, GEMMs (async TP's chunks, fp8
// casts), attention (CP's key/value exchange, ring attention), embeddings and loss parallelism;
// EP's all-to-all dispatch and combine.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "workload/capture_internal.hpp"
#include "workload/capture_lowering.hpp"
#include "workload/ring_attention.hpp"

namespace scalescope::workload::detail {

// Context parallelism around an attention op at node x (Megatron's AttnFuncWithCPAndKVP2P, as
// the builder models it): K and V of the whole sequence, `kv` bytes on this rank, gathered
// over the CP group (a ring passing c − 1 blocks); the backward sends dK, dV back the same way.
// With the ring (cp_comm_type p2p), the attention op itself becomes PyTorch's ring attention
// (ring_attention.hpp): its first step stays the node's op, the further steps and merges run
// after it (`ring_rest`), the dK, dV blocks travel in fp32 (twice the bytes).
void Lowering::cp_exchange(std::uint32_t x, graph::Phase phase, double kv, std::uint32_t k_root) {
  if (opt.cp <= 1) return;
  graph::Op gather = collective_op(graph::OpKind::AllGather, graph::CommRole::Cp,
                                   graph::OpName::CpKvExchange, phase, kv);
  graph::Op reduce = gather;
  reduce.kind = graph::OpKind::ReduceScatter;
  if (opt.cp_all_gather) {
    pre[x].push_back({gather, k_root});
  } else {
    beside[x].push_back({gather, true});
    reduce.comm_bytes *= 2;
    const graph::Op& whole = *own[x];
    // Elements of this rank's attention output and of one K plus V block (bf16 K and V).
    const RingTensors tensors{static_cast<double>(whole.shape[0]) * whole.shape[1] *
                                  (whole.value_dim > 0 ? whole.value_dim : whole.shape[2]),
                              kv / static_cast<double>(opt.cp) / 2};
    std::vector<graph::Op> ring = ring_attention(whole, opt.cp, RingImpl::PyTorch, tensors);
    if (phase == graph::Phase::Forward) out.attention_forward.back() = ring;
    own[x] = ring.front();
    ring_rest[x].assign(ring.begin() + 1, ring.end());
  }
  if (phase == graph::Phase::Backward) beside[x].push_back({reduce, opt.cp_all_gather});
}

// The bytes on this rank of the K or V an attention op reads, before GQA's repeat and for the
// whole sequence: the smallest tensor on the way back through views and copies (the repeat
// makes larger ones; a split of a fused QKV projection's output is where it starts).
double Lowering::kv_tensor_bytes(std::uint32_t j) const {
  double b = std::numeric_limits<double>::infinity();
  for (int depth = 0; depth < 32; ++depth) {
    if (!nodes[j].shapes.empty())
      b = std::min(b, tensor_bytes(nodes[j]) / (st[j].sharded ? t : 1.0));
    const bool pass = is_view(j) || base_op(nodes[j].op) == "clone" ||
                      base_op(nodes[j].op) == "_unsafe_view" || base_op(nodes[j].op) == "expand";
    if (!pass || nodes[j].inputs.empty()) break;
    j = nodes[j].inputs.front();
  }
  return std::isfinite(b) ? b : 0.0;
}

double Lowering::kv_bytes(std::uint32_t k, std::uint32_t v) const {
  return kv_tensor_bytes(k) + kv_tensor_bytes(v);
}

void Lowering::lower_node(std::size_t i) {
  const CapturedNode& d = nodes[i];
  if (d.kind != "call_function") return;
  for (std::uint32_t j : d.inputs) st[i].tokens = st[i].tokens || st[j].tokens;
  if (moe_scaled) {
    // Another rank's expert (its module, or only its tensors as inputs): nothing runs here.
    // A local expert's tensors carry the token copies of all ep ranks.
    bool all_remote = false;
    for (std::uint32_t j : d.inputs) {
      if (nodes[j].kind == "get_attr" ||
          (nodes[j].kind == "placeholder" && !nodes[j].param.empty()))
        continue;
      all_remote = st[j].remote;
      if (!all_remote) break;
    }
    // Scaled: same-sized results of a local expert's tensors (its activation, the routing
    // weights' product, their gradients); the scatter into all tokens is not.
    for (std::uint32_t j : d.inputs)
      if (!d.shapes.empty() && !nodes[j].shapes.empty() &&
          numel(d.shapes[0]) == numel(nodes[j].shapes[0]))
        st[i].scale = std::max(st[i].scale, st[j].scale);
    st[i].remote = remote_expert(d.module) || all_remote;
    if (st[i].remote) return;
    if (expert_of(d.module) >= 0 && aten_class(d.op) != AtenClass::Gemm)
      st[i].scale = expert_factor(d.module);
  }
  st[i].tokens = st[i].tokens && (d.shapes.empty() || numel(d.shapes[0]) >= tokens);
  const bool fwd = forward[i];
  const graph::Phase phase = fwd ? graph::Phase::Forward : graph::Phase::Backward;
  bool any_sharded = false;
  for (std::uint32_t j : d.inputs) any_sharded = any_sharded || st[j].sharded;
  const AtenClass cls = aten_class(d.op);
  graph::Op op;
  op.phase = phase;
  op.layer = 0;
  if (cls == AtenClass::Collective) {
    // A collective PyTorch issued itself (a DTensor-parallelized capture), on the group it
    // names, as it is: nccl-tests' size S is the gathered output of an all-gather and the input
    // of a reduce-scatter or an all-reduce (the capture's shapes are this rank's).
    const std::string name = d.op.substr(d.op.find('.') + 1, d.op.rfind('.') - d.op.find('.') - 1);
    const bool counts = d.op.rfind("c10d.alltoall_base_", 0) == 0;
    if (d.inputs.empty() || (d.shapes.empty() && !counts) || (counts && d.inputs.size() < 2))
      throw_input("captured collective {} (node {}) has no input or output", d.op, i);
    const bool a2a = counts || name == "all_to_all_single";
    if (a2a ? d.group_size != opt.parallel_ep : d.group_size != opt.parallel_tp)
      throw_input(
          "captured collective {} (node {}) runs over a group of {} ranks; the {} group has {} "
          "(other groups are not lowered yet)",
          d.op, i, d.group_size, a2a ? "expert-parallel" : "tensor-parallel",
          a2a ? opt.parallel_ep : opt.parallel_tp);
    if (d.group_size == 1) {  // a group of one rank (TP 1): nothing moves
      st[i] = st[d.inputs[0]];
      return;
    }
    graph::OpKind kind = graph::OpKind::AllReduce;
    graph::OpName opname = graph::OpName::TpAllReduce;
    double bytes = tensor_bytes(nodes[d.inputs[0]]);
    if (a2a) {
      // EP's token exchange (transformers' AllToAllEP): nccl-tests' size is the send buffer.
      // In each pass the dispatch and the combine alternate (backward: the combine's gradient
      // first); the count exchange before a forward dispatch is read back by the host, which
      // waits for it (`.tolist()` of the split sizes).
      const std::size_t pass = fwd ? 0 : 1;
      const bool first = counts || captured_a2a[pass] % 2 == 0;
      if (!counts) ++captured_a2a[pass];
      graph::Op exchange =
          collective_op(graph::OpKind::AllToAll, graph::CommRole::Ep,
                        first == fwd ? graph::OpName::EpDispatch : graph::OpName::EpCombine, phase,
                        tensor_bytes(nodes[d.inputs[counts ? 1 : 0]]));
      exchange.host_sync = counts ? 1 : 0;
      pre[i].push_back({exchange, root(d.inputs[counts ? 1 : 0])});
      st[i] = st[d.inputs[counts ? 1 : 0]];
      return;
    }
    if (name == "all_gather_into_tensor") {
      kind = graph::OpKind::AllGather;
      opname = graph::OpName::TpAllGather;
      bytes = tensor_bytes(d);
    } else if (name == "reduce_scatter_tensor") {
      kind = graph::OpKind::ReduceScatter;
      opname = graph::OpName::TpReduceScatter;
    } else if (name != "all_reduce") {
      throw_input("captured collective {} (node {}) is not lowered yet", d.op, i);
    }
    pre[i].push_back(
        {collective_op(kind, graph::CommRole::Tp, opname, phase, bytes), root(d.inputs[0])});
    st[i] = st[d.inputs[0]];
    st[i].reduced = true;
    return;
  }
  if (cls == AtenClass::View) {
    st[i].sharded = any_sharded;
    if (!d.inputs.empty()) st[i].scale = st[d.inputs.front()].scale;
    for (std::uint32_t j : d.inputs) {
      st[i].partial = st[i].partial || st[j].partial;
      st[i].seq = st[i].seq || st[j].seq;
    }
    return;
  }
  // Partial sums (a row-parallel output, a column-parallel input gradient) are all-reduced
  // over TP where something other than a sum of partials first reads them: the q, k, v input
  // gradients add up before one all-reduce, as DTensor's Replicate input does.
  bool all_partial = !d.inputs.empty(), any_partial = false;
  for (std::uint32_t j : d.inputs) {
    all_partial = all_partial && st[j].partial;
    any_partial = any_partial || st[j].partial;
  }
  if (any_partial && base_op(d.op) == "add" && all_partial) {
    st[i].partial = true;  // a sum of partial sums stays one
  } else if (any_partial) {
    for (std::uint32_t j : d.inputs) {
      if (!st[j].partial) continue;
      const graph::Op ar = collective_op(
          sp ? graph::OpKind::ReduceScatter : graph::OpKind::AllReduce, graph::CommRole::Tp,
          sp ? graph::OpName::TpReduceScatter : graph::OpName::TpAllReduce,
          forward[j] ? graph::Phase::Forward : graph::Phase::Backward, cp_bytes(j));
      if (tp > 1) pre[i].push_back({ar, root(j)});
      if (tp > 1 && sp) scattered.insert(root(j));
      if (tail[root(j)] && sp) {
        // fused_matmul_reduce_scatter sums the t partial sums it received in one kernel: it
        // reads all of them ([m, n] bf16) and writes this rank's [m/t, n].
        graph::Op sum;
        sum.kind = graph::OpKind::Elementwise;
        sum.name = graph::OpName::AtenOp;
        sum.phase = forward[j] ? graph::Phase::Forward : graph::Phase::Backward;
        sum.layer = 0;
        sum.mem_bytes = cp_bytes(j) * (1 + 1 / t);
        casts[i].push_back(sum);
      }
      st[j].partial = false;
      st[j].seq = sp && tp > 1;
      st[root(j)].reduced = tp > 1;
    }
  }
  if (cls == AtenClass::Gemm) {
    lower_gemm(i, d, fwd, phase, any_sharded, op);
    return;
  }
  double bytes = cp_bytes(static_cast<std::uint32_t>(i));
  for (std::uint32_t j : d.inputs)
    if (nodes[j].kind != "get_attr") bytes += cp_bytes(j);
  if (cls == AtenClass::Unknown) ++out.unknown_ops[base_op(d.op)];
  st[i].sharded = any_sharded;
  bool any_seq = false;
  for (std::uint32_t j : d.inputs) any_seq = any_seq || st[j].seq;
  st[i].seq = any_seq && !any_sharded;
  // A fused SDPA kernel's query, key and value inputs: the first three, after the output
  // gradient for a backward op (its schema: grad_out, query, key, value, out, logsumexp, …).
  const std::size_t q_at = cls == AtenClass::Attention && is_backward_op(d.op) ? 1 : 0;
  if (cls == AtenClass::Attention && d.inputs.size() > q_at &&
      !nodes[d.inputs[q_at]].shapes.empty() && nodes[d.inputs[q_at]].shapes[0].size() == 4) {
    // A fused SDPA kernel (PyTorch 2.x): q [b, h, s, dh], k [b, h, sk, dh]; forward
    // 4·b·h·s·sk·dh FLOPs, half of it under a causal mask, the backward 2.5× the forward (the
    // builder's fused-attention model, MODELING §1.1).
    const auto& q = nodes[d.inputs[q_at]].shapes[0];
    const double sk = d.inputs.size() > q_at + 1 && !nodes[d.inputs[q_at + 1]].shapes.empty() &&
                              nodes[d.inputs[q_at + 1]].shapes[0].size() == 4
                          ? static_cast<double>(nodes[d.inputs[q_at + 1]].shapes[0][2])
                          : static_cast<double>(q[2]);
    const double heads = static_cast<double>(q[1]) / (any_sharded ? t : 1.0);
    const double bh = static_cast<double>(q[0]) * heads;
    op.kind = graph::OpKind::Attention;
    op.attention_impl = sdpa_impl;
    op.name = graph::OpName::Attention;
    // With CP: this rank's s/c queries against the whole sequence, 1/c of the work, the
    // kernel running on blocks of s/c.
    op.shape = {static_cast<std::uint32_t>(std::max(1.0, bh)),
                static_cast<std::uint32_t>(static_cast<double>(q[2]) / cp),
                static_cast<std::uint32_t>(q[3])};
    const bool causal = costed_causal(opt.causal_mask, d.causal, !d.mask.empty());
    op.flops = (fwd ? 1.0 : 2.5) * (causal ? 0.5 : 1.0) * 4 * bh * static_cast<double>(q[2]) * sk *
               static_cast<double>(q[3]) / cp;
    op.mem_bytes = any_sharded ? bytes / t : bytes;
    own[i] = op;
    if (fwd) out.attention_forward.push_back({op});
    if (d.inputs.size() >= q_at + 3)
      cp_exchange(static_cast<std::uint32_t>(i), phase,
                  kv_bytes(d.inputs[q_at + 1], d.inputs[q_at + 2]), root(d.inputs[q_at + 1]));
    return;
  }
  op.kind = cls == AtenClass::Attention ? graph::OpKind::Attention : graph::OpKind::Elementwise;
  op.name = cls == AtenClass::Attention ? graph::OpName::Attention : graph::OpName::AtenOp;
  op.mem_bytes = any_sharded || st[i].seq ? bytes / t : bytes;
  // The outer graph's vocabulary-parallel ops (a rowwise nn.Embedding, a colwise output layer):
  // PyTorch's RowwiseParallel embedding and loss_parallel, as Megatron's
  // VocabParallelEmbedding and vocab-parallel cross-entropy.
  const std::string bop = base_op(d.op);
  const auto weight_style = [&](std::uint32_t j) {
    const CapturedNode& w = nodes[root(j)];
    return w.kind == "placeholder" && !w.param.empty() ? plan.style_of(w.module) : std::string();
  };
  if (bop == "embedding" && d.inputs.size() >= 2) {
    // A lookup reads the rows it returns and the token ids, not the table: 2 · out + ids.
    op.mem_bytes = 2 * cp_bytes(static_cast<std::uint32_t>(i)) + cp_bytes(d.inputs[1]);
    st[i].sharded = false;
    st[i].seq = false;
    // Each rank looks up its vocabulary shard: partial sums, reduced (scattered with SP).
    if (weight_style(d.inputs[0]) == "rowwise") st[i].partial = tp > 1;
  } else if (bop == "embedding_dense_backward" && d.inputs.size() >= 2) {
    // Scatter-add of the gradient rows into the rank's [V/t, h] table gradient; vocabulary-
    // parallel when the lookup with the same ids was (a tied table's module path may be
    // another's).
    bool vocab_parallel = plan.style_of(d.module) == "rowwise";
    for (std::uint32_t e = 0; e < n && !vocab_parallel; ++e)
      if (forward[e] && base_op(nodes[e].op) == "embedding" && nodes[e].inputs.size() >= 2 &&
          root(nodes[e].inputs[1]) == root(d.inputs[1]))
        vocab_parallel = weight_style(nodes[e].inputs[0]) == "rowwise";
    if (vocab_parallel && st[d.inputs[0]].seq && tp > 1) {
      graph::Op ag = collective_op(
          graph::OpKind::AllGather, graph::CommRole::Tp, graph::OpName::TpAllGather, phase,
          cp_bytes(d.inputs[0]));  // with SP the output gradient is gathered first
      pre[i].push_back({ag, root(d.inputs[0])});
    }
    op.mem_bytes = cp_bytes(static_cast<std::uint32_t>(i)) / (vocab_parallel ? t : 1.0) +
                   2 * cp_bytes(d.inputs[0]) + cp_bytes(d.inputs[1]);
    st[i].sharded = vocab_parallel && tp > 1;
    st[i].seq = false;
  } else if ((bop == "_log_softmax" || bop == "nll_loss_forward") && any_sharded && tp > 1) {
    // Loss parallelism: the softmax's max and sum, the target logit, each an all-reduce of
    // one fp32 per row over TP.
    const auto& in = nodes[d.inputs.front()].shapes;
    const double rows =
        in.empty() || in[0].empty() ? 1.0 : numel(in[0]) / static_cast<double>(in[0].back());
    graph::Op ar = collective_op(graph::OpKind::AllReduce, graph::CommRole::Tp,
                                 graph::OpName::CeAllReduce, phase, 4 * rows / cp);
    for (int k = 0; k < (bop == "_log_softmax" ? 2 : 1); ++k) beside[i].push_back({ar, false});
    if (bop == "nll_loss_forward") st[i].sharded = false;  // the loss is whole on every rank
    if (bop == "_log_softmax" && !compiled) {
      // Eager, loss_parallel's _log_softmax runs torch._decomp's decomposition on the local
      // shard B (fp32): amax (reads B), shifted = x − max (B → B), exp (B → B), sum (reads
      // B), result = shifted − log(sum) (B → B): 7·B, and `shifted` is alive beside exp's
      // output and then beside the result (one B besides input and output). A low-precision
      // input is first copied to fp32, a low-precision result cast back.
      // The intermediates are the op's own transient, beside what the liveness pass adds.
      const auto y = static_cast<std::uint32_t>(i);
      const double b32 = rank_bytes(y) * 4 / dtype_bytes(dtype_of(d));
      op.mem_bytes = 7 * b32;
      double intermediates = b32;
      if (dtype_of(d) != "float32") op.mem_bytes += b32 + rank_bytes(y);
      if (dtype_of(nodes[d.inputs.front()]) != "float32") {
        op.mem_bytes += b32 + rank_bytes(d.inputs.front());
        intermediates += b32;
      }
      op.mem_transient = static_cast<std::int64_t>(intermediates);
    }
  } else if (bop == "nll_loss_backward" && any_sharded && tp > 1 && !compiled &&
             !d.shapes.empty()) {
    // Eager loss_parallel fuses the log-softmax backward into this op (no all-gather of the
    // gradient): (zeros_like(x) with −1 scattered at the targets + exp(x)) · grad, on the
    // local shard B: zeros (writes B), exp (B → B), add (2·B → B), mul (B → B): 8·B; at
    // the add, the zeros, exp(x) and their sum are alive, two B besides the output.
    const double b = rank_bytes(static_cast<std::uint32_t>(i));
    op.mem_bytes = 8 * b;
    op.mem_transient = static_cast<std::int64_t>(2 * b);
  } else if (bop == "_log_softmax_backward_data" && any_sharded && tp > 1 && !compiled &&
             !d.shapes.empty() && !d.inputs.empty() &&
             dtype_of(nodes[d.inputs.front()]) == dtype_of(d)) {
    // ... and this one only returns its gradient, converted to the input's dtype: no kernel
    // and no copy when it already is one.
    alias[i] = true;
    return;
  }
  own[i] = op;
}

void Lowering::lower_gemm(std::size_t i, const CapturedNode& d, bool fwd, graph::Phase phase,
                          bool any_sharded, graph::Op& op) {
  // Operands: the last two inputs ([b,] m × k and [b,] k × n); addmm's first is the bias.
  // PyTorch's _grouped_mm (grouped expert GEMMs: Hugging Face's grouped_mm experts, torchtitan's
  // MoE) takes (a, b, offsets): a [S, k] by b [E, k, n] → [S, n], each row through its group's
  // matrix; or, for the weights' gradient, a [k, S] by b [S, n] → [E, k, n], each group summing
  // its rows. Either way 2·numel(a)·n FLOPs: m = S rows (or k), k the reduction.
  const bool grouped = base_op(d.op) == "_grouped_mm";
  if (d.inputs.size() < 2 || d.shapes.empty()) return;
  const auto& a = nodes[d.inputs[grouped ? 0 : d.inputs.size() - 2]].shapes;
  const auto& o = d.shapes[0];
  if (a.empty() || o.size() < 2) return;
  double m = static_cast<double>(o[o.size() - 2]), nn = static_cast<double>(o.back());
  double k = static_cast<double>(a[0].back());
  const double batch = o.size() == 3 && !grouped ? static_cast<double>(o[0]) : 1.0;
  m *= batch;
  if (grouped && a[0].size() == 2) m = static_cast<double>(a[0][0]);
  // The forward GEMM of the same Linear: this one, or for a backward GEMM the one reading
  // the same weight (a dgrad) or the same saved input (a wgrad). A tied weight (GPT's head
  // sharing the embedding) gives its backward GEMMs the other module's path, or none.
  std::int64_t owner = -1;
  if (!plan.style_of(d.module).empty() && fwd) owner = static_cast<std::int64_t>(i);
  if (owner < 0 && !fwd)
    for (std::uint32_t j : d.inputs) {
      const std::uint32_t r = root(j);
      if (const auto w = gemm_of_weight.find(r); w != gemm_of_weight.end())
        owner = w->second;
      else if (const auto in = gemm_of_input.find(r);
               owner < 0 && in != gemm_of_input.end() && d.module.empty())
        owner = in->second;  // a wgrad without a module path (a tied weight's second use)
    }
  const std::string style = owner >= 0
                                ? plan.style_of(nodes[static_cast<std::size_t>(owner)].module)
                                : plan.style_of(d.module);
  bool reduce = false;
  bool weight_gradient = false;
  bool data_gradient = false;
  double weight_elements = 0;  // fp8: the rank's share of the layer's weight
  if (!style.empty())
    for (std::uint32_t j : d.inputs)
      // An expert's backward reads the token copies its forward gathered and kept (as
      // Megatron's grouped GEMMs do); only other tensors are gathered.
      if (st[j].seq && !(expert_of(d.module) >= 0 && !fwd && forward[root(j)]) &&
          gathered.insert({expert_of(d.module) >= 0 ? slice_of(j) : root(j), fwd}).second) {
        // The sequence-split operand, gathered over TP before the GEMM (S = its full size);
        // one gather serves every view of the tensor in a pass. An expert gathers its own
        // token copies (Megatron's ETP all-gather after the dispatch), ep× them under EP.
        graph::Op ag = collective_op(
            graph::OpKind::AllGather, graph::CommRole::Tp, graph::OpName::TpAllGather, phase,
            cp_bytes(j) * (expert_of(d.module) >= 0 && moe_scaled ? expert_factor(d.module) : 1.0));
        pre[i].push_back({ag, root(j)});
        st[root(j)].reduced = true;
        if (j == d.inputs[d.inputs.size() - 2]) row_gathers.insert({root(j), fwd});
      }
  if (!style.empty()) {
    // nn.Linear's weight [out, in]: what its forward GEMM reads, else among the module's
    // parameters.
    std::int64_t out_dim = 0, in_dim = 0;
    if (owner >= 0)
      if (const auto w = weight_of_gemm.find(static_cast<std::uint32_t>(owner));
          w != weight_of_gemm.end() && nodes[w->second].shapes[0].size() == 2) {
        out_dim = nodes[w->second].shapes[0][0];
        in_dim = nodes[w->second].shapes[0][1];
      }
    for (const CapturedNode& p : nodes)
      if (out_dim == 0 && p.kind == "placeholder" && p.module == d.module && !p.shapes.empty() &&
          p.shapes[0].size() == 2) {
        out_dim = p.shapes[0][0];
        in_dim = p.shapes[0][1];
      }
    // Backward: dgrad reads the weight (through views), wgrad produces its gradient (shapes
    // alone cannot tell them apart when tokens = a weight dimension).
    bool reads_weight = false;
    for (std::uint32_t j : d.inputs) reads_weight = reads_weight || is_weight(j);
    const bool wgrad = !fwd && !reads_weight;
    if (wgrad) st[i].tokens = false;  // a weight's gradient: tokens summed out
    weight_gradient = wgrad;
    data_gradient = !fwd && reads_weight;
    weight_elements = static_cast<double>(out_dim) * static_cast<double>(in_dim) / t;
    if (style == "colwise") {
      if (fwd) {
        nn /= t;
        st[i].sharded = true;
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
        st[i].sharded = true;
      }
    }
  } else if (any_sharded) {
    m /= t;  // per-head batched GEMMs on this rank's heads
    st[i].sharded = true;
  } else {
    bool any_seq = false, reads_weight = false;
    for (std::uint32_t j : d.inputs) {
      any_seq = any_seq || st[j].seq;
      reads_weight = reads_weight || is_weight(j);
    }
    // A replicated GEMM (a router; experts at ETP 1) on this rank's part of the sequence:
    // its rows, or for a weight gradient the tokens it sums over.
    if (any_seq && !fwd && !reads_weight) {
      k /= t;
      weight_gradient = true;
      st[i].tokens = false;
    } else if (any_seq) {
      m /= t;
      st[i].seq = true;
    }
  }
  if (grouped && o.size() == 3 && !fwd) {  // the experts' weight gradient, [E, k, n]
    weight_gradient = true;
    st[i].tokens = false;
  }
  // What a zero-bubble W action runs: the weight gradients the plan's rules found, and any
  // other backward matrix product (not batched: attention's are) that reads no parameter, a
  // replicated linear's (a router's) at any layout.
  bool reads_param = false;
  for (std::uint32_t j : d.inputs) reads_param = reads_param || is_weight(j);
  const std::string bop = base_op(d.op);
  weight_grad_node[i] =
      weight_gradient || (!fwd && !reads_param && (bop == "mm" || bop == "addmm") &&
                          o.size() == 2 && a[0].size() == 2);
  if (opt.cp > 1) {
    // This rank's tokens: the rows of a forward or dgrad GEMM (and of attention's batched
    // GEMMs: its queries), the reduction of a wgrad, whose output has no token dimension.
    bool in_tokens = false;
    for (std::uint32_t j : d.inputs) in_tokens = in_tokens || st[j].tokens;
    if (st[i].tokens)
      m /= cp;
    else if (in_tokens)
      k /= cp;
  }
  if (expert3d_gemm(i)) ep_gemms.push_back(static_cast<std::uint32_t>(i));
  const bool expert = moe_scaled && expert_of(d.module) >= 0;
  if (expert) {
    // A local expert receives the token copies of all ep ranks of its group.
    const double e = expert_factor(d.module);
    (weight_gradient ? k : m) *= e;
    st[i].scale = weight_gradient ? 1.0 : e;
    ep_gemms.push_back(static_cast<std::uint32_t>(i));
  }
  plan_gemm[i] = !style.empty();
  op.kind = graph::OpKind::Gemm;
  op.name = graph::OpName::AtenGemm;
  op.shape = {static_cast<std::uint32_t>(std::max(1.0, m)),
              static_cast<std::uint32_t>(std::max(1.0, nn)),
              static_cast<std::uint32_t>(std::max(1.0, k))};
  op.flops = 2 * m * nn * k;
  // A weight gradient accumulated into the fp32 (or bf16) main-grad buffer the builder's DP
  // machinery reduces: its read and write, as the builder charges its wgrad GEMMs
  // (Megatron's gradient_accumulation_fusion).
  // A grouped GEMM reads (or, for the weights' gradient, writes) every group's matrix: the
  // 3-D operand whole, this rank's E/ep experts; its [E, k, n] gradient is accumulated whole.
  const double rank_share = 1.0 / static_cast<double>(std::max<std::int64_t>(opt.ep, 1));
  const auto& b = nodes[d.inputs[1]].shapes;
  const double read = grouped ? numel(a[0]) : m * k;
  const double matrix =
      grouped && !b.empty() && b[0].size() == 3 ? numel(b[0]) * rank_share : k * nn;
  const double written = grouped && o.size() == 3 ? numel(o) * rank_share : m * nn;
  const double main_grad = weight_gradient ? 2 * opt.main_grad_bytes * written : 0.0;
  op.mem_bytes = 2 * (read + matrix + written) + main_grad;
  if (opt.fp8 && !style.empty()) {
    // torchao's Float8Linear (roofline_utils.py): fp8 operands, a bf16 result.
    op.gemm_dtype = graph::GemmDtype::Fp8;
    op.mem_bytes = m * k + k * nn + 2 * m * nn + main_grad;
    const auto cast = [&](double elements, double bytes_per_element) {
      graph::Op c;
      c.kind = graph::OpKind::Elementwise;
      c.name = graph::OpName::Fp8Cast;
      c.phase = phase;
      c.layer = 0;
      c.mem_bytes = bytes_per_element * elements;
      casts[i].push_back(c);
    };
    const auto amax_second_stage = [&] { cast(1, 4); };  // one fp32 scale
    const std::uint32_t x = root(d.inputs[d.inputs.size() - 2]);
    if ((fwd || data_gradient) && cast_done.insert({x, fwd}).second) {
      amax_second_stage();
      cast(m * k, 4);  // the input (forward) or the output gradient (dgrad)
      // Gathered over TP: torchao's Float8ColwiseParallel / Float8RowwiseParallel cast the
      // sequence shard and all-gather it in fp8 (torchtitan's default with float8 and TP).
      for (auto& [g, of] : pre[i])
        if (g.kind == graph::OpKind::AllGather && g.role == graph::CommRole::Tp && of == x &&
            casts[i].size() >= 2) {
          g.comm_bytes /= 2;
          casts[i][casts[i].size() - 1].mem_bytes /= t;
          pre_casts[i].assign(casts[i].end() - 2, casts[i].end());
          casts[i].resize(casts[i].size() - 2);
        }
    }
    if (opt.fp8_fsdp_gather) {
      // The shard's cast (read 2 B, write 1 B) before each fp8 all-gather; the dgrad's
      // transposed copy of the gathered fp8 weight (read and write 1 B).
      if (fwd || data_gradient) cast(weight_elements / opt.fsdp_shard, 3);
      if (data_gradient) cast(weight_elements, 2);
    } else if (fwd || (data_gradient && opt.fp8_recast_weight)) {
      cast(weight_elements, 2);  // the weight's amax
      amax_second_stage();
      cast(weight_elements, 4);
      if (!opt.fp8_recast_weight) out.saved_bytes += weight_elements;  // kept for the dgrad
    }
  }
  own[i] = op;
  const bool row_gathered = row_gathers.count({root(d.inputs[d.inputs.size() - 2]), fwd}) > 0;
  if (opt.async_tp && compiled && sp && tp > 1 && !style.empty() && (row_gathered || reduce)) {
    // Micro-pipeline TP runs the GEMM as t chunks of m/t rows (symmetric memory's
    // _pipelined_all_gather_and_consume / _pipelined_produce_and_all2all): the first t − 1
    // here, the last as `tail`, which waits for the whole gather (or after which the last
    // chunk's partial sums leave). Each chunk reads the whole weight.
    graph::Op chunk = op;
    chunk.shape[0] = static_cast<std::uint32_t>(std::max(1.0, m / t));
    chunk.flops = op.flops / t;
    chunk.mem_bytes = op.gemm_dtype == graph::GemmDtype::Fp8
                          ? m / t * k + k * nn + 2 * m / t * nn
                          : 2 * (m / t * k + k * nn + m / t * nn);
    graph::Op first = chunk;
    first.flops *= t - 1;
    first.mem_bytes *= t - 1;
    own[i] = first;
    tail[i] = chunk;
  }
  if (style.empty())
    out.other_gemm_flops += op.flops;
  else
    out.linear_gemm_flops += op.flops;
  st[i].partial = reduce && tp > 1;
}

// EP: per pass, the all-to-all dispatch before the local experts' first GEMM and the combine
// after their last (Megatron's MoEAlltoAllTokenDispatcher), each moving this rank's token
// copies: the experts' inputs of the capture, k·T_l·h bf16 summed over all E experts.
void Lowering::ep_collectives() {
  if (opt.ep > 1 && !ep_gemms.empty()) {
    std::map<std::int64_t, double> input_of_expert;  // its first column-parallel GEMM's input
    for (std::size_t i = 0; i < n; ++i) {
      const CapturedNode& d = nodes[i];
      // Node order: an expert's first GEMM reads its input (w1's).
      if (!forward[i] || expert_of(d.module) < 0 || aten_class(d.op) != AtenClass::Gemm ||
          d.inputs.size() < 2)
        continue;
      const std::uint32_t x = d.inputs[d.inputs.size() - 2];
      input_of_expert.emplace(expert_of(d.module),
                              tensor_bytes(nodes[x]) / (st[x].seq ? t : 1.0) / cp);
    }
    double copies = 0;
    for (const auto& [e, b] : input_of_expert) copies += b;
    // Experts as 3-D weights: each token goes to its top-k experts' ranks, k copies of the
    // hidden states (however the model batches its expert GEMMs: gpt-fast multiplies each token
    // once by its k gathered weights).
    if (input_of_expert.empty() && hidden_input < n)
      copies = static_cast<double>(expert3d_topk) * tensor_bytes(nodes[hidden_input]) /
               (st[hidden_input].seq ? t : 1.0) / cp;
    copies *= opt.all_to_all_scale;
    for (const bool fwd : {true, false}) {
      std::vector<std::uint32_t> g;
      for (std::uint32_t i : ep_gemms)
        if (forward[i] == fwd) g.push_back(i);
      if (g.empty()) continue;
      graph::Op a2a = collective_op(graph::OpKind::AllToAll, graph::CommRole::Ep,
                                    fwd ? graph::OpName::EpDispatch : graph::OpName::EpCombine,
                                    fwd ? graph::Phase::Forward : graph::Phase::Backward, copies);
      const std::uint32_t first = g.front();
      const std::size_t row =
          base_op(nodes[first].op) == "_grouped_mm" ? 0 : nodes[first].inputs.size() - 2;
      pre[first].push_back({a2a, root(nodes[first].inputs[row])});
      a2a.name = fwd ? graph::OpName::EpCombine : graph::OpName::EpDispatch;
      beside[g.back()].push_back({a2a, false});
    }
  }
}

}  // namespace scalescope::workload::detail
