#pragma once
// Helpers of the io/config tests (config_test.cpp, config_error_test.cpp,
// config_megatron_test.cpp): the repository's files, a scratch directory per test, a small valid
// experiment to edit, and the InputError a file gives.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/config.hpp"

namespace scalescope::io::config_test {

namespace fs = std::filesystem;

inline const fs::path kRepo = SCALESCOPE_SOURCE_DIR;
inline std::string repo(const std::string& rel) {
  return (kRepo / rel).string();
}

inline fs::path scratch_root() {
  return fs::temp_directory_path() / ("scalescope_config_test_" + std::to_string(::getpid()));
}

/// A fresh directory for the running test.
inline fs::path scratch() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir = scratch_root() / (std::string(info->test_suite_name()) + "." + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

inline void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

/// Writes `text` to `p` and returns the path, for load_experiment.
inline std::string put(const fs::path& p, const std::string& text) {
  write(p, text);
  return p.string();
}

/// A small valid experiment, as ordered (section, key, value) lines, that cases edit.
class Yaml {
 public:
  Yaml() {
    rows_ = {{"model", "num_layers", "4"},
             {"model", "hidden_size", "256"},
             {"model", "num_attention_heads", "8"},
             {"model", "vocab_size", "1000"},
             {"model", "seq_length", "128"},
             {"parallel", "tp", "2"},
             {"parallel", "pp", "2"},
             {"parallel", "dp", "2"},
             {"training", "micro_batch_size", "1"},
             {"training", "global_batch_size", "4"},
             {"cluster", "preset", "dgx-a100"},
             {"cluster", "num_gpus", "8"},
             {"run", "trace_ranks", "[0, 7]"}};
  }
  /// Sets (or adds) section.key.
  Yaml& set(const std::string& section, const std::string& key, const std::string& value) {
    for (auto& r : rows_)
      if (r[0] == section && r[1] == key) {
        r[2] = value;
        return *this;
      }
    rows_.push_back({section, key, value});
    return *this;
  }
  Yaml& drop(const std::string& section, const std::string& key) {
    std::erase_if(rows_, [&](const auto& r) { return r[0] == section && r[1] == key; });
    return *this;
  }
  std::string text() const {
    std::string out;
    for (const char* s : {"model", "parallel", "training", "cluster", "run"}) {
      out += std::string(s) + ":\n";
      for (const auto& r : rows_)
        if (r[0] == s) out += "  " + r[1] + ": " + r[2] + "\n";
    }
    return out;
  }

 private:
  std::vector<std::array<std::string, 3>> rows_;
};

/// Loads `text` from <dir>/<file> and returns the InputError message ("" if none was thrown).
inline std::string error_of(const fs::path& dir, const std::string& text,
                            const std::vector<std::string>& overrides = {},
                            const std::string& file = "case.yaml") {
  write(dir / file, text);
  try {
    load_experiment((dir / file).string(), overrides);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

/// The message names the file and the key, and is one line.
inline void expect_names(const std::string& message, const std::string& file,
                         const std::string& key) {
  EXPECT_NE(message, "") << "no InputError for " << key;
  EXPECT_NE(message.find(file), std::string::npos) << message;
  EXPECT_NE(message.find(key), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}
}  // namespace scalescope::io::config_test
