#include "io/results_h5.hpp"

#include <cstddef>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "graph/op.hpp"
#include "io/h5.hpp"

namespace scalescope::io {

namespace {

constexpr std::uint32_t kFormatVersion = 1;

/// What one writer process puts in the file: everything (the serial writer), or its share of a
/// collective write. Both paths create the same objects with the same types, shapes, layouts and
/// attributes, so their files have the same content.
struct Share {
  bool collective = false;
  bool first = true;  ///< writes the small datasets every process knows (process 0)
  std::uint32_t world = 0;
  std::vector<emu::RankResult> rows;  ///< the /ranks rows written here, ascending rank
  std::vector<h5::Rows> rank_runs;    ///< where they go
  /// A traced rank's dataset: its length (known to every process) and, where written here,
  /// the records.
  template <class R>
  struct Traced {
    std::uint32_t rank = 0;
    hsize_t length = 0;
    const std::vector<R>* records = nullptr;
  };
  std::vector<Traced<emu::TimelineRecord>> timelines;
  std::vector<Traced<emu::MemoryRecord>> memory;
};

/// Writes a 1-D dataset of `total` elements: whole (serial), or created by every process and
/// filled by the rows each holds (collective; `data` holds the rows of `runs`, packed).
void put(const h5::Group& g, const std::string& name, hid_t mem_type, hid_t file_type,
         const void* data, std::size_t count, hsize_t total, const std::vector<h5::Rows>& runs,
         bool collective) {
  if (!collective) {
    g.write_raw(name, mem_type, file_type, data, count);
    return;
  }
  const h5::DataSet ds = g.create_dataset(name, file_type, {total});
  if (total > 0) ds.write_rows(mem_type, data, runs);
}

template <class T>
void put(const h5::Group& g, const std::string& name, const std::vector<T>& data, hsize_t total,
         const std::vector<h5::Rows>& runs, bool collective) {
  put(g, name, h5::native_type<T>(), h5::native_type<T>(), data.data(), data.size(), total, runs,
      collective);
}

/// Rows [0, n) where this process writes them, none elsewhere.
std::vector<h5::Rows> all_rows_if(bool mine, hsize_t n) {
  if (!mine) return {};
  return {h5::Rows{0, n}};
}

template <class T, class Get>
std::vector<T> column(const std::vector<emu::RankResult>& ranks, Get get) {
  std::vector<T> out;
  out.reserve(ranks.size());
  for (const auto& r : ranks) out.push_back(static_cast<T>(get(r)));
  return out;
}

/// In-memory layout of a timeline record (emu::TimelineRecord itself); stored packed.
h5::DataType timeline_type() {
  using R = emu::TimelineRecord;
  auto t = h5::DataType::compound(sizeof(R));
  t.insert<SimTime>("start_ns", offsetof(R, start))
      .insert<SimTime>("end_ns", offsetof(R, end))
      .insert<std::uint32_t>("op", offsetof(R, op))
      .insert<std::uint8_t>("stream", offsetof(R, stream))
      .insert<std::uint8_t>("kind", offsetof(R, kind))
      .insert<std::uint8_t>("phase", offsetof(R, phase))
      .insert<std::uint8_t>("name", offsetof(R, name))
      .insert<std::uint16_t>("layer", offsetof(R, layer))
      .insert<std::uint16_t>("microbatch", offsetof(R, microbatch));
  return t;
}

h5::DataType memory_type() {
  using R = emu::MemoryRecord;
  auto t = h5::DataType::compound(sizeof(R));
  t.insert<SimTime>("time_ns", offsetof(R, time))
      .insert<std::int64_t>("live_bytes", offsetof(R, live));
  return t;
}

/// A decoding table: names[i] is the name of enum value i.
template <class E, class Name>
std::vector<std::string> names(int count, Name name) {
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) out.emplace_back(name(static_cast<E>(i)));
  return out;
}

void write_summary(const h5::Group& root, const emu::Summary& s, const Share& share) {
  const h5::Group g = root.create_group("summary");
  g.set_attribute("world_size", s.world_size);
  g.set_attribute("iteration_time_s", s.iteration_time_s());
  g.set_attribute("iteration_time_ns", s.iteration_time);
  g.set_attribute("tokens_per_s", s.tokens_per_s());
  g.set_attribute("model_tflops_per_gpu", s.model_tflops_per_gpu());
  g.set_attribute("mfu", s.mfu());
  g.set_attribute("peak_memory_bytes", s.peak_memory_bytes);
  g.set_attribute("model", s.model_name);
  if (!s.software_stack.empty()) g.set_attribute("software_stack", s.software_stack);
  if (!s.pipeline_schedule.empty()) g.set_attribute("pipeline_schedule", s.pipeline_schedule);
  g.set_attribute("gpu", s.gpu);
  g.set_attribute("tokens_per_iteration", s.tokens_per_iteration);
  g.set_attribute("model_flops_per_iteration", s.model_flops_per_iteration);
  g.set_attribute("peak_flops_per_gpu", s.peak_flops_per_gpu);
  if (s.peak_lowp_flops_per_gpu > 0)  // peak_fp8_flops_per_gpu or peak_fp4_flops_per_gpu
    g.set_attribute(fmt::format("peak_{}_flops_per_gpu", s.lowp_format), s.peak_lowp_flops_per_gpu);
  if (!s.sandbox_ranks.empty()) {
    g.set_attribute("sandbox_functional_check",
                    static_cast<std::uint8_t>(s.sandbox_functional_check));
    g.set_attribute("sandbox_pure_replay_iteration_time_ns", s.sandbox_pure_replay_time);
  }
  if (!s.whatif.empty()) {
    g.set_attribute("whatif", s.whatif);
    g.set_attribute("whatif_baseline_iteration_time_s", ns_to_seconds(s.whatif_baseline_time));
    g.set_attribute("whatif_baseline_iteration_time_ns", s.whatif_baseline_time);
  }
  const auto& by_stage = s.peak_memory_bytes_by_pp_stage;
  put(g, "peak_memory_bytes_by_pp_stage", by_stage, by_stage.size(),
      all_rows_if(share.first, by_stage.size()), share.collective);
}

/// /memory_check: the capacity check and each stage's memory classes at its peak
/// (docs/formats.md).
void write_memory_check(const h5::Group& root, const emu::Summary& s, const Share& share) {
  if (s.memory_breakdown_by_pp_stage.empty()) return;
  const h5::Group g = root.create_group("memory_check");
  g.set_attribute("fits", static_cast<std::int32_t>(s.memory_fits ? 1 : 0));
  g.set_attribute("capacity_bytes", s.memory_capacity_bytes);
  g.set_attribute("tightest_rank", s.memory_tightest_rank);
  g.set_attribute("tightest_pp_stage", s.memory_tightest_stage);
  g.set_attribute("dominant_class", s.memory_dominant_class);
  const std::size_t stages = s.memory_breakdown_by_pp_stage.size();
  const h5::Group b = g.create_group("breakdown");
  for (std::size_t k = 0; k < s.memory_class_names.size(); ++k) {
    std::vector<std::int64_t> v;
    for (const auto& row : s.memory_breakdown_by_pp_stage) v.push_back(row[k]);
    put(b, s.memory_class_names[k] + "_bytes_by_pp_stage", v, stages,
        all_rows_if(share.first, stages), share.collective);
  }
  put(g, "total_bytes_by_pp_stage", s.memory_total_bytes_by_pp_stage, stages,
      all_rows_if(share.first, stages), share.collective);
  put(g, "allocated_bytes_by_pp_stage", s.memory_allocated_bytes_by_pp_stage, stages,
      all_rows_if(share.first, stages), share.collective);
  put(g, "reserved_bytes_by_pp_stage", s.memory_reserved_bytes_by_pp_stage, stages,
      all_rows_if(share.first, stages), share.collective);
}

void write_ranks(const h5::Group& root, const Share& share) {
  using R = emu::RankResult;
  const h5::Group g = root.create_group("ranks");
  const auto& rows = share.rows;
  auto col = [&](const std::string& name, const auto& values) {
    put(g, name, values, share.world, share.rank_runs, share.collective);
  };
  col("finish_ns", column<SimTime>(rows, [](const R& r) { return r.finish; }));
  col("compute_ns", column<SimTime>(rows, [](const R& r) { return r.compute; }));
  col("exposed_tp_ns", column<SimTime>(rows, [](const R& r) { return r.exposed_tp; }));
  col("exposed_pp_ns", column<SimTime>(rows, [](const R& r) { return r.exposed_pp; }));
  col("exposed_dp_ns", column<SimTime>(rows, [](const R& r) { return r.exposed_dp; }));
  col("exposed_embedding_ns",
      column<SimTime>(rows, [](const R& r) { return r.exposed_embedding; }));
  col("exposed_cp_ns", column<SimTime>(rows, [](const R& r) { return r.exposed_cp; }));
  col("exposed_ep_ns", column<SimTime>(rows, [](const R& r) { return r.exposed_ep; }));
  col("bubble_ns", column<SimTime>(rows, [](const R& r) { return r.bubble; }));
  col("straggler_wait_ns", column<SimTime>(rows, [](const R& r) { return r.straggler_wait; }));
  col("host_wait_ns", column<SimTime>(rows, [](const R& r) { return r.host_wait; }));
  col("other_wait_ns", column<SimTime>(rows, [](const R& r) { return r.other_wait; }));
  col("peak_memory_bytes", column<std::int64_t>(rows, [](const R& r) { return r.peak_memory; }));
  col("static_memory_bytes",
      column<std::int64_t>(rows, [](const R& r) { return r.static_memory; }));
  col("pp_stage", column<std::uint32_t>(rows, [](const R& r) { return r.pp_stage; }));
  col("class", column<std::uint32_t>(rows, [](const R& r) { return r.rank_class; }));
}

template <class R>
void write_traced(const h5::Group& g, const h5::DataType& mem,
                  const std::vector<Share::Traced<R>>& traced, bool collective) {
  const h5::DataType stored = mem.packed();
  for (const auto& t : traced) {
    const R* data = t.records != nullptr ? t.records->data() : nullptr;
    const std::size_t count = t.records != nullptr ? t.records->size() : 0;
    put(g, std::to_string(t.rank), mem.id(), stored.id(), data, count, t.length,
        all_rows_if(t.records != nullptr, t.length), collective);
  }
}

void write_timelines(const h5::Group& root, const Share& share) {
  const h5::Group g = root.create_group("timeline");
  g.set_attribute("stream_names", names<graph::Stream>(graph::kNumStreams, [](auto v) {
                    return graph::stream_name(v);
                  }));
  g.set_attribute("op_names", names<graph::OpName>(static_cast<int>(graph::OpName::Count),
                                                   [](auto v) { return graph::op_name(v); }));
  g.set_attribute("kind_names", names<graph::OpKind>(graph::kNumOpKinds, [](auto v) {
                    return graph::op_kind_name(v);
                  }));
  g.set_attribute("phase_names", names<graph::Phase>(static_cast<int>(graph::Phase::Other) + 1,
                                                     [](auto v) { return graph::phase_name(v); }));
  write_traced(g, timeline_type(), share.timelines, share.collective);
}

void write_memory(const h5::Group& root, const emu::RunResults& r, const Share& share) {
  const h5::Group g = root.create_group("memory");
  write_traced(g, memory_type(), share.memory, share.collective);
  // /memory/breakdown: each traced rank's memory classes at its peak (its stage's, since the
  // ranks of a stage share one template), one dataset per class in traced-rank order.
  const emu::Summary& s = r.summary;
  if (s.memory_breakdown_by_pp_stage.empty() || share.memory.empty()) return;
  const h5::Group b = g.create_group("breakdown");
  const hsize_t n = share.memory.size();
  std::vector<std::uint32_t> ranks;
  for (const auto& t : share.memory) ranks.push_back(t.rank);
  put(b, "ranks", ranks, n, all_rows_if(share.first, n), share.collective);
  for (std::size_t k = 0; k < s.memory_class_names.size(); ++k) {
    std::vector<std::int64_t> v;
    for (std::uint32_t rank : ranks)
      v.push_back(s.memory_breakdown_by_pp_stage[r.ranks[rank].pp_stage][k]);
    put(b, s.memory_class_names[k] + "_bytes", v, n, all_rows_if(share.first, n), share.collective);
  }
}

/// /critical_path: the segments of the chain that set the iteration time, in time order, and the
/// totals per kind (docs/formats.md). Identical on every process of a parallel run.
void write_critical_path(const h5::Group& root, const emu::CriticalPath& p, const Share& share) {
  const h5::Group g = root.create_group("critical_path");
  std::vector<std::string> kinds;
  for (int k = 0; k < emu::kNumPathKinds; ++k)
    kinds.emplace_back(emu::path_kind_name(static_cast<emu::PathKind>(k)));
  g.set_attribute("kinds", kinds);
  const hsize_t n = p.segments.size();
  std::vector<std::int64_t> start, end;
  std::vector<std::uint32_t> rank, op;
  std::vector<std::uint8_t> kind;
  for (const emu::PathSegment& s : p.segments) {
    start.push_back(s.start);
    end.push_back(s.end);
    rank.push_back(s.rank);
    op.push_back(s.op);
    kind.push_back(static_cast<std::uint8_t>(s.kind));
  }
  const auto rows = all_rows_if(share.first, n);
  put(g, "start_ns", start, n, rows, share.collective);
  put(g, "end_ns", end, n, rows, share.collective);
  put(g, "rank", rank, n, rows, share.collective);
  put(g, "op", op, n, rows, share.collective);
  put(g, "kind", kind, n, rows, share.collective);
  const std::vector<std::int64_t> totals(p.totals.begin(), p.totals.end());
  put(g, "totals_ns", totals, totals.size(), all_rows_if(share.first, totals.size()),
      share.collective);
}

void write_engine(const h5::Group& root, const emu::EngineStats& e, const Share& share) {
  const h5::Group g = root.create_group("engine");
  g.set_attribute("kind", e.kind);
  g.set_attribute("processes", e.processes);
  g.set_attribute("events_processed", e.events_processed);
  g.set_attribute("events_committed", e.events_committed);
  g.set_attribute("events_rolled_back", e.events_rolled_back);
  g.set_attribute("rollbacks", e.rollbacks);
  g.set_attribute("anti_messages", e.anti_messages);
  g.set_attribute("remote_messages", e.remote_messages);
  g.set_attribute("gvt_rounds", e.gvt_rounds);
  g.set_attribute("committed_at_execution", e.committed_at_execution);
  g.set_attribute("fossil_visits", e.fossil_visits);
  g.set_attribute("max_run_ahead_s", ns_to_seconds(e.max_run_ahead));
  g.set_attribute("wall_s", e.wall_s);
  g.set_attribute("gvt_s", e.gvt_s);
  g.set_attribute("idle_s", e.idle_s);
  g.set_attribute("events_per_virtual_rank", e.events_per_rank);
  g.set_attribute("lp_state_bytes_per_virtual_rank", e.lp_bytes_per_rank);
  g.set_attribute("replicas", e.replicas);
  g.set_attribute("replica_count", e.replica_count);
  g.set_attribute("replayed_ranks", e.replayed_ranks);
  if (e.per_process.empty()) return;
  // One row per process (optimistic engine): what each did, and where its wall time went.
  const std::vector<emu::ProcessEngineStats>& p = e.per_process;
  const hsize_t n = p.size();
  const auto rows = all_rows_if(share.first, n);
  auto column = [&]<class T>(const std::string& name, T emu::ProcessEngineStats::*field) {
    std::vector<T> v;
    for (const auto& s : p) v.push_back(s.*field);
    put(g, "process_" + name, v, n, rows, share.collective);
  };
  column("events_processed", &emu::ProcessEngineStats::events_processed);
  column("events_committed", &emu::ProcessEngineStats::events_committed);
  column("events_rolled_back", &emu::ProcessEngineStats::events_rolled_back);
  column("anti_messages", &emu::ProcessEngineStats::anti_messages);
  column("remote_messages", &emu::ProcessEngineStats::remote_messages);
  column("committed_at_execution", &emu::ProcessEngineStats::committed_at_execution);
  column("wall_s", &emu::ProcessEngineStats::wall_s);
  column("gvt_s", &emu::ProcessEngineStats::gvt_s);
  column("idle_s", &emu::ProcessEngineStats::idle_s);
}

void write_file(h5::File& file, const emu::RunResults& r, const Share& share) {
  {
    const h5::Group root = file.root();
    const h5::Group meta = root.create_group("meta");
    meta.set_attribute("format_version", kFormatVersion);
    meta.set_attribute("config_text", r.config_text);
    write_summary(root, r.summary, share);
    write_memory_check(root, r.summary, share);
    write_ranks(root, share);
    write_timelines(root, share);
    write_memory(root, r, share);
    write_critical_path(root, r.critical_path, share);
    write_engine(root, r.engine, share);
  }
  file.close();
}

}  // namespace

