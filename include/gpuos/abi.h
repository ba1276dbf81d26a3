// SPDX-License-Identifier: Apache-2.0
/* gpuos ABI v2: the shared-memory blocks (grant block, control block) and the control-socket
 * messages exchanged by libgpuos.so (inside tenant processes), gpuosd and the gpuos CLI.
 *
 * Contract:
 *  - Plain C structs with fixed sizes; every message and block start with magic, ABI version and
 *    size. A peer that sees another version or a wrong size refuses the message with
 *    GPUOS_ERR_VERSION / GPUOS_ERR_BAD_MESSAGE; it never "logs and carries on".
 *  - A released version is frozen: fields are only ever added in a new version. v1 (one block the
 *    tenant could write whole) is refused with GPUOS_ERR_VERSION: serving it would hand a tenant
 *    its own gate and quota again, so a v1 tenant runs as its on_no_daemon setting says.
 *  - Strings are NUL-terminated within their arrays; a receiver treats an array with no NUL as
 *    malformed.
 *  - Control-block counters are accessed only through atomics (std::atomic_ref in C++).
 */
#ifndef GPUOS_ABI_H_
#define GPUOS_ABI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUOS_ABI_MAGIC 0x534f5047u /* "GPOS" little-endian */
#define GPUOS_ABI_VERSION 2u /* 2: the grant block split off the control block, sealed */
#define GPUOS_MAX_DEVICES 16
#define GPUOS_NAME_MAX 64
#define GPUOS_TEXT_MAX 160
#define GPUOS_DOMAIN_MAX 32
/* Kubernetes names as gpuosd keeps them: a namespace is a DNS label (63), an object name a DNS
 * subdomain (253: longer ones are refused, not cut), a uid a UUID (36); each NUL-terminated. */
#define GPUOS_K8S_NAMESPACE_MAX 64
#define GPUOS_K8S_NAME_MAX 256
#define GPUOS_K8S_UID_MAX 40

/* Scheduling class of a tenant. */
typedef enum gpuos_class {
  GPUOS_CLASS_GUARANTEED = 1,  /* latency-critical: runs as if alone */
  GPUOS_CLASS_BEST_EFFORT = 2, /* fills idle time, yields within a bounded delay */
} gpuos_class;

/* Result codes carried in replies (never CUDA codes). */
typedef enum gpuos_status {
  GPUOS_OK = 0,
  GPUOS_ERR_BAD_MESSAGE = 1, /* malformed, truncated or oversized */
  GPUOS_ERR_VERSION = 2,     /* magic or ABI version mismatch */
  GPUOS_ERR_PERMISSION = 3,  /* peer credentials do not allow this */
  GPUOS_ERR_NOT_FOUND = 4,   /* no such tenant */
  GPUOS_ERR_LIMIT = 5,       /* tenant table full or quota refused */
  GPUOS_ERR_INTERNAL = 6,
  GPUOS_ERR_REFUSED = 7,     /* policy/config refuses the request */
} gpuos_status;

/* Gate word values (daemon writes, tenant waits on it with a shared futex). PARTIAL (grant block
 * `gate` only): closed on some of the tenant's devices, open on the others (gate_closed_devices
 * says which). */
#define GPUOS_GATE_OPEN 0u
#define GPUOS_GATE_CLOSED 1u
#define GPUOS_GATE_PARTIAL 2u

/* ---------------------------------------------------------------------------------------------
 * Shared memory: two blocks per tenant, each in a memfd created by gpuosd and passed to the tenant
 * with SCM_RIGHTS in the REGISTER reply (first the grant block, then the control block). Words are
 * accessed only through atomics.
 * ------------------------------------------------------------------------------------------- */
/* Right-sizing samples of one launch shape: its mean duration at each SM count it ran on. */
#define GPUOS_SPACE_SHAPES 8
#define GPUOS_SPACE_POINTS 6
typedef struct gpuos_latency_point {
  uint32_t sms;    /* SMs of the partition it ran on (the whole device when unconfined); 0 = unused */
  uint32_t count;  /* timed launches */
  uint64_t sum_ns; /* their total duration */
} gpuos_latency_point;
typedef struct gpuos_shape_latency {
  uint64_t key;      /* hash of the shape; 0 = unused slot */
  uint64_t launches; /* timed launches of this shape (its weight among the tenant's work) */
  gpuos_latency_point points[GPUOS_SPACE_POINTS];
} gpuos_shape_latency;

/* One timed launch (control block timing_ring). */
#define GPUOS_TIMING_RING 128
/* A timed launch's key has this bit set when the tenant's engine said it was admitting requests
 * (control block engine_phase) as the launch was made, or its own timings marked it long
 * (launch_phase LONG: a prefill, learned). */
#define GPUOS_TIMING_KEY_ADMISSION (1ull << 63)
typedef struct gpuos_timed_launch {
  uint64_t key; /* shape (as in gpuos_shape_latency), GPUOS_TIMING_KEY_ADMISSION aside */
  uint64_t ns;  /* its duration on the GPU, from its stream reaching it to its end */
} gpuos_timed_launch;

/* control block launch_phase values */
#define GPUOS_LAUNCH_PHASE_STEPS 0u
#define GPUOS_LAUNCH_PHASE_LONG 1u

/* How long a closed gate holds without a heartbeat from gpuosd (daemon_heartbeat_ns). */
#define GPUOS_GATE_LEASE_NS 5000000000ull

/* ---------------------------------------------------------------------------------------------
 * Grant block: what gpuosd decides for the tenant (gate, quota, borrow, class, admission bounds,
 * swap commands, SM masks). In its own memfd that gpuosd maps writable, then seals with
 * F_SEAL_FUTURE_WRITE before passing it: the tenant can map it only read-only (a writable
 * mapping, mprotect to write and write(2) all fail), so no tenant can change what was granted to
 * it. Futex waits work on the read-only mapping; gpuosd wakes them through its own.
 * ------------------------------------------------------------------------------------------- */
