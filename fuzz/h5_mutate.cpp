#include "fuzz/h5_mutate.hpp"

#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

namespace scalescope::fuzz {

namespace {

struct Object {
  std::string path;  ///< the dataset, or the object holding the attribute
  std::string attr;  ///< empty for a dataset
};

herr_t collect_attr(hid_t, const char* name, const H5A_info_t*, void* op) {
  auto* ctx = static_cast<std::pair<std::vector<Object>*, std::string>*>(op);
  ctx->first->push_back({ctx->second, name});
  return 0;
}

herr_t collect(hid_t root, const char* name, const H5O_info_t* info, void* op) {
  auto* out = static_cast<std::vector<Object>*>(op);
  const std::string path = std::string("/") + (std::strcmp(name, ".") == 0 ? "" : name);
  if (info->type == H5O_TYPE_DATASET) out->push_back({path, ""});
  const hid_t obj = H5Oopen(root, path.c_str(), H5P_DEFAULT);
  if (obj < 0) return 0;
  std::pair<std::vector<Object>*, std::string> ctx{out, path};
  hsize_t idx = 0;
  H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, &ctx);
  H5Oclose(obj);
  return 0;
}

/// One boundary value: an integer, or a double.
struct Boundary {
  bool is_double;
  std::int64_t i;
  double d;
};
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::array<Boundary, 20> kBoundaries = {{
    {false, 0, 0},
    {false, -1, 0},
    {false, 1, 0},
    {false, std::int64_t{1} << 31, 0},
    {false, std::int64_t{1} << 32, 0},
    {false, std::numeric_limits<std::int64_t>::max(), 0},
    {false, std::numeric_limits<std::int64_t>::min(), 0},
    {false, (std::int64_t{1} << 50) + 1, 0},
    {false, 0xffff, 0},
    {false, 255, 0},
    {true, 0, std::numeric_limits<double>::quiet_NaN()},
    {true, 0, kInf},
    {true, 0, -kInf},
    {true, 0, 1e300},
    {true, 0, -1.0},
    {true, 0, 1e-320},
    {true, 0, 9.3e18},
    {true, 0, -0.0},
    {false, 0x7fffffff, 0},
    {false, 0xffffffff, 0},
}};

/// The boundary values an edit writes, as 8 raw bytes (the low bytes for narrower elements).
std::array<unsigned char, 8> boundary(unsigned pick) {
  const Boundary& v = kBoundaries[pick % kBoundaries.size()];
  std::array<unsigned char, 8> b{};
  if (v.is_double)
    std::memcpy(b.data(), &v.d, 8);
  else
    std::memcpy(b.data(), &v.i, 8);
  return b;
}

/// An open dataset or attribute with its type and element count.
struct Target {
  hid_t obj = -1, space = -1, type = -1;
  bool attr = false;
  bool variable = false;  ///< holds variable-length data (strings, vlen): replaced whole only
  std::size_t elem = 0, count = 0;
  Target(hid_t file, const Object& o) {
    if (o.attr.empty()) {
      obj = H5Dopen2(file, o.path.c_str(), H5P_DEFAULT);
      if (obj < 0) return;
      space = H5Dget_space(obj);
      type = H5Dget_type(obj);
    } else {
      attr = true;
      obj = H5Aopen_by_name(file, o.path.c_str(), o.attr.c_str(), H5P_DEFAULT, H5P_DEFAULT);
      if (obj < 0) return;
      space = H5Aget_space(obj);
      type = H5Aget_type(obj);
    }
    if (space < 0 || type < 0) return;
    variable = H5Tdetect_class(type, H5T_VLEN) > 0 || H5Tis_variable_str(type) > 0;
    elem = H5Tget_size(type);
    const hssize_t n = H5Sget_simple_extent_npoints(space);
    count = n > 0 ? static_cast<std::size_t>(n) : 0;
  }
  ~Target() {
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    if (obj >= 0) attr ? H5Aclose(obj) : H5Dclose(obj);
  }
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;
  bool ok() const { return obj >= 0 && space >= 0 && type >= 0 && elem > 0; }
  bool read(std::vector<unsigned char>& b) const {
    b.resize(elem * count);
    if (count == 0) return true;
    return (attr ? H5Aread(obj, type, b.data())
                 : H5Dread(obj, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, b.data())) >= 0;
  }
  void write(const std::vector<unsigned char>& b) const {
    if (count == 0) return;
    attr ? H5Awrite(obj, type, b.data())
         : H5Dwrite(obj, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, b.data());
  }
};

/// A variable-length string object: one element replaced by `text`.
void replace_string(const Target& t, std::size_t element, const std::string& text) {
  if (H5Tis_variable_str(t.type) <= 0 || t.count == 0) return;
  std::vector<char*> strings(t.count, nullptr);
  const hid_t mem = H5Tcopy(H5T_C_S1);
  H5Tset_size(mem, H5T_VARIABLE);
  H5Tset_cset(mem, H5Tget_cset(t.type));
  const bool read =
      (t.attr ? H5Aread(t.obj, mem, strings.data())
              : H5Dread(t.obj, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, strings.data())) >= 0;
  if (read) {
    std::vector<char*> edited = strings;
    edited[element % t.count] = const_cast<char*>(text.c_str());
    t.attr ? H5Awrite(t.obj, mem, edited.data())
           : H5Dwrite(t.obj, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, edited.data());
    H5Dvlen_reclaim(mem, t.space, H5P_DEFAULT, strings.data());
  }
  H5Tclose(mem);
}

/// Recreates dataset `path` with its first dimension `n` (its old elements first, then copies of
/// its last one); fixed-size elements only.
void resize_dataset(hid_t file, const std::string& path, std::size_t n) {
  std::vector<unsigned char> bytes;
  std::vector<hsize_t> dims;
  hid_t type = -1;
  std::size_t row = 0;
  {
    const Target t(file, {path, ""});
    if (!t.ok() || t.variable || !t.read(bytes)) return;
    const int rank = H5Sget_simple_extent_ndims(t.space);
    if (rank < 1) return;
    dims.resize(static_cast<std::size_t>(rank));
    H5Sget_simple_extent_dims(t.space, dims.data(), nullptr);
    row = t.elem;  // one row: the elements of every dimension but the first
    for (std::size_t d = 1; d < dims.size(); ++d) row *= static_cast<std::size_t>(dims[d]);
    type = H5Tcopy(t.type);
  }
  if (row == 0) {
    H5Tclose(type);
    return;
  }
  std::vector<unsigned char> grown(n * row, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t from = bytes.empty() ? 0 : std::min(i * row, bytes.size() - row);
    if (!bytes.empty()) std::memcpy(grown.data() + i * row, bytes.data() + from, row);
  }
  H5Ldelete(file, path.c_str(), H5P_DEFAULT);
  dims[0] = n;
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t d =
      H5Dcreate2(file, path.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (d >= 0) {
    if (n > 0) H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, grown.data());
    H5Dclose(d);
  }
  H5Sclose(space);
  H5Tclose(type);
}

}  // namespace

