#pragma once
/// Include in exactly one file of each executable (the one with main). Open MPI leaks its
/// start-up allocations from dlopen'ed components (frames LeakSanitizer cannot symbolize or
/// suppress by module), so leak detection is off in sanitizer builds of MPI programs; the
/// address and undefined-behaviour checks stay on.
#ifdef SCALESCOPE_SANITIZE
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }
#endif
