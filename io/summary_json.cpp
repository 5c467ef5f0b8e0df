#include "io/summary_json.hpp"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string_view>

#include "core/units.hpp"
#include "io/h5.hpp"

namespace scalescope::io {

namespace {

/// Share of the events processed that were committed (1 when nothing was processed: no work
/// was wasted).
template <class Stats>  // emu::EngineStats, or one process's emu::ProcessEngineStats
double efficiency(const Stats& e) {
  return e.events_processed == 0
             ? 1.0
             : static_cast<double>(e.events_committed) / static_cast<double>(e.events_processed);
}

double committed_per_s(const emu::EngineStats& e) {
  return e.wall_s > 0 ? static_cast<double>(e.events_committed) / e.wall_s : 0.0;
}

double gib(std::int64_t bytes) {
  return static_cast<double>(bytes) / units::kGiB;
}

/// From this share of the iteration spent waiting for the host, a run is called host-bound.
constexpr double kHostBoundShare = 0.10;

/// The share of a rank's iteration its GPU waited for the host (kernel issue and
/// training.host_iteration_ms; docs/cost-model.md §1.6).
double host_wait_share(const emu::RankResult& r) {
  return r.finish > 0 ? static_cast<double>(r.host_wait) / static_cast<double>(r.finish) : 0.0;
}

/// A figure for the table, "n/a" when undefined (e.g. MFU without a peak FLOP/s).
std::string figure(double value, int decimals, std::string_view unit) {
  if (!std::isfinite(value)) return "n/a";
  return fmt::format("{:.{}f}{}", value, decimals, unit);
}

/// What a host sandbox's iteration time is (summary.json, the table, the report).
std::string functional_check_note(const emu::Summary& s) {
  return fmt::format(
      "functional check, not a prediction: the {} sandbox ran kernels shrunk to op_scale {} on {}; "
      "the pure replay of this job predicts {:.6f} s",
      s.sandbox_backend, s.sandbox_op_scale, s.sandbox_device,
      ns_to_seconds(s.sandbox_pure_replay_time));
}

}  // namespace

std::uint32_t last_finishing_rank(const emu::RunResults& r) {
  std::uint32_t last = 0;
  for (std::uint32_t i = 1; i < r.ranks.size(); ++i)
    if (r.ranks[i].finish > r.ranks[last].finish) last = i;
  return last;
}

void write_summary_json(const emu::RunResults& r, const std::string& path) {
  using Json = nlohmann::ordered_json;
  const emu::Summary& s = r.summary;
  const emu::RankResult last =
      r.ranks.empty() ? emu::RankResult{} : r.ranks[last_finishing_rank(r)];
  Json j;
  j["world_size"] = s.world_size;
  j["iteration_time_s"] = s.iteration_time_s();
  j["tokens_per_s"] = s.tokens_per_s();
  j["model_tflops_per_gpu"] = s.model_tflops_per_gpu();
  j["mfu"] = s.mfu();
  // MFU is model FLOPs over the datasheet's dense bf16 peak (Megatron's convention); an fp8 job
  // also gets the figure against the dense fp8 peak, so neither is read against the wrong peak.
  j["mfu_peak_tflops"] = s.peak_flops_per_gpu / 1e12;
  // Host-bound: the last rank's share of waiting for the host; "host_bound" from 10 %.
  const double host_share = host_wait_share(last);
  j["host_wait_fraction"] = host_share;
  j["host_bound"] = host_share >= kHostBoundShare;
  if (s.peak_lowp_flops_per_gpu > 0) {  // mfu_fp8 / mfu_fp4 and their peaks
    j["mfu_" + s.lowp_format] = s.mfu_lowp();
    j["mfu_" + s.lowp_format + "_peak_tflops"] = s.peak_lowp_flops_per_gpu / 1e12;
  }
  j["peak_memory_bytes"] = s.peak_memory_bytes;
  j["peak_memory_bytes_by_pp_stage"] = s.peak_memory_bytes_by_pp_stage;
  if (!s.memory_breakdown_by_pp_stage.empty()) {
    Json by_class = Json::object();
    const auto& b = s.memory_breakdown_by_pp_stage[s.memory_tightest_stage];
    for (std::size_t k = 0; k < s.memory_class_names.size(); ++k)
      by_class[s.memory_class_names[k]] = b[k];
    j["memory"] =
        Json{{"fits", s.memory_fits},
             {"capacity_bytes", s.memory_capacity_bytes},
             {"tightest_rank", s.memory_tightest_rank},
             {"tightest_pp_stage", s.memory_tightest_stage},
             {"peak_allocated_bytes", s.peak_allocated_bytes()},
             {"peak_reserved_bytes", s.peak_reserved_bytes()},
             {"peak_total_bytes", s.memory_total_bytes_by_pp_stage[s.memory_tightest_stage]},
             {"dominant_class", s.memory_dominant_class},
             {"breakdown_bytes", by_class},
             {"total_bytes_by_pp_stage", s.memory_total_bytes_by_pp_stage},
             {"allocated_bytes_by_pp_stage", s.memory_allocated_bytes_by_pp_stage},
             {"reserved_bytes_by_pp_stage", s.memory_reserved_bytes_by_pp_stage}};
    if (!s.memory_fits) {
      Json fixes = Json::array();
      for (std::size_t i = 0; i < s.memory_fix_sets.size(); ++i)
        fixes.push_back(
            Json{{"set", s.memory_fix_sets[i]}, {"total_bytes", s.memory_fix_total_bytes[i]}});
      j["memory"]["fixes"] = fixes;
    }
  }
  j["model"] = s.model_name;
  j["gpu"] = s.gpu;
  if (!s.software_stack.empty()) j["software_stack"] = s.software_stack;
  if (!s.pipeline_schedule.empty()) j["pipeline_schedule"] = s.pipeline_schedule;
  if (!s.sandbox_ranks.empty())
    j["sandbox"] = Json{{"ranks", s.sandbox_ranks},
                        {"backend", s.sandbox_backend},
                        {"device", s.sandbox_device},
                        {"op_scale", s.sandbox_op_scale},
                        {"measured_ops", s.sandbox_measured_ops},
                        {"measured_fraction_of_compute_time", s.sandbox_measured_fraction},
                        {"peak_allocated_bytes", s.sandbox_peak_allocated_bytes},
                        {"peak_reserved_bytes", s.sandbox_peak_reserved_bytes},
                        {"replayed_measurements", s.sandbox_replayed},
                        {"functional_check", s.sandbox_functional_check},
                        {"pure_replay_iteration_time_s", ns_to_seconds(s.sandbox_pure_replay_time)},
                        {"pure_replay_iteration_time_ns", s.sandbox_pure_replay_time}};
  if (s.sandbox_functional_check) j["iteration_time_note"] = functional_check_note(s);
  if (!s.sandbox_program.empty())
    j["hybrid"] =
        Json{{"sandbox_program", s.sandbox_program},
             {"rank", s.sandbox_program_rank},
             {"iterations", s.sandbox_program_iterations},
             {"report", "sandbox-program.json"},
             {"collectives_match_graph", s.sandbox_program_in_replay},
             {"program_in_replay", s.sandbox_program_in_replay},
             {"figures", s.sandbox_program_in_replay
                             ? fmt::format("the hybrid replay's: rank {} runs the program's last "
                                           "iteration, every other rank the graph",
                                           s.sandbox_program_rank)
                             : "the pure replay's: " + s.sandbox_program_note},
             {"pure_replay_iteration_time_s", ns_to_seconds(s.sandbox_pure_replay_time)},
             {"pure_replay_iteration_time_ns", s.sandbox_pure_replay_time}};
  if (!s.profile_path.empty())
    j["profile"] = Json{{"path", s.profile_path},
                        {"device", s.profile_device},
                        {"signatures_found", s.profile_signatures_found},
                        {"signatures_total", s.profile_signatures_total},
                        {"measured_fraction_of_compute_time", s.profile_measured_fraction}};
  if (!s.whatif.empty())
    j["whatif"] = Json{
        {"applied", s.whatif},
        {"baseline_iteration_time_s", ns_to_seconds(s.whatif_baseline_time)},
        {"iteration_time_s", s.iteration_time_s()},
        {"change",
         static_cast<double>(s.iteration_time) / static_cast<double>(s.whatif_baseline_time) - 1}};
  if (!r.critical_path.empty()) {
    Json totals = Json::object();
    for (int k = 0; k < emu::kNumPathKinds; ++k)
      totals[std::string(emu::path_kind_name(static_cast<emu::PathKind>(k)))] =
          ns_to_seconds(r.critical_path.totals[static_cast<std::size_t>(k)]);
    std::set<std::uint32_t> ranks;
    for (const emu::PathSegment& seg : r.critical_path.segments) ranks.insert(seg.rank);
    j["critical_path"] = Json{{"totals_s", totals},
                              {"segments", r.critical_path.segments.size()},
                              {"ranks_visited", ranks.size()}};
  }
  j["time_breakdown_rank"] = last_finishing_rank(r);
  j["time_breakdown_s"] = Json{{"compute", ns_to_seconds(last.compute)},
                               {"exposed_tp", ns_to_seconds(last.exposed_tp)},
                               {"exposed_pp", ns_to_seconds(last.exposed_pp)},
                               {"exposed_dp", ns_to_seconds(last.exposed_dp)},
                               {"exposed_embedding", ns_to_seconds(last.exposed_embedding)},
                               {"exposed_cp", ns_to_seconds(last.exposed_cp)},
                               {"exposed_ep", ns_to_seconds(last.exposed_ep)},
                               {"bubble", ns_to_seconds(last.bubble)},
                               {"straggler_wait", ns_to_seconds(last.straggler_wait)},
                               {"host_wait", ns_to_seconds(last.host_wait)},
                               {"other_wait", ns_to_seconds(last.other_wait)}};
  const emu::EngineStats& e = r.engine;
  j["engine"] = Json{{"kind", e.kind},
                     {"processes", e.processes},
                     {"events_processed", e.events_processed},
                     {"events_committed", e.events_committed},
                     {"events_rolled_back", e.events_rolled_back},
                     {"efficiency", efficiency(e)},
                     {"rollbacks", e.rollbacks},
                     {"anti_messages", e.anti_messages},
                     {"remote_messages", e.remote_messages},
                     {"gvt_rounds", e.gvt_rounds},
                     {"committed_at_execution", e.committed_at_execution},
                     {"fossil_visits", e.fossil_visits},
                     {"max_run_ahead_s", ns_to_seconds(e.max_run_ahead)},
                     {"committed_events_per_s", committed_per_s(e)},
                     {"events_per_virtual_rank", e.events_per_rank},
                     {"lp_state_bytes_per_virtual_rank", e.lp_bytes_per_rank},
                     {"wall_s", e.wall_s},
                     {"gvt_s", e.gvt_s},
                     {"idle_s", e.idle_s},
                     {"replicas", e.replicas},
                     {"replica_count", e.replica_count},
                     {"replayed_ranks", e.replayed_ranks}};
  if (!e.per_process.empty()) {
    Json rows = Json::array();
    for (const emu::ProcessEngineStats& p : e.per_process)
      rows.push_back(Json{{"events_processed", p.events_processed},
                          {"events_committed", p.events_committed},
                          {"events_rolled_back", p.events_rolled_back},
                          {"efficiency", efficiency(p)},
                          {"anti_messages", p.anti_messages},
                          {"remote_messages", p.remote_messages},
                          {"committed_at_execution", p.committed_at_execution},
                          {"wall_s", p.wall_s},
                          {"gvt_s", p.gvt_s},
                          {"idle_s", p.idle_s}});
    j["engine"]["per_process"] = std::move(rows);
  }
  const std::string text = j.dump(2) + "\n";
  write_text_via_temporary(path, [&](std::ostream& out) { out << text; });
}

std::string format_summary_table(const emu::RunResults& r) {
  const emu::Summary& s = r.summary;
  const emu::EngineStats& e = r.engine;
  fmt::memory_buffer out;
  auto row = [&](std::string_view label, std::string_view value) {
    fmt::format_to(std::back_inserter(out), "  {:<24}{}\n", label, value);
  };
  fmt::format_to(std::back_inserter(out), "scalescope summary\n");
  row("model", s.model_name);
  row("GPU", s.gpu);
  if (!s.software_stack.empty()) row("software stack", s.software_stack);
  if (!s.pipeline_schedule.empty()) row("pipeline schedule", s.pipeline_schedule);
  row("world size", fmt::format("{}", s.world_size));
  row("iteration time", figure(s.iteration_time_s(), 6, " s"));
  if (!r.ranks.empty()) {
    const double share = host_wait_share(r.ranks[last_finishing_rank(r)]);
    if (share >= kHostBoundShare)
      row("", fmt::format("host-bound: the GPUs wait {:.1f} % of the iteration for the host",
                          100 * share));
  }
  if (s.sandbox_functional_check) row("", functional_check_note(s));
  row("throughput", figure(s.tokens_per_s(), 1, " tokens/s"));
  // As Megatron-LM logs it: "throughput per GPU (TFLOP/s/GPU)", its model-FLOPs count
  // (training.py num_floating_point_operations) over the iteration time and the GPUs.
  row("model TFLOP/s per GPU",
      figure(s.model_tflops_per_gpu(), 2, " (Megatron's throughput per GPU)"));
  row("MFU", fmt::format("{} of the dense bf16 peak ({:.1f} TFLOP/s)",
                         figure(100 * s.mfu(), 2, " %"), s.peak_flops_per_gpu / 1e12));
  if (s.peak_lowp_flops_per_gpu > 0)
    row(fmt::format("MFU ({})", s.lowp_format),
        fmt::format("{} of the dense {} peak ({:.1f} TFLOP/s)", figure(100 * s.mfu_lowp(), 2, " %"),
                    s.lowp_format, s.peak_lowp_flops_per_gpu / 1e12));
  if (!s.memory_total_bytes_by_pp_stage.empty())
    row("peak memory",
        fmt::format("{:.2f} GiB allocated, {:.2f} GiB reserved, {:.2f} GiB on the device "
                    "(of {:.2f})",
                    gib(s.peak_allocated_bytes()), gib(s.peak_reserved_bytes()),
                    gib(s.peak_total_bytes()), gib(s.memory_capacity_bytes)));
  else
    row("peak memory", fmt::format("{:.2f} GiB allocated", gib(s.peak_memory_bytes)));
  if (!s.sandbox_ranks.empty())
    row("sandbox",
        fmt::format("{} rank{} on {} ({}): {} kernels, {:.1f} % of their compute "
                    "measured; allocator peak {:.2f} GiB allocated, {:.2f} GiB reserved",
                    s.sandbox_ranks.size(), s.sandbox_ranks.size() == 1 ? "" : "s",
                    s.sandbox_device, s.sandbox_backend, s.sandbox_measured_ops,
                    100 * s.sandbox_measured_fraction, gib(s.sandbox_peak_allocated_bytes),
                    gib(s.sandbox_peak_reserved_bytes)));
  if (!s.sandbox_program.empty())
    row("hybrid",
        s.sandbox_program_in_replay
            ? fmt::format("rank {} ran the user's program ({} iterations), its last in the "
                          "replay; the pure replay: {:.6f} s",
                          s.sandbox_program_rank, s.sandbox_program_iterations,
                          ns_to_seconds(s.sandbox_pure_replay_time))
            : fmt::format("rank {} ran the user's program ({} iterations); the figures are the "
                          "pure replay's: {}",
                          s.sandbox_program_rank, s.sandbox_program_iterations,
                          s.sandbox_program_note));
  if (!s.profile_path.empty())
    row("measured compute",
        fmt::format("{:.1f} % of compute time from {} ({} of {} kernel signatures)",
                    100 * s.profile_measured_fraction, s.profile_device, s.profile_signatures_found,
                    s.profile_signatures_total));
  row("engine", fmt::format("{}, {} process{}, {} events committed ({:.1f} % efficiency), "
                            "{:.3f} s wall",
                            e.kind, e.processes, e.processes == 1 ? "" : "es", e.events_committed,
                            100 * efficiency(e), e.wall_s));
  if (e.replicas == "representative")
    row("replicas",
        fmt::format("representative: {} of {} ranks replayed (one of {} identical replicas and the "
                    "collectives across them); the others copy their counterparts",
                    e.replayed_ranks, s.world_size, e.replica_count));
  if (e.kind == "conservative" && e.max_run_ahead == 0)
    row("windows", "one window: no event crosses processes");
  else if (e.kind == "conservative")
    row("windows", fmt::format("{} synchronous windows of {:.3f} ms; the busiest process {:.3f} s "
                               "exchanging",
                               e.gvt_rounds, ns_to_seconds(e.max_run_ahead) * 1e3, e.gvt_s));
  if (e.kind == "optimistic")
    row("time warp",
        fmt::format("{} rolled back, {} anti-messages, {} GVT rounds, at most {:.3f} ms past GVT; "
                    "the busiest process {:.3f} s in GVT, {:.3f} s idle",
                    e.events_rolled_back, e.anti_messages, e.gvt_rounds,
                    ns_to_seconds(e.max_run_ahead) * 1e3, e.gvt_s, e.idle_s));

  if (!s.whatif.empty()) {
    fmt::format_to(std::back_inserter(out), "\nwhat-if (the same run without them: baseline)\n");
    for (const std::string& w : s.whatif) fmt::format_to(std::back_inserter(out), "  {}\n", w);
    fmt::format_to(std::back_inserter(out), "  {:<24}{:>12}{:>9}\n", "", "s", "%");
    const double base = ns_to_seconds(s.whatif_baseline_time);
    fmt::format_to(std::back_inserter(out), "  {:<24}{:>12.6f}{:>9}\n", "baseline", base, "");
    fmt::format_to(std::back_inserter(out), "  {:<24}{:>12.6f}{:>+9.2f}\n", "with the what-ifs",
                   s.iteration_time_s(), base > 0 ? 100 * (s.iteration_time_s() / base - 1) : 0.0);
  }

  if (!r.ranks.empty()) {
    const std::uint32_t rank = last_finishing_rank(r);
    const emu::RankResult& last = r.ranks[rank];
    fmt::format_to(std::back_inserter(out), "\ntime breakdown of rank {} (finishes last)\n", rank);
    fmt::format_to(std::back_inserter(out), "  {:<24}{:>12}{:>9}\n", "", "s", "%");
    const double finish = static_cast<double>(last.finish);
    auto part = [&](std::string_view label, SimTime t) {
      fmt::format_to(std::back_inserter(out), "  {:<24}{:>12.6f}{:>9.1f}\n", label,
                     ns_to_seconds(t), finish > 0 ? 100 * static_cast<double>(t) / finish : 0.0);
    };
    part("compute", last.compute);
    part("exposed TP", last.exposed_tp);
    part("exposed PP", last.exposed_pp);
    part("exposed DP", last.exposed_dp);
    part("exposed embedding AR", last.exposed_embedding);
    part("exposed CP", last.exposed_cp);
    part("exposed EP", last.exposed_ep);
    part("pipeline bubble", last.bubble);
    part("straggler wait", last.straggler_wait);
    if (last.host_wait > 0) part("host-bound issue", last.host_wait);
    part("other wait", last.other_wait);
    part("total (finish)", last.finish);
  }

  if (!r.critical_path.empty()) {
    const auto& p = r.critical_path;
    std::set<std::uint32_t> ranks;
    for (const emu::PathSegment& seg : p.segments) ranks.insert(seg.rank);
    fmt::format_to(std::back_inserter(out),
                   "\ncritical path ({} segments over {} ranks; what set the iteration time)\n",
                   p.segments.size(), ranks.size());
    fmt::format_to(std::back_inserter(out), "  {:<24}{:>12}{:>9}\n", "", "s", "%");
    SimTime sum = 0;
    for (SimTime t : p.totals) sum += t;
    for (int k = 0; k < emu::kNumPathKinds; ++k) {
      const SimTime t = p.totals[static_cast<std::size_t>(k)];
      fmt::format_to(std::back_inserter(out), "  {:<24}{:>12.6f}{:>9.1f}\n",
                     k < 2 ? std::string(emu::path_kind_name(static_cast<emu::PathKind>(k)))
                           : fmt::format("{} communication",
                                         emu::path_kind_name(static_cast<emu::PathKind>(k))),
                     ns_to_seconds(t),
                     sum > 0 ? 100 * static_cast<double>(t) / static_cast<double>(sum) : 0.0);
    }
  }

  if (!s.memory_breakdown_by_pp_stage.empty()) {
    const auto& b = s.memory_breakdown_by_pp_stage[s.memory_tightest_stage];
    fmt::format_to(std::back_inserter(out),
                   "\nmemory of rank {} (stage {}, the tightest) at its peak\n",
                   s.memory_tightest_rank, s.memory_tightest_stage);
    fmt::format_to(std::back_inserter(out), "  {:<24}{:>12}\n", "", "GiB");
    for (std::size_t k = 0; k < s.memory_class_names.size(); ++k)
      fmt::format_to(std::back_inserter(out), "  {:<24}{:>12.2f}\n", s.memory_class_names[k],
                     gib(b[k]));
    const std::size_t st = s.memory_tightest_stage;
    fmt::format_to(std::back_inserter(out), "  {:<24}{:>12.2f}\n", "allocated",
                   gib(s.memory_allocated_bytes_by_pp_stage[st]));
    fmt::format_to(std::back_inserter(out), "  {:<24}{:>12.2f}\n", "reserved",
                   gib(s.memory_reserved_bytes_by_pp_stage[st]));
    fmt::format_to(std::back_inserter(out), "  {:<24}{:>12.2f}\n", "total (device)",
                   gib(s.memory_total_bytes_by_pp_stage[st]));
    fmt::format_to(std::back_inserter(out), "  {:<24}{:>12.2f}\n", "usable on the GPU",
                   gib(s.memory_capacity_bytes));
    fmt::format_to(
        std::back_inserter(out), "  {:<24}{}\n", "fits",
        s.memory_fits ? "yes" : fmt::format("NO (largest class: {})", s.memory_dominant_class));
  }

  if (!s.memory_total_bytes_by_pp_stage.empty()) {
    // check_memory fills the three per-stage figures together. The three named figures of
    // docs/model.md "Memory capacity", per stage.
    fmt::format_to(std::back_inserter(out), "\npeak memory by pipeline stage (GiB)\n");
    fmt::format_to(std::back_inserter(out), "  {:<12}{:>12}{:>12}{:>16}\n", "", "allocated",
                   "reserved", "total (device)");
    for (std::size_t i = 0; i < s.memory_total_bytes_by_pp_stage.size(); ++i)
      fmt::format_to(std::back_inserter(out), "  {:<12}{:>12.2f}{:>12.2f}{:>16.2f}\n",
                     fmt::format("stage {}", i), gib(s.memory_allocated_bytes_by_pp_stage[i]),
                     gib(s.memory_reserved_bytes_by_pp_stage[i]),
                     gib(s.memory_total_bytes_by_pp_stage[i]));
  } else if (!s.peak_memory_bytes_by_pp_stage.empty()) {
    fmt::format_to(std::back_inserter(out), "\npeak allocated memory by pipeline stage\n");
    fmt::format_to(std::back_inserter(out), "  {:<24}{:>12}\n", "", "GiB");
    for (std::size_t i = 0; i < s.peak_memory_bytes_by_pp_stage.size(); ++i)
      fmt::format_to(std::back_inserter(out), "  {:<24}{:>12.2f}\n", fmt::format("stage {}", i),
                     gib(s.peak_memory_bytes_by_pp_stage[i]));
  }
  return fmt::to_string(out);
}

}  // namespace scalescope::io
