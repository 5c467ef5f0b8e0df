// Presets (model.preset, cluster.preset): where a preset file is looked for and how it is read.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "io/config_internal.hpp"

namespace scalescope::io::detail {

/// Directory against which a path written in `v` is resolved: the file's own directory, or the
/// current directory for a command-line override.
fs::path base_dir(const Value& v) {
  if (!v.origin.override_text.empty()) return fs::path{};
  return fs::path(v.origin.file).parent_path();
}

/// Finds preset `v` of `kind` ("models", "clusters"). A name is searched in
/// <experiment dir>/../<kind>/, <experiment dir>/, then the repository's inputs/<kind>/; a value
/// that looks like a path (has '/' or ends in .yaml/.yml) is taken as a file.
fs::path find_preset(const Value& v, std::string_view key, std::string_view kind,
                     const fs::path& experiment_dir) {
  const std::string name = detail::read_string(v, key);
  const fs::path as_path(name);
  const std::string ext = as_path.extension().string();
  if (name.find('/') != std::string::npos || ext == ".yaml" || ext == ".yml") {
    const fs::path p = as_path.is_absolute() ? as_path : base_dir(v) / as_path;
    if (!detail::is_file(p)) fail(v, key, fmt::format("preset file {} not found", display(p)));
    return p;
  }
  std::vector<fs::path> candidates = {experiment_dir / ".." / kind / (name + ".yaml"),
                                      experiment_dir / (name + ".yaml")};
#ifdef SCALESCOPE_SOURCE_DIR
  candidates.push_back(fs::path(SCALESCOPE_SOURCE_DIR) / "inputs" / kind / (name + ".yaml"));
#endif
  std::vector<std::string> tried;
  for (const fs::path& c : candidates) {
    if (detail::is_file(c)) return c;
    tried.push_back(display(c));
  }
  fail(v, key, fmt::format("no preset '{}' (looked for {})", name, fmt::join(tried, ", ")));
}

/// Reads a preset file of `section` (a mapping of the keys, without the section header).
Section read_preset(const fs::path& p, std::string_view section, const Keys& allowed) {
  const YAML::Node n = parse_file(p, fmt::format("{} preset", section));
  return read_section(n, Origin{display(p), "", true}, section, allowed, true);
}

}  // namespace scalescope::io::detail
