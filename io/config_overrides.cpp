// Command-line overrides: "section.key=value" (--set), checked against the key tables and
// applied to the merged sections.
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "io/config_internal.hpp"

namespace scalescope::io {

namespace detail {

namespace {

/// One "section.key=value" override, checked: a known section and key (its canonical name) and
/// a value that parses as YAML (null: unset).
struct ParsedOverride {
  std::string section;
  std::string key;
  std::string subkey;  ///< cluster.topology.<subkey>: one key of that mapping
  YAML::Node value;
};

ParsedOverride parse_override(const std::string& text, const std::string& experiment) {
  const auto bad = [&](std::string_view what) {
    throw_input("{}: override '{}': {}", experiment, text, what);
  };
  const auto eq = text.find('=');
  if (eq == std::string::npos) bad("expected key.path=value");
  std::string path = text.substr(0, eq);
  path.erase(0, path.find_first_not_of(" \t"));
  path.erase(path.find_last_not_of(" \t") + 1);
  const auto dot = path.find('.');
  ParsedOverride o;
  // cluster.topology.<key>: one key of the topology mapping.
  constexpr std::string_view kTopologyPrefix = "cluster.topology.";
  if (path.rfind(kTopologyPrefix, 0) == 0) {
    o.subkey = path.substr(kTopologyPrefix.size());
    if (std::find(kTopologyKeys.begin(), kTopologyKeys.end(), o.subkey) == kTopologyKeys.end())
      bad(fmt::format("cluster.topology.{}: unknown key{}", o.subkey,
                      detail::did_you_mean(o.subkey, kTopologyKeys)));
    path.erase(path.size() - o.subkey.size() - 1);
  } else if (dot == std::string::npos || path.find('.', dot + 1) != std::string::npos) {
    bad(fmt::format("key '{}' must be section.key (e.g. parallel.tp=4)", path));
  }
  o.section = path.substr(0, dot);
  const std::string key = path.substr(dot + 1);
  if (std::find(kSections.begin(), kSections.end(), o.section) == kSections.end())
    bad(fmt::format("{}: unknown section{}", o.section,
                    detail::did_you_mean(o.section, kSections)));
  const Keys allowed = section_keys(o.section);
  const std::string_view name = canonical(o.section, key, allowed);
  if (name.empty()) {
    Keys known = allowed;
    if (o.section == "parallel")
      for (const auto& [alias, full] : kParallelAliases) known.push_back(alias);
    bad(fmt::format("{}.{}: unknown key{}", o.section, key, detail::did_you_mean(key, known)));
  }
  o.key = std::string(name);
  try {
    o.value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::ParserException& e) {
    bad(fmt::format("{}.{}: malformed YAML value: {}", o.section, o.key, e.msg));
  }
  return o;
}

}  // namespace

/// Applies one "section.key=value" override; the value is parsed as YAML, empty means unset.
void apply_override(Tree& t, const std::string& text, const std::string& experiment) {
  ParsedOverride o = parse_override(text, experiment);
  Section& s = t[o.section];
  if (!o.subkey.empty()) {
    // One key of a mapping value: merged into what the file wrote (the preset's mapping is merged
    // under both in build_cluster).
    YAML::Node map(YAML::NodeType::Map);
    if (const auto it = s.find(o.key); it != s.end() && it->second.node.IsMap())
      map = YAML::Clone(it->second.node);
    if (o.value.IsNull())
      map.remove(o.subkey);
    else
      map[o.subkey] = o.value;
    s.insert_or_assign(o.key, Value{map, Origin{experiment, text, false}});
    return;
  }
  if (o.value.IsNull())
    s.erase(o.key);
  else
    s.insert_or_assign(o.key, Value{o.value, Origin{experiment, text, false}});
}

}  // namespace detail

namespace {

using detail::kCommandLine;
using detail::parse_override;

}  // namespace

void check_override(const std::string& text, const std::string& experiment) {
  parse_override(text, experiment.empty() ? std::string(kCommandLine) : experiment);
}

}  // namespace scalescope::io
