// What the commands with a Python front end share (app/script_commands.cpp): the checkout's
// scripts and the shell that runs them.
#pragma once

#include <filesystem>
#include <string>

namespace scalescope::app {

/// Runs a command line through the shell; its exit status (1 when it did not exit).
int shell(const std::string& cmd);

/// A script of this checkout (SCALESCOPE_SOURCE_DIR), or a one-line error naming `command` when
/// it is missing.
std::filesystem::path checkout_script(const std::string& command,
                                      const std::filesystem::path& relative);

/// `s` as one single-quoted shell word.
std::string shell_quote(const std::string& s);

}  // namespace scalescope::app
