// SPDX-License-Identifier: Apache-2.0
// Trust but verify: what each process really holds and runs on the GPUs, read from NVML, checked
// against what gpuosd granted, independently of anything a tenant writes or says. A tenant that
// bypasses libgpuos.so (dlmopen of its own libcuda, a patched interposer) is caught here: over its
// quota, launching while its gate is closed, or using a GPU without ever registering.
//
// Mechanism (NvmlReader: one sample of every GPU) and check (check_usage: a pure function of a
// sample and the tenants' grants) are separate; what to do about a finding is policy
// (enforce.h).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/core/gpus.h"
#include "daemon/core/usage_window.h"
#include "gpuos/nvml_api.h"

namespace gpuos::daemon {

// One process on one GPU, as NVML reports it.
struct ObservedProcess {
  pid_t pid = 0;
  uint32_t gpu = 0;                 // gpuosd's GPU index (matched by UUID)
  bool mem_known = false;           // NVML said how much (not GPUOS_NVML_VALUE_NOT_AVAILABLE)
  uint64_t mem_bytes = 0;
  int32_t sm_util = -1;             // highest SM use (percent) over the round; -1 = no sample
  int32_t sm_util_mean = -1;        // the mean of the round's samples (-1 = none): NVML samples
                                    // a process only in periods in which it ran
  bool listed = false;              // in a process list (else only in utilization samples)
  std::vector<SmPoint> points;      // the round's utilization samples themselves (closed_use)
  // Its GPU's sampling period as NvmlReader learned it: the least gap between two samples of one
  // process on that GPU so far (never shorter than NVML's period; 0: not known yet).
  uint64_t period_ns = 0;
  // An MPS server (is_mps_server): no tenant by design. On the H200 (driver 580) NVML lists each
  // MPS client with its own bytes but puts all their SM use on the server's pid: its sm_util is its
  // clients' together, and theirs is never sampled.
  bool mps_server = false;
};

// One NVML call of a sample and what it cost (gpuos-nvml-probe prints them).
struct NvmlCall {
  const char* name;
  uint32_t gpu;
  nvmlReturn_t result;
  uint64_t ns;
};

// A GPU's energy counter (nvmlDeviceGetTotalEnergyConsumption): millijoules since the driver loaded.
struct GpuEnergy {
  uint32_t gpu = 0;                 // gpuosd's GPU index
  uint64_t mj = 0;
};

struct UsageSample {
  bool ok = false;                  // NVML answered for every GPU it was asked about
  uint64_t cost_ns = 0;             // time spent in NVML for this sample
  std::vector<ObservedProcess> processes;  // one per (pid, GPU)
  std::vector<GpuEnergy> energy;    // the GPUs whose energy counter NVML gave (none: not available)
  std::vector<NvmlCall> calls;      // in call order; their ns add up to cost_ns at most
};

// Reads NVML through its table (the real library, the double's stand-in or a test's fakes).
class NvmlReader {
 public:
  // gpus: gpuosd's GPUs; each is matched to an NVML device by UUID (index order differs).
  NvmlReader(const GpuosNvmlTable& table, const std::vector<GpuInfo>& gpus);
  ~NvmlReader();  // nvmlShutdown, if nvmlInit_v2 succeeded (NVML counts them)
  NvmlReader(const NvmlReader&) = delete;
  NvmlReader& operator=(const NvmlReader&) = delete;
  // Whether nvmlInit_v2 succeeded and at least one GPU was matched; else why not.
  bool available() const { return !devices_.empty(); }
  const std::string& why_not() const { return why_not_; }
  UsageSample read();
  // GPU `gpu`'s free memory now as the driver counts it (nvmlDeviceGetMemoryInfo): false when NVML
  // cannot say (no such GPU matched, the call missing or failing).
  bool free_bytes(uint32_t gpu, uint64_t* out);

