// The top-level whatif: list (and --whatif) and the sweep: section of an experiment file.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/error.hpp"
#include "io/config_internal.hpp"

namespace scalescope::io {

namespace {

using detail::fail;
using detail::kCommandLine;
using detail::Keys;
using detail::kSweepKey;
using detail::kWhatifKey;
using detail::Origin;
using detail::parse_file;
using detail::Section;
using detail::Value;

/// One what-if: a mapping with one key, the kind, whose value maps its parameters.
emu::WhatIf parse_whatif(const Value& item, const std::string& text) {
  using Kind = emu::WhatIf::Kind;
  const std::vector<std::pair<std::string_view, Kind>> kinds = {
      {"slow_gpu", Kind::SlowGpu},
      {"degraded_nic", Kind::DegradedNic},
      {"failed_link", Kind::FailedLink},
      {"extra_latency", Kind::ExtraLatency},
      {"slow_dataloader", Kind::SlowDataLoader}};
  Keys names;
  for (const auto& k : kinds) names.push_back(k.first);
  if (!item.node.IsMap() || item.node.size() != 1)
    fail(item, "whatif",
         "each what-if is a mapping with one key: slow_gpu, degraded_nic, failed_link, "
         "extra_latency or slow_dataloader");
  const auto kv = *item.node.begin();
  const std::string kind = kv.first.Scalar();
  const auto it =
      std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == kind; });
  if (it == kinds.end())
    fail(item, "whatif",
         fmt::format("unknown what-if '{}'{}", kind, detail::did_you_mean(kind, names)));
  emu::WhatIf w;
  w.kind = it->second;
  w.text = text;
  const std::string key = fmt::format("whatif.{}", kind);
  const Value params{kv.second, item.origin};
  if (!kv.second.IsMap()) fail(params, key, "expected a mapping of its parameters");
  const std::map<Kind, Keys> allowed = {
      {Kind::SlowGpu, {"ranks", "nodes", "fraction", "seed", "factor"}},
      {Kind::DegradedNic, {"nodes", "fraction", "seed", "factor", "gbps"}},
      {Kind::FailedLink, {"leaf", "spine"}},
      {Kind::ExtraLatency, {"level", "us"}},
      {Kind::SlowDataLoader, {"ranks", "delay_us"}}};
  Section p;
  for (const auto& e : kv.second) {
    const std::string k = e.first.Scalar();
    const Keys& ok = allowed.at(w.kind);
    if (std::find(ok.begin(), ok.end(), k) == ok.end())
      fail(params, key + "." + k, "unknown key" + detail::did_you_mean(k, ok));
    p.insert_or_assign(k, Value{e.second, item.origin});
  }
  const auto list = [&](std::string_view k, std::vector<std::uint32_t>& out) {
    const auto f = p.find(k);
    if (f == p.end()) return;
    const Value& v = f->second;
    const std::string name = fmt::format("{}.{}", key, k);
    // A number, or a range "A-B" (both included), alone or in a list.
    const auto one = [&](const YAML::Node& x) {
      const std::string word = x.IsScalar() ? x.Scalar() : "";
      const std::size_t dash = word.find('-', 1);
      if (dash == std::string::npos) {
        const std::int64_t r = detail::read_int(Value{x, v.origin}, name);
        if (r < 0 || r > 0x7FFFFFFF) fail(v, name, "must be >= 0");
        out.push_back(static_cast<std::uint32_t>(r));
        return;
      }
      std::int64_t lo = -1, hi = -1;
      try {
        std::size_t a = 0, b = 0;
        lo = std::stoll(word.substr(0, dash), &a);
        hi = std::stoll(word.substr(dash + 1), &b);
        if (a != dash || b != word.size() - dash - 1) lo = -1;
      } catch (const std::exception&) {
        lo = -1;
      }
      if (lo < 0 || hi < lo || hi - lo >= (std::int64_t{1} << 24))
        fail(v, name,
             fmt::format("'{}': a range is FIRST-LAST with 0 <= FIRST <= LAST, at most 2^24 "
                         "of them",
                         word));
      for (std::int64_t r = lo; r <= hi; ++r) out.push_back(static_cast<std::uint32_t>(r));
    };
    if (v.node.IsScalar()) {
      one(v.node);
    } else if (v.node.IsSequence()) {
      for (const auto& x : v.node) one(x);
    } else {
      fail(v, name, "expected a number, a range FIRST-LAST or a list of them");
    }
  };
  const auto number = [&](std::string_view k, double& out) -> bool {
    const auto f = p.find(k);
    if (f == p.end()) return false;
    out = detail::read_double(f->second, fmt::format("{}.{}", key, k));
    return true;
  };
  const auto need = [&](bool ok, std::string_view what) {
    if (!ok) fail(params, key, std::string(what));
  };
  switch (w.kind) {
    case Kind::SlowGpu: {
      list("ranks", w.ranks);
      list("nodes", w.nodes);
      number("fraction", w.fraction);
      double seed = 0;
      if (number("seed", seed)) w.seed = static_cast<std::uint64_t>(seed);
      need(number("factor", w.factor) && w.factor > 0, "needs factor > 0 (compute time ×)");
      need(!w.ranks.empty() || !w.nodes.empty() || (w.fraction > 0 && w.fraction <= 1),
           "needs ranks, nodes or a fraction in (0, 1]");
      break;
    }
    case Kind::DegradedNic: {
      list("nodes", w.nodes);
      number("fraction", w.fraction);
      double seed = 0;
      if (number("seed", seed)) w.seed = static_cast<std::uint64_t>(seed);
      need(!w.nodes.empty() || (w.fraction > 0 && w.fraction <= 1),
           "needs nodes or a fraction in (0, 1] of the nodes");
      const bool factor = number("factor", w.factor), gbps = number("gbps", w.gbps);
      need(factor != gbps,
           "needs factor (the bandwidth kept, in (0, 1]) or gbps (the bandwidth "
           "left, Gb/s), one of them");
      need(gbps ? w.gbps > 0 : (w.factor > 0 && w.factor <= 1),
           gbps ? "needs gbps > 0" : "needs factor in (0, 1] (the bandwidth kept)");
      break;
    }
    case Kind::FailedLink: {
      double leaf = -1, spine = -1;
      need(number("leaf", leaf) && number("spine", spine) && leaf >= 0 && spine >= 0,
           "needs leaf and spine (indices >= 0)");
      w.leaf = static_cast<std::uint32_t>(leaf);
      w.spine = static_cast<std::uint32_t>(spine);
      break;
    }
    case Kind::ExtraLatency: {
      const auto f = p.find("level");
      need(f != p.end(), "needs level (nic, spine or core)");
      w.level = detail::read_choice(f->second, key + ".level", {"nic", "spine", "core"});
      need(number("us", w.latency_us) && w.latency_us >= 0, "needs us >= 0");
      break;
    }
    case Kind::SlowDataLoader:
      list("ranks", w.ranks);
      need(!w.ranks.empty(), "needs ranks");
      need(number("delay_us", w.delay_us) && w.delay_us >= 0, "needs delay_us >= 0");
      break;
  }
  return w;
}

