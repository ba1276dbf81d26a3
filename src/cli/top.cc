// SPDX-License-Identifier: Apache-2.0
#include "cli/top.h"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>

#include "common/clock.h"
#include "common/config.h"

namespace gpuos::cli {
using namespace ::gpuos::client;  // the gpuosd client library (src/client)
namespace {

volatile sig_atomic_t g_quit = 0;
volatile sig_atomic_t g_resized = 0;

void on_quit_signal(int) { g_quit = 1; }
void on_winch(int) { g_resized = 1; }

double mono_s() { return static_cast<double>(monotonic_ns()) / 1e9; }

std::string cstr(const char* a, std::size_t n) { return std::string(a, strnlen(a, n)); }

void write_all(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    off += static_cast<std::size_t>(n);
  }
}

// Puts the terminal in the state top needs and restores it on destruction (also on early returns).
class Terminal {
 public:
  explicit Terminal(bool interactive) : interactive_(interactive) {
    if (!interactive_) return;
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);  // keys without Enter, no echo; ISIG kept
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0) have_saved_ = true;
    }
    write_all(STDOUT_FILENO, "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J");  // alternate screen, hide cursor
  }
  ~Terminal() {
    if (!interactive_) return;
    write_all(STDOUT_FILENO, "\x1b[?25h\x1b[?1049l");  // show cursor, back to the main screen
    if (have_saved_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  Terminal(const Terminal&) = delete;
  Terminal& operator=(const Terminal&) = delete;

 private:
  bool interactive_;
  bool have_saved_ = false;
  termios saved_{};
};

void terminal_size(std::size_t* w, std::size_t* h) {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
    *w = ws.ws_col;
    *h = ws.ws_row;
  } else {
    *w = 0;
    *h = 0;
  }
}

std::string rate(uint64_t now, uint64_t before, double dt) {
  if (dt <= 0 || now < before) return "-";
  char b[32];
  double r = static_cast<double>(now - before) / dt;
  std::snprintf(b, sizeof(b), r < 10 ? "%.1f" : "%.0f", r);
  return b;
}

// s in at most n bytes (so at most n columns): cut without splitting a UTF-8 sequence, "~" marking
// the cut.
std::string fit(const std::string& s, std::size_t n) {
  if (s.size() <= n) return s;
  std::size_t cut = n == 0 ? 0 : n - 1;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;
  return s.substr(0, cut) + "~";
}

// The end of s in at most n bytes, "..." marking what was left out (a socket path's file name
// matters most).
std::string fit_tail(const std::string& s, std::size_t n) {
  if (s.size() <= n) return s;
  if (n <= 3) return std::string(n, '.');
  std::size_t from = s.size() - (n - 3);
  while (from < s.size() && (static_cast<unsigned char>(s[from]) & 0xc0) == 0x80) ++from;
  return "..." + s.substr(from);
}

// GPU%: the tenant's GPU time (the usage check's NVML measure) per wall time since `base`; "-"
// where NVML measures nothing of it (no GPU time and no memory: the check is off, or its process
// has no context yet) or there is no base yet. Over 100 on several GPUs.
std::string gpu_percent(const gpuos_msg_tenant_info& t, const gpuos_msg_tenant_info* base, double dt) {
  if ((t.gpu_time_ns == 0 && t.verified_mem_bytes == 0) || base == nullptr || dt <= 0 ||
      t.gpu_time_ns < base->gpu_time_ns) {
    return "-";
  }
  char b[32];
  std::snprintf(b, sizeof(b), "%.0f", 100.0 * static_cast<double>(t.gpu_time_ns - base->gpu_time_ns) / (dt * 1e9));
  return b;
}

// BUDGET: a budgeted tenant's slowdown now / its budget and the share best-effort tenants are lent
// ("1.21/1.50 35%"; "?" before it is measured); a best-effort tenant paced beside one, its share
// ("paced 35%"). `gpuos ps` has the rest (the slower phase, MPS's cost, the launch bound).
std::string budget_cell(const gpuos_msg_tenant_info& t) {
  char b[64];
  if (t.max_slowdown_permille == 0 && t.pace_permille != 0) {
    std::snprintf(b, sizeof(b), "paced %u%%", (t.pace_permille + 5) / 10);
    return b;
  }
  if (t.max_slowdown_permille == 0) return "-";
  char measured[16] = "?";
  if (t.slowdown_permille != 0) std::snprintf(measured, sizeof(measured), "%.2f", t.slowdown_permille / 1000.0);
  std::snprintf(b, sizeof(b), "%s/%.2f %u%%", measured, t.max_slowdown_permille / 1000.0,
                (t.be_share_permille + 5) / 10);
  return b;
}

