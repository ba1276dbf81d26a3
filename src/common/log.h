// SPDX-License-Identifier: Apache-2.0
// A small logger for gpuosd and the gpuos CLI: one line per event on stderr.
//
// When stderr is journald's stream (systemd names it in JOURNAL_STREAM, systemd.exec(5)) each line
// starts with the sd-daemon priority prefix ("<3>" error, "<4>" warning, "<6>" info, "<7>" debug)
// so journald files it at the right priority; anywhere else (a terminal, a pipe, a file) the line
// is "ident: level: message". Embedded newlines are replaced
// by spaces so one event is always one line. Every line is written with a single write(2).
//
// Thread-safety: init/set_level are meant to be called once at start-up; the write functions may be
// called from any thread (the level is an atomic, the write is one syscall).
#pragma once

#include <string_view>

namespace gpuos::log {

enum class Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// "error", "warn" (also "warning"), "info", "debug" -> level. False for anything else.
bool parse_level(std::string_view text, Level* out);
const char* level_name(Level level);

// ident: program name printed on every line (copied; at most 31 chars). Decides the sd-daemon prefix
// from JOURNAL_STREAM (stderr_is_journal) unless force_prefix is 0 (plain) or 1 (prefixed); -1 = decide.
void init(const char* ident, Level level, int force_prefix = -1);
// Whether stderr is the stream journal_stream ("DEV:INODE", JOURNAL_STREAM's form) names.
bool stderr_is_journal(const char* journal_stream);
void set_level(Level level);
Level level();
bool enabled(Level level);

void write(Level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void debug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace gpuos::log
