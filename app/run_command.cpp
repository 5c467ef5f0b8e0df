// `scalescope run`: one training iteration replayed (sequential or optimistic engine), with
// what-ifs, a hybrid sandbox, a stored graph or a Chakra import, and its result files.
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

#include "app/chakra.hpp"
#include "app/commands.hpp"
#include "app/memory_fixes.hpp"
#include "app/pipeline.hpp"
#include "app/sandbox.hpp"
#include "core/error.hpp"
#include "emu/replicas.hpp"
#include "io/graph_h5.hpp"
#include "io/profile_io.hpp"
#include "io/summary_json.hpp"
#include "workload/transformer_builder.hpp"

namespace scalescope::app {

namespace fs = std::filesystem;

int run_command(const MpiWorld& mpi, const std::string& config_path, const std::string& graph_path,
                const std::string& out_override, const std::vector<std::string>& overrides,
                const std::string& megatron_args, bool quiet, bool rollback_check,
                const std::vector<std::uint32_t>& sandbox, const std::string& replay_path,
                const std::vector<std::string>& whatif_texts, SandboxProgram* program) {
  // The configuration first (from CONFIG, or the one graph.h5 carries): the engine decides how
  // the graph is read.
  std::optional<io::ExperimentConfig> loaded;
  graph::SlicedGraph meta;  // a stored graph's configuration, read once
  if (!graph_path.empty()) meta.config_text = io::read_graph_config_text(graph_path);
  // A graph imported from Chakra traces replays with its trace durations.
  if (config_path.empty() && !graph_path.empty() && megatron_args.empty() &&
      is_chakra_config(meta.config_text)) {
    refuse_program_overrides(overrides, graph_path);
    io::ExperimentConfig c = load_config({}, &meta, overrides, {}, graph_path);
    const graph::SlicedGraph g = io::read_graph_h5(graph_path);
    return run_chakra(mpi, g, io::read_graph_durations_h5(graph_path), c, out_override, quiet);
  }
  if (!config_path.empty() || graph_path.empty())
    loaded = load_config(config_path, nullptr, overrides, megatron_args);
  else
    loaded = load_config(config_path, &meta, overrides, megatron_args, graph_path);
  // A stored graph holds the programs: keys that would change them cannot apply.
  if (!graph_path.empty()) check_graph_config(*loaded, meta.config_text, graph_path);
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
  if (mpi.rank() == 0) check_output_dir(c.run.output);
  // A parallel engine over MPI: optimistic (Time Warp), conservative (windows) or auto (the
  // default: the sequential engine on one process).
  const emu::EngineKind parallel_kind = engine_for(c, mpi.size());
  const bool optimistic = parallel_kind != emu::EngineKind::Sequential;
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
    if (c.model.capture)
      std::cout << "note: "
                << workload::describe_causal_attention(*c.model.capture,
                                                       c.model.capture_causal_mask)
                << "\n";
  }
  if (graph->world_size != static_cast<std::uint32_t>(c.parallel.world()))
    throw_input("{}: graph has {} ranks but the configuration has {} GPUs", graph_path,
                graph->world_size, c.parallel.world());
  // The user's program as a sandbox rank: its last iteration replaces that rank's ops where its
  // collectives are the graph's (app/sandbox_program.cpp); the graph as built is kept for the
  // pure replay beside it.
  if (program != nullptr) {
    program->pure = *graph;
    if (embed_program(*graph, *program)) program->hybrid = *graph;
  }
  const double build_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // What-ifs: the run is replayed without them first (the baseline), then with them on a cost
  // model of the changed cluster, whose outputs are written.
  const std::vector<emu::WhatIf> whatifs = io::read_whatifs(config_path, whatif_texts);
  // The iteration time of a replay that writes nothing: the what-ifs' baseline, a hybrid run's
  // pure replay. Same engine as the run, no traced ranks.
  const auto iteration_time_of = [&](const emu::Costs& k, emu::EmulationOptions o,
                                     const graph::SlicedGraph* other = nullptr) {
    const graph::SlicedGraph& g = other != nullptr ? *other : *graph;
    o.trace_ranks.clear();
    o.engine = optimistic ? parallel_kind : emu::EngineKind::Sequential;
    return optimistic
               ? emu::emulate_distributed(g, k, o, MPI_COMM_WORLD).local.summary.iteration_time
               : emu::emulate(g, k, o).summary.iteration_time;
  };
  SimTime baseline_time = 0;
  std::optional<ReplaySetup> base;
  if (!whatifs.empty()) base.emplace(c);
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
  // The ranks a what-if slows are traced too (its first 8), so that its effect is in the
  // timeline and `scalescope compare` can set their ops against the baseline's.
  for (const emu::WhatIf& w : whatifs) {
    std::vector<std::uint32_t> touched;
    const auto world = static_cast<std::uint32_t>(c.parallel.world());
    if (w.kind == emu::WhatIf::Kind::SlowGpu)
      touched = emu::slow_ranks(w, world, c.cluster.gpus_per_node);
    else if (w.kind == emu::WhatIf::Kind::SlowDataLoader)
      touched = w.ranks;
    else if (w.kind == emu::WhatIf::Kind::DegradedNic)
      for (const std::uint32_t n :
           emu::degraded_nodes(w, static_cast<std::uint32_t>((world + c.cluster.gpus_per_node - 1) /
                                                             c.cluster.gpus_per_node)))
        touched.push_back(n * static_cast<std::uint32_t>(c.cluster.gpus_per_node));
    for (std::size_t i = 0; i < std::min<std::size_t>(8, touched.size()); ++i)
      if (touched[i] < world && std::find(opt.trace_ranks.begin(), opt.trace_ranks.end(),
                                          touched[i]) == opt.trace_ranks.end())
        opt.trace_ranks.push_back(touched[i]);
  }
  if (program != nullptr && std::find(opt.trace_ranks.begin(), opt.trace_ranks.end(),
                                      program->rank) == opt.trace_ranks.end())
    opt.trace_ranks.push_back(program->rank);  // the sandbox rank's timeline in the outputs
  opt.rollback_check = rollback_check;
  // The program's ops timed on a GPU take their measured durations.
  if (program != nullptr && program->in_replay) {
    const std::uint32_t cls = graph->rank_class[program->rank];
    std::vector<SimTime> d = measured_durations(graph->templates[cls], program->measured_ns, costs);
    if (!d.empty()) opt.class_durations[cls] = std::move(d);
  }
  // A representative replay counts only the replayed ranks' events (and is refused here, before
  // any work, where the replicas may differ).
  std::optional<emu::ReplicaMap> reps;
  if (opt.representative_replicas) reps = emu::representative_replicas(*graph, costs, opt);
  if (!quiet && mpi.rank() == 0)
    opt.progress = progress_reporter(*graph, opt.coalesce_local_ops,
                                     cost.fabric() != nullptr ? c.cluster.gpus_per_node : 0,
                                     reps ? &reps->active : nullptr);
  if (rollback_check && optimistic)
    throw_input("--rollback-check runs on the sequential engine, on one process (run.engine={})",
                c.run.engine);
  if (optimistic) opt.engine = parallel_kind;
  // Hybrid run: the sandbox ranks' kernels are measured (or replayed) before the replay, and the
  // job is also replayed without them, whose iteration time the outputs give beside the hybrid
  // one (a host sandbox's is only a functional check).
  emu::Summary sandbox_summary;
  std::optional<Sandbox> sandbox_run;
  if (!c.run.sandbox_ranks.empty()) {
    sandbox_run = prepare_sandbox(c, *graph, cost, costs, opt, replayed, mpi.rank(), mpi.size(),
                                  sandbox_summary);
    emu::EmulationOptions pure = setup.options;  // no sandbox durations
    emu::apply_whatifs_to_ranks(whatifs, *graph, costs, c.cluster.gpus_per_node, pure);
    sandbox_summary.sandbox_pure_replay_time = iteration_time_of(costs, pure);
  }
  if (program != nullptr && program->in_replay)
    sandbox_summary.sandbox_pure_replay_time =
        iteration_time_of(costs, setup.options, &*program->pure);
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
    if (program != nullptr) {
      s.sandbox_program = program->command;
      s.sandbox_program_rank = program->rank;
      s.sandbox_program_iterations = program->iterations;
      s.sandbox_program_in_replay = program->in_replay;
      s.sandbox_program_note = program->not_in_replay;
      if (!program->in_replay) s.sandbox_pure_replay_time = s.iteration_time;
    }
  };
  ResultsExtra extra;
  if (sandbox_run)
    extra = [&](const std::string& results_h5) {
      io::write_sandbox_group(results_h5, sandbox_run->measured, c.run.sandbox_ranks);
    };
  // One replay and its files in `dir`: the run's own (`main`: with the sandbox's and what-ifs'
  // figures, the memory verdict acted on and its fixes), or a what-if run's baseline, written to
  // OUT/baseline so that `scalescope compare OUT` sets the two side by side. The results on
  // process 0, nullopt on the others.
  const auto replay = [&](const emu::Costs& k, const emu::EmulationOptions& o,
                          const std::optional<cost::Profile>& prof, const std::string& dir,
                          bool main) -> std::optional<emu::RunResults> {
    if (optimistic) {
      // Results stay distributed: results.h5 is written collectively, summary.json and
      // trace.json by process 0 (which receives only the traced ranks and the summary figures).
      emu::DistributedResults d = emu::emulate_distributed(*graph, k, o, MPI_COMM_WORLD);
      complete_summary(d, c, MPI_COMM_WORLD);
      if (main) copy_run_extras(d.local.summary);
      if (prof)
        summarize_profile(d.local.summary, c, *prof, *graph, k, &d.rank_owner, d.process,
                          MPI_COMM_WORLD);
      check_memory(d.local.summary, c);
      if (main) {
        act_on_memory(d.local.summary, c, mpi.rank() == 0);
        if (mpi.rank() == 0)
          add_memory_fixes(d.local.summary, config_path, overrides, megatron_args, c, quiet);
      }
      write_outputs(d, dir, MPI_COMM_WORLD, main ? extra : ResultsExtra{});
      if (mpi.rank() != 0) return std::nullopt;
      return std::move(d.local);
    }
    emu::RunResults res = emu::emulate(*graph, k, o);
    complete_summary(res, c);
    if (main) copy_run_extras(res.summary);
    if (prof) summarize_profile(res.summary, c, *prof, *graph, k, nullptr, 0, MPI_COMM_NULL);
    check_memory(res.summary, c);
    if (main) {
      act_on_memory(res.summary, c, true);
      add_memory_fixes(res.summary, config_path, overrides, megatron_args, c, quiet);
    }
    write_outputs(res, dir, main ? extra : ResultsExtra{});
    return res;
  };
  // A what-if run's baseline: the same replay without the what-ifs, traced alike, written
  // beside OUT first and moved to OUT/baseline only once the run's own files are in place (a
  // run that fails leaves no baseline that looks like its result).
  const fs::path baseline_dir = fs::path(c.run.output) / "baseline";
  const fs::path baseline_stage = fs::path(c.run.output).string() + ".baseline-staging";
  const auto drop_stage = [&] {
    std::error_code ec;
    if (mpi.rank() == 0) fs::remove_all(baseline_stage, ec);
  };
  if (base) {
    emu::EmulationOptions o = base->options;
    o.trace_ranks = opt.trace_ranks;
    o.engine = opt.engine;
    const std::optional<emu::RunResults> b =
        replay(base->costs, o, base->profile, baseline_stage.string(), false);
    SimTime t = b ? b->summary.iteration_time : 0;
    if (optimistic) MPI_Bcast(&t, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    baseline_time = t;
  }
  std::optional<emu::RunResults> main_results;
  try {
    main_results = replay(costs, opt, profile, c.run.output, true);
  } catch (...) {
    if (base) drop_stage();
    throw;
  }
  if (base && mpi.rank() == 0) {
    fs::remove_all(baseline_dir);
    fs::rename(baseline_stage, baseline_dir);
  }
  if (!main_results) return 0;
  emu::RunResults& r = *main_results;
  if (!quiet) {
    std::cout << io::format_summary_table(r);
    std::cout << "graph build " << build_s << " s; results in " << c.run.output << "/\n";
  }
  return 0;
}

}  // namespace scalescope::app
