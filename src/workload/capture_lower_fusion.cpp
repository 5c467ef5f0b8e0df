// The lowering of a captured graph (workload/capture_lowering.hpp), compiled: torch.compile
// (Inductor) fuses the eager attention pattern into one attention kernel per pass and point-wise
// ops into kernels; its partitioner decides what the backward keeps or recomputes; the kernels
// are emitted in topological order, those feeding a TP collective first.
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "workload/capture_internal.hpp"
#include "workload/capture_lowering.hpp"

namespace scalescope::workload::detail {

void Lowering::emit_compiled() {
  // torch.compile (Inductor), docs/flint.md §2: the eager attention pattern (batched QKᵀ,
  // scale, mask, softmax, batched PV) becomes one fused attention kernel per pass, as
  // Inductor's fuse_attention pass rewrites it to SDPA; point-wise ops and reductions fuse into
  // one kernel per connected group that reads its inputs and writes its outputs once.
  units = Units(n);
  for (std::uint32_t i = 0; i < n; ++i)
    if (is_view(i) && nodes[i].inputs.size() == 1) units.unite(root(i), i);
  fuse_attention();
  fuse_pointwise();
  partition();
  unit_ops();
  schedule();
}

bool Lowering::batched_gemm(std::uint32_t i) const {
  return nodes[i].kind == "call_function" && aten_class(nodes[i].op) == AtenClass::Gemm &&
         plan.style_of(nodes[i].module).empty() && !nodes[i].shapes.empty() &&
         nodes[i].shapes[0].size() == 3;
}

bool Lowering::pointwise(std::uint32_t i) const {
  if (nodes[i].kind != "call_function") return false;
  const AtenClass k = aten_class(nodes[i].op);
  return k == AtenClass::MemoryBound || k == AtenClass::Unknown;
}

// The region around a softmax (or its backward): point-wise and view ops of the same pass,
// bounded by batched GEMMs (included, not crossed), plan GEMMs and placeholders.
std::set<std::uint32_t> Lowering::expand(std::uint32_t seed) const {
  std::set<std::uint32_t> region;
  std::vector<std::uint32_t> todo = {seed};
  while (!todo.empty()) {
    const std::uint32_t x = todo.back();
    todo.pop_back();
    if (!region.insert(x).second) continue;
    if (batched_gemm(x)) continue;
    std::vector<std::uint32_t> next = nodes[x].inputs;
    next.insert(next.end(), consumers[x].begin(), consumers[x].end());
    for (std::uint32_t y : next)
      if (forward[y] == forward[seed] && (batched_gemm(y) || pointwise(y) || is_view(y)))
        todo.push_back(y);
  }
  return region;
}

std::vector<std::uint32_t> Lowering::gemms_in(const std::set<std::uint32_t>& r) const {
  std::vector<std::uint32_t> g;
  for (std::uint32_t x : r)
    if (batched_gemm(x)) g.push_back(x);
  return g;
}

std::optional<std::pair<std::uint32_t, std::uint32_t>> Lowering::attention_gemms(
    std::uint32_t s, const std::set<std::uint32_t>& r) const {
  // Attention, by its structure (not by a softmax beside batched GEMMs): the softmax's input
  // comes from one batched GEMM (the scores QKᵀ: [b·heads, s, sk]) through point-wise and view
  // ops only, and its output is the row operand of another (the probabilities times V), whose
  // contraction is over the scores' last dimension, sk. A router's softmax reads a 2-D linear
  // layer (or its top-k) and feeds expert GEMMs as their column weights: no attention.
  std::vector<std::uint32_t> qk, pv;
  std::set<std::uint32_t> seen;
  std::vector<std::uint32_t> todo = {s};
  while (!todo.empty()) {  // upstream
    const std::uint32_t x = todo.back();
    todo.pop_back();
    for (std::uint32_t j : nodes[x].inputs) {
      if (!r.count(j) || !seen.insert(j).second) continue;
      if (batched_gemm(j))
        qk.push_back(j);
      else
        todo.push_back(j);
    }
  }
  seen.clear();
  todo = {s};
  while (!todo.empty()) {  // downstream, as the row operand
    const std::uint32_t x = todo.back();
    todo.pop_back();
    for (std::uint32_t z : consumers[x]) {
      if (!r.count(z)) continue;
      if (batched_gemm(z)) {
        const auto& in = nodes[z].inputs;
        if (in.size() >= 2 && in[in.size() - 2] == x) pv.push_back(z);
      } else if (seen.insert(z).second) {
        todo.push_back(z);
      }
    }
  }
  if (qk.size() != 1 || pv.size() != 1 || qk[0] == pv[0]) return std::nullopt;
  const auto& scores = nodes[qk[0]].shapes;
  const auto& row = nodes[nodes[pv[0]].inputs[nodes[pv[0]].inputs.size() - 2]].shapes;
  if (scores.empty() || row.empty() || scores[0].size() != 3 || row[0].size() != 3 ||
      scores[0] != row[0])
    return std::nullopt;
  return std::make_pair(qk[0], pv[0]);
}

void Lowering::fuse_attention() {
  in_attention = std::vector<bool>(n, false);
  for (std::uint32_t s = 0; s < n; ++s) {
    if (!forward[s] || nodes[s].kind != "call_function" ||
        (base_op(nodes[s].op) != "_softmax" && base_op(nodes[s].op) != "_safe_softmax") ||
        in_attention[s])
      continue;
    const std::set<std::uint32_t> fr = expand(s);
    const std::vector<std::uint32_t> fg = gemms_in(fr);
    const auto qk_pv = attention_gemms(s, fr);
    if (fg.size() != 2 || !qk_pv) continue;  // a softmax that is no attention (a router)
    // Interior: region tensors no forward op outside the region reads (the scores and
    // probabilities, which the fused kernel never writes).
    std::vector<std::uint32_t> interior;
    for (std::uint32_t x : fr) {
      bool outside = false;
      const std::function<void(std::uint32_t)> visit = [&](std::uint32_t y) {
        for (std::uint32_t z : consumers[y])
          if (is_view(z) && !fr.count(z))
            visit(z);
          else if (forward[z] && !fr.count(z))
            outside = true;
      };
      visit(x);
      if (!outside) interior.push_back(x);
    }
    // Backward: the ops reading the interior (softmax backward, dV), grown like the forward.
    std::set<std::uint32_t> br;
    const std::function<void(std::uint32_t)> seed_from = [&](std::uint32_t y) {
      for (std::uint32_t z : consumers[y]) {
        if (forward[z]) continue;
        if (is_view(z)) {
          seed_from(z);
        } else if (!br.count(z) && (batched_gemm(z) || pointwise(z))) {
          const std::set<std::uint32_t> r = expand(z);
          br.insert(r.begin(), r.end());
        }
      }
    };
    for (std::uint32_t x : interior) seed_from(x);
    const std::vector<std::uint32_t> bg = gemms_in(br);
    // Causal (model.causal_mask): the region makes a triangular mask, or reads a tensor made
    // by tril / triu (nanoGPT's registered `bias`, a plain attribute, a mask the model hands
    // its blocks).
    bool tril_mask = false;
    for (std::uint32_t x : fr) {
      const std::string b = base_op(nodes[x].op);
      tril_mask = tril_mask || b == "triu" || b == "tril";
      for (std::uint32_t j : nodes[x].inputs)
        tril_mask = tril_mask || !nodes[root(j)].mask.empty() || !nodes[j].mask.empty();
    }
    const bool causal = costed_causal(opt.causal_mask, false, tril_mask);
    // Shape from QKᵀ (the region's first GEMM): [b·h, s, sk] from q [b·h, s, dh].
    const std::uint32_t qk = qk_pv->first;
    const auto& so = nodes[qk].shapes[0];
    const auto& qs = nodes[nodes[qk].inputs[nodes[qk].inputs.size() - 2]].shapes;
    const double bh = static_cast<double>(so[0]) / (st[qk].sharded ? t : 1.0);
    const std::uint32_t pv = qk_pv->second;
    double matrix_flops = 0;
    for (std::uint32_t g : fg) matrix_flops += own[g] ? own[g]->flops : 0;
    // What a region reads from outside (the fused kernel's inputs) and what outside reads.
    const auto io_bytes = [&](const std::set<std::uint32_t>& r, bool skip_forward) {
      double b = 0;
      std::set<std::uint32_t> seen;
      for (std::uint32_t x : r) {
        if (is_view(x)) continue;
        for (std::uint32_t j : nodes[x].inputs) {
          const std::uint32_t p = root(j);
          if (r.count(p) || r.count(j) || nodes[p].kind == "get_attr") continue;
          if (skip_forward && fr.count(p)) continue;  // recomputed, never stored
          if (seen.insert(p).second) b += rank_bytes(p);
        }
      }
      return b;
    };
    graph::Op fa;
    fa.kind = graph::OpKind::Attention;
    fa.attention_impl = sdpa_impl;
    fa.name = graph::OpName::Attention;
    fa.layer = 0;
    fa.shape = {static_cast<std::uint32_t>(std::max(1.0, bh)),
                static_cast<std::uint32_t>(static_cast<double>(so[1]) / cp),
                static_cast<std::uint32_t>(qs.empty() ? 1 : qs[0].back())};
    const auto& vs = nodes[nodes[pv].inputs.back()].shapes;
    if (!vs.empty() && vs[0].back() != static_cast<std::int64_t>(fa.shape[2]))
      fa.value_dim = static_cast<std::uint16_t>(vs[0].back());
    // Forward: the eager GEMMs' FLOPs, half of them under a causal mask (flash attention
    // skips the masked blocks); backward 2.5× that (FlashAttention-2's backward recomputes
    // the scores: five GEMMs against two), the builder's fused model (MODELING §1.1).
    const double causal_share = causal ? 0.5 : 1.0;
    fa.phase = graph::Phase::Forward;
    fa.flops = causal_share * matrix_flops;
    fa.mem_bytes = io_bytes(fr, false) + rank_bytes(pv);
    own[pv] = fa;
    for (std::uint32_t x : fr) {
      in_attention[x] = true;
      if (x != pv) own[x].reset();
      if (!is_view(x)) units.unite(qk, x);  // a view stays with the tensor it shows
    }
    for (std::uint32_t x : interior) dropped[x] = x != pv;
    fused_attention_output.insert(pv);
    // Log-sum-exp, fp32 per query row: what the fused kernel keeps for its backward.
    out.saved_bytes += 4 * bh * static_cast<double>(so[1]) / cp;
    out.attention_saved_bytes += 4 * bh * static_cast<double>(so[1]) / cp;
    out.attention_forward.push_back({fa});
    const std::uint32_t k_root = root(nodes[qk].inputs.back());
    const double kv = kv_bytes(nodes[qk].inputs.back(), nodes[pv].inputs.back());
    cp_exchange(pv, graph::Phase::Forward, kv, k_root);
    if (bg.empty()) continue;
    graph::Op fb = fa;
    fb.phase = graph::Phase::Backward;
    fb.flops = 2.5 * fa.flops;
    double written = 0;
    for (std::uint32_t g : bg) written += rank_bytes(g);
    fb.mem_bytes = io_bytes(br, true) + written;
    const std::uint32_t last = *std::max_element(br.begin(), br.end());
    for (std::uint32_t x : br) {
      in_attention[x] = true;
      own[x].reset();
      if (!is_view(x)) units.unite(last, x);
    }
    own[last] = fb;
    cp_exchange(last, graph::Phase::Backward, kv, k_root);
  }
}

std::uint32_t Lowering::unit_of(std::uint32_t i) {
  return units.find(i);
}

// Is there a path from unit a to unit b through some third unit?
bool Lowering::indirect(std::uint32_t a, std::uint32_t b) {
  std::vector<bool> seen(n, false);
  std::vector<std::uint32_t> todo;
  for (std::uint32_t x : units.members[a])
    for (std::uint32_t y : consumers[x]) {
      const std::uint32_t u = unit_of(y);
      if (u != a && u != b && !seen[u]) {
        seen[u] = true;
        todo.push_back(u);
      }
    }
  while (!todo.empty()) {
    const std::uint32_t u = todo.back();
    todo.pop_back();
    for (std::uint32_t x : units.members[u])
      for (std::uint32_t y : consumers[x]) {
        const std::uint32_t w = unit_of(y);
        if (w == b) return true;
        if (w != a && !seen[w]) {
          seen[w] = true;
          todo.push_back(w);
        }
      }
  }
  return false;
}

double Lowering::out_numel(std::uint32_t i) const {
  return nodes[i].shapes.empty() ? 0.0 : numel(nodes[i].shapes[0]);
}

void Lowering::fuse_pointwise() {
  // Point-wise fusion: a point-wise op joins the kernel of a point-wise producer of the same
  // pass unless the producer's output goes through a TP collective first, or the merged
  // kernel would have to run both before and after some other kernel (a cycle).
  fusible = std::vector<bool>(n, false);
  // Lookups and their scatter-add stay kernels of their own (their bytes are the rows they
  // touch, not the table).
  for (std::uint32_t i = 0; i < n; ++i)
    fusible[i] = pointwise(i) && !in_attention[i] && !st[i].remote &&
                 base_op(nodes[i].op) != "embedding" &&
                 base_op(nodes[i].op) != "embedding_dense_backward";
  for (std::uint32_t i = 0; opt.inductor_kernels && i < n; ++i)
    if (nodes[i].kernel != CapturedNode::kKernelUnread) return fuse_as_inductor();
  for (std::uint32_t i = 0; i < n; ++i) {
    if (!fusible[i]) continue;
    for (std::uint32_t j : nodes[i].inputs) {
      const std::uint32_t p = root(j);
      if (!fusible[p] || forward[p] != forward[i] || st[p].reduced) continue;
      if (!part.empty() && part[p] != part[i]) continue;
      const std::uint32_t a = unit_of(p), b = unit_of(i);
      if (a == b || indirect(a, b) || indirect(b, a)) continue;
      units.unite(a, b);
    }
  }
  // Horizontal fusion: point-wise kernels of one pass over the same iteration space that read
  // the same tensor become one kernel, which reads it once (Inductor's scheduler fuses by
  // shared reads).
  for (std::uint32_t p = 0; p < n; ++p) {
    if (is_view(p)) continue;
    std::vector<std::uint32_t> readers;
    const std::function<void(std::uint32_t)> collect = [&](std::uint32_t y) {
      for (std::uint32_t z : consumers[y])
        if (is_view(z))
          collect(z);
        else if (fusible[z])
          readers.push_back(z);
    };
    collect(p);
    for (std::size_t a = 0; a < readers.size(); ++a)
      for (std::size_t b2 = a + 1; b2 < readers.size(); ++b2) {
        const std::uint32_t x = readers[a], y = readers[b2];
        if (forward[x] != forward[y] || out_numel(x) != out_numel(y)) continue;
        if (!part.empty() && part[x] != part[y]) continue;
        const std::uint32_t ux = unit_of(x), uy = unit_of(y);
        if (ux == uy || indirect(ux, uy) || indirect(uy, ux)) continue;
        bool direct = false;  // an edge between them is a vertical fusion the rules refused
        for (std::uint32_t m : units.members[ux])
          for (std::uint32_t c2 : consumers[m]) direct = direct || unit_of(c2) == uy;
        for (std::uint32_t m : units.members[uy])
          for (std::uint32_t c2 : consumers[m]) direct = direct || unit_of(c2) == ux;
        if (!direct) units.unite(ux, uy);
      }
  }
}

bool Lowering::reads_reduced(std::uint32_t a, std::uint32_t b) {
  for (std::uint32_t m : units.members[b])
    for (std::uint32_t j : nodes[m].inputs)
      if (st[root(j)].reduced && unit_of(root(j)) == a) return true;
  return false;
}

void Lowering::fuse_as_inductor() {
  // Inductor's own kernels (scripts/capture/inductor_fusion.py, read from its scheduler): the
  // point-wise ops of one kernel number are one kernel, within one pass (and pipeline part; the
  // capture's forward and backward were scheduled apart, as AOTAutograd's graphs are), split
  // where the lowering puts a TP collective between two of them (Inductor scheduled the
  // single-device graph) or where joining them would make a cycle. An op Inductor makes no
  // kernel of (a concatenation written in place) joins a producer's kernel.
  // (kernel, pass, part) → an op of each unit that kernel has become so far: a split kernel's
  // later ops may still join the part after the split.
  std::map<std::array<std::int64_t, 3>, std::vector<std::uint32_t>> pieces;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (!fusible[i]) continue;
    const std::int64_t k = nodes[i].kernel;
    std::vector<std::uint32_t> with;
    std::vector<std::uint32_t>* of_kernel = nullptr;
    if (k == CapturedNode::kNoKernel) {
      for (std::uint32_t j : nodes[i].inputs)
        if (fusible[root(j)] && forward[root(j)] == forward[i]) with.push_back(root(j));
    } else if (k >= 0) {
      of_kernel =
          &pieces[{k, forward[i] ? 1 : 0, part.empty() ? 0 : static_cast<std::int64_t>(part[i])}];
      with = *of_kernel;
    }
    bool joined = false;
    for (std::uint32_t p : with) {
      if (!part.empty() && part[p] != part[i]) continue;
      const std::uint32_t a = unit_of(p), b = unit_of(i);
      if (a == b || reads_reduced(a, b) || reads_reduced(b, a) || indirect(a, b) || indirect(b, a))
        continue;
      units.unite(a, b);
      joined = true;
      break;
    }
    if (of_kernel != nullptr && !joined) of_kernel->push_back(i);  // a new piece of the kernel
  }
}

