// libFuzzer target for the experiment reader (io/config.hpp load_experiment) with `--set`
// overrides. The input is an experiment file, optionally followed by a line "#--set" and one
// override per line ("section.key=value"), so the shipped experiments are seeds as they are.
// load_experiment must return or throw InputError / IoError (fuzz_common.hpp).
#include <cstdint>
#include <cstdlib>
#include <filesystem>
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
  // In a scratch tree whose inputs/ folders link to the shipped ones, so that the experiments'
  // relative paths (../hf/…, ../models/…) resolve as they do beside them.
  static const std::string path = [] {
    const std::filesystem::path root = scalescope::fuzz::scratch("-inputs");
    const std::filesystem::path inputs = std::filesystem::path(SCALESCOPE_SOURCE_DIR) / "inputs";
    std::error_code ec;
    std::filesystem::create_directories(root / "experiments", ec);
    for (const auto& e : std::filesystem::directory_iterator(inputs, ec))
      if (e.path().filename() != "experiments")
        std::filesystem::create_directory_symlink(e.path(), root / e.path().filename(), ec);
    std::atexit([] { std::filesystem::remove_all(scalescope::fuzz::scratch("-inputs")); });
    return (root / "experiments" / "fuzz.yaml").string();
  }();
  scalescope::fuzz::write_file(path, text.substr(0, mark));
  scalescope::fuzz::expect_checked([&] {
    for (const std::string& o : overrides) scalescope::io::check_override(o, path);
    (void)scalescope::io::load_experiment(path, overrides);
  });
  return 0;
}
