#include "emu/emulation.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>

#include "core/error.hpp"
#include "core/memory_budget.hpp"
#include "emu/comm_lp.hpp"
#include "emu/critical_path.hpp"
#include "emu/fabric_lp.hpp"
#include "emu/rank_lp.hpp"
#include "emu/replicas.hpp"
#include "pdes/conservative_engine.hpp"
#include "pdes/optimistic_engine.hpp"
#include "pdes/partitioner.hpp"
#include "pdes/sequential_engine.hpp"

namespace scalescope::emu {

namespace {

/// Stands for every rank and communicator a representative replay does not run: nothing is
/// ever sent to one (the replayed LPs address only replayed LPs), so an event is a defect.
class DormantLP final : public pdes::LogicalProcess {
 public:
  void init(pdes::Context&) override {}
  void forward(pdes::Event& e, pdes::Context&) override {
    throw ContractError(fmt::format(
        "representative replay: LP {} outside the replayed replica received an event", e.key.dst));
  }
  void reverse(pdes::Event&, pdes::Context&) override {}
  void commit(const pdes::Event&) override {}
  bool has_commit() const override { return false; }
};

/// The LPs of one process (all of them for the sequential engine) and where they record.
/// Refuses a replay whose per-rank state (`bytes`, for the `ranks` replayed on the busiest of
/// `processes`) exceeds the memory available (`room`), naming both.
void check_replay_memory(std::uint64_t bytes, std::uint64_t room, std::uint32_t ranks,
                         std::uint32_t processes) {
  if (bytes <= room) return;
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  throw_input(
      "the replay needs {:.1f} GiB for the state of {} ranks{} (a time slot per op of each "
      "rank's program), but {:.1f} GiB is available: replay one replica of each group "
      "(run.replicas: representative), or spread the ranks over more processes (mpirun -np N; "
      "run.engine: auto)",
      static_cast<double>(bytes) / kGiB, ranks,
      processes > 1 ? fmt::format(" on one of {} processes", processes) : std::string(),
      static_cast<double>(room) / kGiB);
}

struct Instance {
  ModelData data;
  RunResults out;
  std::vector<RankRecorder> recorders;  ///< per local rank
  /// The local ranks' time slots, one block per rank in rank order, each on its own cache lines.
  std::vector<SimTime> times;
  std::vector<RankLP> ranks;
  std::vector<CommLP> comms;
  std::unique_ptr<FabricLP> fabric;  ///< the flow model's LP, on the process that owns it
  std::vector<std::int32_t> index;   ///< LP id → position in ranks / comms, −1 if not here
  const ReplicaMap* reps = nullptr;  ///< a representative replay's map, else null
  DormantLP dormant;                 ///< every LP of mine that a representative replay skips
  /// Ranks traced only because a traced rank outside the replayed replica copies them.
  std::vector<std::uint32_t> traced_for_copy;

  /// `budget` is called with the bytes the replay's per-rank state needs before any of it is
  /// allocated (it throws when they do not fit).
  Instance(const graph::SlicedGraph& g, const Costs& cost, const EmulationOptions& options,
           const std::vector<std::uint32_t>* owner, std::uint32_t me, const ReplicaMap* replicas,
           const std::function<void(std::uint64_t bytes, std::uint32_t ranks)>& budget)
      : data(g, cost, options.coalesce_local_ops, &options.class_durations,
             &options.rank_durations),
        reps(replicas) {
    data.eager_p2p = options.eager_p2p;
    if (reps != nullptr) data.active = &reps->active;
    out.config_text = g.config_text;
    // The per-rank state, counted before it is allocated: a result row per rank of the world,
    // and per replayed rank its LP, recorder and a time slot per op of its program.
    {
      std::uint64_t bytes =
          std::uint64_t{g.world_size} * (sizeof(RankResult) + sizeof(std::int32_t));
      std::uint32_t n = 0;
      for (std::uint32_t r = 0; r < g.world_size; ++r)
        if ((owner == nullptr || (*owner)[r] == me) && (reps == nullptr || reps->is_active(r))) {
          ++n;
          bytes += sizeof(RankLP) + sizeof(RankRecorder) + sizeof(std::size_t) +
                   (RankLP::slots(data.class_of(r), false) + 8) * sizeof(SimTime);
        }
      bytes += std::uint64_t{g.comms.size()} * (sizeof(CommLP) + sizeof(std::int32_t));
      budget(bytes, n);
    }
    out.ranks.resize(g.world_size);
    for (std::uint32_t r : options.trace_ranks) {
      if (r >= g.world_size)
        throw_input("run.trace_ranks: rank {} is outside the world of {} ranks", r, g.world_size);
      out.timelines[r];
      out.memory[r];
    }
    if (reps != nullptr)
      for (std::uint32_t r : options.trace_ranks)
        if (!reps->is_active(r) && out.timelines.emplace(reps->rep[r], 0).second) {
          out.memory[reps->rep[r]];
          traced_for_copy.push_back(reps->rep[r]);
        }
    auto mine = [&](pdes::LpId id) {
      return (owner == nullptr || (*owner)[id] == me) && (reps == nullptr || reps->is_active(id));
    };
    const bool flow = cost.fabric != nullptr;
    index.assign(g.world_size + g.comms.size() + (flow ? 1 : 0), -1);
    std::uint32_t n_ranks = 0, n_comms = 0;
    for (pdes::LpId id = 0; id < index.size(); ++id)
      if (mine(id) && id < g.world_size + g.comms.size()) (id < g.world_size ? n_ranks : n_comms)++;
    recorders.reserve(n_ranks);
    std::vector<std::size_t> offset;
    offset.reserve(n_ranks);
    constexpr std::size_t kLine = 64 / sizeof(SimTime);
    std::size_t total = 0;
    for (std::uint32_t r = 0; r < g.world_size; ++r) {
      out.ranks[r].rank_class = g.rank_class[r];
      if (!mine(r)) continue;
      RankRecorder rec{&out.ranks[r], nullptr, nullptr};
      if (auto it = out.timelines.find(r); it != out.timelines.end()) {
        rec.timeline = &it->second;
        rec.memory = &out.memory[r];
      }
      recorders.push_back(rec);
      offset.push_back(total);
      total += (RankLP::slots(data.class_of(r), rec.traced()) + kLine - 1) / kLine * kLine;
    }
    times.resize(total + kLine - 1);
    SimTime* base = times.data();
    while (reinterpret_cast<std::uintptr_t>(base) % 64 != 0) ++base;
    ranks.reserve(n_ranks);
    comms.reserve(n_comms);
    for (std::uint32_t r = 0; r < g.world_size; ++r) {
      if (!mine(r)) continue;
      const std::size_t k = ranks.size();
      index[r] = static_cast<std::int32_t>(k);
      ranks.emplace_back(r, data, &recorders[k], base + offset[k]);
    }
    for (std::uint32_t c = 0; c < g.comms.size(); ++c) {
      if (!mine(g.world_size + c)) continue;
      index[g.world_size + c] = static_cast<std::int32_t>(comms.size());
      comms.emplace_back(c, data);
    }
    if (flow && mine(data.fabric_lp())) {
      index[data.fabric_lp()] = 0;
      fabric = std::make_unique<FabricLP>(data, *cost.fabric);
    }
  }

