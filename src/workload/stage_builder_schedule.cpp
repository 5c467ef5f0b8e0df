// StageBuilder: pipeline communication, the forward / backward of one micro-batch through the
// stage's layers, and the pipeline schedules (1F1B, GPipe, interleaved).
#include "workload/stage_builder.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace scalescope::workload::detail {

/// A batched send/recv (Megatron p2p_communication with batch_p2p_sync): blocking.
void StageBuilder::p2p(bool send, CommRole send_to, bool recv, CommRole recv_from,
                       std::int64_t mb) {
  if (!send && !recv) return;
  cur_layer_ = -1;
  cur_mb_ = mb_base_ + mb;
  Op op = base(OpKind::SendRecv,
               send && recv ? OpName::PpSendRecv : (send ? OpName::PpSend : OpName::PpRecv),
               Phase::Other);
  op.role = send ? send_to : CommRole::None;
  op.role2 = recv ? recv_from : CommRole::None;
  op.stream = graph::stream_of(send ? send_to : recv_from);
  op.comm_bytes = p2p_bytes();
  chain(op);
}

/// An asynchronous isend or irecv posted now (after the chain's last op) on its pair's
/// stream; whoever waits for it depends on the returned op (Megatron p2p_communication with
/// overlap_p2p_comm: torch.distributed.isend / irecv, waited on later).
std::uint32_t StageBuilder::post(bool send, CommRole role, std::int64_t mb) {
  cur_layer_ = -1;
  cur_mb_ = mb_base_ + mb;
  Op op = base(OpKind::SendRecv, send ? OpName::PpSend : OpName::PpRecv, Phase::Other);
  (send ? op.role : op.role2) = role;
  op.stream = graph::stream_of(role);
  op.comm_bytes = p2p_bytes();
  std::vector<std::uint32_t> deps;
  if (chain_ != kNone) deps.push_back(chain_);
  return add_free(op, deps);
}

/// Forward of micro-batch mb through model chunk `chunk` (the embedding runs in the first
/// virtual stage, the head and loss in the last).
/// Under ZeRO-3 / FSDP each unit's parameters are all-gathered before use unless they are still
/// gathered, one layer ahead (FSDP's prefetch: the gather of layer l + 1 is issued before layer
/// l computes and after layer l − 1 is freed, so two layer units are gathered at most,
/// limit_all_gathers); with reshard_after_forward each layer is freed after its forward. The
/// chunk's units stay gathered otherwise (until a backward frees them, or, under pipeline
/// parallelism with torch.distributed.pipelining, until the chunk's last backward:
/// pp_fsdp_reduce).
void StageBuilder::forward(std::int64_t mb, std::int64_t chunk) {
  mb += mb_base_;  // the iteration's micro-batch index
  cur_mb_ = mb;
  const std::int64_t first = chunk_first_[chunk];
  const std::int64_t end = first + chunk_layers_[chunk];
  const auto c = static_cast<std::size_t>(chunk);
  const bool gather = zero3_ && !layers_gathered_[c];
  std::uint32_t next = kNone;
  if (zero3_ && !root_gathered_[c] && unit_of(-1, chunk).dense > 0) {
    wait_for(unit_gather(-1, Phase::Forward, chunk));
    root_gathered_[c] = true;
  }
  if (gather && end > first) next = unit_gather(first, Phase::Forward, chunk);
  ovl_ends(true);
  if (first_ && chunk == 0) embedding_forward();
  for (std::int64_t l = first; l < end; ++l) {
    ovl_layer(l - first);
    if (gather) {
      const std::uint32_t gathered = next;
      next = l + 1 < end ? unit_gather(l + 1, Phase::Forward, chunk) : kNone;
      wait_for(gathered);
    }
    // MTP modules after the decoder (GPTModel._postprocess: MTP, their losses, the main
    // logits and loss).
    if (m_.is_mtp_layer(l)) mtp_input_forward(l);
    layer_forward(l, Phase::Forward, mb == 0);
    if (m_.is_mtp_layer(l)) head_forward(l);
    if (gather && p_.reshard_after_forward) free_unit(l);
  }
  if (zero3_) layers_gathered_[c] = !p_.reshard_after_forward || !gather;
  ovl_ends(false);
  if (last_ && chunk == p_.vpp() - 1) head_forward();
}