bool Lowering::backward_readers_fusible(std::uint32_t x) const {
  bool ok = true;
  const std::function<void(std::uint32_t)> visit = [&](std::uint32_t y) {
    for (std::uint32_t z : consumers[y]) {
      if (forward[z]) continue;
      if (is_view(z))
        visit(z);
      else
        ok = ok && fusible[z];
    }
  };
  visit(x);
  return ok;
}

void Lowering::partition() {
  // What the backward keeps, as Inductor's min-cut partitioner decides it: a point-wise forward
  // tensor that only point-wise backward kernels read is recomputed there from its nearest
  // non-point-wise ancestors when those cost no more to keep than it (the fp32 upcasts of a
  // norm, a cast copy), else kept.
  std::set<std::uint32_t> kept;
  std::vector<std::uint32_t> candidates;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (!forward[i] || is_view(i) || dropped[i] || st[i].remote || !read_by_backward(i, 0))
      continue;
    if (nodes[i].kind == "placeholder" && (!nodes[i].param.empty() || !nodes[i].buffer.empty()))
      continue;  // the module's state, not an activation
    if (fusible[i] && backward_readers_fusible(i))
      candidates.push_back(i);
    else
      kept.insert(i);
  }
  for (std::uint32_t x : candidates) {
    std::set<std::uint32_t> frontier;
    const std::function<void(std::uint32_t)> up = [&](std::uint32_t y) {
      for (std::uint32_t j : nodes[y].inputs) {
        const std::uint32_t r = root(j);
        if (nodes[r].kind == "get_attr" || (nodes[r].kind == "placeholder" &&
                                            (!nodes[r].param.empty() || !nodes[r].buffer.empty())))
          continue;
        if (fusible[r] && forward[r])
          up(r);
        else
          frontier.insert(r);
      }
    };
    up(x);
    double extra = 0;
    for (std::uint32_t f : frontier)
      if (!kept.count(f)) extra += rank_bytes(f);
    if (extra <= rank_bytes(x)) {
      recompute[x] = std::vector<std::uint32_t>(frontier.begin(), frontier.end());
      kept.insert(frontier.begin(), frontier.end());
    } else {
      kept.insert(x);
    }
  }
  for (std::uint32_t x : kept) {
    saved[x] = true;
    out.saved_bytes += rank_bytes(x);
    if (!part.empty()) out.saved_by_part[part[x]] += rank_bytes(x);
  }
}

