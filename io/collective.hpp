#pragma once
/// Error handling shared by the collective (MPI-IO) readers, writers and the CLI.
#include <mpi.h>

#include <string>

namespace scalescope::io {

/// Collective: if `error` is not empty on any process of `comm`, every process throws
/// IoError with the message of the lowest such process; otherwise returns on every process.
void raise_if_failed_anywhere(MPI_Comm comm, const std::string& error);

}  // namespace scalescope::io
