// libFuzzer target for the Chakra ET reader (issue 11): arbitrary bytes as one rank's trace.
// Decoding, then importing the file as a one-rank trace, must either succeed or throw InputError
// (a one-line message); anything else — a crash, a sanitizer report, another exception — is a bug.
// Build and run: docs/fuzzing.md.
#include <cstdint>
#include <string>

#include "fuzz/fuzz_common.hpp"
#include "io/chakra_et.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    (void)scalescope::io::decode_chakra(bytes, "fuzz.0.et");
  } catch (const scalescope::InputError&) {
    return 0;
  }
  // It decodes: import it as a one-rank trace (graph checks, groups, dependencies).
  static const std::string prefix = scalescope::fuzz::scratch("");
  scalescope::fuzz::write_file(prefix + ".0.et", bytes);
  scalescope::fuzz::expect_checked([&] { (void)scalescope::io::read_chakra(prefix); });
  return 0;
}