/// Under full recomputation, the checkpoint holding layer l: [first, last] of the layers run
/// again together before the backward of the last (parallel_plan.hpp RecomputeMethod, within
/// l's model chunk); an empty span (first > last) when l keeps its activations.
std::pair<std::int64_t, std::int64_t> StageBuilder::checkpoint_of(std::int64_t l) const {
  if (p_.recompute != Recompute::Full) return {1, 0};
  std::int64_t first = l, last = l;
  for (std::size_t c = 0; c < chunk_first_.size(); ++c)
    if (l >= chunk_first_[c] && l < chunk_first_[c] + chunk_layers_[c]) {
      first = chunk_first_[c];
      last = first + chunk_layers_[c] - 1;
    }
  const std::int64_t n = p_.recompute_num_layers;
  constexpr std::pair<std::int64_t, std::int64_t> kKept{1, 0};  // not checkpointed
  // An MTP module checkpoints its layer on its own under uniform (Megatron asserts
  // recompute_num_layers == 1 there) and not under block ("not supported for MTP yet").
  if (m_.is_mtp_layer(l))
    return p_.recompute_method == RecomputeMethod::Uniform ? std::pair{l, l} : kKept;
  if (p_.recompute_method == RecomputeMethod::Block) return l - first < n ? std::pair{l, l} : kKept;
  if (p_.recompute_method == RecomputeMethod::Interval)
    return (l - first + 1) % n == 0 ? std::pair{l, l} : kKept;
  const std::int64_t g = first + (l - first) / n * n;
  return {g, std::min(g + n - 1, last)};
}

bool StageBuilder::checkpointed(std::int64_t l) const {
  const auto [first, last] = checkpoint_of(l);
  return first <= last;
}

/// ZeRO-3 / FSDP: the backward gathers each layer again where it is not gathered (after
/// reshard_after_forward, or after an earlier backward freed it), the gather of layer l − 1
/// issued before layer l's backward (BACKWARD_PRE prefetch); after a unit's backward its
/// parameters are freed and its gradients reduce-scattered (on the last micro-batch only,
/// unless fsdp_reduce_every_microbatch); the root (FSDP2 does not reshard it after the forward)
/// after the embedding's backward. Under pipeline parallelism with the stage reducing once
/// (pp_fsdp_: torch.distributed.pipelining turns resharding and gradient sync off for every
/// backward) nothing is freed or reduced here: the gradients accumulate unsharded and the
/// chunk's units are reduced and freed after its last backward (pp_fsdp_reduce).
void StageBuilder::backward(std::int64_t mb, std::int64_t chunk) {
  mb += mb_base_;  // the iteration's micro-batch index
  cur_mb_ = mb;
  const auto c = static_cast<std::size_t>(chunk);
  const std::int64_t run = chunk_backwards_[c]++;
  // The chunk's last backward of the iteration (looped BFS runs the backwards in reverse
  // micro-batch order, so this is a count, not an index).
  const bool last_of_iteration = run == num_mb_ - 1 && mb_base_ + num_mb_ == total_mb_;
  const bool reduce = !pp_fsdp_ && (last_of_iteration || p_.fsdp_reduce_every_microbatch);
  const bool alloc_grads = run == 0 || p_.fsdp_reduce_every_microbatch;
  const std::int64_t first = chunk_first_[chunk];
  const std::int64_t last = first + chunk_layers_[chunk] - 1;
  const bool regather = zero3_ && !layers_gathered_[c];
  std::uint32_t next = kNone;
  // The root again where an earlier backward resharded it (pipeline warm-up runs several
  // forwards before a backward; FSDP2 unshards a module again before its backward).
  if (zero3_ && !root_gathered_[c] && unit_of(-1, chunk).dense > 0) {
    wait_for(unit_gather(-1, Phase::Backward, chunk));
    root_gathered_[c] = true;
  }
  if (regather && last >= first) next = unit_gather(last, Phase::Backward, chunk);
  if (zero3_ && alloc_grads) pending_alloc_ += unit_grad_bytes(unit_of(-1, chunk));
  ovl_ends(true);
  if (last_ && chunk == p_.vpp() - 1) head_backward();
  for (std::int64_t l = last; l >= first; --l) {
    ovl_layer(last - l);
    if (regather) {
      const std::uint32_t gathered = next;
      next = l > first ? unit_gather(l - 1, Phase::Backward, chunk) : kNone;
      wait_for(gathered);
    }
    cur_layer_ = l;
    if (zero3_ && alloc_grads) pending_alloc_ += unit_grad_bytes(unit_of(l));
    // The main loss's backward runs first (its logits were made last), then each MTP
    // module's, last to first.
    if (m_.is_mtp_layer(l)) head_backward(l);
    // Full recomputation: a checkpoint's layers run forward again before the backward of its
    // last one.
    if (const auto [g0, g1] = checkpoint_of(l); g0 <= g1 && l == g1)
      for (std::int64_t k = g0; k <= g1; ++k) layer_forward(k, Phase::Recompute, false);
    layer_backward(l, mb);
    if (m_.is_mtp_layer(l)) mtp_input_backward(l);
    if (zero3_ && !pp_fsdp_) {
      free_unit(l);
      if (reduce) unit_reduce(l, unit_of(l));
    }
  }
  ovl_ends(false);
  if (first_ && chunk == 0) embedding_backward();
  if (zero3_ && !pp_fsdp_) {
    layers_gathered_[c] = false;
    if (root_gathered_[c]) {
      free_unit(-1, chunk);
      root_gathered_[c] = false;
      if (reduce) unit_reduce(-1, unit_of(-1, chunk));
    }
  }
  if (pp_fsdp_ && run == num_mb_ - 1) pp_fsdp_reduce(chunk);
  // ZeRO-2: the gradients are sharded, so each micro-batch's are reduce-scattered into the
  // shard (DeepSpeed ZeRO-2); the last micro-batch's in finish_iteration.
  if (p_.zero() == 2 && p_.dp_cp() > 1 && !last_of_iteration) reduce_buckets(chunk, chain_);
}