typedef struct gpuos_grant_block {
  /* constant after creation */
  uint32_t magic;
  uint32_t abi_version;
  uint32_t size;         /* sizeof(gpuos_grant_block) */
  uint32_t tenant_id;
  uint32_t tenant_class; /* gpuos_class granted */
  uint32_t reserved0;
  uint8_t pad0[40];

  /* admission and memory */
  uint32_t gate;        /* GPUOS_GATE_OPEN / CLOSED / PARTIAL (device_gate says where); futex word */
  uint32_t grant_epoch; /* bumped by the daemon on every grant change */
  uint32_t daemon_alive;/* 1 while gpuosd holds this tenant; 0 after an orderly daemon exit */
  uint32_t max_inflight;    /* >0: at most this many submitted launches may be unfinished (so a
                               closed gate drains fast); 0 = unbounded */
  uint64_t mem_quota_bytes; /* 0 = unlimited */
  uint64_t mem_borrow_bytes;/* with a quota: it may hold this much more while the GPU has room;
                               borrowers are the first to be swapped out when room is needed */
  uint64_t daemon_heartbeat_ns; /* CLOCK_MONOTONIC of gpuosd's last look (every tick, 100 ms): a
                               closed gate is a lease that ends GPUOS_GATE_LEASE_NS after it, so a
                               stopped or hung gpuosd cannot hold a tenant forever */
  uint32_t idle_grace_us;   /* the tenant reports idle only after its work has finished and no new
                               work came for this long (bridges host gaps between steps) */
  uint32_t sample_period;   /* >0: time one launch in about this many, also outside a spatial
                               domain, into timing_ring (a latency budget needs them); a graph
                               launch is timed whenever no timed launch of its thread is in flight */
  uint32_t pace_permille;   /* best-effort: >0 while a guaranteed tenant with a latency budget runs:
                               its launches keep its GPU time to this share of wall time (each
                               waits until the one before has had its expected duration / share);
                               futex word, gpuosd wakes it when it changes */
  uint32_t pace_max_kernel_us; /* with pacing: a launch expected to run longer than this waits until
                               pacing ends (a gap of the guaranteed tenant); 0 = no such bound */
  uint32_t pace_burst_us;   /* with pacing: GPU time it may use back to back before its gaps begin
                               (fewer switches between the tenants' contexts); 0 = one launch */
  uint32_t gate_closed_devices; /* the devices the gate holds (bit o = the tenant's device ordinal o):
                               0 while `gate` is OPEN, all bits while CLOSED, some while PARTIAL.
                               gpuosd writes it before `gate` (release), so a reader that saw PARTIAL
                               reads the bits that go with it. Futex word: a launch held on its
                               device waits for its bit to clear */

  /* memory oversubscription (swap) */
  uint32_t swap_command;      /* gpuos_swap_command: what the daemon asks for */
  uint32_t swap_command_seq;  /* bumped with every command; futex word the tenant's swapper waits on */
  uint32_t mem_answer_seq;    /* bumped when the daemon answered a memory request (mem_request_seq) */
  uint32_t mem_answer;        /* gpuos_mem_answer of that answer */
  uint64_t swap_slice_offset; /* SWAP_OUT: where in the swap pool the tenant puts its memory */
  uint64_t swap_slice_bytes;  /* SWAP_OUT: size of that slice */
  uint64_t swap_want_bytes;   /* SWAP_OUT: move at least this much (as far as the slice allows) */
  /* KV pools (include/gpuos/kv.h): while kv_target_on, the tenant should keep its pools' resident
   * bytes at most kv_target_bytes, reached within kv_deadline_ms of the change (else gpuosd swaps the
   * rest out). kv_target_seq is bumped with every change; futex word the tenant's watcher waits on. */
  uint64_t kv_target_bytes;
  uint32_t kv_target_seq;
  uint32_t kv_target_on;
  uint32_t kv_deadline_ms;
  uint8_t pad2[4];

  /* spatial sharing (SM partitions) */
  uint32_t space_epoch;       /* bumped with every change of space_mask (any device) */
  uint32_t space_group_sms;   /* SMs per partition group: the split's minimum count (8 on Hopper) */
  uint32_t space_enabled;     /* 1: the tenant is in a spatial domain; its launches follow space_mask */
  uint32_t space_planned_devices; /* the device_count of the tenant's device map that its masks were
                                     last planned with (stored after them, release) */
  uint32_t pace_reserved; /* 0. Was a contention weight on paced launches: removed, as no run
                             showed it paid (#40) */
  uint32_t pace_devices;      /* with pacing: the devices its launches are paced on (bit o = the
                                 tenant's device ordinal o, as gate_closed_devices); launches on its
                                 other devices go unpaced (a process on several GPUs beside a budget
                                 on one of them). 0 = every device. Written before pace_permille */
  uint8_t pad3[40];
  /* Per device: the groups of the device's SM split (bit i = group i; the highest group of the
   * split also takes its remainder) on which this tenant's kernels may run; 0 = the whole device,
   * unconfined (its own streams, no placement). */
  uint64_t space_mask[GPUOS_MAX_DEVICES];
} gpuos_grant_block;

/* ---------------------------------------------------------------------------------------------
 * Control block: what the tenant reports (counters, usage, busy, swap progress, its devices,
 * latency samples). In a second memfd that both map writable. gpuosd reads it as untrusted input:
 * every word is clamped or checked before it counts, and none of it can move another tenant. The
 * header is written by gpuosd at creation, for the tenant to check.
 * ------------------------------------------------------------------------------------------- */
