// SPDX-License-Identifier: Apache-2.0
// The command-line conventions gpuos and gpuosd share (docs/OPERATIONS.md, "The command line"):
// one exit-code scheme, an unknown command named as such, and help without CLI11's type noise.
// Header-only (CLI11 is header-only): both binaries include it; nothing else does (the interposer,
// which links common/, never).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace gpuos {

inline constexpr int kExitOk = 0;       // done (also --help, --version)
inline constexpr int kExitFailure = 1;  // the command ran and failed (no daemon, refused, bad config)
inline constexpr int kExitUsage = 2;    // the command line is wrong (unknown command or option, bad value)

// Help that names each option's value by what it means (--mem SIZE) instead of CLI11's type and
// validator text (TEXT:NUMBER, UINT:INT in [1 - 10000]), and that shows `[--] CMD [ARGS...]` in the
// usage of a command that runs one.
class Formatter : public CLI::Formatter {
 public:
  using ValueNames = std::map<std::string, std::string>;  // long option name -> its value's name
  explicit Formatter(ValueNames names = {}) : names_(std::move(names)) {}

  std::string make_option_opts(const CLI::Option* opt) const override {
    if (!opt->get_option_text().empty() || is_flag(opt)) return CLI::Formatter::make_option_opts(opt);
    const std::string required = opt->get_required() ? " REQUIRED" : "";
    if (!opt->nonpositional()) return required;  // its name is its placeholder: TENANT_ID, FILE
    return " " + metavar(opt) + required;
  }
  // A command that runs another (CLI11's prefix command: `gpuos run`) ends its usage with it.
  std::string make_usage(const CLI::App* app, std::string name) const override {
    std::string usage = CLI::Formatter::make_usage(app, name);
    if (app->get_prefix_command() && !usage.empty() && usage.back() == '\n') {
      usage.insert(usage.size() - 1, " [--] CMD [ARGS...]");
    }
    return usage;
  }
  static bool is_flag(const CLI::Option* opt) { return opt->get_expected_max() == 0; }
  // An option's value placeholder: its option text, else the name given for its long name, else its
  // type name before any validator text, CLI11's own names made plain (TEXT: VALUE, INT: N).
  std::string metavar(const CLI::Option* opt) const {
    if (!opt->get_option_text().empty()) return opt->get_option_text();
    for (const std::string& l : opt->get_lnames()) {
      if (auto it = names_.find(l); it != names_.end()) return it->second;
    }
    std::string t = opt->get_type_name();
    t = t.substr(0, t.find(':'));
    if (t == "TEXT" || t.empty()) return "VALUE";
    if (t == "INT" || t == "UINT") return "N";
    if (t == "FLOAT" || t == "NUMBER") return "X";
    return t;
  }

 private:
  ValueNames names_;
};

// The leading command words of argv (before the first option) must name commands: CLI11 would say
// "A subcommand is required" or "The following arguments were not expected" for a typo. Returns
// false after printing `PROG: unknown command "foo"` and the commands there are.
inline bool known_commands(const CLI::App& app, int argc, char** argv, const std::string& prog) {
  const CLI::App* at = &app;
  std::string path = prog;
  for (int i = 1; i < argc; ++i) {
    const char* word = argv[i];
    if (word[0] == '-') return true;  // an option: CLI11 takes it from here
    const auto subs = at->get_subcommands([](const CLI::App* s) { return !s->get_disabled() && !s->get_name().empty(); });
    if (subs.empty()) return true;  // a command's own positional arguments
    const CLI::App* next = nullptr;
    std::string names;
    for (const CLI::App* s : subs) {
      if (s->get_name() == word) next = s;
      if (!s->get_group().empty()) names += (names.empty() ? "" : ", ") + s->get_name();
    }
    if (next == nullptr) {
      std::fprintf(stderr, "%s: unknown command \"%s\" (commands: %s; see %s --help)\n", path.c_str(), word,
                   names.c_str(), path.c_str());
      return false;
    }
    path += " " + next->get_name();
    at = next;
  }
  return true;
}

// "gpuos run": prog and the commands CLI11 had reached in argv, for a message about them.
inline std::string command_path(const CLI::App& app, const std::string& prog) {
  std::string path = prog;
  for (const CLI::App* at = &app;;) {
    const std::vector<const CLI::App*> subs = at->get_subcommands([](const CLI::App* s) { return s->parsed(); });
    if (subs.empty()) return path;
    at = subs.front();
    path += " " + at->get_name();
  }
}

// A usage error, said as every gpuos program says one: `PROG CMD: what (see PROG CMD --help)`.
inline int usage_error(const std::string& path, const std::string& what) {
  std::fprintf(stderr, "%s: %s (see %s --help)\n", path.c_str(), what.c_str(), path.c_str());
  return kExitUsage;
}

// A parse error in gpuos's own words, naming the bad value: CLI11's "The following arguments were
// not expected: priority --polcy" and "Could not convert: TENANT_ID = abc" read as parser internals.
inline std::string usage_words(const CLI::ParseError& e) {
  const std::string what = e.what();
  auto after = [&](const char* lead) -> std::string {
    const std::size_t at = what.find(lead);
    return at == std::string::npos ? std::string() : what.substr(at + std::strlen(lead));
  };
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    std::string words = after(" not expected: ");
    if (words.empty()) return what;
    std::string quoted, word;
    for (std::size_t i = 0; i <= words.size(); ++i) {
      if (i < words.size() && words[i] != ' ') {
        word += words[i];
      } else if (!word.empty()) {
        quoted += (quoted.empty() ? "\"" : ", \"") + word + "\"";
        word.clear();
      }
    }
    return "does not take " + quoted;
  }
  if (dynamic_cast<const CLI::ConversionError*>(&e) != nullptr) {
    const std::string pair = after("Could not convert: ");
    const std::size_t eq = pair.find(" = ");
    if (eq == std::string::npos) return what;
    const std::string name = pair.substr(0, eq);
    return name + ": \"" + pair.substr(eq + 3) + "\" is not a valid " + name;
  }
  return what;
}

// A path option that must be absolute (a control socket: the config refuses relative ones too, and
// a relative path names a different socket from every other working directory).
inline CLI::Validator absolute_path() {
  return CLI::Validator(
      [](std::string& path) {
        return path.empty() || path[0] == '/' ? std::string() : "\"" + path + "\" is relative: give an absolute path";
      },
      "PATH");
}

// CLI11's parse with the exit-code scheme above: help and version exit 0, every parse error 2
// (CLI11's own codes are 104..114), its message prefixed with the program (and command) it is
// about. Returns -1 when the program should go on.
inline int parse_command_line(CLI::App& app, int argc, char** argv, const std::string& prog) {
  if (!known_commands(app, argc, argv, prog)) return kExitUsage;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e) == 0 ? kExitOk : kExitUsage;  // --help, --version
    return usage_error(command_path(app, prog), usage_words(e));
  }
  return -1;
}

}  // namespace gpuos
