// The MPI world a command runs in.
#pragma once

#include <mpi.h>

#include "core/mpi_singleton.hpp"

namespace scalescope::app {

/// MPI_COMM_WORLD as a command sees it; MPI is initialised by the caller (the driver's
/// MpiSession, or a test's main).
struct MpiWorld {
  int rank() const {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
  }
  int size() const {
    int s = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    return s;
  }
};

/// MPI lifetime for the process; every exit path finalizes. A singleton gets a private session
/// directory first (core::PrivateMpiSessionRoot), so that parallel runs cannot race on Open MPI's
/// shared one.
struct MpiSession : MpiWorld {
  MpiSession(int* argc, char*** argv) { MPI_Init(argc, argv); }
  ~MpiSession() { MPI_Finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  core::PrivateMpiSessionRoot root_;  ///< made before MPI_Init, removed after MPI_Finalize
};

}  // namespace scalescope::app
