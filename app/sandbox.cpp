// Hybrid runs: the sandbox ranks' kernels measured (host or CUDA) or replayed, shared by every
// process, and given to the replay (docs/kernels.md "Sandbox ranks").
#include "app/sandbox.hpp"

#include <sys/wait.h>
#include <unistd.h>

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
#include "io/profile_io.hpp"
#include "kernels/executor.hpp"
#include "kernels/sandbox.hpp"

namespace scalescope::app {

namespace fs = std::filesystem;

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

namespace {

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

}  // namespace

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
  const bool distributed = opt.engine != emu::EngineKind::Sequential;
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

}  // namespace scalescope::app
