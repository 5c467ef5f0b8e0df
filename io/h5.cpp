#include "io/h5.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "core/error.hpp"

namespace scalescope::io {

void write_via_temporary(const std::string& path,
                         const std::function<void(const std::string& tmp_path)>& body) {
  const std::string tmp = path + ".tmp";
  try {
    body(tmp);
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw_io("{}: cannot rename {} into place: {}", path, tmp, std::strerror(errno));
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

void write_text_via_temporary(const std::string& path,
                              const std::function<void(std::ostream& out)>& body) {
  write_via_temporary(path, [&](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw_io("{}: cannot open {} for writing: {}", path, tmp, std::strerror(errno));
    body(out);
    out.flush();
    if (!out) throw_io("{}: write failed: {}", path, std::strerror(errno));
    out.close();
    if (out.fail()) throw_io("{}: cannot close {}: {}", path, tmp, std::strerror(errno));
  });
}

void write_via_temporary(const std::string& path, MPI_Comm comm,
                         const std::function<void(const std::string& tmp_path)>& body) {
  int me = 0;
  MPI_Comm_rank(comm, &me);
  const std::string tmp = path + ".tmp";
  std::string error;
  try {
    body(tmp);
  } catch (const std::exception& e) {
    error = e.what();
  }
  try {
    raise_if_failed_anywhere(comm, error);
  } catch (...) {
    if (me == 0) std::remove(tmp.c_str());
    throw;
  }
  // Every process has closed the file (a collective close): process 0 moves it into place.
  if (me == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = fmt::format("{}: cannot rename {} into place: {}", path, tmp, std::strerror(errno));
    std::remove(tmp.c_str());
  }
  raise_if_failed_anywhere(comm, error);
}

}  // namespace scalescope::io

namespace scalescope::io::h5 {

namespace {

/// Datasets larger than this are chunked and compressed (smaller ones gain nothing).
constexpr std::size_t kCompressAbove = 64 * 1024;
/// Target bytes per chunk of a compressed dataset.
constexpr std::size_t kChunkBytes = 256 * 1024;

herr_t innermost_error(unsigned n, const H5E_error2_t* err, void* data) {
  if (n == 0 && err != nullptr && err->desc != nullptr)
    *static_cast<std::string*>(data) = err->desc;
  return 0;
}

/// The most specific message on HDF5's error stack (where the failure was detected), then clears
/// the stack. Walking upward starts at the innermost frame.
std::string take_hdf5_message() {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_error, &msg);
  H5Eclear2(H5E_DEFAULT);
  std::replace(msg.begin(), msg.end(), '\n', ' ');
  return msg;
}

std::string where(const std::string& file, const std::string& object) {
  return object.empty() ? file : file + ": " + object;
}

/// IoError "<file>: <object>: <what> (<HDF5's innermost message>)"; one line.
[[noreturn]] void raise(const std::string& file, const std::string& object, std::string_view what) {
  std::string hdf5 = take_hdf5_message();
  std::string msg = where(file, object) + ": " + std::string(what);
  if (!hdf5.empty()) msg += " (" + hdf5 + ")";
  throw IoError(msg);
}

hid_t check_id(hid_t id, const std::string& file, const std::string& object,
               std::string_view what) {
  if (id < 0) raise(file, object, what);
  return id;
}

void check(herr_t rc, const std::string& file, const std::string& object, std::string_view what) {
  if (rc < 0) raise(file, object, what);
}

bool check_tri(htri_t rc, const std::string& file, const std::string& object,
               std::string_view what) {
  if (rc < 0) raise(file, object, what);
  return rc > 0;
}

const std::string kTypeLabel = "HDF5 datatype";

std::string describe(H5T_class_t cls, std::size_t size, bool is_signed) {
  switch (cls) {
    case H5T_INTEGER:
      return fmt::format("{}{}", is_signed ? 'i' : 'u', size * 8);
    case H5T_FLOAT:
      return fmt::format("f{}", size * 8);
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    default:
      return fmt::format("type class {}", static_cast<int>(cls));
  }
}

/// Checks that a stored type is exactly `expected` (class, size, sign), so that no silent
/// conversion (clamping an out-of-range value, truncating a float) hides a corrupt file.
void check_stored_type(hid_t stored, const TypeInfo& expected, const std::string& file,
                       const std::string& object) {
  H5T_class_t cls = H5Tget_class(stored);
  if (cls == H5T_NO_CLASS) raise(file, object, "cannot query the stored type");
  std::size_t size = H5Tget_size(stored);
  if (size == 0) raise(file, object, "cannot query the stored type size");
  bool is_signed = false;
  if (cls == H5T_INTEGER) {
    H5T_sign_t sign = H5Tget_sign(stored);
    if (sign == H5T_SGN_ERROR) raise(file, object, "cannot query the stored type sign");
    is_signed = sign == H5T_SGN_2;
  }
  if (cls == H5T_FLOAT) is_signed = true;
  if (cls != expected.cls || size != expected.size ||
      (cls == H5T_INTEGER && is_signed != expected.is_signed))
    throw IoError(fmt::format("{}: stored as {}, expected {}", where(file, object),
                              describe(cls, size, is_signed),
                              describe(expected.cls, expected.size, expected.is_signed)));
}

Id string_type_like(hid_t stored, const std::string& file, const std::string& object) {
  H5T_cset_t cset = H5Tget_cset(stored);
  if (cset == H5T_CSET_ERROR) raise(file, object, "cannot query the string character set");
  Id mem(check_id(H5Tcopy(H5T_C_S1), file, object, "cannot copy the string type"), H5Tclose);
  check(H5Tset_cset(mem.get(), cset), file, object, "cannot set the character set");
  return mem;
}

herr_t reclaim_strings(hid_t type, hid_t space, void* buffer) {
#if H5_VERSION_GE(1, 12, 0)
  return H5Treclaim(type, space, H5P_DEFAULT, buffer);
#else
  return H5Dvlen_reclaim(type, space, H5P_DEFAULT, buffer);
#endif
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Id

Id& Id::operator=(Id&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    closer_ = other.closer_;
    other.id_ = H5I_INVALID_HID;
  }
  return *this;
}

herr_t Id::close() noexcept {
  herr_t rc = 0;
  if (id_ >= 0 && closer_ != nullptr) rc = closer_(id_);
  id_ = H5I_INVALID_HID;
  return rc;
}

void silence_errors() {
  static const bool silenced = [] {
    if (H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) < 0)
      throw IoError("HDF5: cannot switch off automatic error printing");
    return true;
  }();
  (void)silenced;
}

Id file_access_plist(const std::string& label, MPI_Comm comm) {
  Id fapl(check_id(H5Pcreate(H5P_FILE_ACCESS), label, "", "cannot create a file-access list"),
          H5Pclose);
  if (comm == MPI_COMM_NULL)
    check(H5Pset_fapl_sec2(fapl.get()), label, "", "cannot select the sec2 driver");
  else
    check(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL), label, "",
          "cannot select the MPI-IO driver");
  // The 1.8 format checksums object headers, links and attributes: a corrupt file is reported
  // instead of being read as data. Pinned at both ends so the bytes do not change with the
  // library version.
  check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18), label, "",
        "cannot set the format bounds");
  // SEMI: closing a file that still has open objects fails instead of deferring the close (also
  // the MPI-IO driver's default, so switching drivers keeps the behaviour).
  check(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_SEMI), label, "",
        "cannot set the file close degree");
  return fapl;
}

