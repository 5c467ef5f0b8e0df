#pragma once
/// What an emulation run produces, in plain data handed to the writers in io/.
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/sim_time.hpp"

namespace scalescope::emu {

/// Where one rank's iteration time went: finish = compute + exposed_tp + exposed_pp + exposed_dp
/// + exposed_embedding + exposed_cp + exposed_ep + bubble + straggler_wait + host_wait +
/// other_wait. Compute-stream idle time is split along the communication op the next compute op
/// waited for: the part while that op's data moved (its wire time) is exposed communication of
/// its kind (TP, pipeline transfer, DP, tied-embedding all-reduce); the part while it waited for
/// its peers to arrive is `bubble` where the op is a pipeline transfer or the tied-embedding
/// all-reduce between the first and last stage (pipeline fill and drain) and `straggler_wait`
/// where it is any other collective (a slower member of its TP, DP, CP or EP group: a
/// straggler, or load imbalance among replicas or experts); host_wait is idle time while the host
/// (CPU) had not yet issued the next op (docs/engine.md "Host issue"); other_wait is idle time with
/// nothing else to blame.
struct RankResult {
  SimTime finish = 0;
  SimTime compute = 0;
  SimTime exposed_tp = 0;
  SimTime exposed_pp = 0;
  SimTime exposed_dp = 0;
  SimTime exposed_embedding = 0;
  SimTime exposed_cp = 0;      ///< context parallelism's key/value exchange
  SimTime exposed_ep = 0;      ///< MoE token dispatch / combine (EP and expert-TP collectives)
  SimTime bubble = 0;          ///< waiting on the pipeline's other stages
  SimTime straggler_wait = 0;  ///< waiting for a collective's slower members
  SimTime host_wait = 0;
  SimTime other_wait = 0;
  std::int64_t peak_memory = 0;     ///< peak allocated bytes (issue order, as PyTorch counts)
  std::int64_t peak_transient = 0;  ///< of which the transient workspace of the op at the peak
  std::int64_t static_memory = 0;   ///< weights + grads + optimizer state
  std::uint32_t pp_stage = 0;
  std::uint32_t rank_class = 0;
};

/// One op of a traced rank, as executed.
struct TimelineRecord {
  SimTime start = 0;
  SimTime end = 0;
  std::uint32_t op = 0;  ///< index in the rank's template
  std::uint8_t stream = 0;
  std::uint8_t kind = 0;
  std::uint8_t phase = 0;
  std::uint8_t name = 0;
  std::uint16_t layer = 0;
  std::uint16_t microbatch = 0;
};

struct MemoryRecord {
  SimTime time = 0;
  std::int64_t live = 0;
};

/// One process's share of an optimistic run (pdes::OptimisticStats, as written to the files).
struct ProcessEngineStats {
  std::uint64_t events_processed = 0;
  std::uint64_t events_committed = 0;
  std::uint64_t events_rolled_back = 0;
  std::uint64_t anti_messages = 0;
  std::uint64_t remote_messages = 0;
  std::uint64_t committed_at_execution = 0;
  double wall_s = 0;
  double gvt_s = 0;   ///< in the GVT protocol and fossil collection
  double idle_s = 0;  ///< with no event allowed to run
};

struct EngineStats {
  std::string kind = "sequential";
  std::uint32_t processes = 1;
  std::uint64_t events_processed = 0;
  std::uint64_t events_committed = 0;
  std::uint64_t events_rolled_back = 0;
  std::uint64_t rollbacks = 0;
  std::uint64_t anti_messages = 0;
  std::uint64_t remote_messages = 0;
  std::uint64_t gvt_rounds = 0;
  std::uint64_t committed_at_execution = 0;  ///< below GVT + lookahead: never kept for rollback
  std::uint64_t fossil_visits = 0;           ///< LPs fossil collection looked at, over its rounds
  /// Optimistic: the furthest past GVT any event ran (run.optimism_window_us bounds it);
  /// conservative: the window (no event runs further past its window's start), 0 where one
  /// window ran everything (nothing crosses processes); sequential: 0
  SimTime max_run_ahead = 0;
  double wall_s = 0;
  double gvt_s = 0;                             ///< largest over processes
  double idle_s = 0;                            ///< largest over processes
  std::vector<ProcessEngineStats> per_process;  ///< optimistic engine: one per process
  double events_per_rank = 0;                   ///< committed events / replayed ranks
  double lp_bytes_per_rank = 0;  ///< RankLP state (object + per-op dynamic state) / replayed ranks
  /// run.replicas: "all" (every rank replayed) or "representative" (one replica replayed, the
  /// others given its results: emu/replicas.hpp); the replicas found and the ranks replayed.
  std::string replicas = "all";
  std::uint32_t replica_count = 1;
  std::uint32_t replayed_ranks = 0;
};

struct Summary {
  std::uint32_t world_size = 0;
  SimTime iteration_time = 0;
  double tokens_per_iteration = 0;
  double model_flops_per_iteration = 0;  ///< Megatron's num_floating_point_operations
  double peak_flops_per_gpu = 0;         ///< datasheet dense bf16/fp16
  /// Datasheet dense peak of the quantized GEMMs' format when the job trains in fp8 or NVFP4 (0
  /// otherwise): the second MFU, named after `lowp_format` ("fp8" or "fp4").
  double peak_lowp_flops_per_gpu = 0;
  std::string lowp_format;
  std::int64_t peak_memory_bytes = 0;  ///< max over ranks
  std::vector<std::int64_t> peak_memory_bytes_by_pp_stage;
  std::vector<std::int64_t> peak_transient_bytes_by_pp_stage;  ///< workspace at each stage's peak
  /// Capacity check (filled by the caller that knows the workload; docs/model.md): per stage and
  /// memory class (workload::MemClass order) the bytes at the stage's peak, and the verdict.
  std::vector<std::string> memory_class_names;
  std::vector<std::vector<std::int64_t>> memory_breakdown_by_pp_stage;
  std::vector<std::int64_t> memory_total_bytes_by_pp_stage;  ///< reserved + context + NCCL + …
  /// torch.cuda.max_memory_allocated / max_memory_reserved of each stage at its peak (cuBLAS
  /// workspaces included): the names `run`, `memory`, `sweep` and the report all use.
  std::vector<std::int64_t> memory_allocated_bytes_by_pp_stage;
  std::vector<std::int64_t> memory_reserved_bytes_by_pp_stage;
  /// The largest of each over the stages.
  std::int64_t peak_allocated_bytes() const { return max_of(memory_allocated_bytes_by_pp_stage); }
  std::int64_t peak_reserved_bytes() const { return max_of(memory_reserved_bytes_by_pp_stage); }
  std::int64_t peak_total_bytes() const { return max_of(memory_total_bytes_by_pp_stage); }
  static std::int64_t max_of(const std::vector<std::int64_t>& v) {
    std::int64_t m = 0;
    for (std::int64_t x : v) m = x > m ? x : m;
    return m;
  }
  std::int64_t memory_capacity_bytes = 0;  ///< usable HBM of the GPU
  bool memory_fits = true;
  std::uint32_t memory_tightest_rank = 0;
  std::uint32_t memory_tightest_stage = 0;
  std::string memory_dominant_class;
  /// When it does not fit: changes that make it fit (--set overrides each), cheapest first, and
  /// the device total each gives at its tightest stage (app/memory_fixes.cpp).
  std::vector<std::vector<std::string>> memory_fix_sets;
  std::vector<std::int64_t> memory_fix_total_bytes;
  /// cost.profile: where compute durations were measured rather than modelled (empty path: no
  /// profile). The fraction weighs every rank's compute time.
  std::string profile_path;
  std::string profile_device;
  std::uint64_t profile_signatures_found = 0;
  std::uint64_t profile_signatures_total = 0;
  double profile_measured_fraction = 0;
  /// Hybrid runs: the sandbox ranks and what their real kernels gave (empty ranks: none).
  std::vector<std::uint32_t> sandbox_ranks;
  std::string sandbox_backend;
  std::string sandbox_device;
  double sandbox_op_scale = 1;
  std::uint64_t sandbox_measured_ops = 0;  ///< distinct kernel signatures measured
  double sandbox_measured_fraction = 0;    ///< of the sandbox ranks' compute time
  std::int64_t sandbox_peak_allocated_bytes = 0;
  std::int64_t sandbox_peak_reserved_bytes = 0;
  bool sandbox_replayed = false;  ///< the measurements came from --replay-measurements
  /// The host backend at op_scale < 1 ran shrunk kernels on a CPU: the iteration time checks
  /// that real kernels run inside the replay, it predicts nothing.
  bool sandbox_functional_check = false;
  SimTime sandbox_pure_replay_time = 0;  ///< the same job replayed without the sandbox
  /// run --sandbox-program (docs/sandbox-program.md): the user's program on one rank (empty:
  /// none); whether its last iteration replaced that rank's ops in the replay (else the figures
  /// are the pure replay's, and the note says why).
  std::string sandbox_program;
  std::uint32_t sandbox_program_rank = 0;
  std::uint32_t sandbox_program_iterations = 0;
  bool sandbox_program_in_replay = false;
  std::string sandbox_program_note;
  std::string model_name;
  std::string software_stack;  ///< training.stack, "" when none was given
  /// Where a pipeline's order came from when it is not a built-in schedule (a
  /// torch.distributed.pipelining action table), "" otherwise.
  std::string pipeline_schedule;
  std::string gpu;
  /// What-ifs (docs/config.md "What-if"): their texts, and the iteration time of the same run
  /// without them (0: none).
  std::vector<std::string> whatif;
  SimTime whatif_baseline_time = 0;

