#pragma once
/// The experiment configuration: YAML (documented key by key in docs/config.md), with presets,
/// Hugging Face config.json models and command-line `--set key.path=value` overrides.
#include <cstdint>
#include <string>
#include <vector>

#include "cost/cluster_spec.hpp"
#include "cost/network_model.hpp"
#include "emu/whatif.hpp"
#include "explore/sweep.hpp"
#include "workload/model_spec.hpp"
#include "workload/parallel_plan.hpp"

namespace scalescope::io {

struct RunSpec {
  /// sequential | optimistic | conservative | auto (the engine each means: emu::engine_kind)
  std::string engine = "auto";
  std::vector<std::uint32_t> trace_ranks{0};  ///< ranks whose timeline and memory are recorded
  std::string output = "out";                 ///< output directory
  bool coalesce_local_ops = true;             ///< advance local compute chains inside one event
  std::string partition = "block";            ///< optimistic engine: block | metis
  /// Optimistic engine: no event runs more than this past GVT (simulated µs); 0: unbounded.
  double optimism_window_us = 0;
  std::string on_oom = "warn";  ///< capacity check fails: warn | fail
  /// Send/recv: rendezvous (NCCL's P2P: a transfer starts when both ends are posted) | eager
  /// (ASTRA-sim's: a send completes after its transfer; the default for foreign Chakra traces).
  std::string p2p = "rendezvous";
  /// all (every rank replayed, the default) | representative (emu/replicas.hpp: where the
  /// data-parallel replicas are provably identical, one is replayed and the others copy it).
  std::string replicas = "all";
  /// Hybrid runs: ranks that execute their kernels for real (docs/kernels.md "Sandbox ranks").
  std::vector<std::uint32_t> sandbox_ranks;
  /// auto (cuda where scalescope-kernels is built and a GPU is visible, else host) | host
  /// (Kokkos, shrunk shapes) | cuda
  std::string sandbox_backend = "auto";
  double sandbox_op_scale = 0.05;       ///< host backend: every dimension times this
  bool calibrate_from_sandbox = false;  ///< the sandbox ranks' classes take their durations
};

/// Where compute-op durations come from besides the roofline model.
struct CostSpec {
  /// A profile database (profile.h5, docs/kernels.md): measured times by kernel signature;
  /// resolved against the experiment file's directory. Empty: the roofline model alone.
  std::string profile;
};

/// The largest world an experiment may name (cluster.num_gpus, and TP·CP·PP·DP): 2^24 GPUs,
/// 128 times the 131,072 the engines are benchmarked at (docs/engine.md). Ranks are 32-bit in
/// the graph; the bound keeps every product of parallel sizes far inside int64.
inline constexpr std::int64_t kMaxWorld = std::int64_t{1} << 24;

struct ExperimentConfig {
  std::string path;  ///< the YAML file it was read from
  workload::ModelSpec model;
  workload::ParallelPlan parallel;  ///< data_parallel_size resolved (never 0 after loading)
  workload::TrainingSpec training;
  cost::ClusterSpec cluster;  ///< num_gpus resolved, presets merged
  RunSpec run;
  CostSpec cost;
  cost::NetworkOptions network;  ///< `network:` (model, NCCL's forced algorithm and protocol)
  std::string resolved_yaml;     ///< the fully merged configuration, emitted as YAML
};

/// Reads an experiment file, merges presets (`model.preset`, `model.hf_config`,
/// `cluster.preset`), applies overrides ("key.path=value", value parsed as YAML), checks every
/// key and the plan. Throws InputError whose one-line message names the file and the key.
///
/// `megatron_args` is a Megatron-LM launch line (`--num-layers 80 --tensor-model-parallel-size 8
/// …`, docs/config.md). Precedence, lowest first: the file's sections, the file's own
/// `megatron_args:` line, `megatron_args`, then `overrides`. An empty `path` reads no file: the
/// experiment is the launch line and the overrides alone.
ExperimentConfig load_experiment(const std::string& path,
                                 const std::vector<std::string>& overrides = {},
                                 const std::string& megatron_args = {});

/// Checks one "section.key=value" override as load_experiment would apply it: a known section
/// and key and a value that parses as YAML (the plan is not checked). Throws InputError naming
/// `experiment` and the override.
void check_override(const std::string& text, const std::string& experiment);

/// An experiment file's `sweep:` section (docs/config.md "Sweeps"): `vary`, an ordered mapping
/// of section.key to a list of values (each value as `--set` would read it; null unsets), first
/// key outermost; `search` (e.g. parallel). Empty when the file has none. Throws InputError
/// naming the file, line and key.
struct SweepSpec {
  std::vector<explore::Axis> axes;
  std::string search;
};
SweepSpec read_sweep_spec(const std::string& path);

/// The what-ifs of an experiment file's top-level `whatif:` list and of `--whatif` texts (each a
/// YAML mapping such as "slow_gpu: {ranks: [3], factor: 1.5}"; docs/config.md "What-if"). Throws
/// InputError naming the file, line and key, or the command-line text.
std::vector<emu::WhatIf> read_whatifs(const std::string& path,
                                      const std::vector<std::string>& command_line);

/// Reads a Hugging Face config.json (Llama / Mistral / Qwen2 keys) into a ModelSpec.
workload::ModelSpec load_hf_config(const std::string& path);

}  // namespace scalescope::io