/// A YAML node as one line of flow-style text.
std::string one_line(const YAML::Node& n) {
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

}  // namespace

std::vector<emu::WhatIf> read_whatifs(const std::string& path,
                                      const std::vector<std::string>& command_line) {
  std::vector<emu::WhatIf> out;
  if (!path.empty()) {
    const YAML::Node root = parse_file(path, "experiment file");
    const std::string k(kWhatifKey);
    if (root.IsMap() && root[k] && !root[k].IsNull()) {
      const Origin origin{path, "", true};
      if (!root[k].IsSequence())
        fail(Value{root[k], origin}, kWhatifKey, "expected a list of what-ifs");
      for (const auto& item : root[k])
        out.push_back(parse_whatif(Value{item, origin}, one_line(item)));
    }
  }
  for (const std::string& text : command_line) {
    YAML::Node n;
    try {
      n = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
      throw_input("--whatif '{}': malformed YAML: {}", text, e.msg);
    }
    out.push_back(parse_whatif(
        Value{n, Origin{std::string(kCommandLine), "--whatif " + text, false}}, one_line(n)));
  }
  return out;
}

SweepSpec read_sweep_spec(const std::string& path) {
  SweepSpec spec;
  const YAML::Node root = parse_file(path, "experiment file");
  const std::string sweep_key(kSweepKey);
  if (!root.IsMap() || !root[sweep_key]) return spec;
  const Origin origin{path, "", true};
  const YAML::Node sweep = root[sweep_key];
  if (sweep.IsNull()) return spec;
  if (!sweep.IsMap()) fail(Value{sweep, origin}, kSweepKey, "expected a mapping (vary, search)");
  for (const auto& kv : sweep) {
    const std::string key = kv.first.Scalar();
    const Value at{kv.second, origin};
    const std::string qualified = fmt::format("sweep.{}", key);
    if (key == "search") {
      spec.search = detail::read_string(at, qualified);
    } else if (key == "vary") {
      if (!kv.second.IsMap())
        fail(at, qualified, "expected a mapping of section.key to a list of values");
      for (const auto& axis : kv.second) {
        const std::string name = axis.first.Scalar();
        const Value values{axis.second, origin};
        const std::string where_axis = fmt::format("sweep.vary.{}", name);
        if (!axis.second.IsSequence() || axis.second.size() == 0)
          fail(values, where_axis, "expected a non-empty list of values");
        explore::Axis a;
        a.name = name;
        for (const YAML::Node& v : axis.second) {
          // The value as --set would read it: its YAML text in flow style (null: unset).
          std::string text;
          if (!v.IsNull()) {
            YAML::Emitter e;
            e << YAML::Flow << v;
            text = e.c_str();
          }
          const std::string o = name + "=" + text;
          try {
            check_override(o, path);
          } catch (const InputError& err) {
            // fail() names the file, line and key; the override's own message names the file
            // again ("PATH: override '…': …"), so that prefix goes.
            std::string what = err.what();
            if (const std::string prefix = path + ": "; what.rfind(prefix, 0) == 0)
              what.erase(0, prefix.size());
            fail(values, where_axis, what);
          }
          a.values.push_back({o});
        }
        spec.axes.push_back(std::move(a));
      }
    } else {
      fail(Value{kv.first, origin}, qualified,
           "unknown key" + detail::did_you_mean(key, Keys{"vary", "search"}));
    }
  }
  return spec;
}

}  // namespace scalescope::io
