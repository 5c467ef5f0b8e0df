// `scalescope run CONFIG --sandbox-program 'PROGRAM ARGS' [--sandbox R]` (issue 40,
// docs/sandbox-program.md): the user's own program runs as sandbox rank R of the experiment's
// world (scripts/sandbox/run_program.py, its process groups scalescope's backend), then the
// experiment is replayed with rank R running the program's last iteration where its collectives
// are the graph's, and the program's figures are set beside the pure replay's.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "app/commands.hpp"
#include "app/pipeline.hpp"
#include "app/sandbox.hpp"
#include "app/scripts.hpp"
#include "core/error.hpp"
#include "cost/cost_model.hpp"
#include "emu/emulation.hpp"
#include "graph/expand.hpp"
#include "io/collective.hpp"
#include "io/config.hpp"
#include "io/graph_h5.hpp"
#include "kernels/sandbox.hpp"
#include "workload/capture.hpp"

namespace scalescope::app {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

/// The record's tensors ([[shape, dtype], …]).
std::vector<workload::AtenTensor> aten_tensors(const json& list) {
  std::vector<workload::AtenTensor> ts;
  for (const auto& t : list)
    ts.push_back({t.at(0).get<std::vector<std::int64_t>>(), t.at(1).get<std::string>()});
  return ts;
}

/// A recorded op's extras (its fifth element: {"causal", "alloc", "freed"}), or null.
const json& extras_of(const json& entry) {
  static const json none = json::object();
  return entry.size() > 4 && entry.at(4).is_object() ? entry.at(4) : none;
}

/// The op one recorded ATen op launches (workload::eager_aten_op; `.item()` a one-scalar copy
/// the host waits for), or nullopt for an op without a kernel (a view).
std::optional<graph::Op> kernel_of(const json& entry) {
  const std::string name = entry.at(0).get<std::string>();
  if (name.rfind("_local_scalar_dense", 0) == 0) {
    graph::Op op;  // the copy of one scalar to the host, which waits for it
    op.kind = graph::OpKind::Elementwise;
    op.name = graph::OpName::AtenOp;
    op.mem_bytes = 8;
    op.host_sync = 1;
    return op;
  }
  return workload::eager_aten_op(name, aten_tensors(entry.at(1)), aten_tensors(entry.at(2)),
                                 extras_of(entry).value("causal", false));
}

/// What a recorded communication call (`call`, the record's entry) becomes: an op, or a part of
/// the op the call before it made (a pipeline transfer's receive batched with its send), or
/// neither, with `why`.
struct CallOp {
  std::optional<graph::Op> op;
  bool joins_previous = false;
};
using CollectiveOp = std::function<CallOp(const json& call, std::string& why)>;

/// The program's last iteration as one rank's template, in its order: one kernel per ATen op
/// on the compute stream; each collective (its op from `collective`) on its stream after the op
/// before it; an op that first reads a collective's output waits for it (an op without a
/// kernel passes its waits to the next kernel); `.item()` makes the host wait. Memory from the
/// program's own allocations: what each op's outputs newly hold allocated when it is issued,
/// what was released after it freed when it ends, the bytes live when the iteration began held
/// throughout (static). `measured`: per op, its kernels' time measured on a GPU, −1 where none
/// was. nullopt, with `why`, where a collective has no op.
std::optional<graph::RankProgram> program_template(const SandboxProgram& p,
                                                   const CollectiveOp& collective, std::string& why,
                                                   std::vector<std::int64_t>& measured) {
  measured.clear();
  graph::RankProgram t;
  t.name = "sandbox_program";
  const json& calls = p.report.at("calls");
  std::map<std::int64_t, std::uint32_t> issued;  // record seq → op
  std::vector<std::uint32_t> waits;
  std::int64_t last_compute = -1, last_op = -1, last_communication = -1;
  double static_bytes = p.start_live_bytes, pending_alloc = 0;
  std::int64_t pending_ns = 0;  // GPU time measured since the last kernel
  bool timed = false;
  const auto freed = [&](double bytes) {
    if (last_op >= 0)
      t.ops[static_cast<std::size_t>(last_op)].mem_free += static_cast<std::int64_t>(bytes);
    else
      static_bytes = std::max(0.0, static_bytes - bytes);
  };
  for (const auto& e : p.last) {
    if (e.is_object()) {
      const json& c = calls.at(e.at("call").get<std::size_t>());
      const CallOp made = collective(c, why);
      if (made.joins_previous && last_communication >= 0) {
        issued[c.at("seq").get<std::int64_t>()] = static_cast<std::uint32_t>(last_communication);
        continue;
      }
      if (!made.op) return std::nullopt;
      std::vector<std::uint32_t> deps;
      if (last_compute >= 0) deps.push_back(static_cast<std::uint32_t>(last_compute));
      last_op = last_communication = issued[c.at("seq").get<std::int64_t>()] =
          t.add(*made.op, deps);
      measured.push_back(-1);
      continue;
    }
    for (const auto& w : e.at(3))
      if (const auto it = issued.find(w.get<std::int64_t>()); it != issued.end())
        waits.push_back(it->second);
    const json& x = extras_of(e);
    freed(x.value("freed", 0.0));
    pending_alloc += x.value("alloc", 0.0);
    std::optional<graph::Op> op = kernel_of(e);
    // A view launches nothing; what a GPU timed for it (the gap between two events) is
    // charged to the next kernel.
    if (x.contains("gpu_ns")) {
      pending_ns += x.at("gpu_ns").get<std::int64_t>();
      timed = true;
    }
    if (!op) continue;
    measured.push_back(timed ? pending_ns : -1);
    pending_ns = 0;
    timed = false;
    op->phase = graph::Phase::Other;
    op->mem_alloc = static_cast<std::int64_t>(pending_alloc);
    pending_alloc = 0;
    last_op = last_compute = t.add(*op, waits);
    waits.clear();
  }
  t.static_memory = static_cast<std::int64_t>(static_bytes);
  return t;
}

/// The graph's op kind of a recorded collective, or nullopt for what the graph has none of.
std::optional<graph::OpKind> graph_kind(const std::string& kind) {
  if (kind == "all_reduce") return graph::OpKind::AllReduce;
  if (kind == "all_gather") return graph::OpKind::AllGather;
  if (kind == "reduce_scatter") return graph::OpKind::ReduceScatter;
  if (kind == "all_to_all") return graph::OpKind::AllToAll;
  return std::nullopt;
}

std::string describe_call(const json& c) {
  return fmt::format("#{} ({} of {} B over {} ranks)", c.at("seq").get<std::int64_t>(),
                     c.at("kind").get<std::string>(), c.value("bytes", 0.0),
                     c.at("group_size").get<std::uint32_t>());
}

/// Each recorded group's global ranks, sorted (the world's, recorded as "all", spelt out).
std::map<std::string, std::vector<std::uint32_t>> recorded_groups(const SandboxProgram& p) {
  std::map<std::string, std::vector<std::uint32_t>> groups;
  for (const auto& c : p.report.at("calls")) {
    if (c.at("kind") != "group") continue;
    std::vector<std::uint32_t> ranks;
    if (c.at("ranks").is_string())
      for (std::uint32_t k = 0; k < c.at("group_size").get<std::uint32_t>(); ++k)
        ranks.push_back(k);
    else
      ranks = c.at("ranks").get<std::vector<std::uint32_t>>();
    std::sort(ranks.begin(), ranks.end());
    groups[c.at("group").get<std::string>()] = ranks;
  }
  return groups;
}

/// Whether communicator `c` of `g` has exactly `ranks` (sorted) as members.
bool same_members(const graph::SlicedGraph& g, std::int32_t c,
                  const std::vector<std::uint32_t>& ranks) {
  if (c == graph::kNoComm) return false;
  const auto k = static_cast<std::uint32_t>(c);
  return std::equal(g.comms.members_begin(k), g.comms.members_end(k), ranks.begin(), ranks.end());
}

/// A collective's trace name by its kind and the role of its group.
graph::OpName collective_name(graph::OpKind kind, graph::CommRole role) {
  using graph::CommRole;
  using graph::OpKind;
  using graph::OpName;
  if (kind == OpKind::AllToAll) return OpName::EpDispatch;
  const bool ag = kind == OpKind::AllGather, rs = kind == OpKind::ReduceScatter;
  switch (role) {
    case CommRole::Tp:
      return ag ? OpName::TpAllGather : rs ? OpName::TpReduceScatter : OpName::TpAllReduce;
    case CommRole::Etp:
      return ag ? OpName::EtpAllGather : rs ? OpName::EtpReduceScatter : OpName::TpAllReduce;
    case CommRole::Edp:
      return ag ? OpName::EdpAllGather : rs ? OpName::EdpReduceScatter : OpName::EdpAllReduce;
    default:
      return ag ? OpName::DpAllGather : rs ? OpName::DpReduceScatter : OpName::DpAllReduce;
  }
}

/// The program's iteration run by every rank of the experiment's world (the identical-replica
/// assumption). Each group it talks on is a role: the experiment's where rank p.rank has a
/// communicator with the same members (every rank's group of that role then the graph's), else
/// a free one whose groups are the DeviceMesh translates of the recorded one
/// (graph::mesh_groups). nullopt, with `why`, for point-to-point calls or a group of neither kind.
std::optional<graph::SlicedGraph> replicated_program(const SandboxProgram& p,
                                                     const graph::SlicedGraph& pure,
                                                     std::string& why,
                                                     std::vector<std::int64_t>& measured) {
  using graph::CommRole;
  const std::uint32_t world = pure.world_size;
  const auto groups = recorded_groups(p);
  std::map<std::string, CommRole> role_of_group;
  std::map<CommRole, std::vector<std::vector<std::uint32_t>>> partitions;
  const CollectiveOp op_of = [&](const json& c, std::string& w) -> CallOp {
    const std::string kind = c.at("kind").get<std::string>();
    if (kind == "send" || kind == "recv") {
      w = "point-to-point calls are not replayed with every rank running the program (pipeline "
          "stages run different programs)";
      return {};
    }
    const std::string label = c.at("group").get<std::string>();
    auto it = role_of_group.find(label);
    if (it == role_of_group.end()) {
      const auto members = groups.find(label);
      if (members == groups.end()) {
        w = fmt::format("its collective {} names a group it never created", describe_call(c));
        return {};
      }
      std::optional<CommRole> role;
      for (int r = 1; r < graph::kNumRoles && !role; ++r) {
        const auto cr = static_cast<CommRole>(r);
        if (cr == CommRole::PpNext || cr == CommRole::PpPrev || partitions.count(cr) ||
            !same_members(pure, pure.comm_of(p.rank, cr), members->second))
          continue;
        std::vector<std::vector<std::uint32_t>> list;
        std::set<std::int32_t> seen;
        for (std::uint32_t x = 0; x < world; ++x) {
          const std::int32_t comm = pure.comm_of(x, cr);
          if (comm == graph::kNoComm) break;
          if (!seen.insert(comm).second) continue;
          list.emplace_back(pure.comms.members_begin(static_cast<std::uint32_t>(comm)),
                            pure.comms.members_end(static_cast<std::uint32_t>(comm)));
        }
        if (seen.empty() || list.empty()) continue;
        role = cr;
        partitions[cr] = std::move(list);
      }
      if (!role) {
        for (const CommRole free :
             {CommRole::Dp, CommRole::Tp, CommRole::Cp, CommRole::Ep, CommRole::Edp, CommRole::Etp,
              CommRole::TpEp, CommRole::DpReplicate, CommRole::Embedding})
          if (!partitions.count(free)) {
            role = free;
            break;
          }
        auto list = graph::mesh_groups(members->second, world);
        if (!role || list.empty()) {
          w = fmt::format(
              "its collective {} runs over a group that is neither a communicator of the "
              "experiment's rank {} nor a DeviceMesh dimension's",
              describe_call(c), p.rank);
          return {};
        }
        partitions[*role] = std::move(list);
      }
      it = role_of_group.emplace(label, *role).first;
    }
    // A broadcast (and a scatter, gather) moves the root's S bytes to every rank: an
    // all-gather's traffic; a barrier is PyTorch's one-element all-reduce.
    graph::Op op;
    op.kind = graph_kind(kind).value_or(kind == "broadcast" || kind == "scatter" || kind == "gather"
                                            ? graph::OpKind::AllGather
                                            : graph::OpKind::AllReduce);
    op.role = it->second;
    op.stream = graph::stream_of(op.role);
    op.phase = graph::Phase::Other;
    op.name = collective_name(op.kind, op.role);
    op.comm_bytes = std::max(4.0, c.at("bytes").get<double>());
    return {op};
  };
  std::optional<graph::RankProgram> t = program_template(p, op_of, why, measured);
  if (!t) return std::nullopt;
  return graph::replicated_world(std::move(*t), world, partitions);
}

/// The program's storages, as it made and released them over its whole run, through PyTorch's
/// caching allocator (kernels::CachingAllocator): what torch.cuda.max_memory_allocated and
/// max_memory_reserved would say had it run on a GPU in these dtypes. Zeros for a record
/// without them.
kernels::AllocatorPeaks program_allocator(const SandboxProgram& p) {
  kernels::CachingAllocator a;
  std::vector<std::uint64_t> handle;  // by storage number
  for (const auto& call : p.report.at("calls")) {
    if (call.at("kind") != "step") continue;
    for (const auto& e : call.value("ops", json::array())) {
      if (!e.is_array()) continue;
      const json& x = extras_of(e);
      for (const auto& id : x.value("gone", json::array()))
        if (const auto k = id.get<std::size_t>(); k < handle.size() && handle[k] != 0) {
          a.release(handle[k]);
          handle[k] = 0;
        }
      for (const auto& bytes : x.value("new", json::array()))
        handle.push_back(bytes.get<std::int64_t>() > 0 ? a.allocate(bytes.get<std::int64_t>()) : 0);
    }
  }
  return {a.peak_allocated(), a.peak_reserved()};
}

/// The experiment's output directory, as run_command resolves it.
fs::path output_dir(const io::ExperimentConfig& c, const std::string& out_dir) {
  return out_dir.empty() ? fs::path(c.run.output) : fs::path(out_dir);
}

/// Process 0: the experiment's graph written as `out`/sandbox-graph.h5 and the program run as
/// rank `rank` through scripts/sandbox/run_program.py, which writes `out`/sandbox-program.json.
/// The runner's exit status (its one-line error said).
int record_program(const io::ExperimentConfig& c, const fs::path& out, std::uint32_t rank,
                   const std::string& program, const std::string& record, double timeout_s) {
  const fs::path runner =
      checkout_script("run --sandbox-program", fs::path("scripts") / "sandbox" / "run_program.py");
  const fs::path python =
      checkout_script("run --sandbox-program", fs::path("scripts") / "capture" / "python");
  fs::create_directories(out);
  const fs::path graph = out / "sandbox-graph.h5";
  io::write_graph_h5(build(c), graph.string());
  return shell(fmt::format(
      "{} {} --world {} --rank {} --gpus-per-node {} --timeout {} --graph {} -o {} {}",
      shell_quote(python.string()), shell_quote(runner.string()), c.parallel.world(), rank,
      c.cluster.gpus_per_node, timeout_s, shell_quote(graph.string()),
      shell_quote((out / "sandbox-program.json").string()),
      record.empty() ? "-- " + shell_quote(program) : "--record " + shell_quote(record)));
}

/// Rank `rank`'s figures in a replay (traced: its timeline).
struct RankFigures {
  emu::RankResult row;
  SimTime iteration = 0;
  std::vector<emu::TimelineRecord> timeline;
};

/// Rank `rank` of `g` replayed sequentially; with `measured` (per op of its template) its
/// measured durations.
RankFigures rank_figures(const graph::SlicedGraph& g, const io::ExperimentConfig& c,
                         std::uint32_t rank, const std::vector<std::int64_t>& measured = {}) {
  ReplaySetup setup(c);
  setup.options.representative_replicas = false;
  setup.options.trace_ranks = {rank};
  if (std::vector<SimTime> d = measured_durations(g.program_of(rank), measured, setup.costs);
      !d.empty())
    setup.options.class_durations[g.rank_class[rank]] = std::move(d);
  emu::RunResults r = emu::emulate(g, setup.costs, setup.options);
  return {r.ranks.at(rank), r.summary.iteration_time, std::move(r.timelines[rank])};
}

json rank_json(const RankFigures& f) {
  const auto s = [](SimTime t) { return static_cast<double>(t) * 1e-9; };
  return {{"iteration_seconds", s(f.iteration)},
          {"finish_seconds", s(f.row.finish)},
          {"compute_seconds", s(f.row.compute)},
          {"exposed_dp_seconds", s(f.row.exposed_dp)},
          {"exposed_tp_seconds", s(f.row.exposed_tp)},
          {"exposed_pp_seconds", s(f.row.exposed_pp)},
          {"exposed_ep_seconds", s(f.row.exposed_ep)},
          {"bubble_seconds", s(f.row.bubble)},
          {"straggler_wait_seconds", s(f.row.straggler_wait)},
          {"host_wait_seconds", s(f.row.host_wait)},
          {"other_wait_seconds", s(f.row.other_wait)},
          {"peak_memory_bytes", f.row.peak_memory},
          {"static_memory_bytes", f.row.static_memory}};
}

/// The collectives of a traced rank's timeline, in order: [kind, bytes, start s, end s].
json collective_timeline(const RankFigures& f, const graph::RankProgram& t) {
  json out = json::array();
  for (const emu::TimelineRecord& rec : f.timeline) {
    const graph::Op& op = t.ops.at(rec.op);
    if (!graph::is_communication(op.kind)) continue;
    out.push_back({graph::op_kind_name(op.kind), op.comm_bytes,
                   static_cast<double>(rec.start) * 1e-9, static_cast<double>(rec.end) * 1e-9});
  }
  return out;
}

/// Process 0, after the replay: the program's compute against the graph's rank, its memory,
/// and its iteration — rank `p.rank` in the hybrid replay beside the same rank in the pure one,
/// or, where the program is not in the replay, the program run by every rank — in
/// sandbox-program.json and on stdout.
void report_program(const io::ExperimentConfig& c, const fs::path& out, SandboxProgram& p) {
  const fs::path report_path = out / "sandbox-program.json";
  json report = p.report;
  const std::uint32_t world = static_cast<std::uint32_t>(c.parallel.world());
  const graph::SlicedGraph& pure = *p.pure;
  const cost::CostModel model(c.cluster, c.network);
  // Per op kind (gemm, attention, elementwise, …): kernels, GPU time and FLOPs, the program's
  // and the graph's rank's: where their compute differs.
  struct Kind {
    double kernels = 0, seconds = 0, flops = 0;
  };
  std::map<std::string, std::array<Kind, 2>> by_kind;
  double host = 0, measured_kernels = 0;
  const auto add = [&](const graph::Op& op, int side, std::int64_t measured_ns = -1) {
    Kind& k = by_kind[std::string(graph::op_kind_name(op.kind))][static_cast<std::size_t>(side)];
    k.kernels += 1;
    k.seconds += static_cast<double>(measured_ns >= 0 ? measured_ns : model.compute_ns(op)) * 1e-9;
    k.flops += op.flops;
  };
  {
    // The program's kernels in its order (its collectives as any: only compute counts here).
    std::string unused;
    std::vector<std::int64_t> measured;
    const CollectiveOp any = [](const json&, std::string&) -> CallOp {
      return {graph::world_collective(graph::OpKind::AllReduce, 4)};
    };
    const std::optional<graph::RankProgram> t = program_template(p, any, unused, measured);
    for (std::uint32_t i = 0; t && i < t->size(); ++i) {
      const graph::Op& op = t->ops[i];
      if (graph::is_communication(op.kind) || op.host_sync) continue;
      add(op, 0, measured[i]);
      measured_kernels += measured[i] >= 0 ? 1 : 0;
      host += static_cast<double>(model.host_ns(op)) * 1e-9;
    }
  }
  for (const graph::Op& op : pure.program_of(p.rank).ops)
    if (!graph::is_communication(op.kind)) add(op, 1);
  std::array<Kind, 2> total{};
  json kinds = json::object();
  for (const auto& [name, sides] : by_kind) {
    json row;
    for (std::size_t side = 0; side < 2; ++side) {
      total[side].kernels += sides[side].kernels;
      total[side].seconds += sides[side].seconds;
      row[side == 0 ? "program" : "graph"] = {{"kernels", sides[side].kernels},
                                              {"seconds", sides[side].seconds},
                                              {"flops", sides[side].flops}};
    }
    kinds[name] = row;
  }
  report["compute"] = {
      {"gpu", model.gpu().name},
      {"program_kernels", total[0].kernels},
      {"program_seconds", total[0].seconds},
      {"program_host_seconds", host},
      {"program_measured_kernels", measured_kernels},
      {"device", p.report.value("device", "cpu (ops costed, not timed)")},
      {"program_gemm_flops", by_kind.count("gemm") ? by_kind["gemm"][0].flops : 0.0},
      {"graph_kernels", total[1].kernels},
      {"graph_seconds", total[1].seconds},
      {"by_kind", kinds},
      {"note",
       measured_kernels > 0
           ? "the program's last iteration, one kernel per ATen op (eager), timed on the device "
             "it ran on (CUDA events; ops without a time costed by the model)"
           : "the program's last iteration, one kernel per ATen op (eager), GEMMs at the GPU's "
             "bf16 rate whatever dtype they ran in on this machine"}};
  // Rank `p.rank` in the pure replay, and in the hybrid one; else the program on every rank.
  const RankFigures pure_rank = rank_figures(pure, c, p.rank);
  std::optional<RankFigures> hybrid_rank;
  std::optional<SimTime> replicated;
  std::string why = p.not_in_replay;
  std::vector<std::int64_t> measured;
  if (p.in_replay) {
    hybrid_rank = rank_figures(*p.hybrid, c, p.rank, p.measured_ns);
  } else if (const auto g = replicated_program(p, pure, why, measured)) {
    ReplaySetup setup(c);
    if (std::vector<SimTime> d = measured_durations(g->templates[0], measured, setup.costs);
        !d.empty())
      setup.options.class_durations[0] = std::move(d);
    replicated = emu::emulate(*g, setup.costs, setup.options).summary.iteration_time;
  }
  json iteration = {{"world", world},
                    {"replay_seconds", static_cast<double>(pure_rank.iteration) * 1e-9},
                    {"program_in_replay", p.in_replay},
                    {"pure", rank_json(pure_rank)},
                    {"pure_collectives", collective_timeline(pure_rank, pure.program_of(p.rank))}};
  if (hybrid_rank) {
    iteration["hybrid"] = rank_json(*hybrid_rank);
    iteration["hybrid_collectives"] =
        collective_timeline(*hybrid_rank, p.hybrid->program_of(p.rank));
    iteration["program_seconds"] = static_cast<double>(hybrid_rank->iteration) * 1e-9;
    iteration["note"] = fmt::format(
        "rank {} runs the program's last iteration inside the experiment's replay (the other "
        "{} ranks the graph); its collectives complete when the replayed ranks of their groups "
        "have arrived",
        p.rank, world - 1);
  } else {
    iteration["program_seconds"] =
        replicated ? json(static_cast<double>(*replicated) * 1e-9) : json(nullptr);
    iteration["not_in_replay"] = p.not_in_replay;
    iteration["note"] = replicated ? "the program's last iteration run by every rank (identical "
                                     "replicas), replayed by the sequential engine"
                                   : "not replayed: " + why;
  }
  report["iteration"] = iteration;
  const kernels::AllocatorPeaks allocator = program_allocator(p);
  report["memory"] = {
      {"program_peak_bytes", p.peak_bytes},
      {"program_allocator_peak_allocated_bytes", allocator.allocated},
      {"program_allocator_peak_reserved_bytes", allocator.reserved},
      {"replay_peak_bytes", static_cast<double>(pure_rank.row.peak_memory)},
      {"hybrid_peak_bytes",
       hybrid_rank ? json(static_cast<double>(hybrid_rank->row.peak_memory)) : json(nullptr)},
      {"note",
       "program: its own allocations on this machine (the storages its ops made, while a tensor "
       "holds them), in the dtypes it ran in, at their peak in its last iteration; replay: the "
       "modelled peak of the graph's rank; hybrid: the rank running the program's allocations "
       "in the replay (with the graph's collectives' buffers); program_allocator: its storages "
       "over the whole run through PyTorch's caching allocator (kernels::CachingAllocator: "
       "512 B rounding, 2 / 20 MiB segments, never released), as max_memory_allocated / "
       "max_memory_reserved would give"}};
  const fs::path tmp = report_path.string() + ".tmp";
  {
    std::ofstream f(tmp);
    f << report.dump(1);
  }
  fs::rename(tmp, report_path);
  std::cout << fmt::format(
      "  compute, the program's last iteration on {}: {:.0f} kernels, {:.4g} ms (host issue {:.4g} "
      "ms); the graph's rank {}: {:.0f} kernels, {:.4g} ms\n",
      model.gpu().name, total[0].kernels, total[0].seconds * 1e3, host * 1e3, p.rank,
      total[1].kernels, total[1].seconds * 1e3);
  for (const auto& [name, sides] : by_kind)
    std::cout << fmt::format(
        "    {:<12} program {:>5.0f} kernels {:>9.4g} ms {:>10.4g} FLOPs | graph {:>5.0f} kernels "
        "{:>9.4g} ms {:>10.4g} FLOPs\n",
        name, sides[0].kernels, sides[0].seconds * 1e3, sides[0].flops, sides[1].kernels,
        sides[1].seconds * 1e3, sides[1].flops);
  std::cout << fmt::format(
      "  memory, the program's peak in its last iteration: {:.4g} GiB (its own allocations here, "
      "in the dtypes it ran in; through PyTorch's caching allocator {:.4g} GiB allocated, {:.4g} "
      "GiB reserved); the replay's peak: {:.4g} GiB\n",
      p.peak_bytes / (1 << 30), static_cast<double>(allocator.allocated) / (1 << 30),
      static_cast<double>(allocator.reserved) / (1 << 30),
      static_cast<double>(pure_rank.row.peak_memory) / (1 << 30));
  const auto ms = [](SimTime t) { return static_cast<double>(t) * 1e-6; };
  if (hybrid_rank)
    std::cout << fmt::format(
        "  iteration, rank {} running the program inside the replay of {} ranks: {:.4g} ms "
        "(rank {} finishes at {:.4g} ms: compute {:.4g}, exposed DP {:.4g}, host wait {:.4g}); "
        "the pure replay: {:.4g} ms (rank {}: {:.4g} ms, compute {:.4g}, exposed DP {:.4g})\n",
        p.rank, world, ms(hybrid_rank->iteration), p.rank, ms(hybrid_rank->row.finish),
        ms(hybrid_rank->row.compute), ms(hybrid_rank->row.exposed_dp),
        ms(hybrid_rank->row.host_wait), ms(pure_rank.iteration), p.rank, ms(pure_rank.row.finish),
        ms(pure_rank.row.compute), ms(pure_rank.row.exposed_dp));
  else if (replicated)
    std::cout << fmt::format(
        "  iteration, the program run by all {} ranks: {:.4g} ms simulated; the experiment's "
        "replay: {:.4g} ms (not in the replay: {})\n",
        world, ms(*replicated), ms(pure_rank.iteration), p.not_in_replay);
  else
    std::cout << "  iteration of the program not replayed: " << why << "\n";
}

}  // namespace