typedef struct gpuos_control_block {
  uint32_t magic;
  uint32_t abi_version;
  uint32_t size; /* sizeof(gpuos_control_block) */
  uint32_t tenant_id;
  uint8_t pad0[48];

  uint64_t launches;          /* kernel launches submitted to the GPU (not captured ones) */
  uint64_t graph_launches;    /* CUDA graph launches (one each, whatever the graph holds) */
  uint64_t captured_launches; /* kernel launches recorded into a graph under stream capture */
  uint64_t gate_waits;        /* launches that found the gate closed */
  uint64_t gate_wait_ns;      /* total time spent waiting at the gate */
  uint64_t alloc_calls;
  uint64_t free_calls;
  uint64_t alloc_failures;    /* allocation calls that returned an error */
  uint64_t mem_used_bytes;    /* current device bytes held (all devices); goes up and down */
  uint64_t mem_peak_bytes;
  uint64_t mem_used_per_device[GPUOS_MAX_DEVICES];
  uint64_t untracked_frees;   /* frees of pointers gpuos never saw allocated */
  uint64_t contexts_created;
  uint64_t streams_created;
  uint32_t busy;              /* 1 while the tenant has submitted GPU work not yet finished */
  uint32_t waiting;           /* 1 while a thread of the tenant is blocked at the closed gate */
  uint32_t untracked_work;    /* 1 once work went where completion cannot be observed from another
                                 thread (per-thread default stream): idle is then inferred */
  uint64_t busy_transitions;  /* idle->busy transitions */
  uint64_t inflight_waits;    /* launches that waited for max_inflight */
  /* Gate waits by duration, counted when a wait ends (with gate_wait_ns): [i] counts waits of at
   * most gpuos_gate_wait_bound_ns(i) for i < 5, [5] the longer ones. */
  uint64_t gate_wait_hist[6];
  /* 1 while a thread blocked in gpuos (at the closed gate, or waiting for room for an allocation)
   * was woken by a signal handler: the program has a signal to act on (SIGTERM, Ctrl-C), which it
   * can only once the CUDA call returns, so gpuosd lets it run soon. Cleared when the wait ends. */
  uint32_t signalled;
  uint32_t reserved8;

  /* ---- memory oversubscription (swap), written by the tenant, read by gpuosd ---- */
  uint32_t swappable;         /* 1: the tenant's device memory can be swapped (gpuos run --swap) */
  uint32_t swap_state;        /* gpuos_swap_state */
  uint32_t swap_done_seq;     /* swap_command_seq of the last command carried out (or given up) */
  uint32_t mem_request_seq;   /* bumped when an allocation needs the daemon to make room */
  uint64_t mem_wanted_bytes;  /* size of that allocation */
  uint64_t swappable_bytes;   /* bytes of the tenant's allocations that can move (resident or not) */
  uint64_t swapped_bytes;     /* bytes now held in host memory instead of on the GPU */
  uint64_t swap_outs;         /* completed swap-outs */
  uint64_t swap_ins;          /* completed swap-ins */
  uint64_t swap_out_bytes;    /* total bytes copied out */
  uint64_t swap_in_bytes;     /* total bytes copied back */
  uint64_t swap_out_ns;       /* total time of swap-outs (drain excluded: copy and release) */
  uint64_t swap_in_ns;        /* total time of swap-ins (map and copy) */
  uint64_t max_swap_in_ns;    /* longest swap-in */
  uint64_t mem_waits;         /* allocations that waited for the daemon to make room */
  uint64_t mem_wait_ns;       /* total time of those waits */
  uint64_t mem_imported_bytes;/* device memory of other processes mapped in (cuIpcOpenMemHandle):
                                 accounted to its owner, so not part of mem_used_bytes or the quota */
  int32_t mem_wanted_device;  /* device of the allocation waiting for room (mem_request_seq) */
  uint32_t reserved4;

  /* ---- spatial sharing, written by the tenant, read by gpuosd ---- */
  uint64_t space_launches;    /* launches placed on a partition (green-context) stream */
  uint64_t space_switches;    /* placements that found a new mask for their stream */
  uint64_t space_partitions;  /* partitions (green contexts) created */
  uint64_t space_setup_ns;    /* time spent creating partitions and their streams */
  uint64_t space_failures;    /* launches that could not be placed and ran unconfined */
  uint32_t space_active;      /* 1 once a launch was placed on a partition */
  uint32_t space_devices;     /* bit o: it launched on its device ordinal o (placed or not) */
  uint64_t space_joins_skipped; /* placed launches that skipped their forward join (stream_work.h) */
  uint8_t pad6[8];
  uint64_t space_mask_in_use[GPUOS_MAX_DEVICES]; /* mask of the last placed launch, per device */

  /* ---- the tenant's devices, written by the tenant once the driver is initialised ---- */
  /* Every per-device word of this block is indexed by the tenant's device ordinals, which
   * CUDA_VISIBLE_DEVICES (or an MPS server's device list) may hide and reorder. The UUID of each
   * ordinal lets gpuosd map them to its GPUs. device_count is stored last (release). */
  uint32_t device_count;      /* devices the tenant sees; 0 = not published yet (ordinal = GPU index) */
  uint32_t reserved7;
  /* ---- KV pools (include/gpuos/kv.h), written by the tenant ---- */
  uint64_t kv_resident_bytes; /* GPU memory its pools hold (part of mem_used_bytes) */
  uint64_t kv_reserved_bytes; /* virtual range its pools reserved */
  uint64_t kv_grow_ns;        /* time spent growing pools (creating and mapping chunks) */
  uint64_t kv_grown_bytes;    /* bytes those grows mapped */
  uint64_t kv_pages_unmapped; /* pages its engine unmapped (gave back) in all */
  uint32_t kv_target_seen_seq;/* the grant block's kv_target_seq its pressure callback was told */
  uint32_t kv_queue_depth;    /* requests its engine has waiting (gpuos_kv_report_queue) */
  uint32_t engine_slots_active;   /* its engine's batch slots in use, and how many it has */
  uint32_t engine_slots_capacity; /* (gpuos_kv_report_slots; capacity 0 = never reported) */
  uint8_t device_uuid[GPUOS_MAX_DEVICES][16];

  /* ---- right-sizing samples, written by the tenant (spatial tenants only), read by gpuosd ----
   * The interposer times one launch in every space_sample_period (events around it) and adds the
   * duration to the entry of that launch's shape (kernel function and grid, or graph) at the SM
   * count it ran on. gpuosd fits each shape's latency against SMs (l = m/t + b) and sizes
   * guaranteed tenants from it. Seqlock: space_sample_seq is odd while the tenant writes. */
  uint32_t space_sample_seq;
  uint32_t space_sample_period; /* launches per timed launch (the interposer's choice) */
  uint64_t space_samples;       /* launches timed in all (also those whose shape found no slot) */
  uint64_t space_timed_kernels; /* kernels in those timed launches (a graph counts its kernel nodes) */
  uint64_t space_timed_ns;      /* their duration: space_timed_ns / space_timed_kernels is the mean
                                   time of its kernels (what a fixed cost per kernel is measured against) */
  uint32_t space_shape_blocks[GPUOS_SPACE_SHAPES]; /* blocks in the grid of space_shapes[i]'s
                                   launches; 0 = not known (a graph). Written with the entry. */
  gpuos_shape_latency space_shapes[GPUOS_SPACE_SHAPES];

  /* ---- latency samples, written by the tenant while sample_period > 0 (or in a spatial domain),
   * read by gpuosd: every timed launch, its shape and duration, in the order they finished. The
   * tenant writes entry timing_head % GPUOS_TIMING_RING, then bumps timing_head (release); gpuosd
   * reads the entries it has not seen, at most a ring's worth (untrusted: durations are clamped). */
  uint64_t timing_head;
  uint64_t pace_waits;   /* best-effort: launches that waited for pacing (pace_permille) */
  uint64_t pace_wait_ns; /* and how long in all */
  /* what its engine says it runs now (gpuos_kv_report_phase): GPUOS_KV_PHASE_ADMISSION while it
   * admits requests (their prefill), else steps. Launches timed while it said admission (or marked
   * LONG, below) carry GPUOS_TIMING_KEY_ADMISSION in their key, so gpuosd can tell the two
   * slowdowns apart. */
  uint32_t engine_phase;
  /* what its own timings say it launched last (GPUOS_LAUNCH_PHASE_*), written by the interposer of
   * a guaranteed tenant with a latency budget, with no engine hint: LONG while its last launch is
   * one expected to take several times its typical one (a prefill graph, a chunked-prefill step) */
  uint32_t launch_phase;
  uint64_t long_launches; /* launches it marked LONG so */
  uint8_t pad8[24];
  gpuos_timed_launch timing_ring[GPUOS_TIMING_RING];
} gpuos_control_block;

