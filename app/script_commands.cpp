// The commands whose front end is a Python script of this checkout: `capture` (PyTorch's tracer,
// scripts/capture/capture.py, run by scripts/capture/python: $SCALESCOPE_PYTHON, else the pinned
// PyTorch 2.x venv, else Debian's /usr/bin/python3) and `report` (scripts/post/report.py, Debian's
// /usr/bin/python3).
#include <sys/wait.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "app/commands.hpp"
#include "app/pipeline.hpp"
#include "core/error.hpp"
#include "cost/cost_model.hpp"
#include "emu/emulation.hpp"
#include "graph/expand.hpp"
#include "io/capture_h5.hpp"
#include "io/config.hpp"
#include "io/graph_h5.hpp"
#include "workload/capture.hpp"

namespace scalescope::app {

namespace fs = std::filesystem;

namespace {

/// Runs a command line through the shell; its exit status (1 when it did not exit).
int shell(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 1;
}

/// A script of this checkout (SCALESCOPE_SOURCE_DIR), or a one-line error when it is missing.
fs::path checkout_script(const std::string& command, const fs::path& relative) {
  const fs::path script = fs::path(SCALESCOPE_SOURCE_DIR) / relative;
  if (!fs::exists(script))
    throw_input(
        "scalescope {}: {} is missing (this binary runs the scripts of the checkout it "
        "was built from)",
        command, script.string());
  return script;
}

/// The record's tensors ([[shape, dtype], …]).
std::vector<workload::AtenTensor> aten_tensors(const nlohmann::json& list) {
  std::vector<workload::AtenTensor> ts;
  for (const auto& t : list)
    ts.push_back({t.at(0).get<std::vector<std::int64_t>>(), t.at(1).get<std::string>()});
  return ts;
}

/// A recorded attention op's is_causal (its fifth element, {"causal": …}).
bool causal_of(const nlohmann::json& entry) {
  return entry.size() > 4 && entry.at(4).is_object() && entry.at(4).value("causal", false);
}

/// The sandbox program's iteration `sequence` (its ATen ops and, as {"call": seq}, its
/// collectives, scripts/sandbox/scalescope_pg.py's OpRecorder) as the program of every rank of a
/// `world`-rank job (the identical-replica assumption: every rank runs it): one kernel per ATen
/// op on the compute stream (workload::eager_aten_op); each collective on its stream after the
/// op before it; an op that first reads a collective's output waits for it (an op without a
/// kernel, a view, passes its waits to the next kernel); `.item()` (_local_scalar_dense) makes
/// the host wait. nullopt, with `why`, where a collective runs over a group other than the
/// world (not replayed yet).
std::optional<graph::SlicedGraph> program_graph(const nlohmann::json& sequence,
                                                const nlohmann::json& calls, std::uint32_t world,
                                                std::string& why) {
  graph::RankProgram p;
  p.name = "sandbox_program";
  std::map<std::int64_t, std::uint32_t> collective;  // record seq → op
  std::vector<std::uint32_t> waits;
  std::int64_t last = -1;  // the last compute op
  for (const auto& e : sequence) {
    if (e.is_object()) {
      const nlohmann::json& c = calls.at(e.at("call").get<std::size_t>());
      if (c.at("group_size").get<std::uint32_t>() != world) {
        why = fmt::format(
            "its collective #{} ({}) runs over {} of the {} ranks: groups other "
            "than the world are not replayed yet",
            c.at("seq").get<std::int64_t>(), c.at("kind").get<std::string>(),
            c.at("group_size").get<std::uint32_t>(), world);
        return std::nullopt;
      }
      const std::string kind = c.at("kind").get<std::string>();
      if (kind == "send" || kind == "recv") {
        why = "point-to-point calls are not replayed yet";
        return std::nullopt;
      }
      // A broadcast moves the root's S bytes to every rank: an all-gather's traffic; a barrier
      // is PyTorch's one-element all-reduce.
      const graph::Op op = graph::world_collective(
          kind == "all_gather" || kind == "broadcast" ? graph::OpKind::AllGather
          : kind == "reduce_scatter"                  ? graph::OpKind::ReduceScatter
          : kind == "all_to_all"                      ? graph::OpKind::AllToAll
                                                      : graph::OpKind::AllReduce,
          std::max(4.0, c.at("bytes").get<double>()));
      std::vector<std::uint32_t> deps;
      if (last >= 0) deps.push_back(static_cast<std::uint32_t>(last));
      collective[c.at("seq").get<std::int64_t>()] = p.add(op, deps);
      continue;
    }
    for (const auto& w : e.at(3))
      if (const auto it = collective.find(w.get<std::int64_t>()); it != collective.end())
        waits.push_back(it->second);
    const std::string name = e.at(0).get<std::string>();
    std::optional<graph::Op> op;
    if (name.rfind("_local_scalar_dense", 0) == 0) {
      op = graph::Op{};  // the copy of one scalar to the host, which waits for it
      op->kind = graph::OpKind::Elementwise;
      op->name = graph::OpName::AtenOp;
      op->mem_bytes = 8;
      op->host_sync = 1;
    } else {
      op =
          workload::eager_aten_op(name, aten_tensors(e.at(1)), aten_tensors(e.at(2)), causal_of(e));
    }
    if (!op) continue;
    op->phase = graph::Phase::Other;
    last = p.add(*op, waits);
    waits.clear();
  }
  return graph::replicated_world(std::move(p), world);
}

/// `s` as one single-quoted shell word.
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

}  // namespace

void check_sandbox_program(const std::string& config_path,
                           const std::vector<std::string>& overrides,
                           const std::string& megatron_args, std::uint32_t rank) {
  checkout_script("run --sandbox-program", fs::path("scripts") / "sandbox" / "run_program.py");
  const io::ExperimentConfig c = io::load_experiment(config_path, overrides, megatron_args);
  if (static_cast<std::int64_t>(rank) >= c.parallel.world())
    throw_input("--sandbox {}: the experiment {} has {} ranks", rank, c.path, c.parallel.world());
}

int sandbox_program_command(const std::string& config_path,
                            const std::vector<std::string>& overrides,
                            const std::string& megatron_args, const std::string& out_dir,
                            std::uint32_t rank, const std::string& program, double timeout_s) {
  const fs::path runner =
      checkout_script("run --sandbox-program", fs::path("scripts") / "sandbox" / "run_program.py");
  const fs::path python =
      checkout_script("run --sandbox-program", fs::path("scripts") / "capture" / "python");
  io::ExperimentConfig c = io::load_experiment(config_path, overrides, megatron_args);
  const fs::path out = out_dir.empty() ? fs::path(c.run.output) : fs::path(out_dir);
  const std::int64_t world = c.parallel.world();
  // Rank `rank`'s ops in the experiment's graph, for the comparison.
  const fs::path graph = out / "sandbox-graph.h5";
  const graph::SlicedGraph g = build(c);
  io::write_graph_h5(g, graph.string());
  const std::string cmd = fmt::format(
      "{} {} --world {} --rank {} --gpus-per-node {} --timeout {} --graph {} --summary {} -o {} "
      "-- {}",
      shell_quote(python.string()), shell_quote(runner.string()), world, rank,
      c.cluster.gpus_per_node, timeout_s, shell_quote(graph.string()),
      shell_quote((out / "summary.json").string()),
      shell_quote((out / "sandbox-program.json").string()), shell_quote(program));
  if (const int rc = shell(cmd); rc != 0) return rc;
  // The program's own ops of its last iteration, one kernel each (eager), costed for the
  // cluster's GPU, against the compute of rank `rank`'s template (one iteration).
  const fs::path report_path = out / "sandbox-program.json";
  nlohmann::json report;
  {
    std::ifstream f(report_path);
    report = nlohmann::json::parse(f);
  }
  nlohmann::json last;
  double program_peak = 0;
  for (const auto& call : report.at("calls"))
    if (call.at("kind") == "step") {
      last = call.value("ops", nlohmann::json::array());
      program_peak = call.value("peak_bytes", 0.0);
    }
  // The program's iteration replayed on every rank of the world (identical replicas).
  std::string why;
  const std::optional<graph::SlicedGraph> pg =
      program_graph(last, report.at("calls"), static_cast<std::uint32_t>(world), why);
  double program_iteration = 0;
  if (pg) {
    const ReplaySetup setup(c);
    program_iteration =
        static_cast<double>(emu::emulate(*pg, setup.costs, setup.options).summary.iteration_time) *
        1e-9;
  }
  double replay_iteration = 0, replay_peak = 0;
  if (std::ifstream f(out / "summary.json"); f) {
    const nlohmann::json summary = nlohmann::json::parse(f);
    replay_iteration = summary.value("iteration_time_s", 0.0);
    replay_peak = summary.value("peak_memory_bytes", 0.0);
  }
  const cost::CostModel model(c.cluster, c.network);
  // Per op kind (gemm, attention, elementwise, …): kernels, GPU time and FLOPs, the program's
  // and the graph's rank's: where their compute differs.
  struct Kind {
    double kernels = 0, seconds = 0, flops = 0;
  };
  std::map<std::string, std::array<Kind, 2>> by_kind;
  double host = 0;
  const auto add = [&](const graph::Op& op, int side) {
    Kind& k = by_kind[std::string(graph::op_kind_name(op.kind))][static_cast<std::size_t>(side)];
    k.kernels += 1;
    k.seconds += static_cast<double>(model.compute_ns(op)) * 1e-9;
    k.flops += op.flops;
  };
  for (const auto& entry : last) {
    if (entry.is_object()) continue;  // a collective
    const auto op =
        workload::eager_aten_op(entry.at(0).get<std::string>(), aten_tensors(entry.at(1)),
                                aten_tensors(entry.at(2)), causal_of(entry));
    if (!op) continue;
    add(*op, 0);
    host += static_cast<double>(model.host_ns(*op)) * 1e-9;
  }
  for (const graph::Op& op : g.program_of(rank).ops)
    if (!graph::is_communication(op.kind)) add(op, 1);
  Kind total[2];
  nlohmann::json kinds = nlohmann::json::object();
  for (const auto& [name, sides] : by_kind) {
    for (int side = 0; side < 2; ++side) {
      total[side].kernels += sides[static_cast<std::size_t>(side)].kernels;
      total[side].seconds += sides[static_cast<std::size_t>(side)].seconds;
    }
    kinds[name] = {
        {"program",
         {{"kernels", sides[0].kernels}, {"seconds", sides[0].seconds}, {"flops", sides[0].flops}}},
        {"graph",
         {{"kernels", sides[1].kernels},
          {"seconds", sides[1].seconds},
          {"flops", sides[1].flops}}}};
  }
  const double kernels = total[0].kernels, compute = total[0].seconds;
  const double graph_kernels = total[1].kernels, graph_compute = total[1].seconds;
  const double gemm = by_kind.count("gemm") ? by_kind["gemm"][0].flops : 0.0;
  report["compute"] = {{"gpu", model.gpu().name},
                       {"program_kernels", kernels},
                       {"program_seconds", compute},
                       {"program_host_seconds", host},
                       {"program_gemm_flops", gemm},
                       {"graph_kernels", graph_kernels},
                       {"graph_seconds", graph_compute},
                       {"by_kind", kinds},
                       {"note",
                        "the program's last iteration, one kernel per ATen op (eager), GEMMs at "
                        "the GPU's bf16 rate whatever dtype they ran in on this machine"}};
  report["memory"] = {{"program_peak_bytes", program_peak},
                      {"replay_peak_bytes", replay_peak},
                      {"note",
                       "the program's own allocations on this machine (the storages its ops "
                       "made, while a tensor holds them), in the dtypes it ran in, at their peak "
                       "in its last iteration; the replay's: the modelled peak of the rank"}};
  report["iteration"] = {
      {"program_seconds", pg ? nlohmann::json(program_iteration) : nlohmann::json(nullptr)},
      {"replay_seconds", replay_iteration},
      {"world", world},
      {"note", pg ? "the program's last iteration run by every rank (identical replicas), "
                    "replayed by the sequential engine"
                  : "not replayed: " + why}};
  const fs::path tmp = report_path.string() + ".tmp";
  {
    std::ofstream f(tmp);
    f << report.dump(1);
  }
  fs::rename(tmp, report_path);
  std::cout << fmt::format(
      "  compute, the program's last iteration on {}: {:.0f} kernels, {:.4g} ms (host issue {:.4g} "
      "ms); the graph's rank {}: {:.0f} kernels, {:.4g} ms\n",
      model.gpu().name, kernels, compute * 1e3, host * 1e3, rank, graph_kernels,
      graph_compute * 1e3);
  for (const auto& [name, sides] : by_kind)
    std::cout << fmt::format(
        "    {:<12} program {:>5.0f} kernels {:>9.4g} ms {:>10.4g} FLOPs | graph {:>5.0f} kernels "
        "{:>9.4g} ms {:>10.4g} FLOPs\n",
        name, sides[0].kernels, sides[0].seconds * 1e3, sides[0].flops, sides[1].kernels,
        sides[1].seconds * 1e3, sides[1].flops);
  std::cout << fmt::format(
      "  memory, the program's peak in its last iteration: {:.4g} GiB (its own allocations here, "
      "in the dtypes it ran in); the replay's peak: {:.4g} GiB\n",
      program_peak / (1 << 30), replay_peak / (1 << 30));
  if (pg)
    std::cout << fmt::format(
        "  iteration, the program run by all {} ranks: {:.4g} ms simulated; the experiment's "
        "replay: {:.4g} ms\n",
        world, program_iteration * 1e3, replay_iteration * 1e3);
  else
    std::cout << "  iteration of the program not replayed: " << why << "\n";
  return 0;
}

int capture_command(const CaptureOptions& o) {
  const fs::path script =
      checkout_script("capture", fs::path("scripts") / "capture" / "capture.py");
  const fs::path python = checkout_script("capture", fs::path("scripts") / "capture" / "python");
  if (!o.hf_config.empty() || o.world > 0) {
    // Parallelized by PyTorch's DTensor (scripts/capture/capture_hf.py): a Hugging Face config,
    // or a factory with --parallelize (torchtitan's model and apply_tp).
    if (!o.model.empty() || (!o.hf_config.empty() && !o.factory.empty()))
      throw_input("scalescope capture: give --hf-config or --factory with --world, not both");
    if (o.world <= 0) throw_input("scalescope capture: --hf-config needs --world N");
    if (!o.factory.empty() && o.parallelize.empty())
      throw_input("scalescope capture: --factory with --world needs --parallelize FILE:FUNCTION");
    const fs::path hf =
        checkout_script("capture", fs::path("scripts") / "capture" / "capture_hf.py");
    std::string cmd =
        fmt::format("'{}' '{}' {}'{}' --world {} --tp {} --seq {} --batch {} -o '{}'",
                    python.string(), hf.string(), o.factory.empty() ? "" : "--factory ",
                    o.factory.empty() ? o.hf_config : o.factory, o.world, o.tp,
                    o.seq > 0 ? o.seq : 4096, o.batch > 0 ? o.batch : 1, o.out);
    if (o.sp) cmd += " --sp";
    if (o.fsdp) cmd += " --fsdp";
    if (o.layers > 0) cmd += fmt::format(" --layers {}", o.layers);
    if (o.ep > 0) cmd += fmt::format(" --ep {}", o.ep);
    if (!o.parallelize.empty()) cmd += fmt::format(" --parallelize '{}'", o.parallelize);
    const int code = shell(cmd);
    if (code != 0 || !o.summary) return code;
    const workload::Capture captured = io::read_capture_h5(o.out);
    std::cout << io::format_capture_summary(captured, workload::TpPlan{}, o.tp);
    return 0;
  }
  if (o.sp || o.fsdp || o.layers > 0 || o.ep > 0 || !o.parallelize.empty())
    throw_input(
        "scalescope capture: --sp, --fsdp, --ep, --layers and --parallelize apply to a DTensor "
        "capture "
        "(--hf-config, or --factory with --world)");
  if (o.model.empty() == o.factory.empty())
    throw_input("scalescope capture: give path/to/file.py:ClassName or --factory FILE:FUNCTION");
  std::string cmd = fmt::format("'{}' '{}' {}'{}' --dtype '{}' -o '{}'", python.string(),
                                script.string(), o.factory.empty() ? "" : "--factory ",
                                o.factory.empty() ? o.model : o.factory, o.dtype, o.out);
  if (o.seq > 0) cmd += fmt::format(" --seq {}", o.seq);
  if (o.batch > 0) cmd += fmt::format(" --batch {}", o.batch);
  if (!o.blocks.empty()) cmd += fmt::format(" --blocks '{}'", o.blocks);
  if (o.same_blocks) cmd += " --same-blocks";
  if (!o.args.empty()) cmd += fmt::format(" --args '{}'", o.args);
  const int code = shell(cmd);
  if (code != 0 || !o.summary) return code;
  const workload::Capture captured = io::read_capture_h5(o.out);
  std::cout << io::format_capture_summary(captured, workload::capture_default_plan(captured, o.out),
                                          o.tp);
  return 0;
}

int report_command(const std::string& dir, const std::string& out) {
  const fs::path script = checkout_script("report", fs::path("scripts") / "post" / "report.py");
  std::string cmd = fmt::format("/usr/bin/python3 '{}' '{}'", script.string(), dir);
  if (!out.empty()) cmd += fmt::format(" -o '{}'", out);
  return shell(cmd);
}

}  // namespace scalescope::app
