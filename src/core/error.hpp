#pragma once
/// Typed errors raised at the edges (bad input, I/O). Each message names the file, key or rank,
/// so the CLI can print it as one line and exit non-zero.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace scalescope {

/// Bad user input: a config file, a key, an impossible plan, an unknown GPU.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A file that cannot be read or written, or whose content is corrupt.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Violated internal contract: a bug, never the user's fault.
class ContractError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

template <class... Args>
[[noreturn]] void throw_input(fmt::format_string<Args...> f, Args&&... args) {
  throw InputError(fmt::format(f, std::forward<Args>(args)...));
}

template <class... Args>
[[noreturn]] void throw_io(fmt::format_string<Args...> f, Args&&... args) {
  throw IoError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace scalescope

/// Contract check kept in every build type: simulation bugs must never turn into silent wrong
/// answers, and the checks sit outside the per-event hot loops.
#define SCALESCOPE_EXPECTS(cond)                                                          \
  do {                                                                                    \
    if (!(cond))                                                                          \
      throw ::scalescope::ContractError(std::string("contract violated: " #cond " at ") + \
                                        __FILE__ + ":" + std::to_string(__LINE__));       \
  } while (0)