/* swap_command values */
typedef enum gpuos_swap_command {
  GPUOS_SWAP_NONE = 0,
  GPUOS_SWAP_OUT = 1, /* gate is closed: drain, move swap_want_bytes (whole allocations, largest
                         first) into the pool slice and release their GPU memory; repeatable */
  GPUOS_SWAP_IN = 2,  /* map memory again at the same addresses and copy it back */
} gpuos_swap_command;

/* swap_state values */
typedef enum gpuos_swap_state {
  GPUOS_SWAP_RESIDENT = 0,
  GPUOS_SWAP_SWAPPING_OUT = 1,
  GPUOS_SWAP_SWAPPED_OUT = 2, /* some or all of its movable memory is in host memory */
  GPUOS_SWAP_SWAPPING_IN = 3,
} gpuos_swap_state;

/* mem_answer values */
typedef enum gpuos_mem_answer {
  GPUOS_MEM_RETRY = 1,   /* room was made (or may have been): try the allocation again */
  GPUOS_MEM_REFUSED = 2, /* no room can be made: the allocation fails with out-of-memory */
} gpuos_mem_answer;

#define GPUOS_GATE_WAIT_BUCKETS 6
/* Upper bound of gate_wait_hist[i] for i < 5: 100 us, 1 ms, 10 ms, 100 ms, 1 s ([5]: the rest). */
static inline uint64_t gpuos_gate_wait_bound_ns(unsigned i) {
  uint64_t b = 100000u;
  while (i-- > 0) b *= 10u;
  return b;
}
/* The gate_wait_hist index of a wait of ns nanoseconds. */
static inline unsigned gpuos_gate_wait_bucket(uint64_t ns) {
  unsigned i = 0;
  while (i < GPUOS_GATE_WAIT_BUCKETS - 1 && ns > gpuos_gate_wait_bound_ns(i)) ++i;
  return i;
}

/* ---------------------------------------------------------------------------------------------
 * Socket messages (AF_UNIX, SOCK_SEQPACKET: one message per datagram). Every message starts with
 * gpuos_msg_header; size is the whole message including the header and must equal the size of the
 * struct its type names.
 * ------------------------------------------------------------------------------------------- */
