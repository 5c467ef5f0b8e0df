// libFuzzer target for the Chakra ET reader (issue 11): arbitrary bytes as one rank's trace.
// Decoding, then importing the file as a one-rank trace, must either succeed or throw InputError
// (a one-line message); anything else — a crash, a sanitizer report, another exception — is a bug.
// Build: CXX=clang++ cmake -S . -B build-fuzz -DSCALESCOPE_FUZZ=ON && cmake --build build-fuzz
// --target chakra_fuzz; run: build-fuzz/chakra_fuzz -max_total_time=30 (scripts/test.sh does,
// when clang is present).
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "io/chakra_et.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    (void)scalescope::io::decode_chakra(bytes, "fuzz.0.et");
  } catch (const scalescope::InputError&) {
    return 0;
  }
  // It decodes: import it as a one-rank trace (graph checks, groups, dependencies).
  static const std::string prefix = "/dev/shm/scalescope-fuzz-" + std::to_string(::getpid());
  {
    std::ofstream out(prefix + ".0.et", std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  try {
    (void)scalescope::io::read_chakra(prefix);
  } catch (const scalescope::InputError&) {
  } catch (const scalescope::IoError&) {
  }
  return 0;
}