SandboxProgram read_sandbox_program(const fs::path& report, std::uint32_t rank,
                                    const std::string& command) {
  SandboxProgram p;
  p.rank = rank;
  p.command = command;
  std::ifstream f(report);
  if (!f) throw_io("{}: the sandbox program's record is missing", report.string());
  p.report = json::parse(f, nullptr, false);
  // Calls name each other by their place in the record ("seq"): checked here once.
  if (!p.report.is_object() || !p.report.contains("calls") || !p.report["calls"].is_array())
    throw_input("{}: not a sandbox program's record (no \"calls\")", report.string());
  const json& calls = p.report["calls"];
  for (std::size_t i = 0; i < calls.size(); ++i)
    if (!calls[i].is_object() ||
        calls[i].value("seq", std::int64_t{-1}) != static_cast<std::int64_t>(i) ||
        !calls[i].contains("kind"))
      throw_input(
          "{}: call {} of the record has \"seq\" {} (each its own place): an edited "
          "record?",
          report.string(), i,
          calls[i].is_object() ? calls[i].value("seq", json(nullptr)).dump() : "none");
  double previous_live = 0;
  for (const auto& call : calls)
    if (call.at("kind") == "step") {
      ++p.iterations;
      p.last = call.value("ops", json::array());
      p.peak_bytes = call.value("peak_bytes", 0.0);
      p.start_live_bytes = previous_live;
      previous_live = call.value("live_bytes", 0.0);
    }
  return p;
}