  pdes::LogicalProcess* lp(pdes::LpId id) {
    if (index[id] < 0) return &dormant;  // not replayed (representative)
    const auto i = static_cast<std::size_t>(index[id]);
    if (id < data.graph->world_size) return &ranks[i];
    if (id == data.fabric_lp()) return fabric.get();
    return &comms[i];
  }

  /// What the critical path walk reads of a local rank.
  RankTimes rank_times(std::uint32_t r) const {
    if (reps != nullptr) r = reps->rep[r];
    const RankLP& lp = ranks[static_cast<std::size_t>(index[r])];
    return {&lp.rank_class(), lp.finish_times()};
  }

  /// A representative replay: every rank of `owns` outside the replayed replica takes its
  /// counterpart's row (and timeline and memory, if traced); the counterparts traced only for
  /// that are dropped. The counterpart of a rank is owned by the same process.
  template <class Owns>
  void copy_counterparts(Owns owns) {
    if (reps == nullptr) return;
    for (std::uint32_t r = 0; r < out.ranks.size(); ++r)
      if (!reps->is_active(r) && owns(r)) out.ranks[r] = out.ranks[reps->rep[r]];
    for (auto& [r, tl] : out.timelines)
      if (!reps->is_active(r) && owns(r)) {
        tl = out.timelines.at(reps->rep[r]);
        out.memory[r] = out.memory.at(reps->rep[r]);
      }
    for (std::uint32_t r : traced_for_copy) {
      out.timelines.erase(r);
      out.memory.erase(r);
    }
  }

