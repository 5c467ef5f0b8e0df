#pragma once
/// Errors raised by a model's handler on one process of a parallel engine, carried to every
/// process as (kind, message) and rethrown there with the same type.
#include <mpi.h>

#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "pdes/event.hpp"

namespace scalescope::pdes::detail {

enum class ErrorKind : int { Input, Io, Contract, Other };

inline ErrorKind error_kind(const std::exception& e) {
  return dynamic_cast<const InputError*>(&e)      ? ErrorKind::Input
         : dynamic_cast<const IoError*>(&e)       ? ErrorKind::Io
         : dynamic_cast<const ContractError*>(&e) ? ErrorKind::Contract
                                                  : ErrorKind::Other;
}

[[noreturn]] inline void throw_kind(ErrorKind kind, const std::string& what) {
  switch (kind) {
    case ErrorKind::Input:
      throw InputError(what);
    case ErrorKind::Io:
      throw IoError(what);
    case ErrorKind::Contract:
      throw ContractError(what);
    case ErrorKind::Other:
      break;
  }
  throw std::runtime_error(what);
}

/// Collective over `comm`: of the errors the processes hold (`has`: this one holds one, raised
/// by the event with `key`), the earliest in key order, the one the sequential engine stops at,
/// is thrown on every process with its type and message. At least one process must hold one.
[[noreturn]] inline void throw_earliest(MPI_Comm comm, bool has, const EventKey& key,
                                        ErrorKind kind, const std::string& what) {
  struct Candidate {
    EventKey key;
    std::int32_t has = 0;
    std::int32_t kind = 0;
  } mine{key, has ? 1 : 0, static_cast<std::int32_t>(kind)};
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<Candidate> all(static_cast<std::size_t>(size));
  MPI_Allgather(&mine, sizeof(Candidate), MPI_BYTE, all.data(), sizeof(Candidate), MPI_BYTE, comm);
  int from = -1;
  for (int p = 0; p < size; ++p) {
    const Candidate& c = all[static_cast<std::size_t>(p)];
    if (c.has && (from < 0 || c.key < all[static_cast<std::size_t>(from)].key)) from = p;
  }
  SCALESCOPE_EXPECTS(from >= 0);
  std::string text = from == rank ? what : std::string();
  int length = static_cast<int>(text.size());
  MPI_Bcast(&length, 1, MPI_INT, from, comm);
  text.resize(static_cast<std::size_t>(length));
  MPI_Bcast(text.data(), length, MPI_CHAR, from, comm);
  throw_kind(static_cast<ErrorKind>(all[static_cast<std::size_t>(from)].kind), text);
}

}  // namespace scalescope::pdes::detail