// The row layout: 86 columns before BUDGET, which gets the other 14 of kTopWidth ("1.23/1.50 35%").
constexpr const char* kRowFormat = "%4s %7s %-12s %-11s %-9s %4s %9s %8s %5s %7s %s";

}  // namespace

std::vector<std::string> render_top(const TopRates& rates, const Listing& cur, const std::string& socket,
                                    double interval, std::size_t width, std::size_t height) {
  std::vector<std::string> lines;
  char buf[1024];
  time_t now = time(nullptr);
  tm lt{};
  localtime_r(&now, &lt);
  char clock[16];
  std::strftime(clock, sizeof(clock), "%H:%M:%S", &lt);
  std::size_t live = 0;
  for (const auto& t : cur.tenants) live += t.state != GPUOS_TENANT_EXITED;
  std::snprintf(buf, sizeof(buf), "gpuos top - %s  every %.1fs  %zu tenant%s  (q: quit)  socket ", clock, interval,
                live, live == 1 ? "" : "s");
  const std::string head = buf;
  lines.push_back(head + fit_tail(printable(socket), kTopWidth > head.size() ? kTopWidth - head.size() : 0));
  for (const auto& g : cur.gpus) {
    double pct = g.total_mem_bytes ? 100.0 * static_cast<double>(g.used_mem_bytes) / static_cast<double>(g.total_mem_bytes) : 0;
    std::snprintf(buf, sizeof(buf), "GPU %-2u %-32s %4u SMs  mem %s / %s (%.0f%%) by tenants", g.index,
                  fit(printable(cstr(g.name, sizeof(g.name))), 32).c_str(), g.sm_count,
                  human_bytes(g.used_mem_bytes).c_str(), human_bytes(g.total_mem_bytes).c_str(), pct);
    lines.emplace_back(buf);
  }
  if (cur.gpus.empty()) lines.emplace_back("no GPUs known to gpuosd");
  lines.emplace_back("");
  std::snprintf(buf, sizeof(buf), kRowFormat, "ID", "PID", "NAME", "CLASS", "STATE", "GPU%", "MEM", "LAUNCH/s",
                "WAIT%", "SMS", "BUDGET");
  lines.emplace_back(buf);

  auto by_id = [](const Listing* l) {
    std::map<uint32_t, const gpuos_msg_tenant_info*> m;
    if (l != nullptr) {
      for (const auto& t : l->tenants) m[t.tenant_id] = &t;
    }
    return m;
  };
  const auto before = by_id(rates.prev), gpu_before = by_id(rates.gpu_base);
  std::size_t rows = 0, hidden = 0;
  for (const auto& t : cur.tenants) {
    if (t.state == GPUOS_TENANT_EXITED) continue;
    if (height != 0 && lines.size() + 1 >= height) {  // keep a line for the "more" note
      ++hidden;
      continue;
    }
    auto it = before.find(t.tenant_id);
    const gpuos_msg_tenant_info* p = it == before.end() ? nullptr : it->second;
    auto g = gpu_before.find(t.tenant_id);
    std::string lps = p ? rate(t.launches, p->launches, rates.dt_s) : "-";
    std::string gw = "-";
    // With the wait in progress: a tenant blocked the whole interval shows 100, not 0.
    const uint64_t waited = gate_wait_with_current_ns(t), waited_before = p ? gate_wait_with_current_ns(*p) : 0;
    if (p && rates.dt_s > 0 && waited >= waited_before) {
      char b[32];
      std::snprintf(b, sizeof(b), "%.1f", 100.0 * static_cast<double>(waited - waited_before) / (rates.dt_s * 1e9));
      gw = b;
    }
    // The tenant's own bytes: escaped first (no terminal control gets through), then cut to the
    // column without splitting a UTF-8 sequence.
    const std::string name = fit(printable(cstr(t.name, sizeof(t.name))), 12);
    std::snprintf(buf, sizeof(buf), kRowFormat, std::to_string(t.tenant_id).c_str(), std::to_string(t.pid).c_str(),
                  name.c_str(), class_name(t.tenant_class), display_state(t).c_str(),
                  gpu_percent(t, g == gpu_before.end() ? nullptr : g->second, rates.gpu_dt_s).c_str(),
                  human_bytes(t.mem_used_bytes).c_str(), lps.c_str(), gw.c_str(), partition_text(t).c_str(),
                  budget_cell(t).c_str());
    lines.emplace_back(buf);
    ++rows;
  }
  if (hidden) lines.push_back("... " + std::to_string(hidden) + " more tenant(s) (enlarge the terminal)");
  else if (rows == 0) lines.emplace_back("(no live tenants)");
  for (auto& l : lines) {
    l = fit(l, kTopWidth);  // a long state or budget cut at the edge: never a wrapped line
    if (width != 0 && l.size() > width) l.resize(width);
  }
  return lines;
}