/// Non-interleaved 1F1B exactly as Megatron's forward_backward_pipelining_without_interleaving
/// (MODELING §2.1): warm-up forwards, steady 1F1B, cool-down backwards.
void StageBuilder::one_f_one_b() {
  const std::int64_t p = p_.pp(), m = num_mb_, r = stage_;
  if (p_.moe_a2a_overlap && p == 1) {
    // combined_1f1b_schedule_for_no_pipelining: F0 alone, then F(i + 1) with B(i), then the
    // last backward alone.
    const std::int64_t n = chunk_layers_[0];
    forward(0);
    for (std::int64_t i = 0; i + 1 < m; ++i)
      combined(
          n, n, [&] { forward(i + 1); }, [&] { backward(i); });
    backward(m - 1);
    return;
  }
  const std::int64_t w = std::min(p - r - 1, m);
  const bool prev = !first_, next = !last_;
  for (std::int64_t i = 0; i < w; ++i) {
    p2p(false, CommRole::None, prev, CommRole::PpPrev, i);
    forward(i);
    p2p(next, CommRole::PpNext, false, CommRole::None, i);
  }
  if (m > w) p2p(false, CommRole::None, prev, CommRole::PpPrev, w);
  for (std::int64_t i = 0; i < m - w; ++i) {
    const bool last_iteration = i == m - w - 1;
    forward(w + i);
    p2p(next, CommRole::PpNext, next, CommRole::PpNext, w + i);  // send_forward_recv_backward
    backward(i);
    if (last_iteration)
      p2p(prev, CommRole::PpPrev, false, CommRole::None, i);  // send_backward
    else
      p2p(prev, CommRole::PpPrev, prev, CommRole::PpPrev, i);  // send_backward_recv_forward
  }
  for (std::int64_t i = 0; i < w; ++i) {
    p2p(false, CommRole::None, next, CommRole::PpNext, m - w + i);
    backward(m - w + i);
    p2p(prev, CommRole::PpPrev, false, CommRole::None, m - w + i);
  }
}

/// GPipe: all forwards, then all backwards, each with its own blocking transfers.
void StageBuilder::gpipe() {
  const std::int64_t m = num_mb_;
  for (std::int64_t i = 0; i < m; ++i) {
    p2p(false, CommRole::None, !first_, CommRole::PpPrev, i);
    forward(i);
    p2p(!last_, CommRole::PpNext, false, CommRole::None, i);
  }
  for (std::int64_t i = 0; i < m; ++i) {
    p2p(false, CommRole::None, !last_, CommRole::PpNext, i);
    backward(i);
    p2p(!first_, CommRole::PpPrev, false, CommRole::None, i);
  }
}

