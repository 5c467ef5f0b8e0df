#pragma once
/// Thin checked layer over the HDF5 C API, after HighFive: RAII handles, and every C call
/// checked; a failure raises IoError naming the file and the object path inside it, with the
/// innermost message of HDF5's error stack (whose automatic printing is switched off).
/// Only io/ includes this header; the rest of the code speaks C++ types.
#include <hdf5.h>
#include <mpi.h>

#include "io/collective.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace scalescope::io {

/// Writes `path` through a temporary: `body` writes the file named `path + ".tmp"`, which is
/// renamed to `path` once body returns. On any failure the temporary is removed and the error
/// propagates, so a crash or an error never leaves a file that looks complete.
void write_via_temporary(const std::string& path,
                         const std::function<void(const std::string& tmp_path)>& body);

/// write_via_temporary for text output: `body` writes to a stream; stream failures (disk full,
/// unwritable directory) raise IoError naming `path`.
void write_text_via_temporary(const std::string& path,
                              const std::function<void(std::ostream& out)>& body);

/// write_via_temporary for a file written collectively by every process of `comm` (each calls
/// it with the same path): `body` writes `path + ".tmp"` on every process. If body fails on any
/// process, every process throws the same IoError (that of the lowest failing process) and
/// process 0 removes the temporary; otherwise, once every process is done, process 0 renames it
/// into place (a failed rename is raised on every process). A failure inside body is assumed to
/// reach every process that is in the same collective HDF5 call (HDF5 reports errors of
/// collective metadata operations and of MPI-IO collectively).
void write_via_temporary(const std::string& path, MPI_Comm comm,
                         const std::function<void(const std::string& tmp_path)>& body);

}  // namespace scalescope::io

namespace scalescope::io::h5 {

/// Owner of one HDF5 identifier, closed with the matching H5?close when destroyed.
class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Id() { reset(); }
  Id(Id&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = H5I_INVALID_HID; }
  Id& operator=(Id&& other) noexcept;
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  /// Closes now and returns the closer's status (the destructor ignores it).
  herr_t close() noexcept;

 private:
  void reset() noexcept { close(); }
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

/// What a C++ element type is on disk: class, size and signedness of its native HDF5 type.
struct TypeInfo {
  H5T_class_t cls;
  std::size_t size;
  bool is_signed;
};

/// The native HDF5 type of an arithmetic C++ type.
template <class T>
hid_t native_type() {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, "arithmetic types only");
  if constexpr (std::is_same_v<T, double>) {
    return H5T_NATIVE_DOUBLE;
  } else if constexpr (std::is_same_v<T, float>) {
    return H5T_NATIVE_FLOAT;
  } else if constexpr (std::is_signed_v<T>) {
    if constexpr (sizeof(T) == 1) return H5T_NATIVE_INT8;
    if constexpr (sizeof(T) == 2) return H5T_NATIVE_INT16;
    if constexpr (sizeof(T) == 4) return H5T_NATIVE_INT32;
    if constexpr (sizeof(T) == 8) return H5T_NATIVE_INT64;
  } else {
    if constexpr (sizeof(T) == 1) return H5T_NATIVE_UINT8;
    if constexpr (sizeof(T) == 2) return H5T_NATIVE_UINT16;
    if constexpr (sizeof(T) == 4) return H5T_NATIVE_UINT32;
    if constexpr (sizeof(T) == 8) return H5T_NATIVE_UINT64;
  }
}

template <class T>
TypeInfo type_info() {
  return {std::is_floating_point_v<T> ? H5T_FLOAT : H5T_INTEGER, sizeof(T), std::is_signed_v<T>};
}

/// A datatype built at run time: a compound (members added with insert) or a string.
class DataType {
 public:
  /// Compound of `size` bytes (sizeof the C++ struct it mirrors).
  static DataType compound(std::size_t size);
  /// Variable-length UTF-8 string (h5py reads it as str).
  static DataType variable_string();

  /// Adds a member of arithmetic type T at byte `offset` (offsetof in the C++ struct).
  template <class T>
  DataType& insert(const std::string& name, std::size_t offset) {
    return insert(name, offset, native_type<T>());
  }
  DataType& insert(const std::string& name, std::size_t offset, hid_t member_type);
  /// A copy with the padding removed: the on-disk layout of a compound.
  DataType packed() const;

  hid_t id() const { return id_.get(); }

 private:
  explicit DataType(Id id) : id_(std::move(id)) {}
  Id id_;
};

/// Something attributes hang on (a group or a dataset), with the names used in error messages.
class Location {
 public:
  const std::string& file() const { return *file_; }
  const std::string& path() const { return path_; }
  hid_t id() const { return id_.get(); }

  /// Raises IoError "<file>: <path>: <what>".
  [[noreturn]] void fail(std::string_view what) const;

  bool has_attribute(const std::string& name) const;
  void set_attribute(const std::string& name, const std::string& value) const;
  void set_attribute(const std::string& name, const char* value) const {
    set_attribute(name, std::string(value));
  }
  /// A 1-D array of variable-length strings (decoding tables).
  void set_attribute(const std::string& name, const std::vector<std::string>& values) const;
  template <class T>
  requires std::is_arithmetic_v<T>
  void set_attribute(const std::string& name, T value) const {
    write_scalar_attribute(name, native_type<T>(), &value);
  }

  std::string string_attribute(const std::string& name) const;
  std::vector<std::string> string_list_attribute(const std::string& name) const;
  /// A scalar numeric attribute; the stored type must be exactly T's (class, size, sign).
  template <class T>
  requires std::is_arithmetic_v<T> T attribute(const std::string& name)
  const {
    T value{};
    read_scalar_attribute(name, native_type<T>(), type_info<T>(), &value);
    return value;
  }