typedef enum gpuos_msg_type {
  GPUOS_MSG_REGISTER = 1,       /* tenant -> daemon: gpuos_msg_register */
  GPUOS_MSG_REGISTER_REPLY = 2, /* daemon -> tenant: gpuos_msg_register_reply (+ 2 fds: grant block,
                                   control block) */
  GPUOS_MSG_LIST = 3,           /* client -> daemon: gpuos_msg_list */
  GPUOS_MSG_GPU_INFO = 4,       /* daemon -> client: one per GPU, before the tenants */
  GPUOS_MSG_TENANT_INFO = 5,    /* daemon -> client: one per tenant */
  GPUOS_MSG_LIST_END = 6,       /* daemon -> client: gpuos_msg_reply, ends a listing */
  GPUOS_MSG_SET_GATE = 7,       /* admin -> daemon: gpuos_msg_set_gate */
  GPUOS_MSG_REPLY = 8,          /* daemon -> client: gpuos_msg_reply */
  GPUOS_MSG_SHUTDOWN = 9,       /* admin -> daemon: gpuos_msg_header only */
  GPUOS_MSG_ACTIVITY = 10,      /* tenant -> daemon: gpuos_msg_activity; no reply */
  GPUOS_MSG_SWAP_POOL = 11,     /* tenant -> daemon: gpuos_msg_header only; asks for the swap pool */
  GPUOS_MSG_SWAP_POOL_REPLY = 12, /* daemon -> tenant: gpuos_msg_swap_pool_reply (+ pool memfd) */
  /* Added in v2 (types are only ever added; a daemon that predates one refuses it with
     GPUOS_ERR_BAD_MESSAGE "unknown message type N", which a client reads as "not supported"): */
  GPUOS_MSG_SPACE_QUERY = 13,   /* client -> daemon: gpuos_msg_space_query (any local user) */
  GPUOS_MSG_SPACE_INFO = 14,    /* daemon -> client: gpuos_msg_space_info */
  GPUOS_MSG_CLAIM_PREPARE = 15, /* admin -> daemon: gpuos_msg_claim_prepare; REPLY (text: the claim's
                                   socket directory) */
  GPUOS_MSG_CLAIM_UNPREPARE = 16, /* admin -> daemon: gpuos_msg_claim_unprepare; REPLY */
  GPUOS_MSG_TENANT_GPU = 17,    /* daemon -> client: gpuos_msg_tenant_gpu (LIST with GPUOS_LIST_WITH_GPUS) */
  GPUOS_MSG_TYPE_MAX = 17,
} gpuos_msg_type;

typedef struct gpuos_msg_header {
  uint32_t magic;
  uint16_t abi_version;
  uint16_t type; /* gpuos_msg_type */
  uint32_t size; /* whole message in bytes */
  uint32_t seq;  /* request sequence number, echoed in replies */
} gpuos_msg_header;

typedef struct gpuos_msg_register {
  gpuos_msg_header hdr;
  int32_t pid;           /* must equal the SO_PEERCRED pid of the socket, else refused */
  uint32_t tenant_class; /* gpuos_class; may be lowered by the daemon, never raised beyond config */
  /* The numbers' ranges (priority, weight, space_sms, max_slowdown_permille) are gpuosd's, defined
     once in src/common/tenant_numbers.h; a REGISTER outside one is refused (GPUOS_ERR_BAD_MESSAGE). */
  int32_t priority;      /* guaranteed tenants: larger = more important */
  uint32_t weight;       /* best-effort tenants: fair-share weight */
  uint64_t requested_mem_bytes; /* 0 = default from config */
  char name[GPUOS_NAME_MAX];
  uint64_t requested_borrow_bytes; /* more it may hold while the GPU has room (needs a quota) */
  uint32_t previous_tenant_id; /* re-registration after a daemon restart: the id it had (kept when
                                  the new daemon has not used it), else 0 */
  uint32_t reserved;
  char space_domain[GPUOS_DOMAIN_MAX]; /* spatial-sharing domain (gpuos run --space), "" = none */
  uint32_t space_sms;          /* SMs it asks for in its domain (guaranteed tenants); 0 = default */
  uint32_t max_slowdown_permille; /* latency budget (gpuos run --max-slowdown): its GPU work may take
                                     this many thousandths of its time alone (1250 =
                                     1.25x); 0 = the class's default from the config */
} gpuos_msg_register;

typedef struct gpuos_msg_register_reply {
  gpuos_msg_header hdr;
  int32_t status; /* gpuos_status */
  uint32_t tenant_id;
  uint32_t control_block_size; /* sizeof(gpuos_control_block) */
  uint32_t tenant_class; /* class granted */
  uint32_t grant_block_size;   /* sizeof(gpuos_grant_block) */
  uint32_t reserved;
  char text[GPUOS_TEXT_MAX - 8];
} gpuos_msg_register_reply;

typedef struct gpuos_msg_list {
  gpuos_msg_header hdr;
  uint32_t flags; /* GPUOS_LIST_INCLUDE_EXITED | GPUOS_LIST_WITH_GPUS */
  uint32_t reserved;
} gpuos_msg_list;
#define GPUOS_LIST_INCLUDE_EXITED 1u
/* Added in v2: after each live tenant's TENANT_INFO, a TENANT_GPU per GPU it works on. A daemon that
 * predates it refuses the flag ("unknown LIST flags"): ask again without it. */
#define GPUOS_LIST_WITH_GPUS 2u

/* One GPU a live tenant works on: where it holds memory by its own count, or where the usage check
 * (NVML) saw its process. */
typedef struct gpuos_msg_tenant_gpu {
  gpuos_msg_header hdr;
  uint32_t tenant_id;
  uint32_t gpu;            /* gpuosd's index */
  uint64_t mem_used_bytes; /* its device memory on that GPU, by its own count */
  uint32_t gated;          /* 1 while its gate is closed on that GPU (the whole gate, or a partial one) */
  uint32_t reserved;
} gpuos_msg_tenant_gpu;

typedef struct gpuos_msg_gpu_info {
  gpuos_msg_header hdr;
  uint32_t index;
  uint32_t sm_count;
  uint64_t total_mem_bytes;
  uint64_t used_mem_bytes; /* by gpuos tenants */
  char name[96];
  char uuid[40]; /* bare 36-character form; "GPU-" is added for display */
} gpuos_msg_gpu_info;