// ---------------------------------------------------------------------------------------------
// DataType

DataType DataType::compound(std::size_t size) {
  silence_errors();
  return DataType(
      Id(check_id(H5Tcreate(H5T_COMPOUND, size), kTypeLabel, "", "cannot create a compound type"),
         H5Tclose));
}

DataType DataType::variable_string() {
  silence_errors();
  Id id(check_id(H5Tcopy(H5T_C_S1), kTypeLabel, "", "cannot copy the string type"), H5Tclose);
  check(H5Tset_size(id.get(), H5T_VARIABLE), kTypeLabel, "", "cannot make a variable string");
  check(H5Tset_cset(id.get(), H5T_CSET_UTF8), kTypeLabel, "", "cannot set UTF-8");
  return DataType(std::move(id));
}

DataType& DataType::insert(const std::string& name, std::size_t offset, hid_t member_type) {
  check(H5Tinsert(id(), name.c_str(), offset, member_type), kTypeLabel, "",
        "cannot insert compound member '" + name + "'");
  return *this;
}

DataType DataType::packed() const {
  Id copy(check_id(H5Tcopy(id()), kTypeLabel, "", "cannot copy a compound type"), H5Tclose);
  check(H5Tpack(copy.get()), kTypeLabel, "", "cannot pack a compound type");
  return DataType(std::move(copy));
}

