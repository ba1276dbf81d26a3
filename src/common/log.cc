// SPDX-License-Identifier: Apache-2.0
#include "common/log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/text.h"

namespace gpuos::log {
namespace {

struct State {
  std::atomic<int> level{static_cast<int>(Level::kInfo)};
  char ident[32] = "gpuos";
  bool prefix = false;
};

State& state() {
  static State s;
  return s;
}

void vwrite(Level lvl, const char* fmt, va_list ap) {
  if (!enabled(lvl)) return;
  State& s = state();
  static constexpr const char* kPrio[] = {"<3>", "<4>", "<6>", "<7>"};
  static constexpr const char* kWord[] = {"error: ", "warning: ", "", "debug: "};
  int li = static_cast<int>(lvl);
  char line[1024];
  int n;
  if (s.prefix) {
    n = std::snprintf(line, sizeof(line), "%s%s: ", kPrio[li], s.ident);
  } else {
    n = std::snprintf(line, sizeof(line), "%s: %s", s.ident, kWord[li]);
  }
  if (n < 0) return;
  std::size_t off = static_cast<std::size_t>(n) < sizeof(line) ? static_cast<std::size_t>(n) : 0;
  char msg[1024];
  if (std::vsnprintf(msg, sizeof(msg), fmt, ap) < 0) return;
  // Messages quote what tenants chose (names, domains): escaped, so no line can carry terminal
  // controls into an admin's journal view or forge a line of its own with a newline.
  const std::string safe = printable(msg);
  std::size_t len = off + std::min(safe.size(), sizeof(line) - off - 2);
  std::memcpy(line + off, safe.data(), len - off);
  line[len++] = '\n';
  int saved = errno;
  ssize_t r;
  do {
    r = ::write(STDERR_FILENO, line, len);
  } while (r < 0 && errno == EINTR);
  errno = saved;
}

}  // namespace

bool parse_level(std::string_view text, Level* out) {
  if (text == "error") *out = Level::kError;
  else if (text == "warn" || text == "warning") *out = Level::kWarn;
  else if (text == "info") *out = Level::kInfo;
  else if (text == "debug") *out = Level::kDebug;
  else return false;
  return true;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kError: return "error";
    case Level::kWarn: return "warn";
    case Level::kInfo: return "info";
    case Level::kDebug: return "debug";
  }
  return "info";
}

bool stderr_is_journal(const char* journal_stream) {
  if (journal_stream == nullptr) return false;
  unsigned long long dev = 0, ino = 0;
  char end = 0;
  if (std::sscanf(journal_stream, "%llu:%llu%c", &dev, &ino, &end) != 2) return false;
  struct stat st;
  if (::fstat(STDERR_FILENO, &st) != 0) return false;
  return static_cast<unsigned long long>(st.st_dev) == dev && static_cast<unsigned long long>(st.st_ino) == ino;
}

void init(const char* ident, Level lvl, int force_prefix) {
  State& s = state();
  std::snprintf(s.ident, sizeof(s.ident), "%s", ident ? ident : "gpuos");
  s.prefix = force_prefix < 0 ? stderr_is_journal(std::getenv("JOURNAL_STREAM")) : force_prefix != 0;
  set_level(lvl);
}

void set_level(Level lvl) { state().level.store(static_cast<int>(lvl), std::memory_order_relaxed); }
Level level() { return static_cast<Level>(state().level.load(std::memory_order_relaxed)); }
bool enabled(Level lvl) { return static_cast<int>(lvl) <= state().level.load(std::memory_order_relaxed); }

void write(Level lvl, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vwrite(lvl, fmt, ap);
  va_end(ap);
}

#define GPUOS_LOG_FN(fn, lvl)          \
  void fn(const char* fmt, ...) {      \
    va_list ap;                        \
    va_start(ap, fmt);                 \
    vwrite(lvl, fmt, ap);              \
    va_end(ap);                        \
  }
GPUOS_LOG_FN(error, Level::kError)
GPUOS_LOG_FN(warn, Level::kWarn)
GPUOS_LOG_FN(info, Level::kInfo)
GPUOS_LOG_FN(debug, Level::kDebug)
#undef GPUOS_LOG_FN

}  // namespace gpuos::log
