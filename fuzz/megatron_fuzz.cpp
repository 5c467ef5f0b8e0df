// libFuzzer target for the Megatron-LM launch-line parser (io/megatron_args.hpp) and the
// loader's derivations from it (load_experiment with no file: the launch line alone, then on the
// dgx-h100 preset). Both must return or throw InputError / IoError (fuzz_common.hpp).
#include <cstdint>
#include <string>

#include "fuzz/fuzz_common.hpp"
#include "io/config.hpp"
#include "io/megatron_args.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  scalescope::fuzz::expect_checked(
      [&] { (void)scalescope::io::detail::parse_megatron_args(text, "--megatron-args"); });
  scalescope::fuzz::expect_checked(
      [&] { (void)scalescope::io::load_experiment("", {"cluster.preset=dgx-h100"}, text); });
  return 0;
}
