// SPDX-License-Identifier: Apache-2.0
// The bash completion and the man page of gpuos, generated from its CLI11 definition (main.cc) so
// that they list exactly the commands and options the binary has. The build runs
// `gpuos --generate bash-completion` and `gpuos --generate man` and installs the output.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace gpuos::cli {

// A bash script defining _gpuos and `complete -F _gpuos gpuos`: commands, each command's options,
// the values of options with a fixed set, file names for FILE and PATH values, and after `run
// [OPTIONS] [--]` the command and its arguments.
std::string bash_completion(const CLI::App& app);
// gpuos(1) in roff (man macros): every command with its options, then the sections on sizes, exit
// status, environment and files.
std::string man_page(const CLI::App& app, const std::string& version);

}  // namespace gpuos::cli