typedef enum gpuos_tenant_state {
  GPUOS_TENANT_RUNNING = 1,
  GPUOS_TENANT_GATED = 2, /* gate closed */
  GPUOS_TENANT_EXITED = 3,
} gpuos_tenant_state;

typedef struct gpuos_msg_tenant_info {
  gpuos_msg_header hdr;
  uint32_t tenant_id;
  int32_t pid;
  uint32_t uid;
  uint32_t tenant_class;
  uint32_t state; /* gpuos_tenant_state */
  int32_t priority;
  uint32_t weight;
  uint32_t space_kernel_ns; /* spatial tenant: mean time of its kernels (control block space_timed_*);
                               0 = not timed yet */
  char name[GPUOS_NAME_MAX];
  uint64_t launches;
  uint64_t graph_launches;
  uint64_t captured_launches;
  uint64_t gate_waits;
  uint64_t gate_wait_ns;
  uint64_t mem_used_bytes;
  uint64_t mem_peak_bytes;
  uint64_t mem_quota_bytes;
  uint64_t alloc_calls;
  uint64_t alloc_failures;
  uint64_t registered_unix_ms;
  uint64_t exited_unix_ms; /* 0 while running */
  /* memory oversubscription: the control block's swap words (see there) */
  uint32_t swappable;
  uint32_t swap_state;
  uint64_t swapped_bytes;
  uint64_t swap_outs;
  uint64_t swap_ins;
  uint64_t swap_out_bytes;
  uint64_t swap_in_bytes;
  uint64_t swap_out_ns;
  uint64_t swap_in_ns;
  uint64_t max_swap_in_ns;
  uint64_t mem_waits;
  uint64_t mem_wait_ns;
  uint64_t mem_borrow_bytes;
  uint64_t mem_imported_bytes;
  /* spatial sharing: its domain and, on its home GPU, the SMs it may use now */
  char space_domain[GPUOS_DOMAIN_MAX];
  uint32_t space_sms;          /* SMs of space_mask on the home GPU; 0 = unconfined */
  uint32_t space_active;
  uint64_t space_mask;         /* control block space_mask of the home GPU */
  uint64_t space_launches;
  uint64_t space_switches;
  uint64_t space_failures;
  /* right-sizing (a guaranteed tenant that asked for no size): the capacity it gave back */
  uint32_t space_default_sms;      /* SMs of its default partition; 0 = not being right-sized */
  uint32_t space_sized_permille;   /* its latency at space_sms, per mille of that at the default
                                      size, as last measured; 0 = not measured yet */
  /* the usage check (NVML), independent of the tenant: its memory on the GPUs (context included;
     0 = not measured), and the findings against it (over quota, launching while gated) */
  uint64_t verified_mem_bytes;
  uint64_t violations;
  /* latency budget (guaranteed tenants with --max-slowdown): the budget, the slowdown of its GPU
     work against its solo time as measured now (p99 over the time gate's window; 0 = not measured
     yet), and the share of the GPU's time best-effort tenants are granted beside it */
  uint32_t max_slowdown_permille;
  uint32_t slowdown_permille;
  uint32_t be_share_permille;
  /* a best-effort tenant's pacing as gpuosd grants it now (grant block pace_*): the share of the
     GPU's time its launches may take (0 = not paced), and the longest launch it may start while
     paced, in us (0 = no bound); under a budget, or held in a guaranteed tenant's pause */
  uint32_t pace_permille;
  uint32_t pace_max_kernel_us;
  uint32_t gate_by; /* why a live tenant's gate is closed: GPUOS_GATE_BY_* bits (0 = open, or a
                       daemon that predates the field) */
  /* how long the tenant has been blocked at its closed gate now, in ms (0 = not waiting): gate_wait_ns
     counts finished waits only. gpuosd's own clock, from when it first saw the tenant's waiting word
     set while it held the gate closed (the word alone cannot make a wait longer, or one at an open
     gate). */
  uint32_t gate_waiting_ms;
  uint32_t kv_queue_depth;     /* KV pools: the control block's words (see there), and gpuosd's */
  uint64_t kv_resident_bytes;  /* target (UINT64_MAX: none) */
  uint64_t kv_reserved_bytes;
  uint64_t kv_target_bytes;
  /* Kubernetes: the pod the tenant runs in ("" = none known) and the ResourceClaim it was admitted
     under ("" = none: it came by gpuosd's own socket). From the claim gpuosd admitted (the DRA
     plugin's word, an admin's), or the pod uid alone from the process's cgroup path. */
  char pod_namespace[GPUOS_K8S_NAMESPACE_MAX];
  char pod_name[GPUOS_K8S_NAME_MAX];
  char pod_uid[GPUOS_K8S_UID_MAX];
  char claim_uid[GPUOS_K8S_UID_MAX];
  /* chargeback (the usage check, NVML): its GPU time (each round's span times its mean SM use in
     that round, summed over rounds and GPUs), and its part of the GPUs' energy (each GPU's energy
     counter delta of a round, split by the GPU time of the processes that ran in it); 0 = not
     measured. gpuosd's count since the tenant registered (not kept across a restart). */
  uint64_t gpu_time_ns;
  uint64_t energy_mj;
  /* its engine's batch slots as it reports them (control block engine_slots_*; capacity 0 = none
     reported): a server whose slots are all in use queues new requests (kv_queue_depth), and their
     TTFT from arrival then grows by that wait, whatever runs beside it */
  uint32_t engine_slots_active;
  uint32_t engine_slots_capacity;
  /* a budgeted tenant whose engine reports its phases: the slowdown of its steps and of its
     admissions (prefills), each p99 over the window as slowdown_permille (0 = none measured) */
  uint32_t slowdown_step_permille;
  uint32_t slowdown_admission_permille;
  /* a budgeted tenant in a spatial domain: MPS's cost to it that its budget charges, per mille of
     its time without MPS (measured from its kernels' mean time alone; 0 = not in a domain) */
  uint32_t mps_cost_permille;
  /* 1: its connection closed while its process runs on (issue #62): still this tenant, its gate,
     hold and grants binding through its blocks, with no connection; 0 otherwise (and from a daemon
     that predates the field) */
  uint32_t detached;
  /* a budgeted tenant: its launches its own timings marked long (control block long_launches;
     interpose/launch_phase.h), during which its budget lent nothing */
  uint64_t long_launches;
  /* a budgeted tenant: what held its budget unspent over the last probe period (5 s), or that it
     was spent (GPUOS_BUDGET_LIMIT_*; 0 = not judged yet) */
  uint32_t budget_limit;
  uint32_t reserved0;
} gpuos_msg_tenant_info;
/* Why a latency budget's slowdown stayed below 70% of its excess (what more lending would run
 * into), or that it was spent; the policy's judgement (policies/budget/stages.h, budget_limit). */