void Lowering::unit_ops() {
  // Each unit's op: fused point-wise kernels by their bytes in and out.
  for (std::uint32_t u = 0; u < n; ++u) {
    if (units.find(u) != u) continue;
    std::vector<std::uint32_t> pw;
    for (std::uint32_t x : units.members[u])
      if (fusible[x]) pw.push_back(x);
    if (pw.empty()) continue;
    double b = 0;
    std::set<std::uint32_t> seen;
    for (std::uint32_t x : pw)
      for (std::uint32_t j : nodes[x].inputs) {
        const std::uint32_t p = root(j);
        if (unit_of(p) == u || nodes[p].kind == "get_attr") continue;
        if (const auto r = recompute.find(p); r != recompute.end() && !forward[x]) {
          for (std::uint32_t f : r->second)
            if (seen.insert(f).second) b += rank_bytes(f);
        } else if (seen.insert(p).second) {
          b += std::min(rank_bytes(p), rank_bytes(j));
        }
      }
    // Written: outputs read by another kernel; a forward tensor the backward recomputes is
    // written only if a forward kernel reads it.
    const std::function<bool(std::uint32_t, bool)> read_outside = [&](std::uint32_t x,
                                                                      bool forward_only) {
      for (std::uint32_t y : consumers[x]) {
        if (forward_only && !forward[y]) continue;
        if (is_view(y) ? read_outside(y, forward_only) : unit_of(y) != u) return true;
      }
      return false;
    };
    for (std::uint32_t x : pw)
      if (read_outside(x, recompute.count(x) > 0)) b += rank_bytes(x);
    graph::Op op = *own[pw.front()];
    op.mem_bytes = b;
    for (std::uint32_t x : pw) own[x].reset();
    own[pw.back()] = op;
  }
}