  /// Throws if a local rank or communicator did not finish (a deadlocked graph).
  void check_complete() const {
    for (const RankLP& r : ranks)
      if (!r.done())
        throw ContractError(
            fmt::format("emulation deadlocked: rank {} did not finish its program "
                        "(unmatched communication in the graph)",
                        r.rank()));
    for (std::size_t c = 0; c < comms.size(); ++c)
      if (!comms[c].idle())
        throw ContractError("emulation: a communicator has an incomplete instance");
    if (fabric && !fabric->idle())
      throw ContractError("emulation: the fabric has a transfer that never finished");
  }
};

/// Sorts the traced records and fills the summary from the per-rank table.
void finish_results(RunResults& out, const Costs& cost) {
  for (auto& [rank, mem] : out.memory)
    std::stable_sort(mem.begin(), mem.end(),
                     [](const MemoryRecord& a, const MemoryRecord& b) { return a.time < b.time; });
  for (auto& [rank, tl] : out.timelines)
    std::sort(tl.begin(), tl.end(), [](const TimelineRecord& a, const TimelineRecord& b) {
      return a.start != b.start ? a.start < b.start : a.op < b.op;
    });
  Summary& s = out.summary;
  s.world_size = static_cast<std::uint32_t>(out.ranks.size());
  for (const RankResult& r : out.ranks) {
    s.iteration_time = std::max(s.iteration_time, r.finish);
    s.peak_memory_bytes = std::max(s.peak_memory_bytes, r.peak_memory);
  }
  s.gpu = cost.gpu;
  s.peak_flops_per_gpu = cost.peak_flops;
}

/// RankResult as int64 fields, for reductions over processes.
constexpr int kRankFields = 17;
std::array<std::int64_t, kRankFields> pack(const RankResult& r) {
  return {r.finish,         r.compute,    r.exposed_tp,        r.exposed_pp,
          r.exposed_dp,     r.other_wait, r.peak_memory,       r.static_memory,
          r.pp_stage,       r.rank_class, r.exposed_embedding, r.bubble,
          r.peak_transient, r.exposed_cp, r.exposed_ep,        r.host_wait,
          r.straggler_wait};
}
RankResult unpack(const std::int64_t* v) {
  RankResult r;
  r.finish = v[0];
  r.compute = v[1];
  r.exposed_tp = v[2];
  r.exposed_pp = v[3];
  r.exposed_dp = v[4];
  r.other_wait = v[5];
  r.peak_memory = v[6];
  r.static_memory = v[7];
  r.pp_stage = static_cast<std::uint32_t>(v[8]);
  r.rank_class = static_cast<std::uint32_t>(v[9]);
  r.exposed_embedding = v[10];
  r.bubble = v[11];
  r.peak_transient = v[12];
  r.exposed_cp = v[13];
  r.exposed_ep = v[14];
  r.host_wait = v[15];
  r.straggler_wait = v[16];
  return r;
}

/// Sends the records of a traced rank from its owner to process 0.
template <class T>
void gather_records(std::vector<T>& records, std::uint32_t owner, int me, MPI_Comm comm) {
  if (owner == 0) return;
  if (me == static_cast<int>(owner)) {
    const auto bytes = static_cast<long long>(records.size() * sizeof(T));
    MPI_Send(&bytes, 1, MPI_LONG_LONG, 0, 11, comm);
    MPI_Send(records.data(), static_cast<int>(bytes), MPI_BYTE, 0, 12, comm);
  } else if (me == 0) {
    long long bytes = 0;
    MPI_Recv(&bytes, 1, MPI_LONG_LONG, static_cast<int>(owner), 11, comm, MPI_STATUS_IGNORE);
    records.resize(static_cast<std::size_t>(bytes) / sizeof(T));
    MPI_Recv(records.data(), static_cast<int>(bytes), MPI_BYTE, static_cast<int>(owner), 12, comm,
             MPI_STATUS_IGNORE);
  }
}

void describe_replicas(EngineStats& e, const graph::SlicedGraph& g, const ReplicaMap* reps) {
  e.replicas = reps != nullptr ? "representative" : "all";
  e.replica_count = reps != nullptr ? reps->replicas : 1;
  e.replayed_ranks = reps != nullptr ? reps->active_ranks : g.world_size;
}

/// The replica map a replay with `options` runs: run.replicas: representative's (InputError
/// where the replicas are not provably identical), the same where provable under
/// representative_where_provable, else none (every rank replayed).
std::optional<ReplicaMap> replicas_of(const graph::SlicedGraph& g, const Costs& cost,
                                      const EmulationOptions& options) {
  if (options.representative_replicas) return representative_replicas(g, cost, options);
  if (options.representative_where_provable) {
    try {
      return representative_replicas(g, cost, options);
    } catch (const InputError&) {
      // not provable here: every rank is replayed
    }
  }
  return std::nullopt;
}

/// The process of the k-th data-parallel group of `size` members (their owners in `owner`):
/// process k mod P where a member is there, so that the groups' LPs, which every DP collective
/// of the job passes through, are dealt over the processes; else its (k mod size)-th member's.
std::uint32_t dp_group_owner(const std::uint32_t* members, std::uint32_t size, std::uint32_t k,
                             std::uint32_t processes, const std::vector<std::uint32_t>& owner) {
  const std::uint32_t want = k % processes;
  for (std::uint32_t i = 0; i < size; ++i)
    if (owner[members[(k + i) % size]] == want) return want;
  return owner[members[k % size]];
}

/// Owners under a representative replay: contiguous blocks of the replayed ranks in rank order,
/// every other rank with its counterpart; a communicator with one of its replayed members (the
/// k-th data-parallel group as partition_lps places it).
std::vector<std::uint32_t> replica_owner(const graph::SlicedGraph& g, const ReplicaMap& reps,
                                         std::uint32_t processes) {
  const std::uint32_t world = g.world_size;
  std::vector<std::uint32_t> owner(world + g.comms.size(), 0);
  const auto blocks = pdes::BlockPartitioner{}.assign(reps.active_ranks, processes, nullptr);
  std::uint32_t k = 0;
  for (std::uint32_t r = 0; r < world; ++r)
    if (reps.is_active(r)) owner[r] = blocks[k++];
  for (std::uint32_t r = 0; r < world; ++r)
    if (!reps.is_active(r)) owner[r] = owner[reps.rep[r]];
  std::uint32_t dp_groups = 0;
  std::vector<std::uint32_t> replayed;
  for (std::uint32_t c = 0; c < g.comms.size(); ++c) {
    replayed.clear();
    for (const std::uint32_t* m = g.comms.members_begin(c); m != g.comms.members_end(c); ++m)
      if (reps.is_active(*m)) replayed.push_back(*m);
    if (replayed.empty()) {
      owner[world + c] = owner[reps.rep[*g.comms.members_begin(c)]];
      continue;
    }
    const auto n = static_cast<std::uint32_t>(replayed.size());
    owner[world + c] = g.comms.kind[c] == graph::CommKind::DpGroup
                           ? dp_group_owner(replayed.data(), n, dp_groups++, processes, owner)
                           : owner[replayed[0]];
  }
  return owner;
}

}  // namespace

std::uint64_t expected_events(const graph::SlicedGraph& g, bool coalesce_local_ops,
                              std::int64_t gpus_per_node, const std::vector<std::uint8_t>* active) {
  std::vector<std::uint64_t> per_class(g.templates.size(), 0);
  // The flow model: a transfer's fabric events, shared among its members (a collective's
  // instance is counted once per member, a point-to-point transfer once per part), so per class
  // a fraction per op, on the communicators of the class's first rank (a class's ranks have
  // communicators of one shape).
  std::vector<double> flow_per_class(g.templates.size(), 0);
  std::vector<std::int64_t> first_rank(g.templates.size(), -1);
  for (std::uint32_t r = 0; r < g.world_size; ++r)
    if (first_rank[g.rank_class[r]] < 0) first_rank[g.rank_class[r]] = r;
  auto spans_nodes = [&](std::uint32_t rank, graph::CommRole role, double& members) {
    const std::int32_t c = g.comm_of(rank, role);
    if (c == graph::kNoComm) return false;
    const auto id = static_cast<std::uint32_t>(c);
    const std::uint32_t* b = g.comms.members_begin(id);
    const std::uint32_t* e = g.comms.members_end(id);
    members = static_cast<double>(e - b);
    return b != e && *b / gpus_per_node != *(e - 1) / gpus_per_node;  // members sorted
  };
  for (std::size_t k = 0; k < g.templates.size(); ++k) {
    std::uint64_t n = 1;  // START
    for (const graph::Op& op : g.templates[k].ops) {
      if (graph::is_collective(op.kind)) n += 2;
      if (op.kind == graph::OpKind::SendRecv)
        n += 2 * ((op.role != graph::CommRole::None) + (op.role2 != graph::CommRole::None));
      if (!graph::is_communication(op.kind) && !coalesce_local_ops) n += 1;
      if (gpus_per_node <= 0 || first_rank[k] < 0 || !graph::is_communication(op.kind)) continue;
      const auto rank = static_cast<std::uint32_t>(first_rank[k]);
      double members = 0;
      for (graph::CommRole role : {op.role, op.role2})
        if (role != graph::CommRole::None && spans_nodes(rank, role, members))
          flow_per_class[k] += graph::is_collective(op.kind) ? 3.0 / members : 1.5;
    }
    per_class[k] = n;
  }
  std::uint64_t total = 0;
  double flow = 0;
  for (std::uint32_t r = 0; r < g.world_size; ++r) {
    if (active != nullptr && !(*active)[r]) continue;
    total += per_class[g.rank_class[r]];
    flow += flow_per_class[g.rank_class[r]];
  }
  return total + static_cast<std::uint64_t>(std::llround(flow));
}

RunResults emulate(const graph::SlicedGraph& g, const cost::CostModel& cost,
                   const EmulationOptions& options) {
  return emulate(g, costs_of(cost), options);
}

RunResults emulate(const graph::SlicedGraph& g, const Costs& cost,
                   const EmulationOptions& options) {
  if (!g.fully_loaded())
    throw ContractError("emulate: the sequential engine needs every template of the graph");
  const std::optional<ReplicaMap> reps = replicas_of(g, cost, options);
  Instance inst(g, cost, options, nullptr, 0, reps ? &*reps : nullptr,
                [](std::uint64_t bytes, std::uint32_t ranks) {
                  check_replay_memory(bytes, core::available_memory_bytes(), ranks, 1);
                });
  std::vector<pdes::LogicalProcess*> lps;
  lps.reserve(inst.index.size());
  for (pdes::LpId id = 0; id < inst.index.size(); ++id) lps.push_back(inst.lp(id));
  pdes::SequentialEngine engine(std::move(lps));
  engine.set_progress(options.progress);
  const pdes::EngineStats stats = engine.run(kTimeInfinity, options.rollback_check);
  inst.check_complete();
  inst.copy_counterparts([](std::uint32_t) { return true; });
  RunResults out = std::move(inst.out);
  describe_replicas(out.engine, g, reps ? &*reps : nullptr);
  out.engine.kind = "sequential";
  out.engine.processes = 1;
  out.engine.events_processed = stats.events_processed;
  out.engine.events_committed = stats.events_committed;
  out.engine.wall_s = stats.wall_s;
  double bytes = 0;
  for (const RankLP& r : inst.ranks) bytes += static_cast<double>(r.state_bytes());
  out.engine.lp_bytes_per_rank = bytes / out.engine.replayed_ranks;
  out.engine.events_per_rank =
      static_cast<double>(stats.events_committed) / out.engine.replayed_ranks;
  finish_results(out, cost);
  // The lowest rank among those that finish last.
  std::uint32_t last = 0;
  for (std::uint32_t r = 0; r < g.world_size; ++r)
    if (out.ranks[r].finish > out.ranks[last].finish) last = r;
  if (g.world_size > 0)
    out.critical_path = critical_path(g, last, [&](std::uint32_t r) { return inst.rank_times(r); });
  return out;
}

std::vector<std::uint32_t> partition_lps(const graph::SlicedGraph& g, std::uint32_t processes,
                                         const std::string& partition,
                                         const std::vector<std::uint32_t>& dedicated) {
  const std::uint32_t world = g.world_size;
  const auto extra = static_cast<std::uint32_t>(dedicated.size());
  if (extra > 0 && processes > extra) {
    // The dedicated ranks (sandbox) alone on the last processes, the rest as usual before them;
    // a communicator stays with its first member.
    std::vector<std::uint32_t> owner = partition_lps(g, processes - extra, partition);
    for (std::uint32_t i = 0; i < extra; ++i) owner[dedicated[i]] = processes - extra + i;
    for (std::uint32_t c = 0; c < g.comms.size(); ++c)
      owner[world + c] = owner[*g.comms.members_begin(c)];
    return owner;
  }
  std::vector<std::uint32_t> owner(world + g.comms.size(), 0);
  auto partitioner = pdes::make_partitioner(partition);
  if (partitioner->name() == "block") {
    // Blocks of model replicas, not of rank numbers: ranks joined by TP groups, pipeline pairs
    // and tied-embedding groups form one replica (tp·pp ranks) whose ranks wait on each other
    // all the time; replicas only meet in DP collectives. Giving each process whole replicas
    // lets them run in parallel (blocks of rank numbers would cut every pipeline in two).
    // Replicas in order of their lowest rank, then contiguous blocks of replicas.
    const RankComponents components =
        rank_components(g, [](graph::CommKind k) { return k != graph::CommKind::DpGroup; });
    const std::uint32_t replicas = components.count;
    const std::vector<std::uint32_t>& replica = components.of_rank;
    if (replicas >= processes) {
      const auto blocks = partitioner->assign(replicas, processes, nullptr);
      for (std::uint32_t r = 0; r < world; ++r) owner[r] = blocks[replica[r]];
    } else {
      // Fewer replicas than processes: blocks of rank numbers, so no process stays idle.
      const auto blocks = partitioner->assign(world, processes, nullptr);
      std::copy(blocks.begin(), blocks.end(), owner.begin());
    }
    // A communicator goes with a member. Data-parallel groups, whose members span processes,
    // are dealt over the processes: the k-th goes to process k mod P where one of its members
    // is there (else to its (k mod size)-th member). The (k mod size)-th member alone put them
    // all on process 0 where the groups are fewer than their members (131,072 GPUs: 128 groups
    // of 1,024, members 0…127 all in process 0's replicas), which then took every DP arrival
    // of the job (issue 42).
    std::uint32_t dp_groups = 0;
    for (std::uint32_t c = 0; c < g.comms.size(); ++c) {
      const std::uint32_t* members = g.comms.members_begin(c);
      const auto size = static_cast<std::uint32_t>(g.comms.members_end(c) - members);
      if (g.comms.kind[c] != graph::CommKind::DpGroup || size == 0) {
        owner[world + c] = owner[members[0]];
        continue;
      }
      const std::uint32_t k = dp_groups++;
      owner[world + c] = dp_group_owner(members, size, k, processes, owner);
    }
    return owner;
  }
  if (!g.fully_loaded())
    throw ContractError("partition_lps: METIS weighs by message counts and needs every template");
  // Weighted LP graph: rank r — communicator c, weight = messages between them (2 per
  // collective instance or transfer: ARRIVE and COMPLETE), from the rank's template.
  std::vector<std::vector<std::pair<pdes::LpId, std::uint32_t>>> adj(owner.size());
  std::vector<std::array<std::uint32_t, graph::kNumRoles>> per_class(g.templates.size());
  for (std::size_t t = 0; t < g.templates.size(); ++t) {
    per_class[t].fill(0);
    for (const graph::Op& op : g.templates[t].ops) {
      if (op.role != graph::CommRole::None) per_class[t][static_cast<int>(op.role)] += 2;
      if (op.role2 != graph::CommRole::None) per_class[t][static_cast<int>(op.role2)] += 2;
    }
  }
  pdes::LpGraph lg;
  lg.vertex_weights.assign(owner.size(), 1);
  for (std::uint32_t r = 0; r < world; ++r)
    for (int role = 1; role < graph::kNumRoles; ++role) {
      const auto c = g.comm_of(r, static_cast<graph::CommRole>(role));
      const std::uint32_t w = per_class[g.rank_class[r]][static_cast<std::size_t>(role)];
      if (c == graph::kNoComm || w == 0) continue;
      adj[r].emplace_back(world + static_cast<std::uint32_t>(c), w);
      adj[world + static_cast<std::uint32_t>(c)].emplace_back(r, w);
      lg.vertex_weights[r] += w / 2;
      lg.vertex_weights[world + static_cast<std::uint32_t>(c)] += w / 2;
    }
  for (auto& a : adj) {
    std::sort(a.begin(), a.end());
    for (auto [n, w] : a) {
      lg.neighbours.push_back(n);
      lg.weights.push_back(w);
    }
    lg.offsets.push_back(static_cast<std::uint32_t>(lg.neighbours.size()));
  }
  return partitioner->assign(static_cast<std::uint32_t>(owner.size()), processes, &lg);
}

std::vector<bool> templates_needed(const graph::SlicedGraph& g,
                                   const std::vector<std::uint32_t>& owner, std::uint32_t process) {
  SCALESCOPE_EXPECTS(owner.size() >= g.world_size + g.comms.size());
  std::vector<bool> needed(g.templates.size(), false);
  for (std::uint32_t r = 0; r < g.world_size; ++r)
    if (owner[r] == process) needed[g.rank_class[r]] = true;
  for (std::uint32_t c = 0; c < g.comms.size(); ++c)
    if (owner[g.world_size + c] == process)
      for (const std::uint32_t* m = g.comms.members_begin(c); m != g.comms.members_end(c); ++m)
        needed[g.rank_class[*m]] = true;
  return needed;
}

DistributedResults emulate_distributed(const graph::SlicedGraph& g, const Costs& cost,
                                       const EmulationOptions& options, MPI_Comm comm) {
  int me = 0, size = 1;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &size);
  const std::optional<ReplicaMap> reps = replicas_of(g, cost, options);
  std::vector<std::uint32_t> owner =
      reps ? replica_owner(g, *reps, static_cast<std::uint32_t>(size))
           : partition_lps(g, static_cast<std::uint32_t>(size), options.partition,
                           options.dedicated_ranks);
  // The flow model's fabric LP goes to the last process, whose block holds the last ranks.
  if (cost.fabric != nullptr) owner.push_back(static_cast<std::uint32_t>(size - 1));
  const std::vector<bool> needed = templates_needed(g, owner, static_cast<std::uint32_t>(me));
  for (std::size_t k = 0; k < needed.size(); ++k)
    if (needed[k] && !g.is_loaded(k))
      throw ContractError(
          fmt::format("emulation: process {} needs template {} ('{}'), which was not loaded", me, k,
                      g.templates[k].name));
  // Every process checks its share; all refuse together (the largest need, the least room).
  Instance inst(g, cost, options, &owner, static_cast<std::uint32_t>(me), reps ? &*reps : nullptr,
                [&](std::uint64_t bytes, std::uint32_t ranks) {
                  std::uint64_t need[2] = {bytes, ranks};
                  std::uint64_t room = core::available_memory_bytes();
                  MPI_Allreduce(MPI_IN_PLACE, need, 2, MPI_UINT64_T, MPI_MAX, comm);
                  MPI_Allreduce(MPI_IN_PLACE, &room, 1, MPI_UINT64_T, MPI_MIN, comm);
                  check_replay_memory(need[0], room, static_cast<std::uint32_t>(need[1]),
                                      static_cast<std::uint32_t>(size));
                });
  pdes::OptimisticConfig config = options.optimistic;
  config.progress = options.progress;
  // Below a microsecond, two exchanges per window would cost more than the events in it; nor is
  // Time Warp's run-ahead bounded by default at less (an eager pipeline pair's gap is 1 ns).
  constexpr SimTime kLeastWindow = 1000;
  config.least_default_window = kLeastWindow;
  std::vector<SimTime> comm_gap(g.comms.size(), kTimeInfinity);
  const bool windows_asked = options.engine != EngineKind::Optimistic;  // conservative or auto
  if (size > 1 && (windows_asked || config.lookahead == 0)) {
    const RoleOps ops = role_ops(inst.data);
    for (std::uint32_t c = 0; c < g.comms.size(); ++c)
      if (const std::int32_t i = inst.index[g.world_size + c]; i >= 0)  // mine and replayed
        comm_gap[c] = inst.comms[static_cast<std::size_t>(i)].least_gap(ops);
    MPI_Allreduce(MPI_IN_PLACE, comm_gap.data(), static_cast<int>(comm_gap.size()), MPI_INT64_T,
                  MPI_MIN, comm);
  }
  pdes::OptimisticStats local, total;
  std::vector<pdes::OptimisticStats> per_process;
  // Windows of the least gap out of the communicators that hear from another process (they run
  // in each window's second phase: their ARRIVEs cross at the senders' instants); every other
  // edge between processes is such a communicator's COMPLETE (a rank sends only to its
  // communicators and itself, and a communicator whose members are all on its process sends
  // only there). Nothing crosses processes: one window.
  pdes::ConservativeConfig cc;
  SimTime window = kTimeInfinity;
  std::uint32_t tightest = 0;
  if (windows_asked) {
    cc.second_phase.assign(owner.size(), 0);
    for (std::uint32_t c = 0; c < g.comms.size(); ++c) {
      const std::uint32_t at = owner[g.world_size + c];
      if (std::none_of(g.comms.members_begin(c), g.comms.members_end(c),
                       [&](std::uint32_t m) { return owner[m] != at; }))
        continue;
      cc.second_phase[g.world_size + c] = 1;
      if (comm_gap[c] < window) {
        window = comm_gap[c];
        tightest = c;
      }
    }
  }
  const bool flow_across = cost.fabric != nullptr && size > 1;
  if (options.engine == EngineKind::Conservative && flow_across)
    throw_input(
        "run.engine: conservative does not run the flow model across processes (the fabric "
        "answers a transfer at its own instant); use run.engine: optimistic");
  if (options.engine == EngineKind::Conservative && window < kLeastWindow)
    throw_input(
        "run.engine: conservative: communicator {} spans processes and completes {} ns after "
        "its last arrival, so windows would be {} ns long; use run.engine: optimistic",
        tightest, window, window);
  // run.engine: auto takes the windows wherever they are allowed and at least a microsecond
  // long (docs/architecture.md, "Which engine, and why"), Time Warp elsewhere.
  const bool conservative = windows_asked && !flow_across && window >= kLeastWindow;
  if (conservative) {
    cc.progress = options.progress;
    cc.lookahead = window;
    pdes::ConservativeEngine engine(
        comm, owner, [&](pdes::LpId id) { return inst.lp(id); }, cc);
    const pdes::ConservativeStats mine = engine.run();
    // In the optimistic engine's terms: every event committed at execution, a window a round.
    local.events_processed = local.events_committed = local.committed_at_execution =
        mine.events_processed;
    local.remote_messages = mine.remote_messages;
    local.gvt_rounds = mine.windows;
    local.end_time = mine.end_time;
    local.max_run_ahead = window == kTimeInfinity ? 0 : window;  // 0: one window ran everything
    local.wall_s = mine.wall_s;
    local.gvt_s = mine.exchange_s;
    per_process.resize(static_cast<std::size_t>(size));
    MPI_Allgather(&local, sizeof local, MPI_BYTE, per_process.data(), sizeof local, MPI_BYTE, comm);
    // The engine's own reduction (events summed, times the largest).
    const pdes::ConservativeStats all = engine.total(mine);
    total = local;
    total.events_processed = total.events_committed = total.committed_at_execution =
        all.events_processed;
    total.remote_messages = all.remote_messages;
    total.wall_s = all.wall_s;
    total.gvt_s = all.exchange_s;
  } else {
    // The model's lookahead graph: a rank sends ARRIVE to its communicators at once (gap 0), a
    // communicator sends COMPLETE to its members at least its least wire time after the ARRIVE
    // that completes the instance, and the fabric and the communicators exchange flow events at
    // once. Each communicator's gap is priced by its owner (which holds its members' templates)
    // and shared. From it the engine commits a rank's events at execution below the bound on
    // any straggler, which for a rank that hears from other processes only through
    // data-parallel COMPLETEs is a gradient reduction's wire time past GVT (issue 42).
    if (size > 1 && config.lookahead == 0)
      config.lookahead_edges =
          [&](const std::function<void(pdes::LpId, pdes::LpId, SimTime)>& edge) {
            for (std::uint32_t c = 0; c < g.comms.size(); ++c) {
              const pdes::LpId lp = g.world_size + c;
              for (const std::uint32_t* m = g.comms.members_begin(c); m != g.comms.members_end(c);
                   ++m) {
                edge(*m, lp, 0);
                edge(lp, *m, comm_gap[c]);
              }
              if (cost.fabric != nullptr) {
                edge(lp, inst.data.fabric_lp(), 0);
                edge(inst.data.fabric_lp(), lp, 0);
              }
            }
          };
    pdes::OptimisticEngine engine(
        comm, owner, [&](pdes::LpId id) { return inst.lp(id); }, config);
    local = engine.run();
    total = engine.total(local);
    per_process = engine.gather(local);
  }

