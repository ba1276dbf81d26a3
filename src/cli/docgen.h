// SPDX-License-Identifier: Apache-2.0
// The bash completion, the man page and the usage lines of gpuos, generated from its CLI11 definition (main.cc) so
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
// One line per command ("gpuos top [-d,--interval SECONDS] [-n,--iterations N] ..."): every option,
// a fixed set of values as a|b, an optional value in brackets. README.md's usage block holds these
// lines (a test compares them), so that it names every command and option the binary has.
std::string usage_lines(const CLI::App& app);

}  // namespace gpuos::cli
