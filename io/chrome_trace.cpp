#include "io/chrome_trace.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <iterator>
#include <ostream>
#include <set>
#include <string_view>

#include "core/units.hpp"
#include "graph/op.hpp"
#include "io/h5.hpp"

namespace scalescope::io {

namespace {

constexpr std::size_t kFlushBytes = 1 << 20;

/// Streams events as text: one JSON object per line, flushed to the file every MiB, so the
/// trace never sits in memory as a JSON tree.
class EventWriter {
 public:
  explicit EventWriter(std::ostream& os) : os_(os) { append("{\"traceEvents\":["); }

  /// Starts an event object (the caller appends it whole).
  fmt::memory_buffer& next() {
    append(first_ ? "\n" : ",\n");
    first_ = false;
    return buf_;
  }
  void end() {
    if (buf_.size() >= kFlushBytes) flush();
  }
  void finish() {
    append("\n],\"displayTimeUnit\":\"ns\"}\n");
    flush();
  }

 private:
  void append(std::string_view s) { buf_.append(s.data(), s.data() + s.size()); }
  void flush() {
    os_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }
  std::ostream& os_;
  fmt::memory_buffer buf_;
  bool first_ = true;
};

/// Nanoseconds as microseconds with exactly three decimals: exact, no floating-point rounding.
void append_us(fmt::memory_buffer& buf, SimTime ns) {
  auto out = std::back_inserter(buf);
  std::uint64_t magnitude =
      ns < 0 ? 0 - static_cast<std::uint64_t>(ns) : static_cast<std::uint64_t>(ns);
  if (ns < 0) fmt::format_to(out, "-");
  fmt::format_to(out, "{}.{:03}", magnitude / 1000, magnitude % 1000);
}

void write_metadata(EventWriter& w, std::uint32_t rank) {
  fmt::format_to(
      std::back_inserter(w.next()),
      R"({{"name":"process_name","ph":"M","pid":{},"tid":0,"args":{{"name":"rank {}"}}}})", rank,
      rank);
  w.end();
  for (int s = 0; s < graph::kNumStreams; ++s) {
    fmt::format_to(std::back_inserter(w.next()),
                   R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"{}"}}}})",
                   rank, s, graph::stream_name(static_cast<graph::Stream>(s)));
    w.end();
  }
}

void write_op(EventWriter& w, std::uint32_t rank, const emu::TimelineRecord& rec) {
  fmt::memory_buffer& buf = w.next();
  auto out = std::back_inserter(buf);
  fmt::format_to(out, R"({{"name":"{})", graph::op_name(static_cast<graph::OpName>(rec.name)));
  if (rec.layer != graph::kNoIndex) fmt::format_to(out, " L{}", rec.layer);
  if (rec.microbatch != graph::kNoIndex) fmt::format_to(out, " mb{}", rec.microbatch);
  fmt::format_to(out, R"(","cat":"{}","ph":"X","pid":{},"tid":{},"ts":)",
                 graph::phase_name(static_cast<graph::Phase>(rec.phase)), rank, rec.stream);
  append_us(buf, rec.start);
  fmt::format_to(out, R"(,"dur":)");
  append_us(buf, rec.end - rec.start);
  fmt::format_to(out, R"(,"args":{{"op":{},"kind":"{}"}}}})", rec.op,
                 graph::op_kind_name(static_cast<graph::OpKind>(rec.kind)));
  w.end();
}

void write_memory(EventWriter& w, std::uint32_t rank, const emu::MemoryRecord& rec) {
  fmt::memory_buffer& buf = w.next();
  fmt::format_to(std::back_inserter(buf),
                 R"({{"name":"memory_GiB","ph":"C","pid":{},"tid":0,"ts":)", rank);
  append_us(buf, rec.time);
  fmt::format_to(std::back_inserter(buf), R"(,"args":{{"live":{}}}}})",
                 static_cast<double>(rec.live) / units::kGiB);
  w.end();
}

/// The critical path as a process of its own: a thread per rank it visits, a slice per segment,
/// and a flow arrow wherever it moves from one rank to another (a transfer whose last member to
/// arrive was elsewhere).
void write_critical_path(EventWriter& w, const emu::CriticalPath& p) {
  constexpr std::uint64_t kPid = 1'000'000'000;  // no rank has this id
  fmt::format_to(
      std::back_inserter(w.next()),
      R"({{"name":"process_name","ph":"M","pid":{},"tid":0,"args":{{"name":"critical path"}}}})",
      kPid);
  w.end();
  std::set<std::uint32_t> ranks;
  for (const emu::PathSegment& seg : p.segments) ranks.insert(seg.rank);
  for (std::uint32_t rank : ranks) {
    fmt::format_to(
        std::back_inserter(w.next()),
        R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"rank {}"}}}})", kPid,
        rank, rank);
    w.end();
  }
  std::uint64_t flow = 0;
  for (std::size_t i = 0; i < p.segments.size(); ++i) {
    const emu::PathSegment& seg = p.segments[i];
    auto& buf = w.next();
    fmt::format_to(std::back_inserter(buf),
                   R"({{"name":"{}","cat":"critical_path","ph":"X","pid":{},"tid":{},"ts":)",
                   emu::path_kind_name(seg.kind), kPid, seg.rank);
    append_us(buf, seg.start);
    fmt::format_to(std::back_inserter(buf), R"(,"dur":)");
    append_us(buf, seg.end - seg.start);
    fmt::format_to(std::back_inserter(buf), R"(,"args":{{"rank":{},"op":{}}}}})", seg.rank, seg.op);
    w.end();
    if (i + 1 < p.segments.size() && p.segments[i + 1].rank != seg.rank) {
      // An arrow from the end of this segment to the start of the next, on the other rank.
      ++flow;
      auto& s = w.next();
      fmt::format_to(
          std::back_inserter(s),
          R"({{"name":"path","cat":"critical_path","ph":"s","id":{},"pid":{},"tid":{},"ts":)", flow,
          kPid, seg.rank);
      append_us(s, seg.end - 1 > seg.start ? seg.end - 1 : seg.start);
      fmt::format_to(std::back_inserter(s), "}}");
      w.end();
      const emu::PathSegment& next = p.segments[i + 1];
      auto& f = w.next();
      fmt::format_to(
          std::back_inserter(f),
          R"({{"name":"path","cat":"critical_path","ph":"f","bp":"e","id":{},"pid":{},"tid":{},"ts":)",
          flow, kPid, next.rank);
      append_us(f, next.start);
      fmt::format_to(std::back_inserter(f), "}}");
      w.end();
    }
  }
}

}  // namespace

void write_chrome_trace(const emu::RunResults& r, const std::string& path) {
  std::set<std::uint32_t> ranks;
  for (const auto& entry : r.timelines) ranks.insert(entry.first);
  for (const auto& entry : r.memory) ranks.insert(entry.first);
  write_text_via_temporary(path, [&](std::ostream& os) {
    EventWriter w(os);
    for (std::uint32_t rank : ranks) {
      write_metadata(w, rank);
      if (auto it = r.timelines.find(rank); it != r.timelines.end())
        for (const auto& rec : it->second) write_op(w, rank, rec);
      if (auto it = r.memory.find(rank); it != r.memory.end())
        for (const auto& rec : it->second) write_memory(w, rank, rec);
    }
    if (!r.critical_path.empty()) write_critical_path(w, r.critical_path);
    w.finish();
  });
}

}  // namespace scalescope::io
