#include "io/results_h5.hpp"

#include <cstddef>
#include <string>
#include <vector>

#include "graph/op.hpp"
#include "io/h5.hpp"

namespace scalescope::io {

namespace {

constexpr std::uint32_t kFormatVersion = 1;

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

void write_summary(const h5::Group& root, const emu::Summary& s) {
  const h5::Group g = root.create_group("summary");
  g.set_attribute("world_size", s.world_size);
  g.set_attribute("iteration_time_s", s.iteration_time_s());
  g.set_attribute("iteration_time_ns", s.iteration_time);
  g.set_attribute("tokens_per_s", s.tokens_per_s());
  g.set_attribute("model_tflops_per_gpu", s.model_tflops_per_gpu());
  g.set_attribute("mfu", s.mfu());
  g.set_attribute("peak_memory_bytes", s.peak_memory_bytes);
  g.set_attribute("model", s.model_name);
  g.set_attribute("gpu", s.gpu);
  g.set_attribute("tokens_per_iteration", s.tokens_per_iteration);
  g.set_attribute("model_flops_per_iteration", s.model_flops_per_iteration);
  g.set_attribute("peak_flops_per_gpu", s.peak_flops_per_gpu);
  g.write("peak_memory_bytes_by_pp_stage", s.peak_memory_bytes_by_pp_stage);
}

void write_ranks(const h5::Group& root, const std::vector<emu::RankResult>& ranks) {
  using R = emu::RankResult;
  const h5::Group g = root.create_group("ranks");
  g.write("finish_ns", column<SimTime>(ranks, [](const R& r) { return r.finish; }));
  g.write("compute_ns", column<SimTime>(ranks, [](const R& r) { return r.compute; }));
  g.write("exposed_tp_ns", column<SimTime>(ranks, [](const R& r) { return r.exposed_tp; }));
  g.write("exposed_pp_ns", column<SimTime>(ranks, [](const R& r) { return r.exposed_pp; }));
  g.write("exposed_dp_ns", column<SimTime>(ranks, [](const R& r) { return r.exposed_dp; }));
  g.write("other_wait_ns", column<SimTime>(ranks, [](const R& r) { return r.other_wait; }));
  g.write("peak_memory_bytes",
          column<std::int64_t>(ranks, [](const R& r) { return r.peak_memory; }));
  g.write("static_memory_bytes",
          column<std::int64_t>(ranks, [](const R& r) { return r.static_memory; }));
  g.write("pp_stage", column<std::uint32_t>(ranks, [](const R& r) { return r.pp_stage; }));
  g.write("class", column<std::uint32_t>(ranks, [](const R& r) { return r.rank_class; }));
}

void write_timelines(const h5::Group& root, const emu::RunResults& r) {
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
  const h5::DataType mem = timeline_type();
  const h5::DataType stored = mem.packed();
  for (const auto& [rank, records] : r.timelines)
    g.write_raw(std::to_string(rank), mem.id(), stored.id(), records.data(), records.size());
}

void write_memory(const h5::Group& root, const emu::RunResults& r) {
  const h5::Group g = root.create_group("memory");
  const h5::DataType mem = memory_type();
  const h5::DataType stored = mem.packed();
  for (const auto& [rank, records] : r.memory)
    g.write_raw(std::to_string(rank), mem.id(), stored.id(), records.data(), records.size());
}

void write_engine(const h5::Group& root, const emu::EngineStats& e) {
  const h5::Group g = root.create_group("engine");
  g.set_attribute("kind", e.kind);
  g.set_attribute("processes", e.processes);
  g.set_attribute("events_processed", e.events_processed);
  g.set_attribute("events_committed", e.events_committed);
  g.set_attribute("events_rolled_back", e.events_rolled_back);
  g.set_attribute("remote_messages", e.remote_messages);
  g.set_attribute("gvt_rounds", e.gvt_rounds);
  g.set_attribute("wall_s", e.wall_s);
}

}  // namespace

void write_results_h5(const emu::RunResults& r, const std::string& path) {
  write_via_temporary(path, [&](const std::string& tmp) {
    h5::File file = h5::File::create(tmp, path);
    {
      const h5::Group root = file.root();
      const h5::Group meta = root.create_group("meta");
      meta.set_attribute("format_version", kFormatVersion);
      meta.set_attribute("config_text", r.config_text);
      write_summary(root, r.summary);
      write_ranks(root, r.ranks);
      write_timelines(root, r);
      write_memory(root, r);
      write_engine(root, r.engine);
    }
    file.close();
  });
}

}  // namespace scalescope::io
