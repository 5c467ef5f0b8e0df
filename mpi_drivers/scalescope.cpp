// scalescope: emulate one training iteration of an LLM job at its full scale.
//
// This file parses the command line and calls one command of app/ (app/commands.hpp); the
// commands hold the logic and are a library of their own, testable without this driver.
//
//   scalescope run [CONFIG] [--megatron-args "…"] [-o DIR] [--set key.path=value]...
//                  [--graph graph.h5] [--sandbox R,…] [--whatif …] [--quiet]
//   scalescope run --chakra PREFIX [-o DIR] [--comm-groups groups.json] [--expand dp=N] [--set …]
//   scalescope graph [CONFIG] [--megatron-args "…"] -o graph.h5 [--set key.path=value]...
//   scalescope graph --chakra PREFIX -o graph.h5 [--comm-groups groups.json] [--expand dp=N]
//   scalescope memory [CONFIG] [--megatron-args "…"] [--set key.path=value]...
//   scalescope sweep [CONFIG] [--set …]... [--vary key.path=v1,v2,…]... [--search parallel]
//                    [--resume]
//                  [-o DIR] [--replay-unfit] [--top N]
//   scalescope profile CONFIG [--list ops.json] [--backend host|cuda] [-o profile.h5]
//   scalescope capture path/to/file.py:Class [--args A.yaml] [--seq N] -o capture.h5
//   scalescope export-chakra graph.h5 PREFIX [--classes] [--metadata-node]
//   scalescope chakra-microbench all_reduce|all_gather|reduce_scatter|all_to_all PREFIX
//                  [--ranks N] [--bytes S]
//   scalescope report RUN_DIR|SWEEP_DIR [-o report.html]
//   scalescope compare RUN_DIR [RUN_DIR …] [-o compare.html]
#include <mpi.h>

#include "core/sanitizer_defaults.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/session.hpp"
#include "core/error.hpp"

using namespace scalescope;