#define GPUOS_BUDGET_LIMIT_SPENT 1u       /* its slowdown used at least 70% of the excess */
#define GPUOS_BUDGET_LIMIT_NO_SOLO 2u     /* its times alone are not learned yet: nothing lent */
#define GPUOS_BUDGET_LIMIT_NO_BE 3u       /* no best-effort tenant was active beside it */
#define GPUOS_BUDGET_LIMIT_MPS 4u         /* MPS's cost takes most of the budget */
#define GPUOS_BUDGET_LIMIT_SHARE_CAP 5u   /* best-effort work had the largest share there is */
#define GPUOS_BUDGET_LIMIT_GROWTH 6u      /* cuts made by its load growth, its meter within budget */
#define GPUOS_BUDGET_LIMIT_OVER 7u        /* cuts: intervals read over the budget (their spread) */
#define GPUOS_BUDGET_LIMIT_PHASES 8u      /* held for its admissions and long launches much of the time */
#define GPUOS_BUDGET_LIMIT_CONTROL 9u     /* the controller's steps: climbing, or below its target */
#define GPUOS_GATE_BY_ADMIN 1u  /* an admin holds it (gpuos gate ID close); survives a restart */
#define GPUOS_GATE_BY_POLICY 2u /* the time-gate policy closed it */
#define GPUOS_GATE_BY_MEMORY 4u /* the memory slot holds it: the tenant's memory is out or moving */
/* Bits 16-31: the GPUs (gpuosd's 0-15, bit 16 + i = GPU i) the time-gate policy holds it on while
 * its gate is open on its others (gate PARTIAL); none of them while the whole gate is closed. */
#define GPUOS_GATE_BY_POLICY_ON_GPUS_SHIFT 16u

typedef struct gpuos_msg_set_gate {
  gpuos_msg_header hdr;
  uint32_t tenant_id;
  uint32_t gate; /* GPUOS_GATE_OPEN / GPUOS_GATE_CLOSED */
} gpuos_msg_set_gate;

/* Sent by a registered tenant when its busy or waiting flag changes, or another control-block word
 * gpuosd acts on (a signal, a request for room, a swap step, its engine's phase), so the daemon's
 * policy reacts at once instead of polling. The control block's words are authoritative; this
 * message is only a wake-up (busy/waiting echo the values at sending time). */
typedef struct gpuos_msg_activity {
  gpuos_msg_header hdr;
  uint32_t busy;
  uint32_t waiting;
} gpuos_msg_activity;

/* The swap pool: host memory (a memfd) gpuosd sets aside for swapped-out tenants. Every swappable
 * tenant maps and pins all of it once; the daemon hands out slices of it with each SWAP_OUT. With
 * status != GPUOS_OK there is no pool (swapping is off) and no fd. */
typedef struct gpuos_msg_swap_pool_reply {
  gpuos_msg_header hdr;
  int32_t status; /* gpuos_status */
  uint32_t reserved;
  uint64_t pool_bytes;
} gpuos_msg_swap_pool_reply;

/* `gpuos run --space DOMAIN` asks gpuosd (which owns the config) about a trust domain before it
 * runs the program. The answer: status GPUOS_OK (the domain exists and the asking uid may join it),
 * GPUOS_ERR_NOT_FOUND (no such domain; text names the known ones) or GPUOS_ERR_PERMISSION (the uid
 * may not join: its tenant would run time-shared); with a domain that exists, its MPS directories
 * (absolute paths) and whether its MPS control daemon answers (text says why not). */
typedef struct gpuos_msg_space_query {
  gpuos_msg_header hdr;
  char domain[GPUOS_DOMAIN_MAX];
} gpuos_msg_space_query;

#define GPUOS_PATH_MAX 128
typedef struct gpuos_msg_space_info {
  gpuos_msg_header hdr;
  int32_t status;     /* gpuos_status */
  uint32_t available; /* 1: the domain's MPS control daemon answers; 0: not (text says why) */
  char mps_pipe_dir[GPUOS_PATH_MAX]; /* CUDA_MPS_PIPE_DIRECTORY for its tenants ("" if none) */
  char mps_log_dir[GPUOS_PATH_MAX];  /* CUDA_MPS_LOG_DIRECTORY */
  char text[GPUOS_TEXT_MAX];
} gpuos_msg_space_info;

/* CLAIM_PREPARE (admin only; the DRA plugin, gpuos-dra): admit a Kubernetes ResourceClaim's gpuos
 * share. gpuosd keeps the claim (across restarts) and serves it a socket of its own,
 * <socket dir>/claims/<claim_uid>/gpuosd.sock, named in the reply's text: a connection there is
 * bound to the claim (never an admin; REGISTER, ACTIVITY and SWAP_POOL only) and its tenants get
 * the claim's settings below, whatever they ask, and its pod's labels. Idempotent: the same claim
 * again is OK; the same uid with other settings is GPUOS_ERR_BAD_MESSAGE. Strings NUL-terminated. */