bool mutate_h5(const std::string& seed, const std::string& out, const std::uint8_t* data,
               std::size_t size) {
  std::error_code ec;
  std::filesystem::copy_file(seed, out, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return false;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t file = H5Fopen(out.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0) return false;
  std::vector<Object> objects;
  H5Ovisit(file, H5_INDEX_NAME, H5_ITER_INC, collect, &objects);
  FuzzedDataProvider in(data, size);
  for (int edit = 0; edit < 8 && in.remaining_bytes() > 0 && !objects.empty(); ++edit) {
    const unsigned op = in.ConsumeIntegralInRange<unsigned>(0, 5);
    const Object& o = objects[in.ConsumeIntegral<std::uint16_t>() % objects.size()];
    if (op == 3) {  // resize a dataset
      if (o.attr.empty())
        resize_dataset(file, o.path, in.ConsumeIntegralInRange<std::size_t>(0, 1024));
      continue;
    }
    if (op == 4) {  // delete the object
      if (o.attr.empty())
        H5Ldelete(file, o.path.c_str(), H5P_DEFAULT);
      else
        H5Adelete_by_name(file, o.path.c_str(), o.attr.c_str(), H5P_DEFAULT);
      continue;
    }
    const Target t(file, o);
    if (!t.ok()) continue;
    const std::size_t element = in.ConsumeIntegral<std::uint32_t>();
    if (op == 5 || t.variable) {  // replace a string
      replace_string(t, element, in.ConsumeRandomLengthString(256));
      continue;
    }
    std::vector<unsigned char> bytes;
    if (t.count == 0 || !t.read(bytes)) continue;
    if (op == 0) {  // overwrite raw bytes at a byte offset
      const std::size_t at = element % bytes.size();
      const std::string raw = in.ConsumeRandomLengthString(16);
      for (std::size_t i = 0; i < raw.size() && at + i < bytes.size(); ++i)
        bytes[at + i] = static_cast<unsigned char>(raw[i]);
    } else {  // a boundary value at an aligned offset of an element (op 1, 2)
      const std::array<unsigned char, 8> b = boundary(in.ConsumeIntegral<std::uint8_t>());
      const std::size_t width = op == 1 ? std::min<std::size_t>(8, t.elem) : 4;
      const std::size_t at = (element % bytes.size()) / width * width;
      for (std::size_t i = 0; i < width && at + i < bytes.size(); ++i) bytes[at + i] = b[i];
    }
    t.write(bytes);
  }
  H5Fclose(file);
  return true;
}

}  // namespace scalescope::fuzz