  double iteration_time_s() const { return ns_to_seconds(iteration_time); }
  double tokens_per_s() const { return tokens_per_iteration / iteration_time_s(); }
  double model_tflops_per_gpu() const {
    return model_flops_per_iteration / iteration_time_s() / world_size / 1e12;
  }
  /// MFU against the fp8 / fp4 peak (0 when the job's GEMMs are not quantized).
  double mfu_lowp() const {
    return peak_lowp_flops_per_gpu > 0 ? mfu() * peak_flops_per_gpu / peak_lowp_flops_per_gpu : 0;
  }
  double mfu() const {
    return model_flops_per_iteration / iteration_time_s() / world_size / peak_flops_per_gpu;
  }
};

enum class PathKind : std::uint8_t { Compute, Host, Tp, Pp, Dp, Ep, Cp, Embedding };
inline constexpr int kNumPathKinds = 8;
inline std::string_view path_kind_name(PathKind k) {
  constexpr std::array<std::string_view, kNumPathKinds> names = {
      "compute", "host", "TP", "PP", "DP", "EP", "CP", "embedding"};
  return names[static_cast<std::size_t>(k)];
}

/// One piece of the path: op `op` of rank `rank` over [start, end) — a compute op, a transfer
/// from the last member's arrival to its completion, or the host issuing (op: the op issued).
struct PathSegment {
  SimTime start = 0;
  SimTime end = 0;
  std::uint32_t rank = 0;
  std::uint32_t op = 0;
  PathKind kind = PathKind::Compute;
};

struct CriticalPath {
  std::vector<PathSegment> segments;  ///< in time order
  std::array<SimTime, kNumPathKinds> totals{};
  bool empty() const { return segments.empty(); }
};

struct RunResults {
  Summary summary;
  std::vector<RankResult> ranks;                                   ///< world_size entries
  std::map<std::uint32_t, std::vector<TimelineRecord>> timelines;  ///< traced ranks
  std::map<std::uint32_t, std::vector<MemoryRecord>> memory;       ///< traced ranks
  EngineStats engine;
  std::string config_text;
  CriticalPath critical_path;  ///< the chain that set the iteration time (emu/critical_path.hpp)
};

/// One process's share of a parallel run (emu::emulate_distributed), as the collective
/// results.h5 writer takes it: nothing of size world_size is gathered on one process.
struct DistributedResults {
  /// summary, engine, config_text: global figures, identical on every process (reductions).
  /// ranks: world_size rows; complete for the ranks this process owns and for the rank that
  /// finishes last (every process holds that one row, for the summary); the other rows are zero
  /// but for rank_class (and pp_stage once the caller fills it in). timelines, memory: the
  /// traced ranks this process owns (all of them on process 0 after emu::gather_traces).
  RunResults local;
  std::vector<std::uint32_t> rank_owner;    ///< world_size entries: process of each rank
  std::vector<std::uint32_t> traced_ranks;  ///< every traced rank, ascending, on every process
  std::uint32_t process = 0;                ///< this process in the emulation's communicator
  std::uint32_t processes = 1;
  std::uint32_t last_finishing_rank = 0;  ///< the lowest rank with the largest finish time

  bool owns(std::uint32_t rank) const { return rank_owner[rank] == process; }
};

}  // namespace scalescope::emu