/// torch.distributed.pipelining's ScheduleLoopedBFS (torch/distributed/pipelining/schedules.py,
/// `_calculate_single_rank_operations`: the rank's stages in order, every micro-batch's forward
/// of one before the next; then the stages in reverse, the micro-batches' backwards in reverse
/// order), with v = virtual_pipeline_model_parallel_size stages per rank (chunk c of rank r is
/// stage c·p + r; the last rank's chunk c feeds the first rank's chunk c + 1). As
/// PipelineScheduleMulti runs it: each forward waits for its input's receive and posts its
/// output's send, each backward likewise with gradients; the sends are waited for at the end of
/// the step (blocking sends would deadlock the wrap-around once m ≥ p: the last rank's first
/// send to the first rank's next chunk waits for all of the first rank's current chunk).
void StageBuilder::looped_bfs() {
  const std::int64_t v = p_.vpp(), m = num_mb_;
  std::vector<std::uint32_t> sends;
  for (std::int64_t c = 0; c < v; ++c)
    for (std::int64_t i = 0; i < m; ++i) {
      if (!(first_ && c == 0)) wait_for(post(false, CommRole::PpPrev, i));
      forward(i, c);
      if (!(last_ && c == v - 1)) sends.push_back(post(true, CommRole::PpNext, i));
    }
  for (std::int64_t c = v - 1; c >= 0; --c)
    for (std::int64_t i = m - 1; i >= 0; --i) {
      if (!(last_ && c == v - 1)) wait_for(post(false, CommRole::PpNext, i));
      backward(i, c);
      if (!(first_ && c == 0)) sends.push_back(post(true, CommRole::PpPrev, i));
    }
  for (std::uint32_t s : sends) wait_for(s);
}

/// A rank's actions of a torch.distributed.pipelining action table with its transfers
/// (`_PipelineScheduleRuntime._step_microbatches` over pipeline_order_with_comms): a receive is
/// posted where the table puts it and waited for by its forward or backward, a send posted
/// where the table puts it (after its compute) and waited for at the end of the step. Stage s
/// is chunk s / p of rank s mod p: a forward's input comes from the previous rank (the last
/// rank's chunk c feeds the first rank's chunk c + 1), a backward's gradient from the next.
/// A split backward (zero bubble: `backward_one_chunk(full_backward=False)`, then
/// `backward_weight_one_chunk`): the I action emits the backward with its weight-gradient ops
/// keyed to the W action's position (defer_weight_grad); the program is put in key order after
/// the schedule (issue_in_key_order), so those ops issue where W stands.
void StageBuilder::run_actions(const std::vector<PipelineAction>& actions) {
  const std::int64_t p = p_.pp();
  std::vector<std::uint32_t> sends;
  std::map<std::pair<std::int64_t, std::int64_t>, std::uint32_t> recv_f, recv_b;
  std::map<std::pair<std::int64_t, std::int64_t>, std::uint64_t> weight_at;  // W's position
  // Keys: this run's actions after the previous runs' (gradient accumulation runs the schedule
  // several times), ops before the schedule at 0.
  const std::uint64_t base = seg_ + 1;
  for (std::size_t k = 0; k < actions.size(); ++k)
    if (actions[k].kind == PipeAction::BackwardWeight)
      weight_at[{actions[k].stage, actions[k].microbatch}] = base + k;
  const auto take = [](auto& posted, std::int64_t stage, std::int64_t mb) {
    const auto it = posted.find({stage, mb});
    if (it == posted.end()) return kNone;  // a pipeline end: nothing to receive
    const std::uint32_t op = it->second;
    posted.erase(it);
    return op;
  };
  for (std::size_t k = 0; k < actions.size(); ++k) {
    const PipelineAction& a = actions[k];
    if (keyed_) seg_ = base + k;
    switch (a.kind) {
      case PipeAction::RecvF:
        recv_f[{a.stage, a.microbatch}] = post(false, CommRole::PpPrev, a.microbatch);
        break;
      case PipeAction::RecvB:
        recv_b[{a.stage, a.microbatch}] = post(false, CommRole::PpNext, a.microbatch);
        break;
      case PipeAction::SendF:
        sends.push_back(post(true, CommRole::PpNext, a.microbatch));
        break;
      case PipeAction::SendB:
        sends.push_back(post(true, CommRole::PpPrev, a.microbatch));
        break;
      case PipeAction::Forward:
        if (const std::uint32_t r = take(recv_f, a.stage, a.microbatch); r != kNone) wait_for(r);
        forward(a.microbatch, a.stage / p);
        break;
      case PipeAction::Backward:
      case PipeAction::BackwardInput:
        if (const std::uint32_t r = take(recv_b, a.stage, a.microbatch); r != kNone) wait_for(r);
        defer_wgrad_ = a.kind == PipeAction::BackwardInput;
        if (defer_wgrad_) defer_seg_ = weight_at.at({a.stage, a.microbatch});
        backward(a.microbatch, a.stage / p);
        if (defer_wgrad_) prog_.ops[chain_].mem_alloc += static_cast<std::int64_t>(held_);
        held_ = 0;
        defer_wgrad_ = false;
        break;
      case PipeAction::BackwardWeight:  // emitted by its I action, keyed here
      case PipeAction::Idle:
        break;
    }
  }
  if (keyed_) seg_ = base + actions.size();  // the sends' waits, then what follows the run
  for (std::uint32_t s : sends) wait_for(s);
}

