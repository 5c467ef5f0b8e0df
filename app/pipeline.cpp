// What every command that builds or replays a graph shares: loading the configuration, building
// the graph, completing and checking the summary, the replay setup, writing the result files.
#include "app/pipeline.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "app/chakra.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "cost/gpu.hpp"
#include "io/chrome_trace.hpp"
#include "io/collective.hpp"
#include "io/profile_io.hpp"
#include "io/results_h5.hpp"
#include "io/staging.hpp"
#include "io/summary_json.hpp"
#include "workload/accounting.hpp"
#include "workload/memory_plan.hpp"
#include "workload/transformer_builder.hpp"

namespace scalescope::app {

namespace fs = std::filesystem;

/// The configuration a run uses: from CONFIG, or the one embedded in graph.h5.
io::ExperimentConfig load_config(const std::string& config_path, const graph::SlicedGraph* g,
                                 const std::vector<std::string>& overrides,
                                 const std::string& megatron_args, const std::string& label) {
  if (g == nullptr) {
    // The recorded configuration of a Chakra replay names placeholders, not the trace's programs.
    std::ifstream in(config_path);
    std::string first;
    if (!config_path.empty() && std::getline(in, first) && is_chakra_config(first))
      throw_input(
          "{}: the configuration of a Chakra trace replay (its model, parallel and training "
          "sections are placeholders): replay the trace itself (scalescope run --chakra PREFIX "
          "--set cluster.…)",
          config_path);
    return io::load_experiment(config_path, overrides, megatron_args);
  }
  // The graph carries its resolved configuration; load it from a private temporary file, whose
  // name the messages then give as `label` (the user's graph.h5 or trace).
  const std::string shown =
      label.empty() ? "the stored configuration" : label + " (its stored configuration)";
  io::ExperimentConfig c;
  with_config_file(g->config_text, [&](const std::string& tmp) {
    try {
      c = io::load_experiment(tmp, overrides, megatron_args);
    } catch (const InputError& e) {
      std::string message = e.what();
      for (std::size_t at = 0; (at = message.find(tmp, at)) != std::string::npos;
           at += shown.size())
        message.replace(at, tmp.size(), shown);
      throw InputError(message);
    }
  });
  if (!label.empty()) c.path = label;
  return c;
}

void with_config_file(const std::string& text,
                      const std::function<void(const std::string& path)>& body) {
  const fs::path tmp =
      fs::temp_directory_path() / ("scalescope-config-" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(tmp) << text;
  struct Remove {
    const fs::path& path;
    ~Remove() {
      std::error_code ec;
      fs::remove(path, ec);
    }
  } remove{tmp};
  body(tmp.string());
}

namespace {

/// The keys of `section` in a resolved configuration, flattened ("key" → its YAML text).
std::map<std::string, std::string> section_values(const YAML::Node& root, const char* section) {
  std::map<std::string, std::string> out;
  if (const YAML::Node s = root[section]; s && s.IsMap())
    for (const auto& kv : s) out[kv.first.Scalar()] = YAML::Dump(kv.second);
  return out;
}

}  // namespace

void check_graph_config(const io::ExperimentConfig& c, const std::string& graph_config,
                        const std::string& graph_path) {
  const YAML::Node ran = YAML::Load(c.resolved_yaml);
  YAML::Node built;
  try {
    built = YAML::Load(graph_config);
  } catch (const YAML::Exception& e) {
    throw_input("{}: its stored configuration does not parse: {}", graph_path, e.what());
  }
  std::vector<std::string> differ;
  for (const char* section : {"model", "parallel", "training"}) {
    const auto a = section_values(built, section);
    const auto b = section_values(ran, section);
    std::set<std::string> keys;
    for (const auto& kv : a) keys.insert(kv.first);
    for (const auto& kv : b) keys.insert(kv.first);
    for (const std::string& k : keys) {
      // Applied after the replay (app/pipeline.cpp add_host_iteration), not built into ops.
      if (std::string_view(section) == "training" && k == "host_iteration_ms") continue;
      const auto x = a.find(k);
      const auto y = b.find(k);
      const std::string was = x == a.end() ? "unset" : x->second;
      const std::string now = y == b.end() ? "unset" : y->second;
      if (was != now) differ.push_back(fmt::format("{}.{}={} (graph: {})", section, k, now, was));
    }
  }
  if (!differ.empty())
    throw_input(
        "{}: {} {} not apply to a stored graph, which was built with other model / parallel / "
        "training keys; rebuild it (scalescope graph) or drop the key{}",
        c.path, fmt::join(differ, ", "), differ.size() == 1 ? "does" : "do",
        differ.size() == 1 ? "" : "s");
}

void refuse_program_overrides(const std::vector<std::string>& overrides, const std::string& what) {
  for (const std::string& o : overrides) {
    const std::string section = o.substr(0, o.find('.'));
    if (section == "model" || section == "parallel" || section == "training")
      throw_input(
          "{}: --set {} does not apply to a Chakra trace (its programs come from the trace; only "
          "cluster, network and run keys do)",
          what, o);
  }
}

graph::SlicedGraph build(const io::ExperimentConfig& c) {
  return workload::build_graph(c.model, c.parallel, c.training, c.resolved_yaml);
}

namespace {

/// training.host_iteration_ms: the training loop's host work between iterations, with every GPU
/// idle (docs/cost-model.md §1.6 "Per-iteration host work"): each rank's finish and host wait grow
/// by it, and so does the iteration; the critical path ends with it as host time.
void add_host_iteration(std::vector<emu::RankResult>& ranks, emu::Summary& s,
                        emu::CriticalPath& path, const io::ExperimentConfig& c,
                        const std::function<bool(std::uint32_t)>& holds) {
  const auto h = static_cast<SimTime>(std::llround(c.training.host_iteration_ms * 1e6));
  if (h <= 0) return;
  for (std::uint32_t k = 0; k < ranks.size(); ++k)
    if (holds(k)) {
      ranks[k].finish += h;
      ranks[k].host_wait += h;
    }
  if (!path.segments.empty()) {
    const emu::PathSegment& last = path.segments.back();
    path.segments.push_back(
        {s.iteration_time, s.iteration_time + h, last.rank, last.op, emu::PathKind::Host});
    path.totals[static_cast<std::size_t>(emu::PathKind::Host)] += h;
  }
  s.iteration_time += h;
}

/// The workload's figures alone (complete_summary without the host-iteration pass).
void fill_summary(emu::RunResults& r, const io::ExperimentConfig& c) {
  const workload::RankLayout lay = workload::layout_of(c.parallel);
  // The configuration that ran (a stored graph's own may name another cluster or run keys).
  r.config_text = c.resolved_yaml;
  emu::Summary& s = r.summary;
  s.model_name = c.model.name;
  s.software_stack = c.training.stack;
  if (c.parallel.schedule == workload::Schedule::Actions)
    s.pipeline_schedule = fmt::format(
        "torch.distributed.pipelining action table {} (its transfers as PyTorch's runtime "
        "posts them{})",
        c.parallel.pipeline_actions_path,
        c.parallel.splits_backwards() ? "; split backwards: weight gradients at their W actions"
                                      : "");
  if (c.training.precision == workload::Precision::Fp8) {
    s.peak_lowp_flops_per_gpu = cost::find_gpu(c.cluster.gpu).peak_tflops_fp8 * 1e12;
    s.lowp_format = "fp8";
  } else if (c.training.precision == workload::Precision::Nvfp4) {
    s.peak_lowp_flops_per_gpu = cost::find_gpu(c.cluster.gpu).peak_tflops_fp4 * 1e12;
    s.lowp_format = "fp4";
  }
  s.tokens_per_iteration = static_cast<double>(c.training.global_batch_size * c.model.seq_length);
  s.model_flops_per_iteration =
      workload::model_flops_per_iteration(c.model, c.training, c.parallel.tp());
  s.peak_memory_bytes_by_pp_stage.assign(static_cast<std::size_t>(c.parallel.pp()), 0);
  s.peak_transient_bytes_by_pp_stage.assign(static_cast<std::size_t>(c.parallel.pp()), 0);
  for (std::uint32_t rank = 0; rank < r.ranks.size(); ++rank) {
    auto stage = lay.stage_of(rank);
    r.ranks[rank].pp_stage = stage;
    auto& peak = s.peak_memory_bytes_by_pp_stage[stage];
    if (r.ranks[rank].peak_memory > peak) {
      peak = r.ranks[rank].peak_memory;
      s.peak_transient_bytes_by_pp_stage[stage] = r.ranks[rank].peak_transient;
    }
  }
}

}  // namespace

/// Adds the workload's figures (tokens, model FLOPs, pipeline stages) to the engine's results.
void complete_summary(emu::RunResults& r, const io::ExperimentConfig& c) {
  add_host_iteration(r.ranks, r.summary, r.critical_path, c, [](std::uint32_t) { return true; });
  fill_summary(r, c);
}

/// The capacity check (docs/model.md "Memory capacity"): each stage's breakdown at its peak,
/// the tightest stage's first rank, and whether peak total memory fits the GPU's usable HBM.
void check_memory(emu::Summary& s, const io::ExperimentConfig& c) {
  const workload::RankLayout lay = workload::layout_of(c.parallel);
  s.memory_class_names.clear();
  for (int k = 0; k < workload::kNumMemClasses; ++k)
    s.memory_class_names.emplace_back(workload::mem_class_name(static_cast<workload::MemClass>(k)));
  s.memory_breakdown_by_pp_stage.clear();
  s.memory_total_bytes_by_pp_stage.clear();
  s.memory_allocated_bytes_by_pp_stage.clear();
  s.memory_reserved_bytes_by_pp_stage.clear();
  s.memory_capacity_bytes =
      static_cast<std::int64_t>(cost::find_gpu(c.cluster.gpu).hbm_usable_bytes);
  std::int64_t worst = -1;
  workload::MemoryBreakdown at_worst;
  for (std::int64_t stage = 0; stage < c.parallel.pp(); ++stage) {
    const auto i = static_cast<std::size_t>(stage);
    const workload::MemoryBreakdown b = workload::memory_breakdown(
        c.model, c.parallel, c.training, stage, s.peak_memory_bytes_by_pp_stage[i],
        s.peak_transient_bytes_by_pp_stage[i]);
    s.memory_breakdown_by_pp_stage.emplace_back(b.bytes.begin(), b.bytes.end());
    s.memory_total_bytes_by_pp_stage.push_back(b.total());
    s.memory_allocated_bytes_by_pp_stage.push_back(b.allocated());
    s.memory_reserved_bytes_by_pp_stage.push_back(b.reserved());
    if (b.total() > worst) {
      worst = b.total();
      at_worst = b;
      s.memory_tightest_stage = static_cast<std::uint32_t>(stage);
      s.memory_tightest_rank = lay.rank(0, 0, 0, stage);
    }
  }
  s.memory_fits = worst <= s.memory_capacity_bytes;
  s.memory_dominant_class = workload::mem_class_name(at_worst.dominant());
}

/// The capacity check's verdict on the tightest rank: "rank R (pipeline stage S) needs X GiB,
/// the GPU has Y GiB (largest class: C)".
std::string memory_verdict(const emu::Summary& s) {
  return fmt::format(
      "rank {} (pipeline stage {}) needs {:.2f} GiB, the {} has {:.2f} GiB (largest class: {})",
      s.memory_tightest_rank, s.memory_tightest_stage,
      static_cast<double>(s.memory_total_bytes_by_pp_stage[s.memory_tightest_stage]) / (1 << 30),
      s.gpu, static_cast<double>(s.memory_capacity_bytes) / (1 << 30), s.memory_dominant_class);
}

/// What run.on_oom asks for when the check fails: a warning, or a one-line error (no outputs).
void act_on_memory(const emu::Summary& s, const io::ExperimentConfig& c, bool report) {
  if (s.memory_fits) return;
  const std::string what = fmt::format("{}: does not fit in memory: {}", c.path, memory_verdict(s));
  if (c.run.on_oom == "fail") throw_input("{} (run.on_oom=fail)", what);
  if (report) std::cerr << "scalescope: warning: " << what << "\n";
}

/// The same for a distributed run: per-rank rows are set everywhere (pp_stage is a layout
/// property), the per-stage peaks are reduced over the processes of `comm`.
void complete_summary(emu::DistributedResults& d, const io::ExperimentConfig& c, MPI_Comm comm) {
  // The rows this process holds (its own and the last to finish) get the per-iteration host
  // work; the others stay zero, so the reductions below are unaffected.
  add_host_iteration(d.local.ranks, d.local.summary, d.local.critical_path, c,
                     [&](std::uint32_t k) { return d.owns(k) || k == d.last_finishing_rank; });
  fill_summary(d.local, c);
  auto& peaks = d.local.summary.peak_memory_bytes_by_pp_stage;
  MPI_Allreduce(MPI_IN_PLACE, peaks.data(), static_cast<int>(peaks.size()), MPI_INT64_T, MPI_MAX,
                comm);
  // Every rank of a stage runs one template, so the ranks at a stage's peak all have the same
  // workspace there: the max over processes is that value.
  auto& transient = d.local.summary.peak_transient_bytes_by_pp_stage;
  MPI_Allreduce(MPI_IN_PLACE, transient.data(), static_cast<int>(transient.size()), MPI_INT64_T,
                MPI_MAX, comm);
}

emu::EngineKind engine_for(const io::ExperimentConfig& c, int processes) {
  const emu::EngineKind kind = emu::engine_kind(c.run.engine, processes);
  if (kind == emu::EngineKind::Sequential && processes > 1)
    throw_input(
        "{}: run.engine=sequential runs on one process, but {} were started; use "
        "--set run.engine=auto under mpirun",
        c.path, processes);
  return kind;
}

emu::EmulationOptions run_options(const io::RunSpec& r) {
  emu::EmulationOptions o;
  o.coalesce_local_ops = r.coalesce_local_ops;
  o.partition = r.partition;
  // run.optimism_window_us in simulated ns; 0 (the key unset): the engine's default.
  if (r.optimism_window_us > 0)
    o.optimistic.optimism_window = static_cast<SimTime>(std::llround(r.optimism_window_us * 1e3));
  o.eager_p2p = r.p2p == "eager";
  return o;
}

/// cost.profile: the cost functions use the profile's measurement wherever an op's kernel
/// signature is in it, the roofline model elsewhere.
emu::Costs costs_with_profile(emu::Costs costs, const cost::Profile* profile) {
  if (profile != nullptr)
    costs.compute = [base = costs.compute, profile](const graph::Op& op) {
      if (const auto d = profile->duration(op)) return *d;
      return base(op);
    };
  return costs;
}

/// The profile's share of compute time over the ranks this process owns (all of them for a
/// sequential run; summed over processes with `comm`), and its distinct signatures found among
/// those of the templates this process loaded (process 0's count under a partial read).
void summarize_profile(emu::Summary& s, const io::ExperimentConfig& c, const cost::Profile& p,
                       const graph::SlicedGraph& g, const emu::Costs& costs,
                       const std::vector<std::uint32_t>* owner, std::uint32_t me, MPI_Comm comm) {
  std::vector<double> measured(g.templates.size(), 0), total(g.templates.size(), 0);
  std::set<std::string> all, found;
  for (std::size_t k = 0; k < g.templates.size(); ++k) {
    if (!g.is_loaded(k)) continue;
    for (const graph::Op& op : g.templates[k].ops) {
      if (graph::is_communication(op.kind)) continue;
      const auto t = static_cast<double>(costs.compute(op));
      total[k] += t;
      const cost::KernelSig sig = cost::kernel_signature(op);
      if (!sig.measurable()) continue;
      const std::string key = sig.key();
      all.insert(key);
      if (p.find(key) != nullptr) {
        found.insert(key);
        measured[k] += t;
      }
    }
  }
  double sums[2] = {0, 0};
  for (std::uint32_t r = 0; r < g.world_size; ++r) {
    if (owner != nullptr && (*owner)[r] != me) continue;
    sums[0] += measured[g.rank_class[r]];
    sums[1] += total[g.rank_class[r]];
  }
  if (comm != MPI_COMM_NULL) MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, comm);
  s.profile_path = c.cost.profile;
  s.profile_device = p.device;
  s.profile_signatures_found = found.size();
  s.profile_signatures_total = all.size();
  s.profile_measured_fraction = sums[1] > 0 ? sums[0] / sums[1] : 0;
}

void check_output_dir(const fs::path& dir) {
  if (dir.empty()) throw_input("run.output: empty (the directory the results go to)");
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw_input("{}: run.output names a file, not a directory", dir.string());
  io::remove_stale_staging(dir);
  // The staging directory beside DIR is where the results are written first: create it (and
  // its parents) and remove it again, so a directory that cannot be written is said now, not
  // after the whole replay.
  const fs::path probe = io::staging_dir(dir, ::getpid());
  fs::create_directories(probe, ec);
  if (ec || !fs::is_directory(probe))
    throw_input("{}: run.output cannot be written ({}): checked before the replay", dir.string(),
                ec ? ec.message() : "not a directory");
  fs::remove_all(probe, ec);
}

void write_outputs(const emu::RunResults& r, const fs::path& dir, const ResultsExtra& extra) {
  const fs::path stage = io::staging_dir(dir, ::getpid());
  fs::remove_all(stage);
  fs::create_directories(stage);
  try {
    io::write_results_h5(r, (stage / "results.h5").string());
    if (extra) extra((stage / "results.h5").string());
    io::write_summary_json(r, (stage / "summary.json").string());
    io::write_chrome_trace(r, (stage / "trace.json").string());
    fs::create_directories(dir);
    for (const char* name : {"results.h5", "summary.json", "trace.json"})
      fs::rename(stage / name, dir / name);
    fs::remove_all(stage);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(stage, ec);
    throw;
  }
}

/// write_outputs for a distributed run, collective over `comm`: results.h5 is written by every
/// process (each its own rows and traced ranks); process 0 then gathers the traced ranks and
/// writes summary.json and trace.json, and moves the three files in.
void write_outputs(emu::DistributedResults& d, const fs::path& dir, MPI_Comm comm,
                   const ResultsExtra& extra) {
  long pid = ::getpid();
  MPI_Bcast(&pid, 1, MPI_LONG, 0, comm);  // process 0's staging directory, for everyone
  const fs::path stage = io::staging_dir(dir, pid);
  const bool first = d.process == 0;
  auto clean = [&] {
    std::error_code ec;
    if (first) fs::remove_all(stage, ec);
  };
  std::string error;
  if (first) {
    try {
      fs::remove_all(stage);
      fs::create_directories(stage);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  try {
    io::raise_if_failed_anywhere(comm, error);
    io::write_results_h5(d, (stage / "results.h5").string(), comm);
  } catch (...) {
    clean();
    throw;
  }
  emu::gather_traces(d, comm);
  if (!first) return;
  try {
    if (extra) extra((stage / "results.h5").string());
    io::write_summary_json(d.local, (stage / "summary.json").string());
    io::write_chrome_trace(d.local, (stage / "trace.json").string());
    fs::create_directories(dir);
    for (const char* name : {"results.h5", "summary.json", "trace.json"})
      fs::rename(stage / name, dir / name);
    fs::remove_all(stage);
  } catch (...) {
    clean();
    throw;
  }
}

/// One line on stderr at most once per second: committed events, simulated time reached and an
/// estimate of the total (from the event count of the graph: exact under the analytical model,
/// a lower bound under the flow model), event rate, ETA. `flow_gpus_per_node`: 0, or the
/// cluster's GPUs per node under the flow model.
pdes::ProgressReporter progress_reporter(const graph::SlicedGraph& g, bool coalesce,
                                         std::int64_t flow_gpus_per_node,
                                         const std::vector<std::uint8_t>* active) {
  const std::uint64_t total =
      g.fully_loaded() ? emu::expected_events(g, coalesce, flow_gpus_per_node, active) : 0;
  pdes::ProgressReporter p;
  p.interval_s = core::progress_interval_s();
  p.report = [total](const pdes::ProgressInfo& i) {
    const double rate = i.wall_s > 0 ? static_cast<double>(i.committed) / i.wall_s : 0;
    const double sim = ns_to_seconds(i.sim_time);
    if (total > 0 && i.committed > 0) {
      const double done = static_cast<double>(i.committed) / static_cast<double>(total);
      const double eta =
          rate > 0 ? static_cast<double>(total - std::min(total, i.committed)) / rate : 0;
      std::cerr << fmt::format(
          "progress: {:5.1f} % of {} events | simulated {:.3f} s of ~{:.3f} s | {:.3g} events/s | "
          "ETA {:.0f} s\n",
          100 * done, total, sim, done > 0 ? sim / done : 0.0, rate, eta);
    } else {
      std::cerr << fmt::format("progress: {} events | simulated {:.3f} s | {:.3g} events/s\n",
                               i.committed, sim, rate);
    }
  };
  return p;
}

/// Each pipeline stage's memory at its peak and the capacity check, from the graph's templates
/// alone (memory is a property of the template; the replay gives the same peaks).
emu::Summary template_memory(const io::ExperimentConfig& c, const graph::SlicedGraph& g) {
  emu::Summary s;
  s.gpu = cost::find_gpu(c.cluster.gpu).name;
  const workload::RankLayout lay = workload::layout_of(c.parallel);
  // A stage's peak is its tightest program's (several per stage with a skewed MoE router).
  const std::int64_t per_stage = workload::expert_load_classes(c.model, c.parallel, c.training);
  for (std::int64_t stage = 0; stage < c.parallel.pp(); ++stage) {
    emu::MemoryProfile worst;
    for (std::int64_t k = 0; k < per_stage; ++k) {
      const emu::MemoryProfile m = emu::memory_profile(
          g.templates[g.rank_class[lay.rank(0, 0, 0, stage)] + static_cast<std::uint32_t>(k)]);
      if (k == 0 || m.peak > worst.peak) worst = m;
    }
    s.peak_memory_bytes_by_pp_stage.push_back(worst.peak);
    s.peak_transient_bytes_by_pp_stage.push_back(worst.peak_transient);
  }
  check_memory(s, c);
  return s;
}

}  // namespace scalescope::app
