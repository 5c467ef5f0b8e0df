#pragma once
/// What every libFuzzer target here shares (docs/fuzzing.md): a per-process scratch file under
/// /dev/shm, and the contract every reader is held to: for any input it returns, or it throws
/// InputError or IoError (a one-line message). Any other exception escapes and libFuzzer reports
/// it as a crash (an uncaught exception aborts); a sanitizer report is a crash too.
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace scalescope::fuzz {

/// A scratch path private to this process: /dev/shm/scalescope-fuzz-PID<suffix>.
inline std::string scratch(std::string_view suffix) {
  return "/dev/shm/scalescope-fuzz-" + std::to_string(::getpid()) + std::string(suffix);
}

inline void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Runs `body`; a one-line input or I/O error is an accepted outcome.
template <class Body>
void expect_checked(Body&& body) {
  try {
    body();
  } catch (const InputError&) {
  } catch (const IoError&) {
  }
}

}  // namespace scalescope::fuzz
