// SPDX-License-Identifier: Apache-2.0
// Tenant-chosen text shown to people: printable() and the daemon's log lines (issue #22: names with
// terminal escape sequences reached `gpuos ps`, `top` and gpuosd's journal raw).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/log.h"
#include "common/text.h"

namespace gpuos {
namespace {

TEST(Printable, EscapesControlsAndKeepsUtf8) {
  EXPECT_EQ(printable("plain name"), "plain name");
  EXPECT_EQ(printable("\x1b]0;pwned\x07"), "\\x1b]0;pwned\\x07");
  EXPECT_EQ(printable("a\\b"), "a\\\\b");
  EXPECT_EQ(printable("caf\xc3\xa9"), "caf\xc3\xa9");                 // valid UTF-8 kept
  EXPECT_EQ(printable("\xe2\x80\xae" "evil"), "\\u202eevil");           // bidi override
  EXPECT_EQ(printable("\xc2\x9b" "31m"), "\\u009b31m");                 // C1 CSI
  EXPECT_EQ(printable("\xff\xc3"), "\\xff\\xc3");                       // not UTF-8
}

// What `write_lines` writes to stderr, with stderr a pipe meanwhile (at most 511 bytes).
template <typename F>
std::string stderr_of(F write_lines) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const int saved = dup(STDERR_FILENO);
  dup2(fds[1], STDERR_FILENO);
  write_lines();
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(fds[1]);
  char buf[512] = {};
  const ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// A log line quoting a tenant's name carries neither its escape sequences nor its newlines.
TEST(Log, EscapesWhatTenantsChose) {
  const std::string line = stderr_of([] {
    log::init("gpuosd-test", log::Level::kInfo, 0);
    log::info("tenant 7 registered: name \"%s\"", "x\x1b[2J\ngpuosd: error: forged line");
  });
  EXPECT_EQ(line, "gpuosd-test: tenant 7 registered: name \"x\\x1b[2J\\x0agpuosd: error: forged line\"\n");
}

// Journal prefixes ("<6>") only on journald's own stream, which systemd names in JOURNAL_STREAM: a
// pipe or a terminal gets plain lines (issue #57: `<6>` prefixes showed in a terminal).
TEST(Log, PrefixesOnlyTheJournalsStream) {
  bool on_mine = false, on_other = true, on_none = true, on_junk = true;
  const std::string lines = stderr_of([&] {
    struct stat st {};
    fstat(STDERR_FILENO, &st);
    const std::string mine = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
    on_mine = log::stderr_is_journal(mine.c_str());
    on_other = log::stderr_is_journal((std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino + 1)).c_str());
    on_none = log::stderr_is_journal(nullptr);
    on_junk = log::stderr_is_journal((mine + "x").c_str());
    setenv("JOURNAL_STREAM", mine.c_str(), 1);
    log::init("gpuosd-test", log::Level::kInfo);
    log::info("to the journal");
    unsetenv("JOURNAL_STREAM");
    log::init("gpuosd-test", log::Level::kInfo);
    log::info("to a pipe");
  });
  EXPECT_TRUE(on_mine);
  EXPECT_FALSE(on_other);
  EXPECT_FALSE(on_none);
  EXPECT_FALSE(on_junk);
  EXPECT_EQ(lines, "<6>gpuosd-test: to the journal\ngpuosd-test: to a pipe\n");
}

}  // namespace
}  // namespace gpuos
