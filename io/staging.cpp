#include "io/staging.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>

namespace scalescope::io {

namespace fs = std::filesystem;

fs::path staging_dir(const fs::path& target, long pid) {
  fs::path stage = target;
  stage += ".partial-" + std::to_string(pid);
  return stage;
}

void remove_stale_staging(const fs::path& target) {
  std::error_code ec;
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string stem = target.filename().string() + ".partial-";
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(stem, 0) != 0) continue;
    const std::string digits = name.substr(stem.size());
    if (digits.empty() || digits.size() > 9 ||
        !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      continue;
    const long pid = std::stol(digits);
    std::error_code age_ec;
    const auto age = fs::file_time_type::clock::now() - fs::last_write_time(e.path(), age_ec);
    if (!age_ec && age > std::chrono::minutes(10) && pid != ::getpid() &&
        ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::error_code rm;
      fs::remove_all(e.path(), rm);
    }
  }
}

}  // namespace scalescope::io
