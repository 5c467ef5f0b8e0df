// The commands of `scalescope` (mpi_drivers/scalescope.cpp parses the arguments and calls one).
// Each returns the process's exit status and throws InputError / IoError with a one-line
// message for bad input; every process of the run calls the same command.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "app/session.hpp"

namespace scalescope::app {

struct SandboxProgram;

/// `scalescope run` (app/run_command.cpp): CONFIG (or --megatron-args, or the configuration a
/// --graph graph.h5 carries), replayed once; with `sandbox` ranks a hybrid run, with
/// `replay_path` its stored measurements, with `whatif_texts` against a baseline; with `program`
/// (sandbox_program_command) the user's program on its rank where it fits the graph.
int run_command(const MpiWorld& mpi, const std::string& config_path, const std::string& graph_path,
                const std::string& out_override, const std::vector<std::string>& overrides,
                const std::string& megatron_args, bool quiet, bool rollback_check,
                const std::vector<std::uint32_t>& sandbox, const std::string& replay_path,
                const std::vector<std::string>& whatif_texts, SandboxProgram* program = nullptr);

/// `scalescope run CONFIG --sandbox-program 'PROGRAM ARGS' [--sandbox R]`
/// (app/sandbox_program.cpp): the user's own program runs as sandbox rank `rank` of the
/// experiment's world through scripts/sandbox/run_program.py (its process groups scalescope's
/// backend; process 0 only), its recorded calls set against rank `rank`'s ops in the
/// experiment's graph (`out_dir`/sandbox-program.json); then the experiment is replayed (every
/// process, whichever engine) with rank `rank` running the program's last iteration where its
/// collectives are the graph's, and the program's figures are reported beside the pure
/// replay's. `timeout_s`: the program's wall-clock limit. With `record` (an earlier run's
/// sandbox-program.json) its calls are taken instead of running the program.
/// The checks that need neither the program nor a replay (the rank within the world), made
/// first so that a bad rank leaves no output.
void check_sandbox_program(const std::string& config_path,
                           const std::vector<std::string>& overrides,
                           const std::string& megatron_args, std::uint32_t rank);
int sandbox_program_command(const MpiWorld& mpi, const std::string& config_path,
                            const std::vector<std::string>& overrides,
                            const std::string& megatron_args, const std::string& out_dir,
                            std::uint32_t rank, const std::string& program,
                            const std::string& record, double timeout_s, bool quiet);

/// `scalescope run --chakra PREFIX` (app/chakra_commands.cpp).
int run_chakra_command(const MpiWorld& mpi, const std::string& prefix,
                       const std::string& comm_groups, const std::string& expand,
                       const std::vector<std::string>& overrides, const std::string& out,
                       bool quiet);

/// `scalescope graph CONFIG -o graph.h5` (app/graph_memory.cpp).
int graph_command(const std::string& config_path, const std::string& out,
                  const std::vector<std::string>& overrides, const std::string& megatron_args);

/// `scalescope graph --chakra PREFIX -o graph.h5` (app/chakra_commands.cpp).
int graph_chakra_command(const std::string& prefix, const std::string& out,
                         const std::string& comm_groups, const std::string& expand,
                         const std::vector<std::string>& overrides, bool quiet);

/// `scalescope memory CONFIG` (app/graph_memory.cpp).
int memory_command(const std::string& config_path, const std::vector<std::string>& overrides,
                   const std::string& megatron_args);

/// `scalescope profile` (app/profile_command.cpp).
int profile_command(const std::string& config_path, const std::vector<std::string>& overrides,
                    const std::string& megatron_args, const std::string& list_path,
                    const std::string& import_path, const std::string& backend, double op_scale,
                    const std::string& out);

/// `scalescope sweep` (app/sweep_command.cpp).
int sweep_command(const MpiWorld& mpi, const std::string& config_path,
                  const std::vector<std::string>& base, const std::string& megatron_args,
                  const std::vector<std::string>& vary, const std::string& search,
                  const std::string& out, bool replay_unfit, std::size_t top, bool quiet,
                  bool resume);

/// `scalescope export-chakra graph.h5 PREFIX` (app/chakra_commands.cpp).
int export_chakra_command(const std::string& graph_path, const std::string& prefix, bool classes,
                          bool metadata_node, bool quiet);

/// `scalescope chakra-microbench KIND PREFIX` (app/chakra_commands.cpp): ASTRA-sim's collective
/// microbenchmark as Chakra ET files.
int chakra_microbench_command(const std::string& kind, const std::string& prefix,
                              std::uint32_t ranks, double bytes);

/// `scalescope capture` (app/script_commands.cpp): the PyTorch front end.
struct CaptureOptions {
  std::string model;    ///< path/to/file.py:ClassName
  std::string factory;  ///< path/to/file.py:FUNCTION (instead of `model`)
  std::string args;     ///< YAML constructor arguments
  std::string out;
  std::string blocks;
  std::string dtype = "bf16";
  std::int64_t seq = 0;    ///< 0: not given (a factory's example inputs, else 4096)
  std::int64_t batch = 0;  ///< 0: not given (a factory's example inputs, else 1)
  std::int64_t tp = 2;     ///< the TP degree the summary lowers the plan at
  bool summary = false;
  bool same_blocks = false;  ///< blocks that run different ops: cost all as the first
  /// A Hugging Face config.json parallelized by PyTorch's DTensor (scripts/capture/capture_hf.py)
  /// at TP `tp` in a fake world of `world` ranks, with SP, `layers` decoder layers (0: the
  /// config's), and the user's parallelize function (FILE.py:FUNCTION) instead of the config's
  /// base_model_tp_plan.
  std::string hf_config, parallelize;
  std::int64_t world = 0, layers = 0;
  std::int64_t ep = 0;  ///< MoE: the config's base_model_ep_plan at this EP degree (0: none)
  bool sp = false;
  bool fsdp = false;  ///< FSDP2 on the layers over the dp mesh dimension
};
int capture_command(const CaptureOptions& o);

/// `scalescope report DIR [-o FILE]` (app/script_commands.cpp): the HTML report of a run or a
/// sweep, written by scripts/post/report.py.
int report_command(const std::string& dir, const std::string& out);

/// `scalescope compare RUN [RUN …] [-o compare.html]` (app/script_commands.cpp): runs side by
/// side through scripts/post/compare_runs.py; one run made with --whatif against its baseline.
int compare_command(const std::vector<std::string>& dirs, const std::string& out);

}  // namespace scalescope::app