int main(int argc, char** argv) {
  app::MpiSession mpi(&argc, &argv);
  CLI::App app{"scalescope: emulate LLM training at 1,024-131,072 GPUs"};
  app.name("scalescope");
  app.require_subcommand(1);
  app.set_version_flag("--version", "scalescope 0.1.0");

  // A Megatron-LM launch line is one argument that starts with "--"; CLI11 would read it as an
  // option, so `--megatron-args "…"` is joined into `--megatron-args=…` first.
  // An empty line (`--megatron-args "$(cat missing.txt)"`) is refused here: CLI11 would take the
  // next argument as its value.
  std::vector<std::string> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--megatron-args" && i + 1 < args.size()) {
      args[i] += "=" + args[i + 1];
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    }
    if (args[i].rfind("--megatron-args=", 0) == 0 &&
        args[i].find_first_not_of(" \t\n\r", 16) == std::string::npos) {
      if (mpi.rank() == 0)
        std::cerr << "scalescope: error: --megatron-args: the launch line is empty (was the file "
                     "or variable it came from empty?)\n";
      return 1;
    }
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
  std::string sandbox_program, sandbox_record;
  double sandbox_timeout = 600;
  run->add_option("--sandbox-program", sandbox_program,
                  "Hybrid run with the user's own program: after the replay, 'PROGRAM ARGS' runs "
                  "as sandbox rank --sandbox (default 0) of the experiment's world, its "
                  "torch.distributed groups scalescope's backend; its calls against the graph's "
                  "in OUT/sandbox-program.json");
  run->add_option("--sandbox-record", sandbox_record,
                  "Hybrid run with a program recorded earlier (the sandbox-program.json of a "
                  "--sandbox-program run elsewhere: a GPU's, its ops timed there) instead of "
                  "running it again");
  run->add_option("--sandbox-timeout", sandbox_timeout,
                  "--sandbox-program: the program's wall-clock limit in seconds (default 600)")
      ->check(CLI::PositiveNumber);
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
  gcmd->add_flag("-q,--quiet", quiet, "No progress line (Chakra import)");

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
  app::CaptureOptions cap;
  auto* ccmd = app.add_subcommand(
      "capture", "Trace a PyTorch model's block and outer graph into capture.h5 (docs/flint.md)");
  auto* cmodel = ccmd->add_option("model", cap.model, "path/to/file.py:ClassName");
  auto* cfactory = ccmd->add_option(
      "--factory", cap.factory,
      "path/to/file.py:FUNCTION: a function of no arguments returning the module (or the module "
      "and example inputs)");
  cmodel->excludes(cfactory);
  ccmd->add_option("--args", cap.args, "YAML mapping of constructor arguments")->excludes(cfactory);
  ccmd->add_option("--seq", cap.seq,
                   "Sequence length (default: a factory's example inputs, else 4096; the "
                   "inputs must agree with it)")
      ->check(CLI::PositiveNumber);
  ccmd->add_option("--batch", cap.batch,
                   "Micro-batch size (default: a factory's example inputs, else 1; the inputs "
                   "must agree with it)")
      ->check(CLI::PositiveNumber);
  ccmd->add_option("--dtype", cap.dtype, "bf16 (default), fp16 or fp32");
  ccmd->add_option("--blocks", cap.blocks,
                   "Dotted path of the nn.ModuleList of repeated blocks (default: the largest "
                   "one of modules of one class in the module tree)");
  ccmd->add_flag("--same-blocks", cap.same_blocks,
                 "The blocks run different ops (sliding-window and full-attention layers): "
                 "cost every one as the first, said in the capture and its summaries (without "
                 "it such a model is refused)");
  ccmd->add_option("--hf-config", cap.hf_config,
                   "A Hugging Face config.json: the model built from it (no weights) and "
                   "tensor-parallelized by PyTorch's DTensor at --tp in a fake process group of "
                   "--world ranks (scripts/capture/capture_hf.py)");
  ccmd->add_option("--world", cap.world,
                   "Ranks of the fake process group of a DTensor capture (--hf-config, or "
                   "--factory FILE:FUNCTION(layers) returning the module and its shape keys, "
                   "with --parallelize)")
      ->check(CLI::PositiveNumber);
  ccmd->add_flag("--sp", cap.sp, "DTensor capture: sequence parallelism");
  ccmd->add_flag("--fsdp", cap.fsdp,
                 "DTensor capture: FSDP2 (fully_shard) on the layers over the dp mesh dimension "
                 "as torchtitan applies it; its parameter groups are recorded");
  ccmd->add_option("--ep", cap.ep,
                   "DTensor capture of an MoE config: its base_model_ep_plan applied by "
                   "transformers' apply_expert_parallelism at this EP degree (a multiple of "
                   "--tp), tokens exchanged by all-to-all under balanced routing")
      ->check(CLI::PositiveNumber);
  ccmd->add_option("--layers", cap.layers,
                   "With --hf-config: decoder layers (default: the config's)")
      ->check(CLI::PositiveNumber);
  ccmd->add_option("--parallelize", cap.parallelize,
                   "With --hf-config: FILE.py:FUNCTION(model, mesh) that parallelizes the model "
                   "as the user's training script does (mesh dims dp, tp), instead of the "
                   "config's base_model_tp_plan");
  ccmd->add_option("-o,--output", cap.out, "capture.h5 path")->required();
  ccmd->add_flag("--summary", cap.summary,
                 "Print per block the ops, GEMM FLOPs, the TP plan and its collectives, and the "
                 "totals against 6·N·tokens");
  ccmd->add_option("--tp", cap.tp,
                   "TP degree the summary lowers the plan at (default 2); with --hf-config, the "
                   "degree DTensor parallelizes at")
      ->check(CLI::PositiveNumber);
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
  ecmd->add_flag("-q,--quiet", quiet, "No progress line");
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
  bool sweep_replay_unfit = false, sweep_resume = false;
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
  scmd->add_flag("--resume", sweep_resume,
                 "Continue an interrupted sweep of the same configurations in the same directory "
                 "(its finished points are kept as they finish)");
  scmd->add_flag("-q,--quiet", quiet, "Print nothing on success");

  std::string report_dir, report_out;
  auto* rcmd = app.add_subcommand(
      "report", "Write one self-contained HTML page of a run or a sweep (scripts/post/report.py)");
  rcmd->add_option("dir", report_dir, "A run's output directory or a sweep's")->required();
  rcmd->add_option("-o,--output", report_out, "HTML file (default DIR/report.html)");
  std::vector<std::string> compare_dirs;
  std::string compare_out;
  CLI::App* cmpcmd = app.add_subcommand(
      "compare",
      "Runs side by side, differences against the first: headline, time breakdown, critical "
      "path, stages, the ranks and ops that moved most; a run made with --whatif alone against "
      "its baseline (scripts/post/compare_runs.py)");
  cmpcmd->add_option("runs", compare_dirs, "Run output directories (the first is the reference)")
      ->required();
  cmpcmd->add_option("-o,--output", compare_out, "HTML file (default LAST_RUN/compare.html)");

  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*ecmd)
      return app::export_chakra_command(export_graph, export_prefix, export_classes,
                                        export_metadata_node, quiet);
    if (*scmd)
      return app::sweep_command(mpi, sweep_config, sweep_overrides, megatron_args, sweep_vary,
                                sweep_search, sweep_out, sweep_replay_unfit, sweep_top, quiet,
                                sweep_resume);
    if (*bcmd)
      return app::chakra_microbench_command(bench_kind, bench_prefix, bench_ranks, bench_bytes);
    if (*rcmd) return app::report_command(report_dir, report_out);
    if (*cmpcmd) return app::compare_command(compare_dirs, compare_out);
    if (*run && !chakra_prefix.empty()) {
      if (!config.empty() || !graph_path.empty() || !megatron_args.empty())
        throw_input("scalescope run --chakra: give no CONFIG, --graph or --megatron-args");
      return app::run_chakra_command(mpi, chakra_prefix, comm_groups, expand, overrides, out,
                                     quiet);
    }
    if (*gcmd && !chakra_prefix.empty()) {
      if (!graph_config.empty() || !megatron_args.empty())
        throw_input("scalescope graph --chakra: give no CONFIG or --megatron-args");
      return app::graph_chakra_command(chakra_prefix, graph_out, comm_groups, expand,
                                       graph_overrides, quiet);
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
      if (!sandbox_program.empty() && !sandbox_record.empty())
        throw_input("give --sandbox-program or --sandbox-record, not both");
      if (!sandbox_program.empty() || !sandbox_record.empty()) {
        // The user's program as a sandbox rank (issue 40; docs/sandbox-program.md): the program
        // on process 0 first, then the replay with it (every process, whichever engine).
        if (sandbox.size() > 1 || !replay_path.empty() || !graph_path.empty() || config.empty() ||
            !whatif_texts.empty() || rollback_check)
          throw_input(
              "--sandbox-program / --sandbox-record take an experiment CONFIG and at most one "
              "--sandbox rank (no --graph, --replay-measurements, --whatif or --rollback-check)");
        return app::sandbox_program_command(mpi, config, overrides, megatron_args, out,
                                            sandbox.empty() ? 0 : sandbox.front(), sandbox_program,
                                            sandbox_record, sandbox_timeout, quiet);
      }
      return app::run_command(mpi, config, graph_path, out, overrides, megatron_args, quiet,
                              rollback_check, sandbox, replay_path, whatif_texts);
    }
    if (*ccmd) return app::capture_command(cap);
    if (*pcmd)
      return app::profile_command(profile_config, profile_overrides, megatron_args, profile_list,
                                  profile_import, profile_backend, op_scale, profile_out);
    const std::string& cfg = *mcmd ? memory_config : graph_config;
    if (cfg.empty() && megatron_args.empty())
      throw_input("scalescope {}: give an experiment CONFIG or --megatron-args \"…\"",
                  *mcmd ? "memory" : "graph");
    if (*mcmd) return app::memory_command(memory_config, memory_overrides, megatron_args);
    return app::graph_command(graph_config, graph_out, graph_overrides, megatron_args);
  } catch (const InputError& e) {
    // Input is read identically by every process, so every process fails here; one reports.
    if (mpi.rank() == 0) std::cerr << "scalescope: error: " << e.what() << "\n";
  } catch (const IoError& e) {
    if (mpi.rank() == 0) std::cerr << "scalescope: error: " << e.what() << "\n";
  } catch (const std::bad_alloc&) {
    // Beyond the checked estimates (emu: the replay's per-rank state): still one line.
    std::cerr << "scalescope: error: out of memory on rank " << mpi.rank()
              << " (std::bad_alloc): the job needs more memory than this machine has; replay "
                 "fewer ranks (run.replicas: representative) or use more processes\n";
    if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
  } catch (const std::exception& e) {
    std::cerr << "scalescope: internal error (rank " << mpi.rank() << "): " << e.what() << "\n";
    if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);  // the others may wait in a collective
  }
  return 1;
}