void Lowering::schedule() {
  // Emission: units in topological order; among the ready ones, first one whose result a TP
  // collective reduces (so the collective starts as early as its inputs allow and the
  // independent kernels after it, a wgrad GEMM, overlap it: Inductor's raise_comms /
  // reorder_compute_for_overlap passes), then capture order. Each unit's collectives first,
  // then its kernel.
  std::vector<bool> feeds_collective(n, false);
  for (std::uint32_t x = 0; x < n; ++x)
    for (const auto& [o, producer] : pre[x])
      if (o.kind != graph::OpKind::AllGather) feeds_collective[unit_of(producer)] = true;
  // … and the kernels feeding such a unit through point-wise kernels only (the q, k and v
  // dgrads whose sum is reduced).
  for (bool changed = true; changed;) {
    changed = false;
    for (auto i = static_cast<std::uint32_t>(n); i-- > 0;) {
      const std::uint32_t u = unit_of(i);
      if (!feeds_collective[u] || !fusible[i]) continue;
      for (std::uint32_t j : nodes[i].inputs) {
        const std::uint32_t v = unit_of(root(j));
        if (v != u && forward[root(j)] == forward[i] && !feeds_collective[v] &&
            nodes[root(j)].kind == "call_function") {
          feeds_collective[v] = true;
          changed = true;
        }
      }
    }
  }
  std::vector<int> indegree(n, 0);
  std::vector<std::vector<std::uint32_t>> succ(n);
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t j : nodes[i].inputs) {
      const std::uint32_t a = unit_of(j), b = unit_of(i);
      if (a != b) {
        succ[a].push_back(b);
        ++indegree[b];
      }
    }
  std::set<std::pair<bool, std::uint32_t>> ready;  // (not feeding a collective, unit)
  const auto make_ready = [&](std::uint32_t u) { ready.insert({!feeds_collective[u], u}); };
  for (std::uint32_t u = 0; u < n; ++u)
    if (unit_of(u) == u && indegree[u] == 0) make_ready(u);
  std::size_t emitted = 0;
  while (!ready.empty()) {
    const std::uint32_t u = ready.begin()->second;
    ready.erase(ready.begin());
    ++emitted;
    std::vector<std::uint32_t> ms = units.members[u];
    std::sort(ms.begin(), ms.end());
    for (std::uint32_t x : ms) emit_collectives(x);
    for (std::uint32_t x : ms)
      if (own[x]) emit_own(*own[x], forward[x], ms);
    for (std::uint32_t v : succ[u])
      if (--indegree[v] == 0) make_ready(v);
  }
  std::size_t unit_count = 0;
  for (std::uint32_t u = 0; u < n; ++u) unit_count += unit_of(u) == u;
  SCALESCOPE_EXPECTS(emitted == unit_count);
}

}  // namespace scalescope::workload::detail