typedef struct gpuos_msg_claim_prepare {
  gpuos_msg_header hdr;
  char claim_uid[GPUOS_K8S_UID_MAX]; /* [0-9a-z-], 1..36 characters: it names a directory */
  char claim_namespace[GPUOS_K8S_NAMESPACE_MAX]; /* also the pod's namespace */
  char claim_name[GPUOS_K8S_NAME_MAX];
  char pod_name[GPUOS_K8S_NAME_MAX]; /* "" = not reserved for a pod yet */
  char pod_uid[GPUOS_K8S_UID_MAX];
  char gpu_uuid[40];                 /* the GPU of the share (bare 36-character form); "" = any */
  char space_domain[GPUOS_DOMAIN_MAX]; /* "" = time-shared */
  uint32_t tenant_class;             /* gpuos_class */
  int32_t priority;
  uint32_t weight;                   /* ranges as REGISTER's (common/tenant_numbers.h) */
  uint32_t space_sms;
  uint64_t mem_bytes;                /* quota; 0 = none */
  uint64_t borrow_bytes;
  uint32_t max_slowdown_permille;    /* 0 = the config's default */
  uint32_t reserved;
} gpuos_msg_claim_prepare;

/* CLAIM_UNPREPARE (admin only): gpuosd forgets the claim and closes and removes its socket; its
 * live tenants keep running. An unknown claim is OK (idempotent). */
typedef struct gpuos_msg_claim_unprepare {
  gpuos_msg_header hdr;
  char claim_uid[GPUOS_K8S_UID_MAX];
} gpuos_msg_claim_unprepare;

typedef struct gpuos_msg_reply {
  gpuos_msg_header hdr;
  int32_t status; /* gpuos_status */
  uint32_t count; /* LIST_END: number of tenant records sent */
  char text[GPUOS_TEXT_MAX];
} gpuos_msg_reply;

/* Largest message any peer may send; receivers read into a buffer of this size plus one byte so
 * that an oversized datagram is detected (MSG_TRUNC) and refused. */
#define GPUOS_MSG_MAX_SIZE 1024u

#ifdef __cplusplus
} /* extern "C" */

#include <cstddef>
static_assert(sizeof(gpuos_msg_header) == 16, "ABI v2 frozen");
static_assert(sizeof(gpuos_grant_block) % 64 == 0, "grant block is whole cache lines");
static_assert(sizeof(gpuos_grant_block) == 384, "ABI v2 frozen at release (fields only ever replace padding)");
static_assert(offsetof(gpuos_grant_block, gate) == 64, "admission line");
static_assert(offsetof(gpuos_grant_block, swap_command) == 128, "swap line");
static_assert(offsetof(gpuos_grant_block, kv_target_bytes) == 168, "swap line");
static_assert(offsetof(gpuos_grant_block, space_epoch) == 192, "spatial lines");
static_assert(sizeof(gpuos_control_block) % 64 == 0, "control block is whole cache lines");
static_assert(sizeof(gpuos_control_block) <= 4096, "control block fits one page");
static_assert(sizeof(gpuos_control_block) == 4096, "ABI v2 frozen at release (fields only ever replace padding)");
static_assert(offsetof(gpuos_control_block, timing_head) == 1984, "timing lines");
static_assert(offsetof(gpuos_control_block, launches) == 64, "counters");
static_assert(offsetof(gpuos_control_block, gate_wait_hist) == 328, "ABI v2 frozen");
static_assert(offsetof(gpuos_control_block, swappable) == 384, "memory lines");
static_assert(offsetof(gpuos_control_block, space_launches) == 512, "spatial lines");
static_assert(offsetof(gpuos_control_block, device_count) == 704, "device map");
static_assert(offsetof(gpuos_control_block, device_uuid) == 768, "device map");
static_assert(offsetof(gpuos_control_block, space_sample_seq) == 1024, "sizing lines");
static_assert(sizeof(gpuos_shape_latency) == 112, "shape entries");
static_assert(sizeof(gpuos_msg_register) == 160, "ABI v2 frozen");
static_assert(sizeof(gpuos_msg_register_reply) == 192, "ABI v2 frozen");
static_assert(sizeof(gpuos_msg_tenant_info) == 920, "ABI v2 (grown by chargeback, engine slots and phases, MPS's cost, long launches, the budget's limit: gpuosd and the CLI are one build)");
static_assert(sizeof(gpuos_msg_gpu_info) == 176, "ABI v2 frozen");
static_assert(sizeof(gpuos_msg_reply) == 184, "ABI v2 frozen");
static_assert(sizeof(gpuos_msg_activity) == 24, "ABI v2 frozen");
static_assert(sizeof(gpuos_msg_swap_pool_reply) == 32, "ABI v2 frozen");
static_assert(sizeof(gpuos_msg_space_query) == 48, "ABI v2 frozen");
static_assert(sizeof(gpuos_msg_space_info) == 440, "ABI v2 frozen");
static_assert(sizeof(gpuos_msg_space_info) <= GPUOS_MSG_MAX_SIZE, "fits the receive buffer");
static_assert(sizeof(gpuos_msg_claim_prepare) == 784, "ABI v2 frozen");
static_assert(sizeof(gpuos_msg_claim_unprepare) == 56, "ABI v2 frozen");
static_assert(sizeof(gpuos_msg_tenant_gpu) == 40, "ABI v2 frozen");
static_assert(sizeof(gpuos_msg_claim_prepare) <= GPUOS_MSG_MAX_SIZE, "fits the receive buffer");
static_assert(sizeof(gpuos_msg_tenant_info) <= GPUOS_MSG_MAX_SIZE, "fits the receive buffer");
#endif

#endif /* GPUOS_ABI_H_ */