void write_results_h5(const emu::RunResults& r, const std::string& path) {
  Share share;
  share.world = static_cast<std::uint32_t>(r.ranks.size());
  share.rows = r.ranks;
  for (const auto& [rank, records] : r.timelines)
    share.timelines.push_back({rank, records.size(), &records});
  for (const auto& [rank, records] : r.memory)
    share.memory.push_back({rank, records.size(), &records});
  write_via_temporary(path, [&](const std::string& tmp) {
    h5::File file = h5::File::create(tmp, path);
    write_file(file, r, share);
  });
}

void write_results_h5(const emu::DistributedResults& d, const std::string& path, MPI_Comm comm) {
  const emu::RunResults& r = d.local;
  Share share;
  share.collective = true;
  share.first = d.process == 0;
  share.world = static_cast<std::uint32_t>(d.rank_owner.size());
  SCALESCOPE_EXPECTS(r.ranks.size() == share.world);
  for (std::uint32_t rank = 0; rank < share.world; ++rank) {
    if (!d.owns(rank)) continue;
    share.rows.push_back(r.ranks[rank]);
    if (!share.rank_runs.empty() &&
        share.rank_runs.back().first + share.rank_runs.back().count == rank)
      ++share.rank_runs.back().count;
    else
      share.rank_runs.push_back({rank, 1});
  }
  // Every process creates every traced rank's datasets, so all must know their lengths: the
  // owner contributes them, the others zero.
  const std::size_t n = d.traced_ranks.size();
  std::vector<std::uint64_t> lengths(2 * n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t rank = d.traced_ranks[i];
    if (!d.owns(rank)) continue;
    if (auto it = r.timelines.find(rank); it != r.timelines.end()) lengths[i] = it->second.size();
    if (auto it = r.memory.find(rank); it != r.memory.end()) lengths[n + i] = it->second.size();
  }
  MPI_Allreduce(MPI_IN_PLACE, lengths.data(), static_cast<int>(lengths.size()), MPI_UINT64_T,
                MPI_SUM, comm);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t rank = d.traced_ranks[i];
    const auto tl = d.owns(rank) ? r.timelines.find(rank) : r.timelines.end();
    const auto mem = d.owns(rank) ? r.memory.find(rank) : r.memory.end();
    share.timelines.push_back({rank, lengths[i], tl != r.timelines.end() ? &tl->second : nullptr});
    share.memory.push_back({rank, lengths[n + i], mem != r.memory.end() ? &mem->second : nullptr});
  }
  write_via_temporary(path, comm, [&](const std::string& tmp) {
    h5::File file = h5::File::create(tmp, path, comm);
    write_file(file, r, share);
  });
}

}  // namespace scalescope::io
