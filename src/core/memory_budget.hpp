#pragma once
/// The memory this process may still allocate, read before a large allocation so that a replay
/// too big for the machine is refused with what it needs ("needs N GiB") instead of ending in
/// std::bad_alloc or the kernel's OOM killer (issue 38).
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>

namespace scalescope::core {

namespace detail {

/// A "Key:   N kB" line of a /proc file, in bytes (max when absent).
inline std::uint64_t proc_kib(const char* file, const std::string& key) {
  std::ifstream in(file);
  const std::string prefix = key + ":";
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) {
      try {
        return std::stoull(line.substr(prefix.size())) * 1024;
      } catch (...) {
        break;
      }
    }
  return std::numeric_limits<std::uint64_t>::max();
}

/// One number in a cgroup v2 file (max for "max" or when absent).
inline std::uint64_t cgroup_value(const char* file) {
  std::ifstream in(file);
  std::string text;
  if (!(in >> text) || text == "max") return std::numeric_limits<std::uint64_t>::max();
  try {
    return std::stoull(text);
  } catch (...) {
    return std::numeric_limits<std::uint64_t>::max();
  }
}

}  // namespace detail

/// The smallest of: the kernel's MemAvailable, the cgroup's memory.max less memory.current, and
/// the address-space and data limits (ulimit -v / -d) less this process's virtual size.
inline std::uint64_t available_memory_bytes() {
  constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t avail = detail::proc_kib("/proc/meminfo", "MemAvailable");
  const std::uint64_t cg_max = detail::cgroup_value("/sys/fs/cgroup/memory.max");
  const std::uint64_t cg_now = detail::cgroup_value("/sys/fs/cgroup/memory.current");
  if (cg_max != kNone && cg_now != kNone)
    avail = std::min(avail, cg_max > cg_now ? cg_max - cg_now : 0);
  const std::uint64_t vm = detail::proc_kib("/proc/self/status", "VmSize");
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    rlimit lim{};
    if (getrlimit(resource, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY || vm == kNone) continue;
    const auto cur = static_cast<std::uint64_t>(lim.rlim_cur);
    avail = std::min(avail, cur > vm ? cur - vm : 0);
  }
  return avail;
}

}  // namespace scalescope::core