// ---------------------------------------------------------------------------------------------
// Location: attributes

std::string Location::child_path(const std::string& name) const {
  return path_ == "/" ? "/" + name : path_ + "/" + name;
}

void Location::fail(std::string_view what) const {
  throw IoError(where(file(), path_) + ": " + std::string(what));
}

bool Location::has_attribute(const std::string& name) const {
  return check_tri(H5Aexists(id(), name.c_str()), file(), path_,
                   "cannot look up attribute '" + name + "'");
}

namespace {

Id open_attribute(const Location& loc, const std::string& name) {
  if (!loc.has_attribute(name)) loc.fail("missing attribute '" + name + "'");
  return Id(check_id(H5Aopen(loc.id(), name.c_str(), H5P_DEFAULT), loc.file(), loc.path(),
                     "cannot open attribute '" + name + "'"),
            H5Aclose);
}

Id create_attribute(const Location& loc, const std::string& name, hid_t type, hid_t space) {
  return Id(check_id(H5Acreate2(loc.id(), name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT),
                     loc.file(), loc.path(), "cannot create attribute '" + name + "'"),
            H5Aclose);
}

}  // namespace

void Location::write_scalar_attribute(const std::string& name, hid_t type,
                                      const void* value) const {
  Id space(check_id(H5Screate(H5S_SCALAR), file(), path_, "cannot create a scalar dataspace"),
           H5Sclose);
  Id attr = create_attribute(*this, name, type, space.get());
  check(H5Awrite(attr.get(), type, value), file(), path_, "cannot write attribute '" + name + "'");
}

void Location::read_scalar_attribute(const std::string& name, hid_t type, TypeInfo expected,
                                     void* value) const {
  Id attr = open_attribute(*this, name);
  const std::string what = "attribute '" + name + "'";
  Id stored(check_id(H5Aget_type(attr.get()), file(), path_, "cannot get the type of " + what),
            H5Tclose);
  check_stored_type(stored.get(), expected, file(), path_ + " " + what);
  Id space(check_id(H5Aget_space(attr.get()), file(), path_, "cannot get the space of " + what),
           H5Sclose);
  hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) raise(file(), path_, "cannot size " + what);
  if (n != 1) fail(what + " is not a scalar");
  check(H5Aread(attr.get(), type, value), file(), path_, "cannot read " + what);
}

void Location::set_attribute(const std::string& name, const std::string& value) const {
  DataType type = DataType::variable_string();
  const char* text = value.c_str();
  Id space(check_id(H5Screate(H5S_SCALAR), file(), path_, "cannot create a scalar dataspace"),
           H5Sclose);
  Id attr = create_attribute(*this, name, type.id(), space.get());
  check(H5Awrite(attr.get(), type.id(), &text), file(), path_,
        "cannot write attribute '" + name + "'");
}

void Location::set_attribute(const std::string& name,
                             const std::vector<std::string>& values) const {
  DataType type = DataType::variable_string();
  std::vector<const char*> texts;
  texts.reserve(values.size());
  for (const auto& v : values) texts.push_back(v.c_str());
  const hsize_t dims[1] = {static_cast<hsize_t>(values.size())};
  Id space(check_id(H5Screate_simple(1, dims, nullptr), file(), path_, "cannot create a dataspace"),
           H5Sclose);
  Id attr = create_attribute(*this, name, type.id(), space.get());
  if (!texts.empty())
    check(H5Awrite(attr.get(), type.id(), texts.data()), file(), path_,
          "cannot write attribute '" + name + "'");
}

