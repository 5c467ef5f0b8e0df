#pragma once
/// Sweeps (docs/config.md "Sweeps"): a base experiment and axes of overrides expand into one
/// configuration per point of their product; each is run by the same pipeline as `scalescope
/// run`, and the points become the rows of one result table, ranked.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace scalescope::explore {

/// One axis of a sweep: its name (the key varied, or "layout" for a search) and its values,
/// each a list of "section.key=value" overrides applied together.
struct Axis {
  std::string name;
  std::vector<std::vector<std::string>> values;
};

/// Parses `--vary section.key=v1,v2,…`: one override per value. Commas inside brackets or
/// braces belong to the value (`parallel.recompute_modules=[mlp,core_attn],[moe]` has two
/// values). Throws InputError naming the text when there is no '=', no value, an empty value
/// or unbalanced brackets.
Axis parse_vary(const std::string& text);

/// The parallel layouts `--search parallel` tries on num_gpus GPUs: every TP that is a power of
/// two up to the GPUs of a node, every PP that is a power of two up to the pipeline's units and
/// the GPUs left, with PP > 1 every interleaving VPP ≥ 2 whose PP · VPP chunks divide the units,
/// and none (`parallel.vpp=` unset), and DP derived from the world size (`parallel.dp=`
/// unset). `units` is what the pipeline split counts: the decoder layers, plus one each for the
/// embedding and the loss where the experiment accounts for them in the split. Sequence parallelism
/// goes with TP > 1 (Megatron's recipes; required for MoE with TP) and is off at TP 1, where
/// Megatron switches it off; TE's TP overlap (userbuffers) is off at TP 1. Plans the
/// configuration rules refuse become rows that say why.
Axis parallel_search(std::int64_t num_gpus, std::int64_t gpus_per_node, std::int64_t units);

/// What `--search layout` needs of the experiment.
struct LayoutSpace {
  std::int64_t num_gpus = 0, gpus_per_node = 0;
  std::int64_t units = 0;        ///< what the pipeline split counts (as parallel_search)
  std::int64_t num_experts = 0;  ///< 0: a dense model (no EP axis)
  std::int64_t global_batch = 0;
};

/// The layouts `--search layout` tries: parallel_search's TP × PP × VPP (VPP none or 2) times
/// CP (1, 2, 4, 8), EP (MoE: every power of two dividing the experts, expert TP 1), the
/// micro-batch (1, 2, 4), recompute (none, selective, full) and the optimizer's sharding
/// (distributed optimizer, or FSDP / ZeRO-3). Only plans whose products divide the world
/// (TP·PP·CP | GPUs; EP | GPUs / PP; micro-batch · DP | global batch) are listed; the
/// configuration rules refuse the rest of what cannot run, as rows that say why.
Axis layout_search(const LayoutSpace& s);

/// The points of the product of `axes`, the first axis outermost (the last varies fastest);
/// each point is the concatenation of one value of every axis. No axes: one empty point.
std::vector<std::vector<std::string>> expand(const std::vector<Axis>& axes);

enum class Status : std::uint8_t {
  Ok,          ///< replayed; fits in memory
  DoesNotFit,  ///< the memory check failed (replayed only with --replay-unfit)
  Invalid,     ///< the configuration rules refused the plan; `message` says why
  /// `--search layout`: fits, but a replayed configuration is at least as fast as this one's
  /// lower bound with no more memory: not replayed (`message` names it).
  Dominated,
};
const char* status_name(Status s);

/// One configuration of a sweep and what it gave. Times in seconds, memory in bytes; the
/// figures a status does not produce stay 0.
struct Row {
  std::size_t index = 0;               ///< position in the expansion order
  std::vector<std::string> overrides;  ///< the point's overrides (the --set that reproduces it)
  Status status = Status::Invalid;
  std::string message;  ///< why a plan was refused, or which rank and class did not fit
  bool replayed = false;
  // The resolved plan.
  std::int64_t tp = 0, pp = 0, dp = 0, cp = 0, ep = 0, vpp = 0, micro_batch = 0;
  std::int64_t num_gpus = 0;
  // The replay (when replayed).
  double iteration_time_s = 0;
  double tokens_per_s = 0;
  double model_tflops_per_gpu = 0;
  double mfu = 0;
  /// The last rank to finish: its compute, its exposed communication (TP, PP, DP, embedding,
  /// CP, EP together), its pipeline bubble, its wait for collectives' slower members and its
  /// host wait.
  double compute_s = 0, exposed_comm_s = 0, bubble_s = 0, straggler_wait_s = 0, host_wait_s = 0;
  // Memory: the tightest stage's total on the device against the usable HBM
  // (peak_memory_bytes, the device total: summary.json's memory.peak_total_bytes), and the
  // largest allocated / reserved peaks over the stages (memory.peak_allocated_bytes, …).
  std::int64_t peak_memory_bytes = 0;
  std::int64_t peak_allocated_bytes = 0, peak_reserved_bytes = 0;
  std::int64_t memory_capacity_bytes = 0;
  /// A lower bound on the iteration time before any replay: the busiest rank's compute stream
  /// (its ops back to back), 0 when not computed.
  double lower_bound_s = 0;
};

/// Whether a configuration of `memory` bytes whose iteration takes at least `lower_bound_s`
/// is dominated by `r` (replayed, fits): r is no slower than that bound and needs no more memory.
bool dominates(const Row& r, double lower_bound_s, std::int64_t memory);

/// The table's order: configurations that fit by iteration time, then dominated ones (by their
/// lower bound), then those that do not fit (replayed ones by iteration time, then by peak
/// memory), then refused plans; ties by index.
/// Returns the row indices (positions in `rows`) in that order.
std::vector<std::size_t> rank_rows(const std::vector<Row>& rows);

}  // namespace scalescope::explore