 private:
  GpuosNvmlTable t_;
  std::vector<std::pair<uint32_t, nvmlDevice_t>> devices_;  // gpuosd GPU index, NVML handle
  std::vector<nvmlProcessInfo_t> infos_ = std::vector<nvmlProcessInfo_t>(64);  // grown, kept
  std::vector<nvmlProcessUtilizationSample_t> util_ = std::vector<nvmlProcessUtilizationSample_t>(64);
  unsigned long long last_seen_us_ = 0;                     // newest utilization sample seen
  std::map<uint32_t, uint64_t> period_ns_;                  // per GPU: ObservedProcess::period_ns
  std::string why_not_;
  bool initialized_ = false;
};

// What gpuosd knows of a live tenant for the check (never the tenant's own words).
struct TenantGrant {
  uint32_t id = 0;
  pid_t pid = 0;
  uint64_t limit_bytes = 0;         // quota + borrow; 0 = unlimited
  uint64_t gated_all_round = 0;     // the GPUs its gate was closed on (and drained) the whole round
  // ... of those, the GPUs it was gated on the whole round before as well (so that no sample of
  // this round reaches back to before the gate closed): its gated_sm counts there.
  uint64_t gated_settled = 0;
  // Paced (a best-effort tenant beside a latency budget) without a break since before the last
  // round: the GPUs it was paced on (0: not so paced) and its granted share over this round.
  uint64_t paced_gpus = 0;
  uint32_t pace_permille = 0;
  const UsageWindow* window = nullptr;  // its earlier rounds (null: none)
  // Its report (control block mem_used_bytes, bounded by the node's memory; tenant-written), and the
  // least NVML has measured beyond it so far (its contexts' own memory; UINT64_MAX: not measured
  // yet, nothing to check): under_reported.
  uint64_t reported_bytes = 0;
  uint64_t context_bytes = UINT64_MAX;
  // Sub-round gates (closed_use): the times its gate was closed (excused resolved), and the round's
  // span [round_from_ns, round_to_ns) (CLOCK_MONOTONIC; from 0: the first round, nothing judged).
  std::vector<ClosedSpan> closed = {};
  uint64_t round_from_ns = 0;
  uint64_t round_to_ns = 0;
};

enum class FindingKind { kOverQuota, kLaunchedWhileGated, kUnregistered, kOverPace, kUnderReported };
const char* finding_name(FindingKind k);

struct Finding {
  FindingKind kind;
  pid_t pid = 0;
  uint32_t tenant_id = 0;           // 0: the process is not a registered tenant
  uint32_t gpu = 0;
  // Bytes (over quota, unregistered); SM percent (gated: this round's on `gpu`, or with `window`
  // the window's sum); over pace: the window's mean SM percent in the rounds it ran paced.
  uint64_t measured = 0;
  uint64_t limit = 0;               // bytes allowed, SM percent threshold or bound of the mean
  bool window = false;              // found by adding up the window's rounds
  uint32_t rounds = 0;              // ... that many of them (gated: with use; paced: ran paced)
  // Gated, by its duty while closed (closed_use): `measured` is the duty (percent of the closed
  // time), `limit` kClosedDutyPercent, closed_ms the closed time it was judged over.
  bool duty = false;
  uint64_t closed_ms = 0;
};

// The duty-cycle check (issue #62 item 7): whatever the gate's pattern (closed for rounds, or
// opening and closing within every round), a tenant whose NVML samples wholly inside the times its
// gate was closed add up to kClosedDutyPercent of that closed time or more over the window is
// launching around the gate, once the window holds kClosedDutyMinNs of such closed time (less is
// noise: a few samples). The constants in one place:
inline constexpr uint32_t kClosedDutyPercent = 8;
inline constexpr uint64_t kClosedDutyMinNs = 2'000'000'000;
// A sample counts only if its period, widened by kSampleEdgeNs on each side (NVML's clock against
// gpuosd's, the gate's futex wake), lies within a closed span. Its period is the least gap between
// two samples of one process (NVML samples a process at most once a period, so that is never
// shorter than the real one): the GPU's as learned (ObservedProcess::period_ns) or the process's own
// in the round, whichever is less; neither known: kSamplePeriodUnknownNs.
inline constexpr uint64_t kSampleEdgeNs = 20'000'000;
inline constexpr uint64_t kSamplePeriodUnknownNs = 1'000'000'000;

// One process on one GPU in one round [from_ns, to_ns): the closed time its samples could show
// wholly (each closed, unexcused span on `gpu`, less a period and both edges, within the round)
// and the SM time its samples show in it (percent x period). Pure.
struct ClosedUse {
  uint64_t closed_ns = 0;
  uint64_t used_ns = 0;
};
ClosedUse closed_use(const std::vector<SmPoint>& points, uint64_t period_ns, uint32_t gpu,
                     const std::vector<ClosedSpan>& spans, uint64_t from_ns, uint64_t to_ns);
// Whether use over closed time is a bypass (kClosedDutyPercent, kClosedDutyMinNs); *duty: its
// percent, rounded down.
bool closed_duty_bypass(uint64_t closed_ns, uint64_t used_ns, uint32_t* duty_percent);

struct CheckParams {
  uint64_t memory_slack_bytes = 1ull << 30;
  uint32_t gated_sm_util_percent = 20;
  // The window: this many rounds (this one included). Gated: SM use adding up to more than
  // gated_window_percent over it (summed percents of rounds gated since before the last round) is
  // launching around the gate, though no round passed gated_sm_util_percent: at 1 s rounds, 5% of a
  // GPU on average over 10 s, a burst of 14% duty in the 4th such round.
  uint32_t window_rounds = 10;
  uint32_t gated_window_percent = 50;
  // Paced: a tenant whose mean SM use over the window's rounds in which it ran paced (at least
  // pace_min_rounds of them) exceeds the mean of its granted shares by more than a quarter of it
  // plus pace_margin_percent points ignores its pacing (an honest tenant's kernels may run somewhat
  // longer beside the guaranteed tenant's than the times alone its pacing charges).
  uint32_t pace_min_rounds = 3;
  uint32_t pace_margin_percent = 10;
};

// The most SM percent (mean) a tenant paced at `permille` may show in a round (CheckParams).
uint32_t pace_bound_percent(uint32_t permille, const CheckParams& p);

// How far NVML's measure of a tenant may exceed its report plus its contexts' memory before the
// report is a lie (kUnderReported): 64 MiB, and no more than a quarter of its quota + borrow; 256 MiB
// for a tenant with no quota, which hides nothing from a quota by it (on an H100 an honest Triton
// tenant's contexts grew by about 90 MiB after its first launches, as it loaded new kernels). Not
// the 1 GiB memory slack: that is for the contexts, which context_bytes already holds (sized after
// the tenant's first launch, which reserves the context's local memory: hundreds of MiB on an H100);
// what an honest tenant adds on top without an allocation call (module code loaded lazily) should be
// tens of MiB, and a quarter of a small quota still catches a tenant that hides its whole quota (a
// 64 MiB quota: 16 MiB).
uint64_t report_margin(uint64_t limit_bytes);

// The findings of one sample: a tenant whose NVML memory (all GPUs) exceeds its limit plus the
// slack; one whose NVML memory exceeds its report plus its contexts' plus report_margin (it rewrote
// the word: issue #42); a tenant gated the whole round whose SM use exceeds the threshold on a GPU, or
// whose use while gated adds up over the window beyond gated_window_percent; a paced tenant that used
// more than its share (pace_bound_percent) over the window's paced rounds; a process with GPU memory
// or activity that is no tenant, no MPS server and not in `ignored` (gpuosd itself). The window
// findings come only in a round that itself added to them. `figures` (optional): this round's
// figures of each tenant, in the order of `tenants`, for its window.
std::vector<Finding> check_usage(const UsageSample& sample, const std::vector<TenantGrant>& tenants,
                                 const CheckParams& p, const std::set<pid_t>& ignored,
                                 std::vector<RoundFigures>* figures = nullptr);

// Whether pid is an MPS server: it holds its clients' contexts, so NVML lists it (66 MiB on the
// H200, beside each client with its own bytes); it is no tenant by design. Decided by the binary it
// runs: /proc/<pid>/exe named nvidia-cuda-mps-server, owned by `trusted_uid` (root) and writable by
// nobody else. Not by its comm, which the kernel cuts to 15 characters ("nvidia-cuda-mps", as the
// control daemon's), nor by argv[0]: any process can rename itself, none can make a root-owned file.
bool is_mps_server(pid_t pid, const std::string& proc_root = "/proc", uid_t trusted_uid = 0);

// NVML memory of each pid over all GPUs (unknown amounts count 0).
uint64_t measured_bytes(const UsageSample& sample, pid_t pid);

// Chargeback: one round's GPU time and energy of one tenant on one GPU.
struct Charge {
  std::size_t tenant = 0;           // index into the pids given to apportion_round
  uint32_t gpu = 0;
  uint64_t gpu_ns = 0;
  uint64_t energy_mj = 0;
};

// A process's GPU time in a round: the round's span times its mean SM use (sm_util_mean, percent)
// in that round, at most the span. NVML samples a process only in periods in which it ran, so this
// is the share of the GPU's time its kernels held SMs as NVML's sampling sees it, not a count of
// SM-seconds. An MPS server carries its clients' use (they are never sampled): under MPS the
// tenants get none, and it stays unattributed.
uint64_t round_gpu_ns(const ObservedProcess& o, uint64_t span_ns);

// Splits each GPU's energy of one round (energy_delta_mj: GPU -> the counter's growth since the
// round before) among the processes that ran on it, by their GPU time there (round_gpu_ns), and
// returns the tenants' parts (tenant_pids, in order; a Charge per tenant and GPU with GPU time or
// energy). The parts of processes that are no tenant, and the whole energy of a GPU on which
// nothing ran, stay unattributed; the tenants' energy on a GPU never exceeds its delta (parts are
// rounded down).
std::vector<Charge> apportion_round(const UsageSample& sample, const std::vector<pid_t>& tenant_pids,
                                    uint64_t span_ns, const std::map<uint32_t, uint64_t>& energy_delta_mj);

}  // namespace gpuos::daemon