std::vector<std::string> Location::string_list_attribute(const std::string& name) const {
  Id attr = open_attribute(*this, name);
  const std::string what = "attribute '" + name + "'";
  Id stored(check_id(H5Aget_type(attr.get()), file(), path_, "cannot get the type of " + what),
            H5Tclose);
  H5T_class_t cls = H5Tget_class(stored.get());
  if (cls == H5T_NO_CLASS) raise(file(), path_, "cannot query the type of " + what);
  if (cls != H5T_STRING) fail(what + " is not a string");
  Id space(check_id(H5Aget_space(attr.get()), file(), path_, "cannot get the space of " + what),
           H5Sclose);
  hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) raise(file(), path_, "cannot size " + what);
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(n));
  if (n == 0) return out;
  Id mem = string_type_like(stored.get(), file(), path_);
  if (check_tri(H5Tis_variable_str(stored.get()), file(), path_, "cannot inspect " + what)) {
    check(H5Tset_size(mem.get(), H5T_VARIABLE), file(), path_, "cannot size a string type");
    std::vector<char*> texts(static_cast<std::size_t>(n), nullptr);
    check(H5Aread(attr.get(), mem.get(), texts.data()), file(), path_, "cannot read " + what);
    for (char* t : texts) out.emplace_back(t != nullptr ? t : "");
    check(reclaim_strings(mem.get(), space.get(), texts.data()), file(), path_,
          "cannot free " + what);
  } else {
    // Fixed-length strings (h5py's default for numpy bytes): one byte more for the terminator.
    std::size_t size = H5Tget_size(stored.get());
    if (size == 0) raise(file(), path_, "cannot size the strings of " + what);
    check(H5Tset_size(mem.get(), size + 1), file(), path_, "cannot size a string type");
    std::vector<char> buffer(static_cast<std::size_t>(n) * (size + 1), '\0');
    check(H5Aread(attr.get(), mem.get(), buffer.data()), file(), path_, "cannot read " + what);
    for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
      const char* t = buffer.data() + i * (size + 1);
      out.emplace_back(t, strnlen(t, size));
    }
  }
  return out;
}

std::string Location::string_attribute(const std::string& name) const {
  auto values = string_list_attribute(name);
  if (values.size() != 1) fail("attribute '" + name + "' is not a single string");
  return std::move(values.front());
}

// ---------------------------------------------------------------------------------------------
// DataSet

std::vector<hsize_t> DataSet::dims() const {
  Id space(check_id(H5Dget_space(id()), file(), path_, "cannot get the dataspace"), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) raise(file(), path_, "cannot get the rank of the dataspace");
  std::vector<hsize_t> d(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), d.data(), nullptr) < 0)
    raise(file(), path_, "cannot get the dimensions of the dataspace");
  return d;
}

std::size_t DataSet::size() const {
  Id space(check_id(H5Dget_space(id()), file(), path_, "cannot get the dataspace"), H5Sclose);
  hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) raise(file(), path_, "cannot count the elements");
  return static_cast<std::size_t>(n);
}

std::uint64_t DataSet::storage_size() const {
  return H5Dget_storage_size(id());  // 0 when unallocated or on error: a statistic only
}

void DataSet::read_raw(hid_t mem_type, void* buffer, std::size_t count) const {
  if (count != size()) fail(fmt::format("has {} elements, expected {}", size(), count));
  if (count == 0) return;
  check(H5Dread(id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer), file(), path_,
        "cannot read the data");
}

void DataSet::read_raw(hid_t mem_type, TypeInfo expected, void* buffer, std::size_t count) const {
  Id stored(check_id(H5Dget_type(id()), file(), path_, "cannot get the stored type"), H5Tclose);
  check_stored_type(stored.get(), expected, file(), path_);
  read_raw(mem_type, buffer, count);
}

void DataSet::write_all(hid_t mem_type, const void* data, std::size_t count) const {
  if (count != size()) fail(fmt::format("has {} elements, {} given", size(), count));
  if (count == 0) return;
  check(H5Dwrite(id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), file(), path_,
        "cannot write the data");
}

