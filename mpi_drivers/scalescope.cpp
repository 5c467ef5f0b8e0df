// scalescope: emulate one training iteration of an LLM job at its full scale.
//
//   scalescope run [CONFIG] [--megatron-args "…"] [-o DIR] [--set key.path=value]...
//                  [--graph graph.h5] [--quiet]
//   scalescope graph [CONFIG] [--megatron-args "…"] -o graph.h5 [--set key.path=value]...
//   scalescope memory [CONFIG] [--megatron-args "…"] [--set key.path=value]...
//   scalescope sweep [CONFIG] [--set …]... [--vary key.path=v1,v2,…]... [--search parallel]
//                  [-o DIR] [--replay-unfit] [--top N]
//   scalescope export-chakra graph.h5 PREFIX [--classes] [--metadata-node]
//   scalescope chakra-microbench all_reduce|all_gather|reduce_scatter|all_to_all PREFIX
//                  [--ranks N] [--bytes S]
//   scalescope graph --chakra PREFIX -o graph.h5 [--comm-groups groups.json] [--expand dp=N] [--set
//   …] scalescope run --chakra PREFIX [-o DIR] [--comm-groups groups.json] [--expand dp=N] [--set
//   …]
#include <mpi.h>

#include <sys/wait.h>
#include <unistd.h>
#include "core/sanitizer_defaults.hpp"

#include <yaml-cpp/yaml.h>
#include <CLI/CLI.hpp>
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

#include "core/error.hpp"
#include "cost/cost_model.hpp"
#include "cost/gpu.hpp"
#include "emu/emulation.hpp"
#include "emu/replicas.hpp"
#include "explore/sweep.hpp"
#include "graph/expand.hpp"
#include "io/capture_h5.hpp"
#include "io/chakra_et.hpp"
#include "io/chrome_trace.hpp"
#include "io/collective.hpp"
#include "io/config.hpp"
#include "io/graph_h5.hpp"
#include "io/profile_io.hpp"
#include "io/results_h5.hpp"
#include "io/summary_json.hpp"
#include "io/sweep_table.hpp"
#include "kernels/executor.hpp"
#include "kernels/sandbox.hpp"
#include "workload/accounting.hpp"
#include "workload/memory_plan.hpp"
#include "workload/transformer_builder.hpp"

namespace fs = std::filesystem;
using namespace scalescope;