 protected:
  Location(Id id, std::shared_ptr<const std::string> file, std::string path)
      : id_(std::move(id)), file_(std::move(file)), path_(std::move(path)) {}
  std::string child_path(const std::string& name) const;
  void write_scalar_attribute(const std::string& name, hid_t type, const void* value) const;
  void read_scalar_attribute(const std::string& name, hid_t type, TypeInfo expected,
                             void* value) const;

  Id id_;
  std::shared_ptr<const std::string> file_;
  std::string path_;

  friend class Group;
  friend class File;
};

/// Rows [first, first + count) along the first dimension of a dataset.
struct Rows {
  hsize_t first = 0;
  hsize_t count = 0;
};

class DataSet : public Location {
 public:
  /// Extent of each dimension.
  std::vector<hsize_t> dims() const;
  /// Number of elements.
  std::size_t size() const;
  /// Bytes the data takes in the file (after compression).
  std::uint64_t storage_size() const;

  /// The whole dataset; the stored type must be exactly T's (class, size, sign).
  template <class T>
  std::vector<T> read() const {
    std::vector<T> out(size());
    read_raw(native_type<T>(), type_info<T>(), out.data(), out.size());
    return out;
  }
  /// Reads the whole dataset into `buffer` (`count` elements of memory type `mem_type`).
  void read_raw(hid_t mem_type, void* buffer, std::size_t count) const;
  void read_raw(hid_t mem_type, TypeInfo expected, void* buffer, std::size_t count) const;

  /// Writes the whole dataset from `count` elements of `mem_type` (no-op when empty).
  void write_all(hid_t mem_type, const void* data, std::size_t count) const;
  /// Writes the rows `runs` (ascending, disjoint) from `data`, which holds them packed one after
  /// another. In a file opened on an MPI communicator this is a collective write: every process
  /// of the communicator calls it (with its own runs, possibly none), as HDF5 requires for
  /// chunked, compressed datasets.
  void write_rows(hid_t mem_type, const void* data, const std::vector<Rows>& runs) const;

 private:
  using Location::Location;
  friend class Group;
};

class Group : public Location {
 public:
  Group create_group(const std::string& name) const;
  Group open_group(const std::string& name) const;
  /// Whether a link `name` (one path component) exists in this group.
  bool exists(const std::string& name) const;
  /// Opens a dataset; a missing one raises IoError "<file>: <path>/<name>: missing dataset".
  DataSet open_dataset(const std::string& name) const;

  /// Writes `data` as a new dataset of shape `dims` (1-D of data.size() when empty). Datasets
  /// over 64 KiB are chunked and deflate-compressed.
  template <class T>
  DataSet write(const std::string& name, const std::vector<T>& data,
                std::vector<hsize_t> dims = {}) const {
    if (dims.empty()) dims = {static_cast<hsize_t>(data.size())};
    return write_raw(name, native_type<T>(), native_type<T>(), data.data(), data.size(), dims);
  }
  /// Creates a dataset of `dims` stored as `file_type`, with the layout write_raw gives it
  /// (chunked and compressed above 64 KiB), without writing data. In a file opened on an MPI
  /// communicator every process must create it with the same arguments.
  DataSet create_dataset(const std::string& name, hid_t file_type,
                         const std::vector<hsize_t>& dims) const;
  /// Writes `count` elements of `mem_type` (stored as `file_type`), e.g. a compound table.
  DataSet write_raw(const std::string& name, hid_t mem_type, hid_t file_type, const void* data,
                    std::size_t count, std::vector<hsize_t> dims = {}) const;

  /// read<T>(name) == open_dataset(name).read<T>().
  template <class T>
  std::vector<T> read(const std::string& name) const {
    return open_dataset(name).read<T>();
  }

 private:
  using Location::Location;
  friend class File;
};

/// An HDF5 file. Every file is opened through file_access_plist(): the 1.8 file format (checksummed
/// metadata) and H5F_CLOSE_SEMI, so that closing a file with objects still open is reported rather
/// than silently deferred.
class File {
 public:
  /// Creates (truncating) `path`; `label` is the name errors use (default: path), e.g. the
  /// final name of a file written through a temporary.
  /// With `comm` (not MPI_COMM_NULL) the file is created collectively by the processes of
  /// `comm` through MPI-IO; metadata operations (groups, datasets, attributes) must then be done
  /// by every process with the same arguments.
  static File create(const std::string& path, const std::string& label = {},
                     MPI_Comm comm = MPI_COMM_NULL);
  /// Opens an existing file read-only, or read-write when `writable`; with `comm`, collectively
  /// through MPI-IO (reads are independent: each process may read different datasets).
  static File open(const std::string& path, bool writable = false, MPI_Comm comm = MPI_COMM_NULL);

  Group root() const;
  const std::string& label() const { return *label_; }
  /// Closes the file, checked; the destructor closes it unchecked.
  void close();

 private:
  File(Id id, std::shared_ptr<const std::string> label)
      : id_(std::move(id)), label_(std::move(label)) {}
  Id id_;
  std::shared_ptr<const std::string> label_;
};

/// The file-access property list of every file this program opens: the one place that picks
/// the driver: sec2 (POSIX) without a communicator, MPI-IO (H5Pset_fapl_mpio) over `comm`.
Id file_access_plist(const std::string& label, MPI_Comm comm = MPI_COMM_NULL);

/// Switches off HDF5's automatic error-stack printing (idempotent); errors surface as IoError.
void silence_errors();

}  // namespace scalescope::io::h5