  int ok = 1;
  std::string why;
  try {
    inst.check_complete();
  } catch (const ContractError& e) {
    ok = 0;
    why = e.what();
  }
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
  if (!all_ok) throw ContractError(why.empty() ? "emulation deadlocked on another process" : why);

  inst.copy_counterparts(
      [&](std::uint32_t r) { return owner[r] == static_cast<std::uint32_t>(me); });
  DistributedResults d;
  d.process = static_cast<std::uint32_t>(me);
  d.processes = static_cast<std::uint32_t>(size);
  d.rank_owner.assign(owner.begin(), owner.begin() + g.world_size);
  for (const auto& entry : inst.out.timelines) d.traced_ranks.push_back(entry.first);
  d.local = std::move(inst.out);
  RunResults& out = d.local;
  // Keep only the traced ranks this process owns (the others stayed empty here).
  for (std::uint32_t r : d.traced_ranks)
    if (!d.owns(r)) {
      out.timelines.erase(r);
      out.memory.erase(r);
    }
  describe_replicas(out.engine, g, reps ? &*reps : nullptr);
  out.engine.kind = conservative ? "conservative" : "optimistic";
  out.engine.processes = static_cast<std::uint32_t>(size);
  out.engine.events_processed = total.events_processed;
  out.engine.events_committed = total.events_committed;
  out.engine.events_rolled_back = total.events_rolled_back;
  out.engine.remote_messages = total.remote_messages;
  out.engine.gvt_rounds = total.gvt_rounds;
  out.engine.rollbacks = total.rollbacks;
  out.engine.anti_messages = total.anti_messages;
  out.engine.committed_at_execution = total.committed_at_execution;
  out.engine.fossil_visits = total.fossil_visits;
  out.engine.max_run_ahead = total.max_run_ahead;
  out.engine.wall_s = total.wall_s;
  out.engine.gvt_s = total.gvt_s;
  out.engine.idle_s = total.idle_s;
  for (const pdes::OptimisticStats& p : per_process)
    out.engine.per_process.push_back(ProcessEngineStats{
        p.events_processed, p.events_committed, p.events_rolled_back, p.anti_messages,
        p.remote_messages, p.committed_at_execution, p.wall_s, p.gvt_s, p.idle_s});
  double bytes = 0;
  for (const RankLP& r : inst.ranks) bytes += static_cast<double>(r.state_bytes());
  MPI_Allreduce(MPI_IN_PLACE, &bytes, 1, MPI_DOUBLE, MPI_SUM, comm);
  out.engine.lp_bytes_per_rank = bytes / out.engine.replayed_ranks;
  out.engine.events_per_rank =
      static_cast<double>(total.events_committed) / out.engine.replayed_ranks;
  finish_results(out, cost);  // over the local rows; made global below
  Summary& s = out.summary;
  MPI_Allreduce(MPI_IN_PLACE, &s.iteration_time, 1, MPI_INT64_T, MPI_MAX, comm);
  MPI_Allreduce(MPI_IN_PLACE, &s.peak_memory_bytes, 1, MPI_INT64_T, MPI_MAX, comm);