namespace {

/// MPI lifetime for the process; every exit path finalizes.
struct MpiSession {
  MpiSession(int* argc, char*** argv) { MPI_Init(argc, argv); }
  ~MpiSession() { MPI_Finalize(); }
  int rank() const {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
  }
  int size() const {
    int s = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    return s;
  }
};

/// The configuration a run uses: from CONFIG, or the one embedded in graph.h5.
io::ExperimentConfig load_config(const std::string& config_path, const graph::SlicedGraph* g,
                                 const std::vector<std::string>& overrides,
                                 const std::string& megatron_args) {
  if (g == nullptr) return io::load_experiment(config_path, overrides, megatron_args);
  // The graph carries its resolved configuration; load it from a private temporary file.
  fs::path tmp =
      fs::temp_directory_path() / ("scalescope-config-" + std::to_string(::getpid()) + ".yaml");
  {
    std::ofstream f(tmp);
    f << g->config_text;
  }
  try {
    io::ExperimentConfig c = io::load_experiment(tmp.string(), overrides, megatron_args);
    fs::remove(tmp);
    return c;
  } catch (...) {
    fs::remove(tmp);
    throw;
  }
}

graph::SlicedGraph build(const io::ExperimentConfig& c) {
  return workload::build_graph(c.model, c.parallel, c.training, c.resolved_yaml);
}

/// Adds the workload's figures (tokens, model FLOPs, pipeline stages) to the engine's results.
void complete_summary(emu::RunResults& r, const io::ExperimentConfig& c) {
  const workload::RankLayout lay = workload::layout_of(c.parallel);
  emu::Summary& s = r.summary;
  s.model_name = c.model.name;
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

/// The capacity check (docs/model.md "Memory capacity"): each stage's breakdown at its peak,
/// the tightest stage's first rank, and whether peak total memory fits the GPU's usable HBM.
void check_memory(emu::Summary& s, const io::ExperimentConfig& c) {
  const workload::RankLayout lay = workload::layout_of(c.parallel);
  s.memory_class_names.clear();
  for (int k = 0; k < workload::kNumMemClasses; ++k)
    s.memory_class_names.emplace_back(workload::mem_class_name(static_cast<workload::MemClass>(k)));
  s.memory_breakdown_by_pp_stage.clear();
  s.memory_total_bytes_by_pp_stage.clear();
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
  complete_summary(d.local, c);  // the rows this process does not hold are zero: max unaffected
  auto& peaks = d.local.summary.peak_memory_bytes_by_pp_stage;
  MPI_Allreduce(MPI_IN_PLACE, peaks.data(), static_cast<int>(peaks.size()), MPI_INT64_T, MPI_MAX,
                comm);
  // Every rank of a stage runs one template, so the ranks at a stage's peak all have the same
  // workspace there: the max over processes is that value.
  auto& transient = d.local.summary.peak_transient_bytes_by_pp_stage;
  MPI_Allreduce(MPI_IN_PLACE, transient.data(), static_cast<int>(transient.size()), MPI_INT64_T,
                MPI_MAX, comm);
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

/// What a replay of configuration `c` takes: its cost model, cost.profile's measurements (if
/// any) over it, and the emulation options the run keys ask for (engine and traced ranks are
/// the caller's). Not copyable: `costs` refers to the model and the profile.
struct ReplaySetup {
  explicit ReplaySetup(const io::ExperimentConfig& c)
      : model(c.cluster, c.network),
        profile(c.cost.profile.empty() ? std::nullopt
                                       : std::optional(io::read_profile_h5(c.cost.profile))),
        costs(costs_with_profile(emu::costs_of(model), profile ? &*profile : nullptr)) {
    options.coalesce_local_ops = c.run.coalesce_local_ops;
    options.partition = c.run.partition;
    options.eager_p2p = c.run.p2p == "eager";
    options.representative_replicas = c.run.replicas == "representative";
  }
  ReplaySetup(const ReplaySetup&) = delete;
  ReplaySetup& operator=(const ReplaySetup&) = delete;

  cost::CostModel model;
  std::optional<cost::Profile> profile;
  emu::Costs costs;
  emu::EmulationOptions options;
};

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

/// The staging directory beside DIR that the result files are written into before they move in.
fs::path staging_dir(const fs::path& dir, long pid) {
  fs::path stage = dir;
  stage += ".partial-" + std::to_string(pid);
  return stage;
}

/// Writes the three result files into a staging directory beside DIR, then moves them in, so
/// DIR never holds a mix of old and new or half-written files.
/// Adds to a written results.h5 before it moves into place (a hybrid run's /sandbox).
using ResultsExtra = std::function<void(const std::string& results_h5)>;

void write_outputs(const emu::RunResults& r, const fs::path& dir, const ResultsExtra& extra = {}) {
  const fs::path stage = staging_dir(dir, ::getpid());
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
                   const ResultsExtra& extra = {}) {
  long pid = ::getpid();
  MPI_Bcast(&pid, 1, MPI_LONG, 0, comm);  // process 0's staging directory, for everyone
  const fs::path stage = staging_dir(dir, pid);
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
                                         const std::vector<std::uint8_t>* active = nullptr) {
  const std::uint64_t total =
      g.fully_loaded() ? emu::expected_events(g, coalesce, flow_gpus_per_node, active) : 0;
  pdes::ProgressReporter p;
  p.interval_s = 1.0;
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

/// The CUDA executor: the standalone scalescope-kernels beside this binary (built where CMake
/// finds the CUDA toolkit).
fs::path kernels_tool() {
  return fs::read_symlink("/proc/self/exe").parent_path() / "scalescope-kernels";
}

/// Runs scalescope-kernels on `ops` and reads what it measured; the device is the node-local
/// MPI rank's (CUDA_VISIBLE_DEVICES), as a sandbox rank is bound to one.
cost::Profile measure_with_cuda_tool(const fs::path& ops, const std::string& what) {
  const fs::path tool = kernels_tool();
  if (!fs::exists(tool))
    throw_input(
        "{}: {} was not built (configure with -DSCALESCOPE_ENABLE_CUDA=ON where nvcc "
        "exists)",
        what, tool.string());
  const fs::path measured = ops.string() + ".measured.json";
  std::string env;
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"))
    env = fmt::format("CUDA_VISIBLE_DEVICES={} ", local);
  const std::string cmd =
      fmt::format("{}'{}' '{}' -o '{}'", env, tool.string(), ops.string(), measured.string());
  const int rc = std::system(cmd.c_str());
  if (rc != 0)
    throw_input("{}: {} exited with {}{}", what, tool.string(), WEXITSTATUS(rc),
                WEXITSTATUS(rc) == 77 ? " (no CUDA device visible)" : "");
  cost::Profile p = io::read_measured_json(measured.string());
  fs::remove(measured);
  return p;
}

/// Serialises measurements for MPI ("sig\tmedian\tp10\tp90\treps\timpl\n" per entry).
std::string pack_measurements(const cost::Profile& p) {
  std::string out;
  for (const auto& [sig, e] : p.entries)
    out += fmt::format("{}\t{:a}\t{:a}\t{:a}\t{}\t{}\n", sig, e.median_s, e.p10_s, e.p90_s, e.reps,
                       e.impl);
  return out;
}
void unpack_measurements(const std::string& text, cost::Profile& p) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string sig, median, p10, p90, reps, impl;
    std::getline(f, sig, '\t');
    std::getline(f, median, '\t');
    std::getline(f, p10, '\t');
    std::getline(f, p90, '\t');
    std::getline(f, reps, '\t');
    std::getline(f, impl);
    // First come, first kept: processes are merged in rank order, so every process keeps the
    // same value when two measured one signature.
    p.entries.emplace(
        sig,
        cost::ProfileEntry{std::strtod(median.c_str(), nullptr), std::strtod(p10.c_str(), nullptr),
                           std::strtod(p90.c_str(), nullptr), std::stoll(reps), impl});
  }
}

/// A hybrid run's sandbox (docs/kernels.md "Sandbox ranks"): each sandbox rank's process runs
/// the kernels of its template's distinct signatures (memoized: once each, before the replay, so
/// no rollback re-runs one), every process receives all measurements, and the sandbox ranks —
/// or with run.calibrate_from_sandbox their whole classes — take the measured durations. With
/// `replayed` the measurements come from a previous run's results.h5 instead.
struct Sandbox {
  cost::Profile measured;
  bool replayed = false;
};
/// run.sandbox_backend: auto = cuda where scalescope-kernels was built beside this binary and
/// `nvidia-smi -L` lists a GPU, else host.
std::string sandbox_backend_of(const io::ExperimentConfig& c) {
  if (c.run.sandbox_backend != "auto") return c.run.sandbox_backend;
  const bool gpu = fs::exists(kernels_tool()) && std::system("nvidia-smi -L >/dev/null 2>&1") == 0;
  return gpu ? "cuda" : "host";
}

Sandbox prepare_sandbox(const io::ExperimentConfig& c, const graph::SlicedGraph& g,
                        const cost::CostModel& model, const emu::Costs& costs,
                        emu::EmulationOptions& opt, const std::optional<cost::Profile>& replayed,
                        int me, int size, emu::Summary& summary) {
  Sandbox sb;
  const auto& ranks = c.run.sandbox_ranks;
  const std::string backend = sandbox_backend_of(c);
  // Shrunk kernels on a CPU say nothing of a GPU's durations: never spread them over classes.
  const std::string measured_on = replayed ? replayed->backend : backend;
  if (c.run.calibrate_from_sandbox && measured_on == "host")
    throw_input(
        "{}: run.calibrate_from_sandbox gives whole classes of ranks the sandbox's durations, but "
        "the host backend measures kernels shrunk to op_scale {} on a CPU, which predict no "
        "GPU's; calibrate from a cuda sandbox, or use cost.profile with GPU measurements",
        c.path, replayed ? replayed->op_scale : c.run.sandbox_op_scale);
  for (std::uint32_t r : ranks)
    if (r >= g.world_size)
      throw_input("{}: run.sandbox_ranks has rank {} but the graph has {} ranks", c.path, r,
                  g.world_size);
  const bool distributed = opt.engine == emu::EngineKind::Optimistic;
  if (distributed) opt.dedicated_ranks = ranks;
  const std::vector<std::uint32_t> owner =
      distributed ? emu::partition_lps(g, static_cast<std::uint32_t>(size), opt.partition, ranks)
                  : std::vector<std::uint32_t>(g.world_size + g.comms.size(), 0);
  if (replayed) {
    sb.measured = *replayed;
    sb.replayed = true;
  } else {
    // Each process measures the templates of the sandbox ranks it owns.
    cost::Profile local;
    std::unique_ptr<kernels::Executor> exec;
    kernels::SandboxMeasurements m;
    for (std::uint32_t r : ranks) {
      if (owner[r] != static_cast<std::uint32_t>(me)) continue;
      const graph::RankProgram& prog = g.program_of(r);
      if (backend == "cuda") {
        const fs::path ops = fs::temp_directory_path() /
                             fmt::format("scalescope-sandbox-{}-{}.ops.json", ::getpid(), r);
        io::write_ops_json({&prog}, model, c.path, ops.string());
        const cost::Profile p = measure_with_cuda_tool(ops, fmt::format("sandbox rank {}", r));
        fs::remove(ops);
        local.device = p.device;
        local.versions = p.versions;
        for (const auto& [sig, e] : p.entries) local.entries.emplace(sig, e);
      } else {
        if (!exec) exec = kernels::make_host_executor(c.run.sandbox_op_scale);
        kernels::measure_template(prog, *exec, m);
      }
    }
    for (auto& [sig, e] : kernels::as_profile(m).entries) local.entries.emplace(sig, e);
    if (exec) {
      local.device = exec->device();
      local.versions = exec->versions();
    }
    // Everyone gets every process's measurements, merged in process order.
    std::string mine = pack_measurements(local);
    std::string device = local.device + "\n" + local.versions;
    sb.measured.backend = backend;
    sb.measured.op_scale = backend == "host" ? c.run.sandbox_op_scale : 1.0;
    sb.measured.source = c.path;
    for (int p = 0; p < (distributed ? size : 1); ++p) {
      std::string text = p == me ? mine : std::string();
      std::string dev = p == me ? device : std::string();
      if (distributed) {
        for (std::string* str : {&text, &dev}) {
          long n = static_cast<long>(str->size());
          MPI_Bcast(&n, 1, MPI_LONG, p, MPI_COMM_WORLD);
          str->resize(static_cast<std::size_t>(n));
          MPI_Bcast(str->data(), static_cast<int>(n), MPI_CHAR, p, MPI_COMM_WORLD);
        }
      }
      unpack_measurements(text, sb.measured);
      if (sb.measured.device.empty() && dev.size() > 1) {
        sb.measured.device = dev.substr(0, dev.find('\n'));
        sb.measured.versions = dev.substr(dev.find('\n') + 1);
      }
    }
  }
  // Durations, memory peaks and the measured share, from each sandbox rank's owner.
  double sums[2] = {0, 0};
  std::int64_t peaks[2] = {0, 0};
  for (std::uint32_t r : ranks) {
    const std::uint32_t k = g.rank_class[r];
    if (!g.is_loaded(k)) continue;
    const graph::RankProgram& prog = g.templates[k];
    double measured = 0, total = 0;
    std::vector<SimTime> d =
        kernels::sandbox_durations(prog, sb.measured, costs.compute, &measured, &total);
    if (c.run.calibrate_from_sandbox) opt.class_durations.emplace(k, d);
    opt.rank_durations.emplace(r, std::move(d));
    if (owner[r] == static_cast<std::uint32_t>(me)) {
      sums[0] += measured;
      sums[1] += total;
      const kernels::AllocatorPeaks a = kernels::replay_allocator(prog);
      peaks[0] = std::max(peaks[0], a.allocated);
      peaks[1] = std::max(peaks[1], a.reserved);
    }
  }
  if (distributed) {
    MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, peaks, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  }
  summary.sandbox_ranks = ranks;
  summary.sandbox_backend = sb.measured.backend.empty() ? backend : sb.measured.backend;
  summary.sandbox_device = sb.measured.device;
  summary.sandbox_op_scale = sb.measured.op_scale;
  summary.sandbox_measured_ops = sb.measured.entries.size();
  summary.sandbox_measured_fraction = sums[1] > 0 ? sums[0] / sums[1] : 0;
  summary.sandbox_peak_allocated_bytes = peaks[0];
  summary.sandbox_peak_reserved_bytes = peaks[1];
  summary.sandbox_replayed = sb.replayed;
  summary.sandbox_functional_check =
      summary.sandbox_backend == "host" && summary.sandbox_op_scale < 1;
  return sb;
}

/// The first line of the configuration text of a graph imported from Chakra ET files.
constexpr std::string_view kChakraMarker = "# chakra-import:";

bool is_chakra_config(const std::string& config_text) {
  return config_text.rfind(kChakraMarker, 0) == 0;
}

/// The configuration of a Chakra import: the trace holds the programs, so only the cluster and
/// run sections matter. The model, parallel and training sections are placeholders that make it
/// a valid experiment (one data-parallel group of all ranks); `--set cluster.preset=…` etc.
/// apply on top. The first line records where the graph came from. A trace written by another
/// tool (`foreign`) replays its sends eagerly, as ASTRA-sim does (run.p2p: eager); one that
/// write_chakra wrote keeps the rendezvous of the graph it came from, so the round trip is exact.
/// `source`: the resolved configuration scalescope's own files carry (ss_config): its cluster
/// and network sections replace the placeholder cluster, so that the round trip of a graph
/// replays on the cluster it was built for.
io::ExperimentConfig chakra_config(const std::string& prefix, std::uint32_t ranks, bool foreign,
                                   const std::vector<std::string>& overrides,
                                   const std::string& source = {}) {
  const std::string origin = fmt::format("{} {} ({} rank files)", kChakraMarker, prefix, ranks);
  std::string cluster = fmt::format("cluster: {{preset: dgx-h100, num_gpus: {}}}\n", ranks);
  if (!source.empty()) {
    YAML::Node src;
    try {
      src = YAML::Load(source);
    } catch (const YAML::Exception& e) {
      throw_input("{}: the configuration in its GlobalMetadata (ss_config) does not parse: {}",
                  prefix, e.what());
    }
    if (src["cluster"]) src["cluster"]["num_gpus"] = ranks;  // --expand may have replicated it
    YAML::Emitter out;
    out << YAML::BeginMap;
    for (const char* section : {"cluster", "network"})
      if (src[section]) out << YAML::Key << section << YAML::Value << src[section];
    out << YAML::EndMap;
    if (src["cluster"]) cluster = std::string(out.c_str()) + "\n";
  }
  graph::SlicedGraph meta;
  meta.config_text = fmt::format(
      "{}\n"
      "model: {{preset: llama3-8b, num_layers: 1}}\n"
      "parallel: {{tp: 1, pp: 1, dp: {}}}\n"
      "training: {{micro_batch_size: 1, global_batch_size: {}}}\n"
      "{}"
      "run: {{output: out/chakra, trace_ranks: [0], p2p: {}}}\n",
      origin, ranks, ranks, cluster, foreign ? "eager" : "rendezvous");
  io::ExperimentConfig c = load_config({}, &meta, overrides, {});
  c.path = prefix;
  c.resolved_yaml = origin +
                    "\n# model, parallel and training are placeholders: the programs come from "
                    "the trace\n" +
                    c.resolved_yaml;
  return c;
}

/// `--expand dp=N` → N (1 when not given).
std::uint32_t parse_expand(const std::string& expand) {
  if (expand.empty()) return 1;
  constexpr std::string_view key = "dp=";
  std::int64_t n = 0;
  if (expand.rfind(key, 0) == 0) {
    const std::string v = expand.substr(key.size());
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || end != v.data() + v.size()) n = 0;
  }
  if (n < 1 || n > 1 << 20)
    throw_input("--expand {}: expected dp=N with N a replica count from 1 to 1048576", expand);
  return static_cast<std::uint32_t>(n);
}

io::ChakraImport import_chakra(const std::string& prefix, const std::string& comm_groups,
                               const std::string& expand, bool report) {
  io::ChakraReadOptions ro;
  ro.comm_groups_path = comm_groups;
  ro.expand_dp = parse_expand(expand);
  if (report)
    ro.warn = [](const std::string& w) { std::cerr << "scalescope: warning: " << w << "\n"; };
  return io::read_chakra(prefix, ro);
}

/// `scalescope run` of an imported trace (run --chakra, or run --graph of a graph.h5 that
/// graph --chakra wrote): the cost model for compute ops without a trace duration, the trace's
/// durations elsewhere (io::resolve_durations); no workload figures (tokens, model FLOPs are
/// the trace's total FLOPs) and no memory-capacity check (the trace has no memory model).
int run_chakra(const MpiSession& mpi, const graph::SlicedGraph& g,
               const std::map<std::uint32_t, std::vector<std::int64_t>>& durations,
               io::ExperimentConfig& c, const std::string& out_override, bool quiet) {
  if (!out_override.empty()) c.run.output = out_override;
  if (g.world_size != static_cast<std::uint32_t>(c.parallel.world()))
    throw_input("{}: the trace has {} ranks but the configuration has {} GPUs", c.path,
                g.world_size, c.parallel.world());
  const bool optimistic = c.run.engine == "optimistic";
  if (!optimistic && mpi.size() > 1)
    throw_input("{}: run.engine=sequential runs on one process; use --set run.engine=optimistic",
                c.path);
  cost::CostModel cost(c.cluster, c.network);
  const emu::Costs costs = emu::costs_of(cost);
  emu::EmulationOptions opt;
  opt.coalesce_local_ops = c.run.coalesce_local_ops;
  opt.trace_ranks = c.run.trace_ranks;
  opt.partition = c.run.partition;
  opt.class_durations = io::resolve_durations(g, durations, costs.compute);
  opt.eager_p2p = c.run.p2p == "eager";
  if (optimistic) opt.engine = emu::EngineKind::Optimistic;
  emu::RunResults r;
  try {
    r = optimistic ? emu::emulate_parallel(g, costs, opt, MPI_COMM_WORLD)
                   : emu::emulate(g, costs, opt);
  } catch (const ContractError& e) {
    // A trace in which every rank sends before it receives (a ring) runs with eager sends and
    // deadlocks with rendezvous ones; any trace deadlocks if its dependencies do.
    if (std::string_view(e.what()).find("deadlocked") == std::string_view::npos) throw;
    throw_input("{}: the trace deadlocks with run.p2p={} send/recv{}: {}", c.path, c.run.p2p,
                opt.eager_p2p ? ""
                              : " (a send completes only when its receive is posted; "
                                "run.p2p=eager completes it without waiting, as ASTRA-sim)",
                e.what());
  }
  if (mpi.rank() != 0) return 0;
  emu::Summary& s = r.summary;
  s.model_name = "chakra:" + c.path;
  double flops = 0;
  for (std::uint32_t rank = 0; rank < g.world_size; ++rank)
    for (const graph::Op& op : g.program_of(rank).ops) flops += op.flops;
  s.model_flops_per_iteration = flops;
  s.peak_memory_bytes_by_pp_stage = {s.peak_memory_bytes};
  r.config_text = c.resolved_yaml;
  write_outputs(r, c.run.output);
  if (!quiet) {
    std::cout << io::format_summary_table(r);
    std::cout << "results in " << c.run.output << "/\n";
  }
  return 0;
}

/// `scalescope export-chakra graph.h5 PREFIX`: compute nodes carry the cost model's durations
/// (duration_micros, rounded up) for the cluster the graph's configuration names.
int export_chakra_command(const std::string& graph_path, const std::string& prefix, bool classes,
                          bool metadata_node) {
  const graph::SlicedGraph g = io::read_graph_h5(graph_path);
  const io::ExperimentConfig c = load_config({}, &g, {}, {});
  const cost::CostModel cost(c.cluster);
  const emu::Costs costs = emu::costs_of(cost);
  io::ChakraWriteOptions wo;
  wo.classes = classes;
  wo.metadata_node = metadata_node;
  wo.duration = costs.compute;
  const std::size_t files = io::write_chakra(g, prefix, wo);
  std::cout << fmt::format("wrote {} Chakra ET file{} {}{} for {} ranks ({} templates){}\n", files,
                           files == 1 ? "" : "s", prefix, classes ? ".class*.et" : ".*.et",
                           g.world_size, g.templates.size(),
                           classes ? "" : fmt::format("; groups in {}.comm_groups.json", prefix));
  return 0;
}

/// `scalescope graph --chakra PREFIX -o graph.h5`: the imported graph, with the trace's fixed
/// durations beside it (/chakra_durations), written through one temporary.
int graph_chakra_command(const std::string& prefix, const std::string& out,
                         const std::string& comm_groups, const std::string& expand,
                         const std::vector<std::string>& overrides) {
  io::ChakraImport imp = import_chakra(prefix, comm_groups, expand, true);
  const io::ExperimentConfig c = chakra_config(prefix, imp.graph.world_size, !imp.scalescope_schema,
                                               overrides, imp.source_config);
  imp.graph.config_text = c.resolved_yaml;
  io::write_imported_graph_h5(imp.graph, imp.durations, out);
  std::size_t ops = 0;
  for (const auto& t : imp.graph.templates) ops += t.ops.size();
  std::cout << "wrote " << out << ": " << imp.graph.world_size << " ranks, "
            << imp.graph.templates.size() << " templates, " << ops << " template ops, "
            << imp.graph.comms.size() << " communicators (from " << imp.files
            << " Chakra ET files, " << imp.nodes << " nodes)\n";
  return 0;
}

int run_command(const MpiSession& mpi, const std::string& config_path,
                const std::string& graph_path, const std::string& out_override,
                const std::vector<std::string>& overrides, const std::string& megatron_args,
                bool quiet, bool rollback_check, const std::vector<std::uint32_t>& sandbox,
                const std::string& replay_path, const std::vector<std::string>& whatif_texts) {
  // The configuration first (from CONFIG, or the one graph.h5 carries): the engine decides how
  // the graph is read.
  std::optional<io::ExperimentConfig> loaded;
  if (config_path.empty() && !graph_path.empty() && megatron_args.empty()) {
    // A graph imported from Chakra traces replays with its trace durations.
    graph::SlicedGraph meta;
    meta.config_text = io::read_graph_config_text(graph_path);
    if (is_chakra_config(meta.config_text)) {
      io::ExperimentConfig c = load_config({}, &meta, overrides, {});
      c.path = graph_path;
      const graph::SlicedGraph g = io::read_graph_h5(graph_path);
      return run_chakra(mpi, g, io::read_graph_durations_h5(graph_path), c, out_override, quiet);
    }
  }
  if (!config_path.empty() || graph_path.empty()) {
    loaded = load_config(config_path, nullptr, overrides, megatron_args);
  } else {
    graph::SlicedGraph meta;
    meta.config_text = io::read_graph_config_text(graph_path);
    loaded = load_config(config_path, &meta, overrides, megatron_args);
  }
  io::ExperimentConfig& c = *loaded;
  if (!out_override.empty()) c.run.output = out_override;
  if (!sandbox.empty()) c.run.sandbox_ranks = sandbox;
  // --replay-measurements: the stored measurements (and, unless named, their sandbox ranks).
  std::optional<cost::Profile> replayed;
  if (!replay_path.empty()) {
    std::vector<std::uint32_t> stored_ranks;
    replayed = io::read_sandbox_group(replay_path, &stored_ranks);
    if (c.run.sandbox_ranks.empty()) c.run.sandbox_ranks = stored_ranks;
  }
  const bool optimistic = c.run.engine == "optimistic";
  if (!optimistic && mpi.size() > 1)
    throw_input(
        "{}: run.engine=sequential runs on one process, but {} were started; use "
        "--set run.engine=optimistic under mpirun",
        c.path, mpi.size());
  std::optional<graph::SlicedGraph> graph;
  if (!graph_path.empty() && optimistic) {
    // Each process reads only the templates of its LPs under block partitioning (computed from
    // the rank map and communicator table); METIS needs every template to weigh its edges, and a
    // representative replay places its LPs only once the cost model has proved the replicas
    // alike, so both read them all.
    io::GraphPart part;
    if (c.run.partition == "block" && c.run.replicas == "all")
      part.needed = [&](const graph::SlicedGraph& skeleton) {
        const auto owner =
            emu::partition_lps(skeleton, static_cast<std::uint32_t>(mpi.size()), "block");
        return emu::templates_needed(skeleton, owner, static_cast<std::uint32_t>(mpi.rank()));
      };
    graph = io::read_graph_h5(graph_path, MPI_COMM_WORLD, part);
  } else if (!graph_path.empty()) {
    graph = io::read_graph_h5(graph_path);
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (!graph) graph = build(c);
  // A captured model (once its graph is built): the plan its TP runs with, however it was
  // found, and what else was assumed.
  if (!quiet && mpi.rank() == 0 && c.model.capture) {
    if (c.parallel.tp() > 1)
      std::cout << fmt::format("tensor-parallel plan ({}):\n{}", c.model.capture_plan.source,
                               workload::describe_tp_plan(c.model.capture_plan));
    if (!c.model.capture_note.empty()) std::cout << "note: " << c.model.capture_note << "\n";
  }
  if (graph->world_size != static_cast<std::uint32_t>(c.parallel.world()))
    throw_input("{}: graph has {} ranks but the configuration has {} GPUs", graph_path,
                graph->world_size, c.parallel.world());
  const double build_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // What-ifs: the run is replayed without them first (the baseline), then with them on a cost
  // model of the changed cluster, whose outputs are written.
  const std::vector<emu::WhatIf> whatifs = io::read_whatifs(config_path, whatif_texts);
  SimTime baseline_time = 0;
  if (!whatifs.empty()) {
    const ReplaySetup base(c);
    emu::EmulationOptions bo = base.options;
    bo.trace_ranks.clear();
    bo.engine = optimistic ? emu::EngineKind::Optimistic : emu::EngineKind::Sequential;
    baseline_time = optimistic ? emu::emulate_distributed(*graph, base.costs, bo, MPI_COMM_WORLD)
                                     .local.summary.iteration_time
                               : emu::emulate(*graph, base.costs, bo).summary.iteration_time;
  }
  io::ExperimentConfig changed = c;
  emu::apply_whatifs_to_cluster(whatifs, changed.cluster);
  ReplaySetup setup(changed);
  emu::apply_whatifs_to_fabric(whatifs, setup.model);
  const cost::CostModel& cost = setup.model;
  const std::optional<cost::Profile>& profile = setup.profile;
  const emu::Costs& costs = setup.costs;
  emu::EmulationOptions opt = setup.options;
  emu::apply_whatifs_to_ranks(whatifs, *graph, costs, c.cluster.gpus_per_node, opt);
  opt.trace_ranks = c.run.trace_ranks;
  opt.rollback_check = rollback_check;
  // A representative replay counts only the replayed ranks' events (and is refused here, before
  // any work, where the replicas may differ).
  std::optional<emu::ReplicaMap> reps;
  if (opt.representative_replicas) reps = emu::representative_replicas(*graph, costs, opt);
  if (!quiet && mpi.rank() == 0)
    opt.progress = progress_reporter(*graph, opt.coalesce_local_ops,
                                     cost.fabric() != nullptr ? c.cluster.gpus_per_node : 0,
                                     reps ? &reps->active : nullptr);
  if (rollback_check && optimistic)
    throw_input("--rollback-check runs on the sequential engine; drop run.engine=optimistic");
  if (optimistic) opt.engine = emu::EngineKind::Optimistic;
  // Hybrid run: the sandbox ranks' kernels are measured (or replayed) before the replay, and the
  // job is also replayed without them, whose iteration time the outputs give beside the hybrid
  // one (a host sandbox's is only a functional check).
  emu::Summary sandbox_summary;
  std::optional<Sandbox> sandbox_run;
  if (!c.run.sandbox_ranks.empty()) {
    sandbox_run = prepare_sandbox(c, *graph, cost, costs, opt, replayed, mpi.rank(), mpi.size(),
                                  sandbox_summary);
    emu::EmulationOptions po = setup.options;
    po.trace_ranks.clear();
    po.engine = opt.engine;
    emu::apply_whatifs_to_ranks(whatifs, *graph, costs, c.cluster.gpus_per_node, po);
    sandbox_summary.sandbox_pure_replay_time =
        optimistic ? emu::emulate_distributed(*graph, costs, po, MPI_COMM_WORLD)
                         .local.summary.iteration_time
                   : emu::emulate(*graph, costs, po).summary.iteration_time;
  }
  // What the summary reports besides the replay itself: the what-ifs and the sandbox.
  const auto copy_run_extras = [&](emu::Summary& s) {
    for (const emu::WhatIf& w : whatifs) s.whatif.push_back(w.text);
    s.whatif_baseline_time = baseline_time;
    s.sandbox_ranks = sandbox_summary.sandbox_ranks;
    s.sandbox_backend = sandbox_summary.sandbox_backend;
    s.sandbox_device = sandbox_summary.sandbox_device;
    s.sandbox_op_scale = sandbox_summary.sandbox_op_scale;
    s.sandbox_measured_ops = sandbox_summary.sandbox_measured_ops;
    s.sandbox_measured_fraction = sandbox_summary.sandbox_measured_fraction;
    s.sandbox_peak_allocated_bytes = sandbox_summary.sandbox_peak_allocated_bytes;
    s.sandbox_peak_reserved_bytes = sandbox_summary.sandbox_peak_reserved_bytes;
    s.sandbox_replayed = sandbox_summary.sandbox_replayed;
    s.sandbox_functional_check = sandbox_summary.sandbox_functional_check;
    s.sandbox_pure_replay_time = sandbox_summary.sandbox_pure_replay_time;
  };
  ResultsExtra extra;
  if (sandbox_run)
    extra = [&](const std::string& results_h5) {
      io::write_sandbox_group(results_h5, sandbox_run->measured, c.run.sandbox_ranks);
    };
  emu::RunResults r;
  if (optimistic) {
    // Results stay distributed: results.h5 is written collectively, summary.json and
    // trace.json by process 0 (which receives only the traced ranks and the summary figures).
    emu::DistributedResults d = emu::emulate_distributed(*graph, costs, opt, MPI_COMM_WORLD);
    complete_summary(d, c, MPI_COMM_WORLD);
    copy_run_extras(d.local.summary);
    if (profile)
      summarize_profile(d.local.summary, c, *profile, *graph, costs, &d.rank_owner, d.process,
                        MPI_COMM_WORLD);
    check_memory(d.local.summary, c);
    act_on_memory(d.local.summary, c, mpi.rank() == 0);
    write_outputs(d, c.run.output, MPI_COMM_WORLD, extra);
    if (mpi.rank() != 0) return 0;
    r = std::move(d.local);
  } else {
    r = emu::emulate(*graph, costs, opt);
    complete_summary(r, c);
    copy_run_extras(r.summary);
    if (profile)
      summarize_profile(r.summary, c, *profile, *graph, costs, nullptr, 0, MPI_COMM_NULL);
    check_memory(r.summary, c);
    act_on_memory(r.summary, c, true);
    write_outputs(r, c.run.output, extra);
  }
  if (!quiet) {
    std::cout << io::format_summary_table(r);
    std::cout << "graph build " << build_s << " s; results in " << c.run.output << "/\n";
  }
  return 0;
}

int graph_command(const std::string& config_path, const std::string& out,
                  const std::vector<std::string>& overrides, const std::string& megatron_args) {
  io::ExperimentConfig c = io::load_experiment(config_path, overrides, megatron_args);
  graph::SlicedGraph g = build(c);
  io::write_graph_h5(g, out);
  std::size_t ops = 0;
  for (const auto& t : g.templates) ops += t.ops.size();
  std::cout << "wrote " << out << ": " << g.world_size << " ranks, " << g.templates.size()
            << " templates, " << ops << " template ops, " << g.comms.size() << " communicators\n";
  return 0;
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

/// `scalescope memory CONFIG`: each pipeline stage's memory classes at its peak and the capacity
/// check, from the graph's templates alone (no replay: memory is a property of the template).
int memory_command(const std::string& config_path, const std::vector<std::string>& overrides,
                   const std::string& megatron_args) {
  io::ExperimentConfig c = io::load_experiment(config_path, overrides, megatron_args);
  const emu::Summary s = template_memory(c, build(c));
  std::cout << fmt::format("memory at each pipeline stage's peak (GiB), {} ({:.2f} GiB usable)\n",
                           s.gpu, static_cast<double>(s.memory_capacity_bytes) / (1 << 30));
  std::cout << fmt::format("  {:<18}", "class");
  for (std::int64_t stage = 0; stage < c.parallel.pp(); ++stage)
    std::cout << fmt::format("{:>9}", fmt::format("stage {}", stage));
  std::cout << "\n";
  auto row = [&](const std::string& label, auto value) {
    std::cout << fmt::format("  {:<18}", label);
    for (std::size_t stage = 0; stage < s.memory_breakdown_by_pp_stage.size(); ++stage)
      std::cout << fmt::format("{:>9.2f}", static_cast<double>(value(stage)) / (1 << 30));
    std::cout << "\n";
  };
  for (std::size_t k = 0; k < s.memory_class_names.size(); ++k)
    row(s.memory_class_names[k],
        [&](std::size_t st) { return s.memory_breakdown_by_pp_stage[st][k]; });
  row("total", [&](std::size_t st) { return s.memory_total_bytes_by_pp_stage[st]; });
  std::cout << fmt::format("fits: {} (tightest: rank {}, stage {}, largest class {})\n",
                           s.memory_fits ? "yes" : "NO", s.memory_tightest_rank,
                           s.memory_tightest_stage, s.memory_dominant_class);
  return 0;
}

/// The distinct measurable kernel signatures of a graph, in key order, with one op of each.
std::map<std::string, cost::KernelSig> distinct_signatures(const graph::SlicedGraph& g) {
  std::map<std::string, cost::KernelSig> out;
  for (const graph::RankProgram& t : g.templates)
    for (const graph::Op& op : t.ops) {
      const cost::KernelSig s = cost::kernel_signature(op);
      if (s.measurable()) out.emplace(s.key(), s);
    }
  return out;
}

/// `scalescope profile`: the signature list (--list), a measured.json turned into a database
/// (--import), or every signature measured with an executor (--backend host|cuda).
int profile_command(const std::string& config_path, const std::vector<std::string>& overrides,
                    const std::string& megatron_args, const std::string& list_path,
                    const std::string& import_path, const std::string& backend, double op_scale,
                    const std::string& out) {
  if (!import_path.empty()) {
    if (out.empty()) throw_input("scalescope profile --import: give -o profile.h5");
    const cost::Profile p = io::read_measured_json(import_path);
    io::write_profile_h5(p, out);
    std::cout << fmt::format("{} measured signatures from {} ({}) → {}\n", p.entries.size(),
                             import_path, p.device, out);
    return 0;
  }
  if (config_path.empty() && megatron_args.empty())
    throw_input("scalescope profile: give an experiment CONFIG (or --import measured.json)");
  io::ExperimentConfig c = io::load_experiment(config_path, overrides, megatron_args);
  const graph::SlicedGraph g = build(c);
  const cost::CostModel model(c.cluster);
  if (!list_path.empty()) {
    io::write_ops_json(g, model, c.path, list_path);
    std::cout << fmt::format("{} kernel signatures of {} → {}\n", distinct_signatures(g).size(),
                             c.path, list_path);
    if (out.empty()) return 0;
  }
  if (out.empty()) throw_input("scalescope profile: give -o profile.h5 (or --list ops.json)");
  if (backend == "cuda") {
    // List, measure with scalescope-kernels, import.
    const fs::path ops = fs::path(out).string() + ".ops.json";
    io::write_ops_json(g, model, c.path, ops.string());
    cost::Profile p;
    try {
      p = measure_with_cuda_tool(ops, "scalescope profile --backend cuda");
    } catch (...) {
      fs::remove(ops);
      throw;
    }
    fs::remove(ops);
    p.source = c.path;
    io::write_profile_h5(p, out);
    std::cout << fmt::format("{} signatures measured on {} → {}\n", p.entries.size(), p.device,
                             out);
    return 0;
  }
  if (backend != "host")
    throw_input("scalescope profile --backend {}: expected host or cuda", backend);
  if (!(op_scale > 0 && op_scale <= 1))
    throw_input("scalescope profile --op-scale {}: must be in (0, 1]", op_scale);
  auto exec = kernels::make_host_executor(op_scale);
  kernels::SandboxMeasurements m;  // each distinct signature once (measure_template memoizes)
  for (const graph::RankProgram& t : g.templates) kernels::measure_template(t, *exec, m);
  cost::Profile p = kernels::as_profile(m);
  p.device = exec->device();
  p.backend = exec->backend();
  p.source = c.path;
  p.op_scale = op_scale;
  p.versions = exec->versions();
  io::write_profile_h5(p, out);
  std::cout << fmt::format("{} signatures measured on {} at op_scale {} → {}\n", p.entries.size(),
                           p.device, op_scale, out);
  return 0;
}

/// One configuration of a sweep through `scalescope run`'s pipeline: load (a refused plan is a
/// row that says why), build, the memory check from the templates, and unless it does not fit
/// (or `replay_unfit`), the replay: on the sequential engine, or with `group` on the optimistic
/// engine over that communicator's processes (the same result bit for bit). Nothing is written.
explore::Row sweep_point(const std::string& config_path, const std::vector<std::string>& base,
                         const std::string& megatron_args, const std::vector<std::string>& point,
                         std::size_t index, bool replay_unfit, MPI_Comm group) {
  explore::Row r;
  r.index = index;
  r.overrides = point;
  std::vector<std::string> overrides = base;
  overrides.insert(overrides.end(), point.begin(), point.end());
  std::optional<io::ExperimentConfig> loaded;
  std::optional<graph::SlicedGraph> g;
  try {
    loaded = io::load_experiment(config_path, overrides, megatron_args);
    g = build(*loaded);
  } catch (const InputError& e) {
    r.status = explore::Status::Invalid;
    r.message = e.what();
    return r;
  }
  const io::ExperimentConfig& c = *loaded;
  r.num_gpus = c.parallel.world();
  r.tp = c.parallel.tp();
  r.pp = c.parallel.pp();
  r.dp = c.parallel.dp();
  r.cp = c.parallel.cp();
  r.ep = c.parallel.ep();
  r.vpp = c.parallel.vpp();
  r.micro_batch = c.training.micro_batch_size;
  const auto fill_memory = [&](const emu::Summary& s) {
    r.peak_memory_bytes = s.memory_total_bytes_by_pp_stage[s.memory_tightest_stage];
    r.memory_capacity_bytes = s.memory_capacity_bytes;
    r.status = s.memory_fits ? explore::Status::Ok : explore::Status::DoesNotFit;
    r.message = s.memory_fits ? std::string() : memory_verdict(s);
  };
  fill_memory(template_memory(c, *g));
  if (r.status == explore::Status::DoesNotFit && !replay_unfit) return r;

  const ReplaySetup setup(c);
  const emu::Costs& costs = setup.costs;
  emu::EmulationOptions opt = setup.options;  // no traced ranks: no timelines needed
  emu::Summary s;
  emu::RankResult last;
  if (group != MPI_COMM_NULL) {
    // The processes of `group` replay this one configuration together (optimistic engine).
    opt.engine = emu::EngineKind::Optimistic;
    emu::DistributedResults d = emu::emulate_distributed(*g, costs, opt, group);
    complete_summary(d, c, group);
    s = d.local.summary;
    last = d.local.ranks[d.last_finishing_rank];
  } else {
    emu::RunResults res = emu::emulate(*g, costs, opt);
    complete_summary(res, c);
    s = res.summary;
    last = res.ranks[io::last_finishing_rank(res)];
  }
  check_memory(s, c);
  fill_memory(s);
  r.replayed = true;
  r.iteration_time_s = s.iteration_time_s();
  r.tokens_per_s = s.tokens_per_s();
  r.model_tflops_per_gpu = s.model_tflops_per_gpu();
  r.mfu = s.mfu();
  r.compute_s = ns_to_seconds(last.compute);
  r.exposed_comm_s = ns_to_seconds(last.exposed_tp + last.exposed_pp + last.exposed_dp +
                                   last.exposed_embedding + last.exposed_cp + last.exposed_ep);
  r.bubble_s = ns_to_seconds(last.bubble);
  r.host_wait_s = ns_to_seconds(last.host_wait);
  return r;
}

/// `scalescope sweep`: every configuration of the axes' product (or of the parallel-layout
/// search) run as `scalescope run` would, ranked into DIR/sweep.csv and sweep.json. Under
/// mpirun the configurations are dealt to the processes (round-robin, each on the sequential
/// engine; or, with more processes than configurations, a group of processes per configuration
/// on the optimistic engine), so the table is the same at any process count.
int sweep_command(const MpiSession& mpi, const std::string& config_path,
                  const std::vector<std::string>& base, const std::string& megatron_args,
                  const std::vector<std::string>& vary, const std::string& search,
                  const std::string& out, bool replay_unfit, std::size_t top, bool quiet) {
  if (config_path.empty() && megatron_args.empty())
    throw_input("scalescope sweep: give an experiment CONFIG or --megatron-args \"…\"");
  // The base experiment must load on its own: its errors are the user's, not a row's.
  const io::ExperimentConfig c0 = io::load_experiment(config_path, base, megatron_args);
  // Axes: the layout search, the file's `sweep:` axes, then --vary's.
  const io::SweepSpec spec =
      config_path.empty() ? io::SweepSpec{} : io::read_sweep_spec(config_path);
  const std::string& kind = search.empty() ? spec.search : search;
  std::vector<explore::Axis> axes;
  if (!kind.empty()) {
    if (kind != "parallel")
      throw_input("{}: sweep search '{}': expected 'parallel'",
                  search.empty() ? config_path : std::string("--search"), kind);
    // The units the pipeline split counts: the layers, and the embedding and the loss where the
    // experiment accounts for them.
    const std::int64_t units = c0.model.num_layers +
                               (c0.parallel.account_for_embedding_in_pipeline_split ? 1 : 0) +
                               (c0.parallel.account_for_loss_in_pipeline_split ? 1 : 0);
    axes.push_back(explore::parallel_search(c0.cluster.num_gpus, c0.cluster.gpus_per_node, units));
  }
  axes.insert(axes.end(), spec.axes.begin(), spec.axes.end());
  for (const std::string& v : vary) {
    explore::Axis a = explore::parse_vary(v);
    for (const auto& value : a.values)
      for (const std::string& o : value) io::check_override(o, c0.path);
    axes.push_back(std::move(a));
  }
  if (axes.empty())
    throw_input(
        "scalescope sweep: give --vary key=v1,v2,…, --search parallel or a sweep: section in "
        "the experiment file");
  const std::vector<std::vector<std::string>> points = explore::expand(axes);

  // This process's share: with fewer processes than configurations, every procs-th one on the
  // sequential engine; with more, one configuration per group of processes (process p in group
  // p mod N), replayed by the group on the optimistic engine. Then every share to process 0 as
  // one JSON text each (a group's rows from its first process).
  const auto me = static_cast<std::size_t>(mpi.rank());
  const auto procs = static_cast<std::size_t>(mpi.size());
  const std::size_t n = points.size();
  std::vector<std::size_t> share;
  MPI_Comm group = MPI_COMM_NULL;
  bool reports = true;
  if (procs > n) {
    MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(me % n), static_cast<int>(me), &group);
    int size = 1;
    MPI_Comm_size(group, &size);
    if (size == 1) MPI_Comm_free(&group);  // a group of one: the sequential engine
    share.push_back(me % n);
    reports = me < n;
  } else {
    for (std::size_t i = me; i < n; i += procs) share.push_back(i);
  }
  // An unreadable file (cost.profile, a capture) stops this process's share; the error travels
  // with the rows, so no process is left waiting in the gather, and process 0 reports it.
  nlohmann::ordered_json mine = nlohmann::ordered_json::array();
  std::string error;
  for (const std::size_t i : share) {
    const auto t0 = std::chrono::steady_clock::now();
    explore::Row r;
    try {
      r = sweep_point(config_path, base, megatron_args, points[i], i, replay_unfit, group);
    } catch (const IoError& e) {
      error = e.what();
      break;
    } catch (const InputError& e) {
      error = e.what();
      break;
    }
    if (!reports) continue;
    if (!quiet && me == 0)
      std::cerr << fmt::format(
          "[{}/{}] {} → {} ({:.1f} s)\n", i + 1, points.size(), fmt::join(points[i], " "),
          r.replayed ? fmt::format("{:.4f} s", r.iteration_time_s) : explore::status_name(r.status),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    mine.push_back(io::sweep_row_json(r));
  }
  if (group != MPI_COMM_NULL) MPI_Comm_free(&group);
  const std::string text = nlohmann::ordered_json{{"rows", mine}, {"error", error}}.dump();
  int len = static_cast<int>(text.size());
  std::vector<int> lens(procs), displs(procs);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (me == 0) {
    for (std::size_t p = 0, at = 0; p < procs; at += static_cast<std::size_t>(lens[p]), ++p)
      displs[p] = static_cast<int>(at);
    all.resize(static_cast<std::size_t>(displs[procs - 1] + lens[procs - 1]));
  }
  MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  if (me != 0) return 0;
  std::vector<explore::Row> rows(points.size());
  for (std::size_t p = 0; p < procs; ++p) {
    const auto payload = nlohmann::ordered_json::parse(
        all.substr(static_cast<std::size_t>(displs[p]), static_cast<std::size_t>(lens[p])));
    if (const std::string e = payload.at("error").get<std::string>(); !e.empty()) throw_io("{}", e);
    for (const auto& j : payload.at("rows")) {
      explore::Row r = io::sweep_row_from_json(j);
      rows[r.index] = std::move(r);
    }
  }
  const std::vector<std::size_t> order = explore::rank_rows(rows);
  io::write_sweep(out, c0.path, axes, rows, order);
  if (!quiet) {
    std::cout << io::format_sweep_table(rows, order, top);
    const explore::Row& best = rows[order.front()];
    if (best.status == explore::Status::Ok)
      std::cout << fmt::format("best: {:.4f} s per iteration with --set {}\n",
                               best.iteration_time_s, fmt::join(best.overrides, " --set "));
    else if (best.status == explore::Status::DoesNotFit) {
      const explore::Row* lean = &best;
      for (const explore::Row& r : rows)
        if (r.status == explore::Status::DoesNotFit &&
            r.peak_memory_bytes < lean->peak_memory_bytes)
          lean = &r;
      std::cout << fmt::format(
          "no configuration fits in memory; the leanest needs {:.2f} GiB of {:.2f} GiB with "
          "--set {}\n",
          static_cast<double>(lean->peak_memory_bytes) / (1 << 30),
          static_cast<double>(lean->memory_capacity_bytes) / (1 << 30),
          fmt::join(lean->overrides, " --set "));
    } else
      std::cout << "every configuration was refused by the plan rules (see the messages)\n";
    std::cout << fmt::format("{} configurations; table in {}/sweep.csv and sweep.json\n",
                             rows.size(), out);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  CLI::App app{"scalescope: emulate LLM training at 1,024-16,384 GPUs"};
  app.name("scalescope");
  app.require_subcommand(1);
  app.set_version_flag("--version", "scalescope 0.1.0");

  // A Megatron-LM launch line is one argument that starts with "--"; CLI11 would read it as an
  // option, so `--megatron-args "…"` is joined into `--megatron-args=…` first.
  std::vector<std::string> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--megatron-args") {
      args[i] += "=" + args[i + 1];
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    }
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments in reverse order

  const char* launch_help =
      "A Megatron-LM pretrain_gpt.py launch line (quoted), applied over CONFIG's keys; "
      "--set wins over it";
  std::string config, graph_path, out, megatron_args;
  std::vector<std::string> overrides;
  bool quiet = false, rollback_check = false;
  std::vector<std::string> whatif_texts;
  auto* run = app.add_subcommand("run", "Emulate one training iteration and write results");
  run->add_option("config", config, "Experiment YAML (optional with --graph or --megatron-args)");
  run->add_option("--megatron-args", megatron_args, launch_help);
  run->add_option("-o,--output", out, "Output directory (overrides run.output)");
  run->add_option("--set", overrides, "Override a config key: key.path=value (repeatable)");
  run->add_option("--graph", graph_path, "Replay this graph.h5 instead of building one");
  run->add_flag("-q,--quiet", quiet, "Print nothing on success");
  std::string sandbox_list, replay_path;
  run->add_option("--sandbox", sandbox_list,
                  "Hybrid run: these ranks (comma-separated) execute their kernels for real "
                  "(run.sandbox_ranks)");
  run->add_option("--replay-measurements", replay_path,
                  "Take the sandbox measurements from a hybrid run's results.h5 (no device)");
  std::string chakra_prefix, comm_groups, expand;
  run->add_option("--chakra", chakra_prefix,
                  "Replay Chakra ET files PREFIX.<rank>.et (cluster: --set cluster.preset=…)");
  run->add_option("--comm-groups", comm_groups,
                  "Chakra: communicator groups {\"<pg_name>\": [ranks]} (ASTRA-sim's format)");
  run->add_option("--expand", expand,
                  "Chakra: dp=N replays N data-parallel replicas of the trace (one replica; its "
                  "single-rank groups become the data-parallel groups)");
  run->add_option("--whatif", whatif_texts,
                  "A what-if, as YAML (repeatable): 'slow_gpu: {ranks: [3], factor: 1.5}', "
                  "degraded_nic, failed_link, extra_latency, slow_dataloader (docs/config.md)");
  run->add_flag("--rollback-check", rollback_check,
                "Check mode: run every event forward, reverse it, compare the LP state, then "
                "run it for real (slow; sequential engine)");

  std::string graph_config, graph_out;
  std::vector<std::string> graph_overrides;
  auto* gcmd = app.add_subcommand("graph", "Build the sliced execution graph and write graph.h5");
  gcmd->add_option("config", graph_config, "Experiment YAML (optional with --megatron-args)");
  gcmd->add_option("--megatron-args", megatron_args, launch_help);
  gcmd->add_option("-o,--output", graph_out, "graph.h5 path")->required();
  gcmd->add_option("--chakra", chakra_prefix, "Import Chakra ET files PREFIX.<rank>.et");
  gcmd->add_option("--comm-groups", comm_groups,
                   "Chakra: communicator groups {\"<pg_name>\": [ranks]} (ASTRA-sim's format)");
  gcmd->add_option("--expand", expand, "Chakra: dp=N data-parallel replicas of the trace");
  gcmd->add_option("--set", graph_overrides, "Override a config key: key.path=value");

  std::string memory_config;
  std::vector<std::string> memory_overrides;
  auto* mcmd = app.add_subcommand(
      "memory", "Print each pipeline stage's memory at its peak and whether it fits, no replay");
  mcmd->add_option("config", memory_config, "Experiment YAML (optional with --megatron-args)");
  mcmd->add_option("--megatron-args", megatron_args, launch_help);
  mcmd->add_option("--set", memory_overrides, "Override a config key: key.path=value");

  std::string profile_config, profile_list, profile_import, profile_backend = "host", profile_out;
  std::vector<std::string> profile_overrides;
  double op_scale = 0.05;
  std::string capture_model, capture_factory, capture_args, capture_out, capture_blocks,
      capture_dtype = "bf16";
  std::int64_t capture_seq = 4096, capture_batch = 1, capture_tp = 2;
  bool capture_summary = false;
  auto* ccmd = app.add_subcommand(
      "capture", "Trace a PyTorch model's block and outer graph into capture.h5 (docs/flint.md)");
  auto* cmodel = ccmd->add_option("model", capture_model, "path/to/file.py:ClassName");
  auto* cfactory = ccmd->add_option(
      "--factory", capture_factory,
      "path/to/file.py:FUNCTION: a function of no arguments returning the module (or the module "
      "and example inputs)");
  cmodel->excludes(cfactory);
  ccmd->add_option("--args", capture_args, "YAML mapping of constructor arguments")
      ->excludes(cfactory);
  ccmd->add_option("--seq", capture_seq, "Sequence length (default 4096)");
  ccmd->add_option("--batch", capture_batch, "Micro-batch size (default 1)");
  ccmd->add_option("--dtype", capture_dtype, "bf16 (default), fp16 or fp32");
  ccmd->add_option("--blocks", capture_blocks,
                   "Dotted path of the nn.ModuleList of repeated blocks (default: the largest "
                   "one of modules of one class in the module tree)");
  ccmd->add_option("-o,--output", capture_out, "capture.h5 path")->required();
  ccmd->add_flag("--summary", capture_summary,
                 "Print per block the ops, GEMM FLOPs, the TP plan and its collectives, and the "
                 "totals against 6·N·tokens");
  ccmd->add_option("--tp", capture_tp, "TP degree the summary lowers the plan at (default 2)");
  auto* pcmd = app.add_subcommand(
      "profile", "Kernel signatures of a configuration: list them, measure them, import them");
  pcmd->add_option("config", profile_config, "Experiment YAML");
  pcmd->add_option("--megatron-args", megatron_args, launch_help);
  pcmd->add_option("--set", profile_overrides, "Override a config key: key.path=value");
  pcmd->add_option("--list", profile_list, "Write the signature list (ops.json) and stop");
  pcmd->add_option("--import", profile_import,
                   "Turn a measured.json (scalescope-kernels) into a profile database");
  pcmd->add_option("--backend", profile_backend, "host (Kokkos, shrunk shapes) or cuda");
  pcmd->add_option("--op-scale", op_scale,
                   "host: every dimension times this (default 0.05); recorded in the profile");
  pcmd->add_option("-o,--output", profile_out, "profile.h5 path");

  std::string export_graph, export_prefix;
  bool export_classes = false, export_metadata_node = false;
  auto* ecmd = app.add_subcommand("export-chakra",
                                  "Write a graph.h5 as Chakra ET files (one per rank) for "
                                  "ASTRA-sim and Chakra's tools");
  ecmd->add_option("graph", export_graph, "graph.h5")->required();
  ecmd->add_option("prefix", export_prefix, "Output PREFIX: PREFIX.<rank>.et")->required();
  ecmd->add_flag("--classes", export_classes,
                 "One file per rank class (PREFIX.class<k>.et) plus PREFIX.classes.json");
  ecmd->add_flag("--metadata-node", export_metadata_node,
                 "Also write the communicator groups as a METADATA node (Chakra's PyTorch "
                 "converter's flavour; stock ASTRA-sim stops on it: docs/formats.md)");

  std::string bench_kind, bench_prefix;
  std::uint32_t bench_ranks = 8;
  double bench_bytes = 1 << 20;
  auto* bcmd = app.add_subcommand(
      "chakra-microbench",
      "Write ASTRA-sim's collective microbenchmark (one collective over all ranks) as Chakra ET");
  bcmd->add_option("kind", bench_kind, "all_reduce | all_gather | reduce_scatter | all_to_all")
      ->required()
      ->check(CLI::IsMember({"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}));
  bcmd->add_option("prefix", bench_prefix, "Output PREFIX: PREFIX.<rank>.et")->required();
  bcmd->add_option("--ranks", bench_ranks, "Ranks (default 8)")->check(CLI::Range(1, 1 << 24));
  bcmd->add_option("--bytes", bench_bytes, "nccl-tests size S in bytes (default 1 MiB)")
      ->check(CLI::NonNegativeNumber);

  std::string sweep_config, sweep_search, sweep_out = "out/sweep";
  std::vector<std::string> sweep_overrides, sweep_vary;
  bool sweep_replay_unfit = false;
  std::size_t sweep_top = 20;
  auto* scmd = app.add_subcommand(
      "sweep", "Run every configuration of a sweep and rank them (sweep.csv, sweep.json)");
  scmd->add_option("config", sweep_config, "Experiment YAML (optional with --megatron-args)");
  scmd->add_option("--megatron-args", megatron_args, launch_help);
  scmd->add_option("--set", sweep_overrides, "Override a config key for every configuration");
  scmd->add_option("--vary", sweep_vary,
                   "An axis: key.path=v1,v2,… (repeatable; the product of the axes is swept)");
  scmd->add_option("--search", sweep_search,
                   "parallel: every TP (powers of two within a node) × PP (powers of two) × "
                   "VPP (whose chunks divide the layers) on the configured GPUs, DP derived");
  scmd->add_option("-o,--output", sweep_out, "Output directory (default out/sweep)");
  scmd->add_flag("--replay-unfit", sweep_replay_unfit,
                 "Replay configurations that do not fit in memory too");
  scmd->add_option("--top", sweep_top, "Rows printed (default 20; 0: all)");
  scmd->add_flag("-q,--quiet", quiet, "Print nothing on success");

  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*ecmd)
      return export_chakra_command(export_graph, export_prefix, export_classes,
                                   export_metadata_node);
    if (*scmd)
      return sweep_command(mpi, sweep_config, sweep_overrides, megatron_args, sweep_vary,
                           sweep_search, sweep_out, sweep_replay_unfit, sweep_top, quiet);
    if (*bcmd) {
      const graph::OpKind kind = bench_kind == "all_reduce"       ? graph::OpKind::AllReduce
                                 : bench_kind == "all_gather"     ? graph::OpKind::AllGather
                                 : bench_kind == "reduce_scatter" ? graph::OpKind::ReduceScatter
                                                                  : graph::OpKind::AllToAll;
      const std::size_t files = io::write_chakra(
          graph::collective_microbenchmark(kind, bench_ranks, bench_bytes), bench_prefix);
      std::cout << fmt::format("wrote {} Chakra ET files {}.*.et: {} of {} bytes\n", files,
                               bench_prefix, bench_kind, bench_bytes);
      return 0;
    }
    if (*run && !chakra_prefix.empty()) {
      if (!config.empty() || !graph_path.empty() || !megatron_args.empty())
        throw_input("scalescope run --chakra: give no CONFIG, --graph or --megatron-args");
      io::ChakraImport imp = import_chakra(chakra_prefix, comm_groups, expand, mpi.rank() == 0);
      io::ExperimentConfig c = chakra_config(chakra_prefix, imp.graph.world_size,
                                             !imp.scalescope_schema, overrides, imp.source_config);
      imp.graph.config_text = c.resolved_yaml;
      return run_chakra(mpi, imp.graph, imp.durations, c, out, quiet);
    }
    if (*gcmd && !chakra_prefix.empty()) {
      if (!graph_config.empty() || !megatron_args.empty())
        throw_input("scalescope graph --chakra: give no CONFIG or --megatron-args");
      return graph_chakra_command(chakra_prefix, graph_out, comm_groups, expand, graph_overrides);
    }
    if (*run) {
      if (config.empty() && graph_path.empty() && megatron_args.empty())
        throw_input(
            "scalescope run: give an experiment CONFIG, --megatron-args \"…\" or --graph "
            "graph.h5");
      std::vector<std::uint32_t> sandbox;
      for (std::size_t pos = 0; pos < sandbox_list.size();) {
        const std::size_t comma = std::min(sandbox_list.find(',', pos), sandbox_list.size());
        const std::string item = sandbox_list.substr(pos, comma - pos);
        char* end = nullptr;
        const unsigned long v = std::strtoul(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0')
          throw_input("--sandbox {}: expected comma-separated rank numbers", sandbox_list);
        if (std::find(sandbox.begin(), sandbox.end(), v) == sandbox.end())
          sandbox.push_back(static_cast<std::uint32_t>(v));
        pos = comma + 1;
      }
      return run_command(mpi, config, graph_path, out, overrides, megatron_args, quiet,
                         rollback_check, sandbox, replay_path, whatif_texts);
    }
    if (*ccmd) {
      // The front end is Python (PyTorch's tracer): scripts/capture/capture.py of this checkout,
      // run with Debian's /usr/bin/python3 (python3-torch).
      const fs::path script =
          fs::path(SCALESCOPE_SOURCE_DIR) / "scripts" / "capture" / "capture.py";
      if (capture_model.empty() == capture_factory.empty())
        throw_input(
            "scalescope capture: give path/to/file.py:ClassName or --factory FILE:FUNCTION");
      std::string cmd =
          fmt::format("/usr/bin/python3 '{}' {}'{}' --seq {} --batch {} --dtype '{}' -o '{}'",
                      script.string(), capture_factory.empty() ? "" : "--factory ",
                      capture_factory.empty() ? capture_model : capture_factory, capture_seq,
                      capture_batch, capture_dtype, capture_out);
      if (!capture_blocks.empty()) cmd += fmt::format(" --blocks '{}'", capture_blocks);
      if (!capture_args.empty()) cmd += fmt::format(" --args '{}'", capture_args);
      const int rc = std::system(cmd.c_str());
      const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : 1;
      if (code != 0 || !capture_summary) return code;
      const workload::Capture captured = io::read_capture_h5(capture_out);
      std::cout << io::format_capture_summary(
          captured, workload::capture_default_plan(captured, capture_out), capture_tp);
      return 0;
    }
    if (*pcmd)
      return profile_command(profile_config, profile_overrides, megatron_args, profile_list,
                             profile_import, profile_backend, op_scale, profile_out);
    const std::string& cfg = *mcmd ? memory_config : graph_config;
    if (cfg.empty() && megatron_args.empty())
      throw_input("scalescope {}: give an experiment CONFIG or --megatron-args \"…\"",
                  *mcmd ? "memory" : "graph");
    if (*mcmd) return memory_command(memory_config, memory_overrides, megatron_args);
    return graph_command(graph_config, graph_out, graph_overrides, megatron_args);
  } catch (const InputError& e) {
    // Input is read identically by every process, so every process fails here; one reports.
    if (mpi.rank() == 0) std::cerr << "scalescope: error: " << e.what() << "\n";
  } catch (const IoError& e) {
    if (mpi.rank() == 0) std::cerr << "scalescope: error: " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "scalescope: internal error (rank " << mpi.rank() << "): " << e.what() << "\n";
    if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);  // the others may wait in a collective
  }
  return 1;
}
