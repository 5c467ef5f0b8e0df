// `scalescope profile`: a configuration's kernel signatures listed, measured (host or CUDA) or
// imported into a profile database.
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

#include "app/commands.hpp"
#include "app/pipeline.hpp"
#include "app/sandbox.hpp"
#include "core/error.hpp"
#include "cost/kernel_signature.hpp"
#include "io/profile_io.hpp"
#include "kernels/executor.hpp"
#include "kernels/sandbox.hpp"

namespace scalescope::app {

namespace fs = std::filesystem;

namespace {

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

}  // namespace

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

}  // namespace scalescope::app