  // The last-finishing rank (the lowest on a tie, as MAXLOC breaks ties) and its row.
  struct {
    long finish;
    int rank;
  } last{std::numeric_limits<long>::min(), std::numeric_limits<int>::max()}, global{};
  static_assert(sizeof(long) == sizeof(SimTime));
  for (std::uint32_t r = 0; r < g.world_size; ++r)
    if (d.owns(r) && out.ranks[r].finish > last.finish) {
      last.finish = out.ranks[r].finish;
      last.rank = static_cast<int>(r);
    }
  MPI_Allreduce(&last, &global, 1, MPI_LONG_INT, MPI_MAXLOC, comm);
  if (g.world_size > 0) {
    d.last_finishing_rank = static_cast<std::uint32_t>(global.rank);
    auto row = pack(out.ranks[d.last_finishing_rank]);
    MPI_Bcast(row.data(), kRankFields, MPI_INT64_T, static_cast<int>(owner[d.last_finishing_rank]),
              comm);
    out.ranks[d.last_finishing_rank] = unpack(row.data());
    out.critical_path = critical_path(
        g, d.last_finishing_rank, [&](std::uint32_t r) { return inst.rank_times(r); }, owner, comm);
  }
  return d;
}

void gather_traces(DistributedResults& d, MPI_Comm comm) {
  const int me = static_cast<int>(d.process);
  for (std::uint32_t r : d.traced_ranks) {
    gather_records(d.local.timelines[r], d.rank_owner[r], me, comm);
    gather_records(d.local.memory[r], d.rank_owner[r], me, comm);
    if (me != 0 && !d.owns(r)) {
      d.local.timelines.erase(r);
      d.local.memory.erase(r);
    }
  }
}

