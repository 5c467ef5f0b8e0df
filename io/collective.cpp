#include "io/collective.hpp"

#include "core/error.hpp"

namespace scalescope::io {

void raise_if_failed_anywhere(MPI_Comm comm, const std::string& error) {
  int me = 0, size = 1;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &size);
  const int mine = error.empty() ? size : me;
  int first = size;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == size) return;
  // Every process reports the same line: that of the lowest failing process.
  std::string msg = error;
  unsigned long long length = msg.size();
  MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, first, comm);
  msg.resize(static_cast<std::size_t>(length));
  MPI_Bcast(msg.data(), static_cast<int>(length), MPI_CHAR, first, comm);
  throw IoError(msg);
}

}  // namespace scalescope::io
