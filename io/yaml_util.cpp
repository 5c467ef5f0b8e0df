#include "io/yaml_util.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.hpp"

namespace scalescope::io::detail {

namespace {

/// What the user wrote, for "expected X, got Y" messages.
std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar:
      return fmt::format("'{}'", n.Scalar());
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "nothing";
  }
}

template <class T>
T convert_scalar(const Value& v, std::string_view key, std::string_view expected) {
  if (!v.node.IsScalar())
    fail(v, key, fmt::format("expected {}, got {}", expected, describe(v.node)));
  try {
    return v.node.as<T>();
  } catch (const YAML::Exception&) {
    fail(v, key, fmt::format("expected {}, got {}", expected, describe(v.node)));
  }
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0U : 1U)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string where(const Value& v, std::string_view key) {
  if (!v.origin.override_text.empty())
    return fmt::format("{}: override '{}': {}", v.origin.file, v.origin.override_text, key);
  const YAML::Mark mark = v.node.Mark();
  if (v.origin.has_marks && mark.line >= 0)
    return fmt::format("{}:{}:{}: {}", v.origin.file, mark.line + 1, mark.column + 1, key);
  return fmt::format("{}: {}", v.origin.file, key);
}

void fail(const Value& v, std::string_view key, std::string_view what) {
  throw InputError(fmt::format("{}: {}", where(v, key), what));
}

std::int64_t read_int(const Value& v, std::string_view key) {
  return convert_scalar<std::int64_t>(v, key, "an integer");
}

std::int64_t read_positive_int(const Value& v, std::string_view key) {
  const std::int64_t x = read_int(v, key);
  if (x <= 0) fail(v, key, fmt::format("must be > 0, got {}", x));
  return x;
}

double read_double(const Value& v, std::string_view key) {
  const double x = convert_scalar<double>(v, key, "a number");
  if (!std::isfinite(x)) fail(v, key, fmt::format("must be finite, got {}", describe(v.node)));
  return x;
}

bool read_bool(const Value& v, std::string_view key) {
  return convert_scalar<bool>(v, key, "true or false");
}

std::string read_string(const Value& v, std::string_view key) {
  auto s = convert_scalar<std::string>(v, key, "a string");
  if (s.empty()) fail(v, key, "must not be empty");
  return s;
}

std::string read_choice(const Value& v, std::string_view key,
                        const std::vector<std::string_view>& allowed) {
  const std::string s = read_string(v, key);
  if (std::find(allowed.begin(), allowed.end(), s) == allowed.end())
    fail(v, key,
         fmt::format("'{}' is not one of {}{}", s, fmt::join(allowed, "|"),
                     did_you_mean(s, allowed)));
  return s;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string_view>& known) {
  // A suggestion is worth making for a typo (a few edits), not for an unrelated word.
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 4);
  std::string_view best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (std::string_view k : known) {
    const std::size_t d = edit_distance(word, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  if (best.empty() || best_d > limit || best_d == 0) return "";
  return fmt::format(" (did you mean '{}'?)", best);
}

std::string format_double(double x) {
  return fmt::format("{}", x);
}

}  // namespace scalescope::io::detail