std::vector<SimTime> measured_durations(const graph::RankProgram& t,
                                        const std::vector<std::int64_t>& measured_ns,
                                        const emu::Costs& costs) {
  if (std::none_of(measured_ns.begin(), measured_ns.end(), [](std::int64_t ns) { return ns >= 0; }))
    return {};
  SCALESCOPE_EXPECTS(measured_ns.size() == t.size());
  std::vector<SimTime> d(t.size(), 0);
  for (std::uint32_t i = 0; i < t.size(); ++i)
    if (!graph::is_communication(t.ops[i].kind))
      d[i] = measured_ns[i] >= 0 ? static_cast<SimTime>(measured_ns[i]) : costs.compute(t.ops[i]);
  return d;
}

bool embed_program(graph::SlicedGraph& g, SandboxProgram& p) {
  const std::uint32_t r = p.rank;
  const auto groups = recorded_groups(p);
  // Rank r's communication ops in the graph, per role, in its order.
  const graph::RankProgram& mine = g.program_of(r);
  // Its collectives per role, and its pipeline transfers (send_recv: a send, a receive or both
  // batched) in its order.
  std::array<std::vector<std::uint32_t>, graph::kNumRoles> queue;
  std::vector<std::uint32_t> transfers;
  for (std::uint32_t i = 0; i < mine.size(); ++i)
    if (mine.ops[i].kind == graph::OpKind::SendRecv)
      transfers.push_back(i);
    else if (graph::is_collective(mine.ops[i].kind))
      queue[static_cast<std::size_t>(mine.ops[i].role)].push_back(i);
  std::array<std::size_t, graph::kNumRoles> next{};
  std::size_t next_transfer = 0;
  // The parts of the transfer in progress not yet matched: peers (global ranks), none = −1.
  std::int64_t send_left = -1, recv_left = -1;
  double transfer_bytes = 0;
  const auto describe_op = [](const graph::Op& op) {
    return fmt::format("{} of {} B", graph::op_kind_name(op.kind), op.comm_bytes);
  };
  const auto peer_of = [&](graph::CommRole role) -> std::int64_t {
    const std::int32_t comm = role == graph::CommRole::None ? graph::kNoComm : g.comm_of(r, role);
    if (comm == graph::kNoComm) return -1;
    const auto k = static_cast<std::uint32_t>(comm);
    for (const std::uint32_t* m = g.comms.members_begin(k); m != g.comms.members_end(k); ++m)
      if (*m != r) return *m;
    return -1;
  };
  const auto describe_transfer = [&](std::int64_t to, std::int64_t from, double bytes) {
    return fmt::format("{}{}{} of {} B", to >= 0 ? fmt::format("a send to rank {}", to) : "",
                       to >= 0 && from >= 0 ? " and " : "",
                       from >= 0 ? fmt::format("a receive from rank {}", from) : "", bytes);
  };
  // A send or receive: the rest of the transfer in progress, or the first part of the next one.
  const auto transfer = [&](const json& c, std::string& why) -> CallOp {
    const bool send = c.at("kind") == "send";
    const auto group = groups.find(c.at("group").get<std::string>());
    const auto local = c.value("peer", std::int64_t{-1});
    const std::int64_t peer = group != groups.end() && local >= 0 &&
                                      static_cast<std::size_t>(local) < group->second.size()
                                  ? group->second[static_cast<std::size_t>(local)]
                                  : -1;
    const double bytes = c.at("bytes").get<double>();
    const bool same_bytes = std::abs(transfer_bytes - bytes) <= 1e-9 * std::max(1.0, bytes);
    if (send_left >= 0 || recv_left >= 0) {
      std::int64_t& left = send ? send_left : recv_left;
      if (left == peer && peer >= 0 && same_bytes) {
        left = -1;
        return {std::nullopt, true};
      }
      why = fmt::format(
          "its {} {} {} rank {} of {} B is not the rest of rank {}'s pipeline "
          "transfer in the graph ({})",
          c.at("kind").get<std::string>(), describe_call(c), send ? "to" : "from", peer, bytes, r,
          describe_transfer(send_left, recv_left, transfer_bytes));
      return {};
    }
    if (next_transfer >= transfers.size()) {
      why = fmt::format(
          "its {} {} has no counterpart: the graph's rank {} has no more pipeline "
          "transfers",
          c.at("kind").get<std::string>(), describe_call(c), r);
      return {};
    }
    const graph::Op& op = mine.ops[transfers[next_transfer]];
    const std::int64_t to = peer_of(op.role), from = peer_of(op.role2);
    transfer_bytes = op.comm_bytes;
    if ((send ? to : from) != peer || peer < 0 ||
        std::abs(op.comm_bytes - bytes) > 1e-9 * std::max(1.0, bytes)) {
      why = fmt::format(
          "its {} {} {} rank {} differs from rank {}'s next pipeline transfer in "
          "the graph ({})",
          c.at("kind").get<std::string>(), describe_call(c), send ? "to" : "from", peer, r,
          describe_transfer(to, from, op.comm_bytes));
      return {};
    }
    ++next_transfer;
    send_left = send ? -1 : to;
    recv_left = send ? from : -1;
    return {op};
  };
  const CollectiveOp matched = [&](const json& c, std::string& why) -> CallOp {
    const std::string kind = c.at("kind").get<std::string>();
    if (kind == "send" || kind == "recv") return transfer(c, why);
    if (send_left >= 0 || recv_left >= 0) {
      why = fmt::format(
          "its collective {} comes before the rest of rank {}'s pipeline transfer "
          "in the graph ({})",
          describe_call(c), r, describe_transfer(send_left, recv_left, transfer_bytes));
      return {};
    }
    const std::optional<graph::OpKind> k = graph_kind(kind);
    if (!k) {
      why = fmt::format("its collective {} has no counterpart in the graph", describe_call(c));
      return {};
    }
    const auto group = groups.find(c.at("group").get<std::string>());
    const double bytes = c.at("bytes").get<double>();
    std::string expected;
    for (int role = 1; role < graph::kNumRoles; ++role) {
      if (group == groups.end() ||
          !same_members(g, g.comm_of(r, static_cast<graph::CommRole>(role)), group->second))
        continue;
      const auto ri = static_cast<std::size_t>(role);
      if (next[ri] >= queue[ri].size()) {
        expected = expected.empty() ? "none" : expected;
        continue;
      }
      const graph::Op& op = mine.ops[queue[ri][next[ri]]];
      if (op.kind == *k && std::abs(op.comm_bytes - bytes) <= 1e-9 * std::max(1.0, bytes)) {
        ++next[ri];
        return {op};
      }
      expected = describe_op(op);
    }
    why = expected.empty()
              ? fmt::format(
                    "its collective {} runs over a group that is none of rank {}'s "
                    "communicators in the graph",
                    describe_call(c), r)
              : fmt::format(
                    "its collective {} differs from rank {}'s next one on that group in "
                    "the graph ({})",
                    describe_call(c), r, expected);
    return {};
  };
  std::optional<graph::RankProgram> t =
      program_template(p, matched, p.not_in_replay, p.measured_ns);
  if (!t) return false;
  if (send_left >= 0 || recv_left >= 0 || next_transfer < transfers.size()) {
    p.not_in_replay =
        send_left >= 0 || recv_left >= 0
            ? fmt::format("its last pipeline transfer lacks {} of the graph's rank {}",
                          describe_transfer(send_left, recv_left, transfer_bytes), r)
            : fmt::format(
                  "the graph's rank {} has {} more pipeline transfer(s) than the program "
                  "(the first: {})",
                  r, transfers.size() - next_transfer,
                  describe_transfer(peer_of(mine.ops[transfers[next_transfer]].role),
                                    peer_of(mine.ops[transfers[next_transfer]].role2),
                                    mine.ops[transfers[next_transfer]].comm_bytes));
    return false;
  }
  for (std::size_t role = 0; role < queue.size(); ++role)
    if (next[role] < queue[role].size()) {
      p.not_in_replay = fmt::format(
          "the graph's rank {} has {} more collective(s) on one group than the program (the "
          "first: {})",
          r, queue[role].size() - next[role], describe_op(mine.ops[queue[role][next[role]]]));
      return false;
    }
  t->finalize();
  g.templates.push_back(std::move(*t));
  if (!g.loaded.empty()) g.loaded.push_back(true);
  g.rank_class[r] = static_cast<std::uint32_t>(g.templates.size() - 1);
  graph::validate(g);
  p.in_replay = true;
  return true;
}

