#pragma once
/// Internal helpers of the configuration loader (io/config.cpp, io/hf_config.cpp): where a value
/// was written, typed reads that fail with a one-line InputError naming the file and the key,
/// and "did you mean" suggestions. Not part of the public interface (io/config.hpp).
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace scalescope::io::detail {

/// Where a value came from: a YAML file (node marks are its line:column), a JSON file, or a
/// command-line override "key.path=value".
struct Origin {
  std::string file;           ///< the file named in messages (the experiment for an override)
  std::string override_text;  ///< the "key.path=value" text when the value is an override
  bool has_marks = true;      ///< node marks are positions in `file`
};

/// One configuration value and its origin.
struct Value {
  YAML::Node node;
  Origin origin;
};

/// Message prefix "file:line:col: key" (or "file: override 'text': key") for `v`.
std::string where(const Value& v, std::string_view key);
/// Throws InputError "<where>: <what>".
[[noreturn]] void fail(const Value& v, std::string_view key, std::string_view what);

std::int64_t read_int(const Value& v, std::string_view key);
std::int64_t read_positive_int(const Value& v, std::string_view key);  ///< > 0
double read_double(const Value& v, std::string_view key);
bool read_bool(const Value& v, std::string_view key);
std::string read_string(const Value& v, std::string_view key);  ///< non-empty scalar
/// A string that must be one of `allowed`.
std::string read_choice(const Value& v, std::string_view key,
                        const std::vector<std::string_view>& allowed);

/// " (did you mean 'x'?)" when a known word is close to `word` (edit distance), else "".
std::string did_you_mean(std::string_view word, const std::vector<std::string_view>& known);

/// Shortest text that reads back as the same double ("0.1", not "0.10000000000000001").
std::string format_double(double x);

/// The model keys (canonical names, see docs/config.md) that a Hugging Face config.json
/// defines, as a YAML mapping. Throws InputError naming the file and the JSON key.
YAML::Node hf_model_keys(const std::string& path);

}  // namespace scalescope::io::detail
