// libFuzzer target for the experiment reader (io/config.hpp load_experiment) with `--set`
// overrides. The input is an experiment file, optionally followed by a line "#--set" and one
// override per line ("section.key=value"), so the shipped experiments are seeds as they are.
// load_experiment must return or throw InputError / IoError (fuzz_common.hpp).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "io/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::size_t mark = text.find("\n#--set\n");
  std::vector<std::string> overrides;
  if (mark != std::string_view::npos) {
    std::string_view rest = text.substr(mark + 8);
    while (!rest.empty() && overrides.size() < 16) {
      const std::size_t eol = rest.find('\n');
      overrides.emplace_back(rest.substr(0, eol));
      rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    }
  }
  // Beside the shipped experiments (their relative preset and config paths resolve as there);
  // .gitignore keeps such files out.
  static const std::string path = std::string(SCALESCOPE_SOURCE_DIR) +
                                  "/inputs/experiments/.fuzz-" + std::to_string(::getpid()) +
                                  ".yaml";
  static const bool cleanup = [] {
    std::atexit([] { std::remove(path.c_str()); });
    return true;
  }();
  (void)cleanup;
  scalescope::fuzz::write_file(path, text.substr(0, mark));
  scalescope::fuzz::expect_checked([&] {
    for (const std::string& o : overrides) scalescope::io::check_override(o, path);
    (void)scalescope::io::load_experiment(path, overrides);
  });
  return 0;
}