/// Interleaved 1F1B as Megatron-Core's forward_backward_pipelining_with_interleaving runs it
/// (MODELING §2.2): v model chunks per rank, virtual micro-batches in the order of
/// get_schedule_table (groups of G micro-batches run chunk 0, then chunk 1, …; the backward
/// takes the chunks in reverse), warm-up w = min(2·(p − r − 1) + (v − 1)·G, m·v) forwards,
/// steady 1F1B, cool-down backwards. Transfers wrap around from the last rank to the first
/// between chunks. With overlap_p2p_comm (the default) the steady state's transfers are
/// asynchronous: each forward send is waited for at once (pp_post_forward, to free the output
/// under deallocate_pipeline_outputs), each backward send one step later (pp_post_backward
/// waits the previous step's send_prev handle after posting this step's transfers; the last
/// one after the cool-down loop), each receive just before the forward or backward that needs
/// it; warm-up and cool-down transfers block. Without it, each step's four transfers are
/// posted together and waited for at once.
void StageBuilder::interleaved() {
  const std::int64_t p = p_.pp(), v = p_.vpp(), m = num_mb_, r = stage_;
  const std::int64_t G = p_.microbatch_group_size();
  const std::int64_t total = m * v;
  // get_schedule_table: (micro-batch, chunk) of each virtual micro-batch.
  std::vector<std::pair<std::int64_t, std::int64_t>> table;
  for (std::int64_t lo = 0; lo < m; lo += G) {
    const std::int64_t hi = lo + G >= m ? m : lo + G;
    for (std::int64_t c = 0; c < v; ++c)
      for (std::int64_t mb = lo; mb < hi; ++mb) table.emplace_back(mb, c);
  }
  auto chunk_of = [&](std::int64_t k, bool fwd) {
    const std::int64_t c = table[static_cast<std::size_t>(((k % total) + total) % total)].second;
    return fwd ? c : v - 1 - c;
  };
  auto mb_of = [&](std::int64_t k) { return table[static_cast<std::size_t>(k)].first; };
  // recv_tensor_from_previous_stage: whether the peer sends for virtual micro-batch k + 1.
  auto expects = [&](std::int64_t k, bool fwd) {
    const bool leading = fwd ? first_ : last_;
    if (!leading) return true;
    if (k < p - 1) return false;
    return chunk_of(k - (p - 1), fwd) != (fwd ? v - 1 : 0);
  };
  auto sends_forward = [&](std::int64_t k) { return !(last_ && chunk_of(k, true) == v - 1); };
  auto sends_backward = [&](std::int64_t k) { return !(first_ && chunk_of(k, false) == 0); };
  std::int64_t w = 2 * (p - r - 1) + (v - 1) * G;
  // EP overlap: one more warm-up forward, "to ensure the forward and backward computations
  // are independent in all 1f1b steps" (Megatron get_pp_rank_microbatches).
  if (p_.moe_a2a_overlap) ++w;
  const bool all_warmup = w >= total;
  if (all_warmup) w = total;
  const std::int64_t remaining = total - w;
  const bool overlap = p_.overlap_p2p_comm;
  std::deque<std::uint32_t> recv_prev, recv_next;  // posted receives not yet waited for

  // Blocking exchange: post every part, then wait for all (isend/irecv, then wait()).
  auto exchange = [&](bool send_next, bool recv_from_prev, bool send_prev, bool recv_from_next,
                      std::int64_t mb) {
    std::vector<std::uint32_t> posted;
    if (send_next) posted.push_back(post(true, CommRole::PpNext, mb));
    if (recv_from_prev) posted.push_back(post(false, CommRole::PpPrev, mb));
    if (send_prev) posted.push_back(post(true, CommRole::PpPrev, mb));
    if (recv_from_next) posted.push_back(post(false, CommRole::PpNext, mb));
    for (std::uint32_t op : posted) wait_for(op);
  };
  auto wait_front = [&](std::deque<std::uint32_t>& q) {
    if (q.empty()) return;
    wait_for(q.front());
    q.pop_front();
  };
  // pp_post_backward (schedules.py, Megatron-Core d98e8a6): post this step's send_prev and
  // recv_next, then wait the previous step's send_prev handle; this step's is waited one step
  // later (or after the cool-down loop).
  std::uint32_t send_prev_pending = kNone;
  auto post_backward = [&](std::int64_t k, bool recv_b) {
    const std::uint32_t send = sends_backward(k) ? post(true, CommRole::PpPrev, mb_of(k)) : kNone;
    if (recv_b) recv_next.push_back(post(false, CommRole::PpNext, mb_of(k)));
    wait_for_overlapped(std::exchange(send_prev_pending, send));
  };

  // recv_forward before the loop (nothing on the first virtual stage).
  if (!first_) exchange(false, true, false, false, 0);
  for (std::int64_t k = 0; k < w; ++k) {
    forward(mb_of(k), chunk_of(k, true));
    const bool recv = expects(k, true) && k != total - 1;
    if (k == w - 1 && !all_warmup && !overlap) {
      exchange(sends_forward(k), recv, false, !last_, mb_of(k));
    } else {
      exchange(sends_forward(k), recv, false, false, mb_of(k));
      if (k == w - 1 && !all_warmup && !last_)  // recv_backward posted asynchronously
        recv_next.push_back(post(false, CommRole::PpNext, mb_of(k)));
    }
  }
  for (std::int64_t k = 0; k < remaining; ++k) {
    const std::int64_t fk = w + k;
    const bool recv_f = expects(fk, true) && k != remaining - 1;
    const bool recv_b = expects(k, false);
    if (overlap && p_.moe_a2a_overlap) {
      // combined_1f1b_schedule_for_interleaved_pipelining: the step's forward and backward
      // together (each with its own transfers), layer by layer.
      combined(
          chunk_layers_[static_cast<std::size_t>(chunk_of(fk, true))],
          chunk_layers_[static_cast<std::size_t>(chunk_of(k, false))],
          [&] {
            if (!(first_ && chunk_of(fk, true) == 0)) wait_front(recv_prev);
            forward(mb_of(fk), chunk_of(fk, true));
            if (sends_forward(fk)) wait_for(post(true, CommRole::PpNext, mb_of(fk)));
            if (recv_f) recv_prev.push_back(post(false, CommRole::PpPrev, mb_of(fk)));
          },
          [&] {
            if (!(last_ && chunk_of(k, false) == v - 1)) wait_front(recv_next);
            backward(mb_of(k), chunk_of(k, false));
            post_backward(k, recv_b);
          });
    } else if (overlap) {
      if (!(first_ && chunk_of(fk, true) == 0)) wait_front(recv_prev);
      forward(mb_of(fk), chunk_of(fk, true));
      if (sends_forward(fk)) wait_for(post(true, CommRole::PpNext, mb_of(fk)));
      if (recv_f) recv_prev.push_back(post(false, CommRole::PpPrev, mb_of(fk)));
      if (!(last_ && chunk_of(k, false) == v - 1)) wait_front(recv_next);
      backward(mb_of(k), chunk_of(k, false));
      post_backward(k, recv_b);
    } else {
      forward(mb_of(fk), chunk_of(fk, true));
      backward(mb_of(k), chunk_of(k, false));
      exchange(sends_forward(fk), recv_f, sends_backward(k), recv_b, mb_of(k));
    }
  }
  // Cool-down: blocking exchanges; a receive still posted is waited for before the first
  // backward that needs an input gradient.
  if (all_warmup && !last_) exchange(false, false, false, true, 0);
  for (std::int64_t k = remaining; k < total; ++k) {
    if (!(last_ && chunk_of(k, false) == v - 1) && k != 0) wait_front(recv_next);
    backward(mb_of(k), chunk_of(k, false));
    const bool recv = expects(k, false) && k != total - 1;
    exchange(false, false, sends_backward(k), recv, mb_of(k));
  }
  wait_for_overlapped(send_prev_pending);  // after the cool-down loop (schedules.py)
  SCALESCOPE_EXPECTS(recv_prev.empty() && recv_next.empty());
}

}  // namespace scalescope::workload::detail
