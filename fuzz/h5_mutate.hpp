#pragma once
/// Structure-aware mutation of an HDF5 file for the graph.h5 and capture.h5 fuzz targets
/// (docs/fuzzing.md). Bytes that corrupt HDF5's own structures test HDF5's parser, not ours; what
/// our readers own is what they do with the values, shapes and strings of a well-formed file. So
/// the fuzz input is a script of edits applied to a copy of a valid seed file: overwrite bytes of
/// a dataset or attribute, write a boundary value (0, −1, 2^31, 2^32, 2^63−1, −2^63, NaN, ±Inf,
/// 1e300, ...) at an element, resize a dataset's first dimension, delete an object, replace a
/// string. Variable-length data is only ever replaced whole (its raw bytes are pointers).
#include <cstddef>
#include <cstdint>
#include <string>

namespace scalescope::fuzz {

/// Copies `seed` to `out` and applies the edits that `data` describes (at most 8). Returns
/// false when the seed cannot be read (a harness error, reported by the caller).
bool mutate_h5(const std::string& seed, const std::string& out, const std::uint8_t* data,
               std::size_t size);

}  // namespace scalescope::fuzz
