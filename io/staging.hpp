#pragma once
/// Staging directories: output that is more than one file (a run's results, a Chakra export) is
/// written into TARGET.partial-PID beside its place and moved in only when complete, so that a
/// killed process leaves nothing that looks like a finished output. Those of dead processes are
/// removed by the next writer of the same target.
#include <filesystem>

namespace scalescope::io {

/// TARGET.partial-PID.
std::filesystem::path staging_dir(const std::filesystem::path& target, long pid);

/// Removes the staging directories of `target` left by processes that died: TARGET.partial-PID
/// whose PID is gone on this machine and that nobody wrote to for ten minutes (on a shared file
/// system the PID may be another node's).
void remove_stale_staging(const std::filesystem::path& target);

}  // namespace scalescope::io