namespace {

/// Whether the file holding `object` was opened through the MPI-IO driver.
bool on_mpio(hid_t object, const std::string& file, const std::string& path) {
  Id fid(check_id(H5Iget_file_id(object), file, path, "cannot get the file"), H5Fclose);
  Id fapl(check_id(H5Fget_access_plist(fid.get()), file, path, "cannot get the file access"),
          H5Pclose);
  const hid_t driver = H5Pget_driver(fapl.get());
  if (driver < 0) raise(file, path, "cannot get the file driver");
  return driver == H5FD_MPIO;
}

}  // namespace

void DataSet::write_rows(hid_t mem_type, const void* data, const std::vector<Rows>& runs) const {
  const std::vector<hsize_t> d = dims();
  SCALESCOPE_EXPECTS(!d.empty());
  Id space(check_id(H5Dget_space(id()), file(), path_, "cannot get the dataspace"), H5Sclose);
  check(H5Sselect_none(space.get()), file(), path_, "cannot clear a selection");
  hsize_t rows = 0;
  std::vector<hsize_t> start(d.size(), 0), count = d;
  for (const Rows& run : runs) {
    SCALESCOPE_EXPECTS(run.first + run.count <= d[0] && run.first >= rows);
    if (run.count == 0) continue;
    start[0] = run.first;
    count[0] = run.count;
    check(H5Sselect_hyperslab(space.get(), H5S_SELECT_OR, start.data(), nullptr, count.data(),
                              nullptr),
          file(), path_, "cannot select rows");
    rows += run.count;
  }
  hsize_t elements = rows;
  for (std::size_t i = 1; i < d.size(); ++i) elements *= d[i];
  const hsize_t mem_dims[1] = {std::max<hsize_t>(elements, 1)};
  Id mem(
      check_id(H5Screate_simple(1, mem_dims, nullptr), file(), path_, "cannot create a dataspace"),
      H5Sclose);
  if (elements == 0) check(H5Sselect_none(mem.get()), file(), path_, "cannot clear a selection");
  // Convert to the stored type here: a conversion inside H5Dwrite (e.g. padded → packed
  // compound) breaks collective I/O, which compressed datasets require.
  Id stored(check_id(H5Dget_type(id()), file(), path_, "cannot get the stored type"), H5Tclose);
  std::vector<unsigned char> converted;
  if (!check_tri(H5Tequal(mem_type, stored.get()), file(), path_, "cannot compare types")) {
    const std::size_t from = H5Tget_size(mem_type), to = H5Tget_size(stored.get());
    if (from == 0 || to == 0) raise(file(), path_, "cannot size the types");
    const auto n = static_cast<std::size_t>(elements);
    converted.resize(std::max<std::size_t>(n, 1) * std::max(from, to));
    if (n > 0) {
      std::memcpy(converted.data(), data, n * from);
      std::vector<unsigned char> background(n * to, 0);
      check(H5Tconvert(mem_type, stored.get(), n, converted.data(), background.data(), H5P_DEFAULT),
            file(), path_, "cannot convert to the stored type");
    }
    data = converted.data();
    mem_type = stored.get();  // on every process, also those that write nothing
  }
  Id dxpl(check_id(H5Pcreate(H5P_DATASET_XFER), file(), path_, "cannot create a transfer list"),
          H5Pclose);
  if (on_mpio(id(), file(), path_))
    check(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE), file(), path_,
          "cannot select collective transfers");
  check(H5Dwrite(id(), mem_type, mem.get(), space.get(), dxpl.get(), data), file(), path_,
        "cannot write the data");
}

// ---------------------------------------------------------------------------------------------
// Group

namespace {

/// Creation properties shared by groups and datasets: no modification times, so that the same
/// content gives the same bytes.
Id creation_plist(hid_t cls, const std::string& file, const std::string& object) {
  Id plist(check_id(H5Pcreate(cls), file, object, "cannot create a property list"), H5Pclose);
  check(H5Pset_obj_track_times(plist.get(), false), file, object,
        "cannot switch off time tracking");
  return plist;
}

bool deflate_available() {
  static const bool available = H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0;
  return available;
}

}  // namespace

bool Group::exists(const std::string& name) const {
  return check_tri(H5Lexists(id(), name.c_str(), H5P_DEFAULT), file(), path_,
                   "cannot look up '" + name + "'");
}

