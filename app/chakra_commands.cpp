// Chakra execution traces: importing them as a graph (graph --chakra), replaying them
// (run --chakra), exporting a graph (export-chakra) and ASTRA-sim's microbenchmark.
#include <yaml-cpp/yaml.h>

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
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "app/chakra.hpp"
#include "app/commands.hpp"
#include "app/pipeline.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "graph/expand.hpp"
#include "io/chakra_et.hpp"
#include "io/graph_h5.hpp"
#include "io/summary_json.hpp"

namespace scalescope::app {

namespace fs = std::filesystem;

namespace {

/// The first line of the configuration text of a graph imported from Chakra ET files.
constexpr std::string_view kChakraMarker = "# chakra-import:";

}  // namespace

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
                                   const std::string& source) {
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
  refuse_program_overrides(overrides, prefix);
  io::ExperimentConfig c = load_config({}, &meta, overrides, {}, prefix);
  c.resolved_yaml = origin +
                    "\n# model, parallel and training are placeholders: the programs come from "
                    "the trace\n" +
                    c.resolved_yaml;
  return c;
}

namespace {

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

}  // namespace

io::ChakraImport import_chakra(const std::string& prefix, const std::string& comm_groups,
                               const std::string& expand, bool report, bool quiet) {
  io::ChakraReadOptions ro;
  ro.comm_groups_path = comm_groups;
  ro.expand_dp = parse_expand(expand);
  if (report)
    ro.warn = [](const std::string& w) { std::cerr << "scalescope: warning: " << w << "\n"; };
  auto progress = std::make_shared<std::optional<core::Progress>>();
  ro.progress = [progress, on = report && !quiet](std::uint64_t done, std::uint64_t total) {
    if (!*progress) progress->emplace("Chakra import", "files", total, on);
    (*progress)->update(done);
  };
  return io::read_chakra(prefix, ro);
}

/// `scalescope run` of an imported trace (run --chakra, or run --graph of a graph.h5 that
/// graph --chakra wrote): the cost model for compute ops without a trace duration, the trace's
/// durations elsewhere (io::resolve_durations); no workload figures (tokens, model FLOPs are
/// the trace's total FLOPs) and no memory-capacity check (the trace has no memory model).
int run_chakra(const MpiWorld& mpi, const graph::SlicedGraph& g,
               const std::map<std::uint32_t, std::vector<std::int64_t>>& durations,
               io::ExperimentConfig& c, const std::string& out_override, bool quiet) {
  if (!out_override.empty()) c.run.output = out_override;
  check_output_dir(c.run.output);
  if (g.world_size != static_cast<std::uint32_t>(c.parallel.world()))
    throw_input("{}: the trace has {} ranks but the configuration has {} GPUs", c.path,
                g.world_size, c.parallel.world());
  // A parallel engine over MPI (run.engine: auto, the default, is sequential on one process).
  const emu::EngineKind kind = engine_for(c, mpi.size());
  const bool optimistic = kind != emu::EngineKind::Sequential;
  cost::CostModel cost(c.cluster, c.network);
  const emu::Costs costs = emu::costs_of(cost);
  emu::EmulationOptions opt = run_options(c.run);
  opt.trace_ranks = c.run.trace_ranks;
  opt.class_durations = io::resolve_durations(g, durations, costs.compute);
  opt.engine = kind;
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
                          bool metadata_node, bool quiet) {
  const graph::SlicedGraph g = io::read_graph_h5(graph_path);
  const io::ExperimentConfig c = load_config({}, &g, {}, {}, graph_path);
  const cost::CostModel cost(c.cluster);
  const emu::Costs costs = emu::costs_of(cost);
  io::ChakraWriteOptions wo;
  wo.classes = classes;
  wo.metadata_node = metadata_node;
  wo.duration = costs.compute;
  std::optional<core::Progress> progress;
  wo.progress = [&](std::uint64_t done, std::uint64_t total) {
    if (!progress) progress.emplace("export-chakra", "files", total, !quiet);
    progress->update(done);
  };
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
                         const std::vector<std::string>& overrides, bool quiet) {
  io::ChakraImport imp = import_chakra(prefix, comm_groups, expand, true, quiet);
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

int run_chakra_command(const MpiWorld& mpi, const std::string& prefix,
                       const std::string& comm_groups, const std::string& expand,
                       const std::vector<std::string>& overrides, const std::string& out,
                       bool quiet) {
  io::ChakraImport imp = import_chakra(prefix, comm_groups, expand, mpi.rank() == 0, quiet);
  io::ExperimentConfig c = chakra_config(prefix, imp.graph.world_size, !imp.scalescope_schema,
                                         overrides, imp.source_config);
  imp.graph.config_text = c.resolved_yaml;
  return run_chakra(mpi, imp.graph, imp.durations, c, out, quiet);
}

int chakra_microbench_command(const std::string& kind_name, const std::string& prefix,
                              std::uint32_t ranks, double bytes) {
  const graph::OpKind kind = kind_name == "all_reduce"       ? graph::OpKind::AllReduce
                             : kind_name == "all_gather"     ? graph::OpKind::AllGather
                             : kind_name == "reduce_scatter" ? graph::OpKind::ReduceScatter
                                                             : graph::OpKind::AllToAll;
  const std::size_t files =
      io::write_chakra(graph::collective_microbenchmark(kind, ranks, bytes), prefix);
  std::cout << fmt::format("wrote {} Chakra ET files {}.*.et: {} of {} bytes\n", files, prefix,
                           kind_name, bytes);
  return 0;
}

}  // namespace scalescope::app
