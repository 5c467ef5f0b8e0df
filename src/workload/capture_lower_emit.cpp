// The lowering of a captured graph (workload/capture_lowering.hpp): emission of the nodes' ops
// and collectives onto the forward and backward passes, what the backward keeps, per-op
// selective activation checkpointing, and the transient memory each op holds.
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "workload/capture_internal.hpp"
#include "workload/capture_lowering.hpp"

namespace scalescope::workload::detail {

// Forward outputs (not views) that a backward op reads: what autograd keeps.
bool Lowering::read_by_backward(std::uint32_t j, int depth) const {
  for (std::uint32_t c2 : consumers[j]) {
    if (!forward[c2]) return true;
    if (depth < 4 && is_view(c2) && read_by_backward(c2, depth + 1)) return true;
  }
  return false;
}

// Emission. A collective starts once the op producing its tensor is done (or at the start of
// its pass if that op belongs to the other pass) and the compute op after it waits for it:
// independent compute (a wgrad GEMM) overlaps it, as with functional collectives waited at
// their first use.
void Lowering::record_part(bool f, std::uint32_t x) {
  if (!part.empty()) (f ? out.forward_part : out.backward_part).push_back(part[x]);
}

bool Lowering::overlaps_gather(std::uint32_t x) const {
  const CapturedNode& d = nodes[x];
  return async_tp && plan_gemm[x] && d.inputs.size() >= 2 &&
         row_gathers.count({root(d.inputs[d.inputs.size() - 2]), forward[x]}) > 0;
}

// A compute op of node x's part on its pass's chain (`follows`: kChain or kChainOverlap);
// returns its index.
std::int32_t Lowering::emit_compute(bool f, const graph::Op& o, std::uint32_t x,
                                    std::int32_t follows) {
  record_part(f, x);
  (f ? out.forward : out.backward).push_back(o);
  (f ? out.forward_after : out.backward_after).push_back(follows);
  return last_compute[f] = static_cast<std::int32_t>((f ? out.forward : out.backward).size()) - 1;
}

void Lowering::emit_collectives(std::uint32_t x) {
  // fp8 with TP: the casts of an operand gathered in fp8 run before its gather, which waits
  // for them.
  std::int32_t cast_at = -1;
  for (const graph::Op& c : pre_casts[x])
    cast_at = emit_compute(c.phase == graph::Phase::Forward, c, x, LoweredBlock::kChain);
  for (const auto& [o, producer] : pre[x]) {
    const bool f = o.phase == graph::Phase::Forward;
    auto& list = f ? out.forward : out.backward;
    auto& after = f ? out.forward_after : out.backward_after;
    if (o.kind == graph::OpKind::AllGather)
      gathered_copies.push_back(
          {f, static_cast<std::int32_t>(list.size()), producer, o.comm_bytes});
    if (o.kind == graph::OpKind::AllGather && cast_at >= 0) {
      record_part(f, x);
      list.push_back(o);
      after.push_back(cast_at);
      continue;
    }
    // A reduction belongs where its partial sums are made (the embedding's, before the
    // blocks, not with the head that reads it); a gather where its result is read.
    const std::uint32_t owner =
        o.kind != graph::OpKind::AllGather && nodes[producer].kind == "call_function" ? producer
                                                                                      : x;
    record_part(f, owner);
    list.push_back(o);
    const bool same_pass = at[producer] >= 0 && forward[producer] == f;
    if (async_tp && same_pass && o.kind == graph::OpKind::ReduceScatter && tail[producer]) {
      // The partial sums of the GEMM's first t − 1 chunks leave beside them, the last
      // chunk's after it.
      graph::Op last = o;
      list.back().comm_bytes = o.comm_bytes * (t - 1) / t;
      last.comm_bytes = o.comm_bytes / t;
      after.push_back(before[producer]);
      record_part(f, owner);
      list.push_back(last);
      after.push_back(static_cast<std::int32_t>(at[producer]) + 1);
    } else
      after.push_back(same_pass ? static_cast<std::int32_t>(at[producer])
                                : LoweredBlock::kPassStart);
  }
}

void Lowering::emit_own(const graph::Op& o, bool f, const std::vector<std::uint32_t>& ms) {
  auto& list = f ? out.forward : out.backward;
  auto& after = f ? out.forward_after : out.backward_after;
  // fp8: the GEMM's casts, just before it (an overlapped gather waits beside them too).
  bool overlap = false;
  for (std::uint32_t m : ms) overlap = overlap || overlaps_gather(m);
  const std::int32_t follows = overlap ? LoweredBlock::kChainOverlap : LoweredBlock::kChain;
  for (std::uint32_t m : ms)
    for (const graph::Op& c : casts[m]) emit_compute(f, c, m, follows);
  after.push_back(follows);
  const auto self = static_cast<std::int32_t>(list.size());
  for (std::uint32_t m : ms) {
    at[m] = self;
    before[m] = last_compute[f];
  }
  last_compute[f] = self;
  record_part(f, ms.front());
  list.push_back(o);
  if (!f && std::any_of(ms.begin(), ms.end(), [&](std::uint32_t m) { return weight_grad_node[m]; }))
    out.backward_weight_grads.push_back(static_cast<std::uint32_t>(self));
  for (std::uint32_t m : ms)
    if (tail[m]) emit_compute(f, *tail[m], m, LoweredBlock::kChain);  // at at[m] + 1
  const std::int32_t done = last_compute[f];  // the op itself, or its last chunk
  for (std::uint32_t m : ms) {
    // A ring's further steps wait for its key/value gather (the first collective beside it);
    // its dK, dV exchange starts after the first step and is waited for after the last.
    const bool ring = !ring_rest[m].empty();
    for (std::size_t k = 0; k < beside[m].size(); ++k) {
      const auto& [comm, starts_before] = beside[m][k];
      record_part(f, m);
      list.push_back(comm);
      after.push_back(k > 0            ? (ring ? done : static_cast<std::int32_t>(list.size()) - 2)
                      : !starts_before ? done
                      : self > 0       ? self - 1
                                       : LoweredBlock::kPassStart);
      if (ring && k == 0)
        for (const graph::Op& r : ring_rest[m]) emit_compute(f, r, m, LoweredBlock::kChain);
    }
  }
}

void Lowering::emit_eager() {
  for (std::uint32_t i = 0; i < n; ++i) {
    emit_collectives(i);
    if (own[i]) emit_own(*own[i], forward[i], {i});
  }
}

void Lowering::save_eager() {
  for (std::uint32_t i = 0; i < n; ++i) {
    if (!forward[i] || nodes[i].kind != "call_function" || is_view(i) || st[i].remote) continue;
    if (read_by_backward(i, 0)) {
      saved[i] = true;
      out.saved_bytes += rank_bytes(i);
      if (!part.empty()) out.saved_by_part[part[i]] += rank_bytes(i);
    }
  }
}

void Lowering::op_sac() {
  // Per-op selective activation checkpointing (torchtitan's `selective_ac_option: op`,
  // compiled): what the backward needs is kept where the policy saves it (every odd-numbered
  // mm of the forward, attention outputs, reduce-scatter results) and recomputed otherwise, from
  // its inputs, back to saved tensors and the block input. The recomputed GEMMs (and the
  // all-gathers of their operands) run again before the backward; recomputed point-wise ops
  // fuse into the backward's kernels, as the partitioner places them.
  std::vector<bool> must_save(n, false);  // the policy's save list
  std::vector<bool> cached(n, false);     // … its ops proper: odd-numbered mms and SDPA
  int mm_count = 0;
  for (std::uint32_t x = 0; x < n; ++x) {
    if (!forward[x] || nodes[x].kind != "call_function" || st[x].remote) continue;
    if (base_op(nodes[x].op) == "mm" && ++mm_count % 2 == 1) cached[x] = true;
    if (own[x] && own[x]->kind == graph::OpKind::Attention) cached[x] = true;  // SDPA
    must_save[x] = cached[x] || fused_attention_output.count(x) || scattered.count(x);
  }
  if (!compiled) {
    // Eager (torch.utils.checkpoint, non-reentrant, with the policy's context): the forward
    // caches the output of every op on the save list, the block input stays, and the recompute
    // before the backward runs the block's forward again, each op on the list returning its
    // cached output instead, every other op and collective running again (all-gathers, casts)
    // but the reduce-scatters, whose shards are cached too. An odd-numbered reduce-scattered mm
    // keeps both its [m, n] partial sums and the shard.
    if (hidden_input < n) out.op_sac_saved_bytes += rank_bytes(hidden_input);
    for (std::uint32_t x = 0; x < n; ++x) {
      if (!forward[x]) continue;
      if (cached[x]) out.op_sac_saved_bytes += rank_bytes(x);
      if (scattered.count(x)) out.op_sac_saved_bytes += rank_bytes(x) / t;
    }
    std::map<std::uint32_t, std::int32_t> again;  // node → index of its recomputed op
    const auto push = [&](const graph::Op& o, std::int32_t after) {
      out.op_sac_recompute.push_back(o);
      out.op_sac_recompute_after.push_back(after);
      return static_cast<std::int32_t>(out.op_sac_recompute.size()) - 1;
    };
    for (std::uint32_t x = 0; x < n; ++x) {
      if (!forward[x] || !own[x]) continue;
      for (const auto& [o, producer] : pre[x]) {
        if (o.kind == graph::OpKind::ReduceScatter) continue;  // its shard is cached
        const auto from = again.find(producer);
        push(o, from != again.end() ? from->second : LoweredBlock::kPassStart);
      }
      for (const auto* list : {&pre_casts[x], &casts[x]})
        for (const graph::Op& c : *list) push(c, LoweredBlock::kChain);
      if (!cached[x]) again[x] = push(*own[x], LoweredBlock::kChain);
      // Collectives beside the op (MoE's combine all-to-all after the last expert GEMM) run
      // again after it.
      const auto self = again.find(x);
      for (const auto& [comm, starts_before] : beside[x])
        push(comm, self != again.end() ? self->second : LoweredBlock::kPassStart);
    }
  } else {
    std::vector<bool> visited(n, false);
    std::vector<std::uint32_t> todo;
    for (std::uint32_t x = 0; x < n; ++x)
      if (forward[x] && !dropped[x] && !st[x].remote && read_by_backward(x, 0)) todo.push_back(x);
    std::vector<std::uint32_t> again;  // recomputed GEMMs
    while (!todo.empty()) {
      const std::uint32_t y = todo.back();
      todo.pop_back();
      if (visited[y] || !forward[y]) continue;
      visited[y] = true;
      const CapturedNode& d = nodes[y];
      if (d.kind == "placeholder") {
        if (y == hidden_input) out.op_sac_saved_bytes += rank_bytes(y);  // the block input
        continue;
      }
      if (d.kind != "call_function") continue;
      if (!is_view(y) && must_save[y]) {
        out.op_sac_saved_bytes += scattered.count(y) ? rank_bytes(y) / t : rank_bytes(y);
        continue;
      }
      if (!is_view(y) && own[y] && own[y]->kind == graph::OpKind::Gemm) again.push_back(y);
      for (std::uint32_t j : d.inputs) todo.push_back(j);
    }
    out.op_sac_saved_bytes += out.attention_saved_bytes;  // the log-sum-exps
    std::sort(again.begin(), again.end(),
              [&](std::uint32_t a, std::uint32_t b2) { return at[a] < at[b2]; });
    // The forward's gathers by the tensor they gather: a recomputed GEMM gathers its operand
    // again (the gathered copy is not kept), once per tensor.
    std::map<std::uint32_t, graph::Op> forward_gather;
    for (std::uint32_t x = 0; x < n; ++x)
      for (const auto& [o, producer] : pre[x])
        if (o.kind == graph::OpKind::AllGather && forward[x]) forward_gather.emplace(producer, o);
    std::set<std::uint32_t> regathered;
    for (std::uint32_t y : again) {
      for (std::uint32_t j : nodes[y].inputs)
        if (const auto g = forward_gather.find(root(j));
            g != forward_gather.end() && regathered.insert(root(j)).second) {
          out.op_sac_recompute.push_back(g->second);
          out.op_sac_recompute_after.push_back(LoweredBlock::kPassStart);
        }
      for (const auto* list : {&pre_casts[y], &casts[y]})
        for (const graph::Op& c : *list) {
          out.op_sac_recompute.push_back(c);
          out.op_sac_recompute_after.push_back(LoweredBlock::kChain);
        }
      out.op_sac_recompute.push_back(*own[y]);
      out.op_sac_recompute_after.push_back(LoweredBlock::kChain);
      if (tail[y]) {
        out.op_sac_recompute.push_back(*tail[y]);
        out.op_sac_recompute_after.push_back(LoweredBlock::kChain);
      }
    }
  }
}

// Transient memory: what the caching allocator holds besides the saved tensors while an op
// runs. A tensor the backward does not keep lives from the op that writes it to the last op
// of its pass that reads it (through views); compiled, a tensor read only inside its own
// kernel is never written. A gathered copy lives from its all-gather to the last op reading
// the tensor. Each op's mem_transient is the sum alive while it runs.
std::int64_t Lowering::last_use(std::uint32_t y, bool f) const {
  std::int64_t last = -1;
  for (std::uint32_t c : consumers[y]) {
    if (is_view(c) || alias[c]) last = std::max(last, last_use(c, f));
    if (!is_view(c) && at[c] >= 0 && forward[c] == f) last = std::max(last, at[c]);
  }
  return last;
}

void Lowering::transient_memory() {
  for (const bool f : {true, false}) {
    auto& list = f ? out.forward : out.backward;
    std::vector<double> delta(list.size() + 1, 0.0);
    const auto live = [&](std::int64_t from, std::int64_t to, double bytes) {
      if (from < 0 || bytes <= 0) return;
      to = std::min<std::int64_t>(std::max(from, to), static_cast<std::int64_t>(list.size()) - 1);
      delta[static_cast<std::size_t>(from)] += bytes;
      delta[static_cast<std::size_t>(to) + 1] -= bytes;
    };
    for (std::uint32_t x = 0; x < n; ++x) {
      if (nodes[x].kind != "call_function" || is_view(x) || at[x] < 0 || forward[x] != f ||
          saved[x] || dropped[x] || st[x].remote || alias[x])
        continue;
      const std::int64_t last = last_use(x, f);
      if (compiled && last <= at[x]) continue;  // never leaves its kernel
      live(at[x], last, rank_bytes(x));
    }
    for (const Gathered& g : gathered_copies)
      if (g.forward == f) live(g.at, last_use(g.tensor, f), g.bytes);
    double alive = 0;
    for (std::size_t k = 0; k < list.size(); ++k) {
      alive += delta[k];
      if (!graph::is_communication(list[k].kind))
        list[k].mem_transient += static_cast<std::int64_t>(alive);  // on top of its own
    }
  }
}

}  // namespace scalescope::workload::detail