Group Group::create_group(const std::string& name) const {
  const std::string child = child_path(name);
  Id gcpl = creation_plist(H5P_GROUP_CREATE, file(), child);
  hid_t g = H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT);
  return Group(Id(check_id(g, file(), child, "cannot create group"), H5Gclose), file_, child);
}

Group Group::open_group(const std::string& name) const {
  const std::string child = child_path(name);
  if (!exists(name)) throw IoError(where(file(), child) + ": missing group");
  hid_t g = H5Gopen2(id(), name.c_str(), H5P_DEFAULT);
  return Group(Id(check_id(g, file(), child, "cannot open group"), H5Gclose), file_, child);
}

DataSet Group::open_dataset(const std::string& name) const {
  const std::string child = child_path(name);
  if (!exists(name)) throw IoError(where(file(), child) + ": missing dataset");
  hid_t d = H5Dopen2(id(), name.c_str(), H5P_DEFAULT);
  return DataSet(Id(check_id(d, file(), child, "cannot open dataset"), H5Dclose), file_, child);
}

DataSet Group::write_raw(const std::string& name, hid_t mem_type, hid_t file_type, const void* data,
                         std::size_t count, std::vector<hsize_t> dims) const {
  if (dims.empty()) dims = {static_cast<hsize_t>(count)};
  SCALESCOPE_EXPECTS(std::accumulate(dims.begin(), dims.end(), hsize_t{1}, std::multiplies<>()) ==
                     count);
  DataSet ds = create_dataset(name, file_type, dims);
  ds.write_all(mem_type, data, count);
  return ds;
}

DataSet Group::create_dataset(const std::string& name, hid_t file_type,
                              const std::vector<hsize_t>& dims) const {
  const std::string child = child_path(name);
  SCALESCOPE_EXPECTS(!dims.empty());
  const auto count = static_cast<std::size_t>(
      std::accumulate(dims.begin(), dims.end(), hsize_t{1}, std::multiplies<>()));
  Id space(check_id(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), file(),
                    child, "cannot create a dataspace"),
           H5Sclose);
  Id dcpl = creation_plist(H5P_DATASET_CREATE, file(), child);
  const std::size_t element = H5Tget_size(file_type);
  if (element == 0) raise(file(), child, "cannot size the stored type");
  if (count * element > kCompressAbove && deflate_available()) {
    // Chunks of whole rows along the first dimension, about kChunkBytes each.
    std::vector<hsize_t> chunk = dims;
    const std::size_t row = count / dims[0] * element;
    chunk[0] = std::clamp<hsize_t>(kChunkBytes / row, 1, dims[0]);
    check(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), file(), child,
          "cannot set the chunk size");
    check(H5Pset_shuffle(dcpl.get()), file(), child, "cannot enable the shuffle filter");
    check(H5Pset_deflate(dcpl.get(), 4), file(), child, "cannot enable deflate");
  }
  hid_t d =
      H5Dcreate2(id(), name.c_str(), file_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT);
  return DataSet(Id(check_id(d, file(), child, "cannot create dataset"), H5Dclose), file_, child);
}

// ---------------------------------------------------------------------------------------------
// File

File File::create(const std::string& path, const std::string& label, MPI_Comm comm) {
  silence_errors();
  auto name = std::make_shared<const std::string>(label.empty() ? path : label);
  Id fapl = file_access_plist(*name, comm);
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  return File(Id(check_id(id, *name, "", "cannot create file"), H5Fclose), name);
}

File File::open(const std::string& path, bool writable, MPI_Comm comm) {
  silence_errors();
  auto name = std::make_shared<const std::string>(path);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw IoError(path + ": no such file");
  Id fapl = file_access_plist(*name, comm);
  hid_t id = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl.get());
  return File(Id(check_id(id, *name, "", "cannot open as an HDF5 file"), H5Fclose), name);
}

Group File::root() const {
  hid_t g = H5Gopen2(id_.get(), "/", H5P_DEFAULT);
  return Group(Id(check_id(g, *label_, "/", "cannot open the root group"), H5Gclose), label_, "/");
}

void File::close() {
  if (id_.valid() && id_.close() < 0)
    raise(*label_, "", "cannot close the file (are objects still open?)");
}

}  // namespace scalescope::io::h5