RunResults gather_results(DistributedResults d, MPI_Comm comm) {
  const auto world = static_cast<std::uint32_t>(d.rank_owner.size());
  // Per-rank table: each process packs only its ranks (others zero), so a sum gathers it.
  std::vector<std::int64_t> mine(static_cast<std::size_t>(world) * kRankFields, 0);
  for (std::uint32_t r = 0; r < world; ++r)
    if (d.owns(r)) {
      const auto v = pack(d.local.ranks[r]);
      std::copy(v.begin(), v.end(), mine.begin() + static_cast<std::ptrdiff_t>(r) * kRankFields);
    }
  std::vector<std::int64_t> all(d.process == 0 ? mine.size() : 0);
  MPI_Reduce(mine.data(), all.data(), static_cast<int>(mine.size()), MPI_INT64_T, MPI_SUM, 0, comm);
  gather_traces(d, comm);
  RunResults out = std::move(d.local);
  if (d.process == 0)
    for (std::uint32_t r = 0; r < world; ++r)
      out.ranks[r] = unpack(all.data() + static_cast<std::size_t>(r) * kRankFields);
  return out;
}

RunResults emulate_parallel(const graph::SlicedGraph& g, const Costs& cost,
                            const EmulationOptions& options, MPI_Comm comm) {
  return gather_results(emulate_distributed(g, cost, options, comm), comm);
}

}  // namespace scalescope::emu