int top_command(const TopOptions& o) {
  const unsigned frames = o.once ? 1 : o.iterations;  // 0: until quit
  const bool counted = frames != 0;
  const bool tty_out = isatty(STDOUT_FILENO) != 0;
  const bool interactive = !counted && tty_out;
  const bool keys = !counted && isatty(STDIN_FILENO) != 0;

  struct sigaction sa{};
  sa.sa_handler = on_quit_signal;  // no SA_RESTART: a signal ends the wait at once
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int{}, old_term{}, old_hup{}, old_winch{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
  sa.sa_handler = on_winch;
  sigaction(SIGWINCH, &sa, &old_winch);

  int rc = 0;
  {
    Terminal term(interactive);
    // The snapshots of the last kGpuWindowS seconds and the one before them (GPU% spans them),
    // newest last; cleared when gpuosd does not answer.
    std::deque<std::pair<double, Listing>> past;
    unsigned drawn = 0;
    for (int frame = 0; !g_quit; ++frame) {
      Listing cur;
      std::string err;
      bool ok = list_tenants(o.socket, false, &cur, &err);
      double t_now = mono_s();
      if (!ok && counted) {
        std::fprintf(stderr, "gpuos top: %s\n", err.c_str());
        rc = 1;
        break;
      }
      // -n: the first snapshot only primes the rates; every frame printed has them.
      if (!(counted && frame == 0)) {
        std::size_t w = 0, h = 0;
        if (interactive) terminal_size(&w, &h);
        std::vector<std::string> lines;
        if (ok) {
          TopRates rates;
          if (!past.empty()) {
            rates.prev = &past.back().second;
            rates.dt_s = t_now - past.back().first;
            rates.gpu_base = &past.front().second;
            rates.gpu_dt_s = t_now - past.front().first;
          }
          lines = render_top(rates, cur, o.socket, o.interval, w, h);
        } else {
          lines = {"gpuos top - " + err, "retrying every " + std::to_string(o.interval).substr(0, 4) + "s (q: quit)"};
        }
        std::string out;
        if (interactive) {
          out = "\x1b[H";
          for (const auto& l : lines) out += l + "\x1b[K\r\n";
          out += "\x1b[J";
        } else {
          for (const auto& l : lines) out += l + "\n";
          if (frames != 1) out += "\n";
        }
        write_all(STDOUT_FILENO, out);
        if (counted && ++drawn == frames) break;
      }
      if (ok) {
        past.emplace_back(t_now, std::move(cur));
        // Drop the oldest while the next one is old enough to start the window.
        while (past.size() > 2 && t_now - past[1].first >= kGpuWindowS) past.pop_front();
      } else {
        past.clear();
      }
      // Wait for the next frame, reading keys meanwhile.
      double until = t_now + o.interval;
      bool redraw = false;
      while (!g_quit && !redraw) {
        double left = until - mono_s();
        if (left <= 0) break;
        pollfd pfd{STDIN_FILENO, POLLIN, 0};
        int n = poll(keys ? &pfd : nullptr, keys ? 1 : 0, static_cast<int>(std::ceil(left * 1000)));
        if (n < 0 && errno != EINTR) break;
        if (g_resized) {
          g_resized = 0;
          redraw = true;  // redraw now at the new size (rates over the shorter interval)
        }
        if (n > 0 && (pfd.revents & POLLIN)) {
          char c[64];
          ssize_t r = ::read(STDIN_FILENO, c, sizeof(c));
          if (r == 0) {  // readable but nothing to read: the terminal is gone
            g_quit = 1;
            break;
          }
          for (ssize_t i = 0; i < r; ++i) {
            if (c[i] == 'q' || c[i] == 'Q' || c[i] == 3 /* ^C without ISIG */) g_quit = 1;
            if (c[i] == ' ') redraw = true;
          }
        } else if (n > 0 && (pfd.revents & (POLLHUP | POLLERR))) {
          g_quit = 1;
        }
      }
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  sigaction(SIGWINCH, &old_winch, nullptr);
  return rc;
}

}  // namespace gpuos::cli