void check_sandbox_program(const std::string& config_path,
                           const std::vector<std::string>& overrides,
                           const std::string& megatron_args, std::uint32_t rank) {
  checkout_script("run --sandbox-program", fs::path("scripts") / "sandbox" / "run_program.py");
  const io::ExperimentConfig c = io::load_experiment(config_path, overrides, megatron_args);
  if (static_cast<std::int64_t>(rank) >= c.parallel.world())
    throw_input("--sandbox {}: the experiment {} has {} ranks", rank, c.path, c.parallel.world());
}

int sandbox_program_command(const MpiWorld& mpi, const std::string& config_path,
                            const std::vector<std::string>& overrides,
                            const std::string& megatron_args, const std::string& out_dir,
                            std::uint32_t rank, const std::string& program,
                            const std::string& record, double timeout_s, bool quiet) {
  check_sandbox_program(config_path, overrides, megatron_args, rank);
  const io::ExperimentConfig c = io::load_experiment(config_path, overrides, megatron_args);
  const fs::path out = output_dir(c, out_dir);
  // The program first, on process 0 (its record does not depend on the process count); every
  // process then reads the record and replays the experiment with it.
  std::string error;
  int rc = 0;
  if (mpi.rank() == 0) {
    check_output_dir(out);
    try {
      if (!record.empty()) read_sandbox_program(record, rank, "");  // checked before any output
      rc = record_program(c, out, rank, program, record, timeout_s);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  io::raise_if_failed_anywhere(MPI_COMM_WORLD, error);
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rc != 0) return rc;
  SandboxProgram p = read_sandbox_program(out / "sandbox-program.json", rank, program);
  if (!record.empty()) {  // the command the record ran
    p.command.clear();
    for (const auto& word : p.report.at("program"))
      p.command += (p.command.empty() ? "" : " ") + word.get<std::string>();
  }
  rc = run_command(mpi, config_path, {}, out_dir, overrides, megatron_args, quiet, false, {}, {},
                   {}, &p);
  if (rc != 0 || mpi.rank() != 0) return rc;
  report_program(c, out, p);
  return 0;
}

}  // namespace scalescope::app
