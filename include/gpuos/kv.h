// SPDX-License-Identifier: Apache-2.0
/* gpuos KV pools: elastic GPU memory for LLM engines (KV caches), ABI version 1.
 *
 * A pool reserves a virtual address range once (the most KV cache the engine could ever want) and
 * backs it with physical GPU memory page by page, on demand: the engine maps pages when it needs
 * more blocks and unmaps them when it frees blocks, in batched calls. Addresses never change, so
 * the engine's tensors and block tables stay valid while the pool grows and shrinks.
 *
 * Under gpuos the pool's memory counts toward the tenant's quota (guaranteed plus borrowed bytes),
 * and gpuosd arbitrates it between tenants: when another tenant needs memory this one borrowed,
 * gpuosd sets this process a target (gpuos_kv_target) and calls its pressure callback; the engine
 * frees blocks (preempting or evicting requests) and unmaps their pages. A tenant that is still
 * above its target at the deadline has the rest of its pages moved to host memory by gpuos's swap
 * (it waits, nothing is lost) until there is room again.
 *
 * Pages and chunks: engines map and unmap pages (page_bytes, 2 MiB by default). The GPU's cost of
 * mapping is per physical allocation, not per byte (H200: 22 ms per GiB in 2 MiB allocations, 1.3
 * in 32 MiB ones), so a pool backs its range in chunks of whole pages (chunk_bytes, 32 MiB by
 * default): mapping a page maps its chunk if the chunk has no memory yet, and a chunk's memory is
 * released when its last mapped page is unmapped. Engines that allocate low page numbers first
 * keep chunks full; gpuos_kv_stats says how much memory is held.
 *
 * libgpuos_kv.so implements these functions in any process. The pool itself lives in gpuos's
 * interposer (libgpuos.so, preloaded by `gpuos run`); in a process that does not run under gpuos,
 * gpuos_kv_pool_create fails with GPUOS_KV_ERR_NOT_GOVERNED, and an engine falls back to its own
 * static allocation.
 *
 * All functions are thread-safe and return a gpuos_kv_result. None throws. Versioning: a struct
 * passed in starts with the ABI version and its size; fields are only ever added at the end. */
#ifndef GPUOS_KV_H_
#define GPUOS_KV_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUOS_KV_ABI_VERSION 1u
#define GPUOS_KV_DEFAULT_PAGE_BYTES (2ull << 20)
#define GPUOS_KV_DEFAULT_CHUNK_BYTES (32ull << 20)
/* gpuos_kv_target: no target is set (the pools may grow up to the tenant's quota). */
#define GPUOS_KV_NO_TARGET UINT64_MAX

typedef enum gpuos_kv_result {
  GPUOS_KV_OK = 0,
  GPUOS_KV_ERR_INVALID = 1,        /* a bad argument: null, a page out of range, a size not a
                                      multiple of the page or granularity, a wrong struct size */
  GPUOS_KV_ERR_NOT_GOVERNED = 2,   /* this process does not run under gpuos */
  GPUOS_KV_ERR_VERSION = 3,        /* the gpuos in this process does not speak this ABI version */
  GPUOS_KV_ERR_OUT_OF_MEMORY = 4,  /* no room: the quota, gpuosd's target, or the GPU (after gpuosd
                                      was asked to make room) */
  GPUOS_KV_ERR_DRIVER = 5,         /* a CUDA driver call failed; nothing changed */
  GPUOS_KV_ERR_NOT_MAPPED = 6,     /* gpuos_kv_unmap of a page that is not mapped; nothing changed */
  GPUOS_KV_ERR_NOT_INITIALIZED = 7, /* CUDA is not initialised in this process yet: cuInit (or the
                                       framework's CUDA initialisation) comes before the first pool */
} gpuos_kv_result;

typedef struct gpuos_kv_pool gpuos_kv_pool; /* opaque */

typedef struct gpuos_kv_pool_options {
  uint32_t abi_version; /* GPUOS_KV_ABI_VERSION */
  uint32_t size;        /* sizeof(gpuos_kv_pool_options) */
  int32_t device;       /* CUDA device ordinal (of this process) */
  uint32_t flags;       /* 0 */
  uint64_t max_bytes;   /* virtual range to reserve: the most the pool can map; rounded up to chunks */
  uint64_t page_bytes;  /* the unit of map/unmap; 0 = GPUOS_KV_DEFAULT_PAGE_BYTES; a multiple of the
                           device's VMM granularity (2 MiB) */
  uint64_t chunk_bytes; /* one physical allocation; 0 = GPUOS_KV_DEFAULT_CHUNK_BYTES; a multiple of
                           page_bytes */
} gpuos_kv_pool_options;

typedef struct gpuos_kv_stats {
  uint32_t abi_version;      /* filled in: GPUOS_KV_ABI_VERSION */
  uint32_t size;             /* the caller's sizeof(gpuos_kv_stats); only that much is written */
  uint64_t base;             /* CUdeviceptr of page 0 */
  uint64_t reserved_bytes;   /* the virtual range */
  uint64_t page_bytes;
  uint64_t chunk_bytes;
  uint64_t pages;            /* pages in the range */
  uint64_t mapped_pages;     /* pages mapped now */
  uint64_t resident_bytes;   /* GPU memory the pool holds now: its chunks with memory */
  uint64_t swapped_bytes;    /* of its chunks' memory, what gpuos moved to host memory */
  uint64_t map_calls;        /* gpuos_kv_map calls that succeeded */
  uint64_t pages_mapped;     /* pages mapped in all */
  uint64_t pages_unmapped;   /* pages unmapped in all */
  uint64_t chunks_created;   /* physical allocations made */
  uint64_t chunks_released;  /* physical allocations given back */
  uint64_t grow_ns;          /* time spent creating and mapping chunks (what growing costs) */
  uint64_t grown_bytes;      /* bytes of chunks created: grow_ns / grown_bytes is the cost per byte */
  uint64_t room_waits;       /* maps that waited for gpuosd to make room */
} gpuos_kv_stats;

/* Called when gpuosd sets (or lifts) this process's target: the engine should bring the resident
 * bytes of all its pools down to target_bytes (GPUOS_KV_NO_TARGET: lifted) within deadline_ms, by
 * freeing blocks and unmapping their pages. Runs on a gpuos thread: keep it short (set a flag for
 * the engine's own loop); it may call gpuos_kv_target and gpuos_kv_stats_get, not gpuos_kv_map. */
typedef void (*gpuos_kv_pressure_fn)(void* user, uint64_t target_bytes, uint32_t deadline_ms);

/* The version of this ABI that the library in this process implements (GPUOS_KV_ABI_VERSION). */
uint32_t gpuos_kv_abi_version(void);
/* A short English text for a result ("out of memory (quota, target or GPU)"). Never null. */
const char* gpuos_kv_result_text(int result);

/* Reserves the range. *pool is set on success; *base (optional) to the address of page 0. */
int gpuos_kv_pool_create(const gpuos_kv_pool_options* options, gpuos_kv_pool** pool, uint64_t* base);
/* Unmaps every page (synchronising the device first, like cuMemFree), releases the range. */
int gpuos_kv_pool_destroy(gpuos_kv_pool* pool);

/* Maps pages[0..count): chunks without memory get some (one batched set of driver calls).
 * Mapping a page that is mapped is allowed and changes nothing. All or nothing: on an error no
 * page changed. Waits while gpuosd makes room on the GPU; fails with OUT_OF_MEMORY when the
 * quota or the target would be exceeded, or no room can be made. */
int gpuos_kv_map(gpuos_kv_pool* pool, const uint64_t* pages, size_t count);
/* Unmaps pages[0..count). A chunk whose last page goes is released (after the device finished the
 * work queued so far: its memory may still be read). All or nothing (NOT_MAPPED, INVALID). */
int gpuos_kv_unmap(gpuos_kv_pool* pool, const uint64_t* pages, size_t count);
/* 1 if the page is mapped, 0 if not, -1 for a bad pool or page. */
int gpuos_kv_is_mapped(gpuos_kv_pool* pool, uint64_t page);
/* Fills *stats up to stats->size bytes (set size first). */
int gpuos_kv_stats_get(gpuos_kv_pool* pool, gpuos_kv_stats* stats);

/* gpuosd's target for this process's pools (resident bytes of all of them together), or
 * GPUOS_KV_NO_TARGET; *deadline_ms (optional) is the time it gave to meet it. */
int gpuos_kv_target(uint64_t* target_bytes, uint32_t* deadline_ms);
/* Installs the pressure callback (null: none). Replaces the previous one. */
int gpuos_kv_set_pressure_callback(gpuos_kv_pressure_fn fn, void* user);
/* The engine's queue: requests waiting for KV memory (or for a batch slot). gpuosd's "queue"
 * rule gives pages to the tenants whose queues they shorten most. */
int gpuos_kv_report_queue(uint32_t waiting_requests);
#define GPUOS_KV_MAX_SLOTS 1048576u
/* The engine's batch slots: `active` of `capacity` in use (1 <= capacity <= GPUOS_KV_MAX_SLOTS,
 * active <= capacity; else INVALID). Shown by `gpuos ps` and the metrics beside the queue: a server with every
 * slot in use and requests waiting pays a TTFT from arrival that no GPU sharing causes or cures.
 * An interposer older than this function answers VERSION. */
int gpuos_kv_report_slots(uint32_t active, uint32_t capacity);
#define GPUOS_KV_PHASE_STEP 0u      /* decode steps, or anything but admissions */
#define GPUOS_KV_PHASE_ADMISSION 1u /* the prefill of newly admitted requests */
/* What the engine runs from now on: GPUOS_KV_PHASE_ADMISSION before it launches the prefill of
 * requests it admitted, GPUOS_KV_PHASE_STEP after (else INVALID). A latency budget then measures
 * the two apart: `gpuos ps` shows which binds, the steps' (TPOT) or the admissions' (TTFT from
 * admission), and lends best-effort tenants nothing while it admits: report STEP once the prefill
 * has finished on the GPU. An interposer older than this function answers VERSION. */
int gpuos_kv_report_phase(uint32_t phase);

/* ---- between libgpuos_kv.so and the interposer (not for engines) ----------------------------
 * libgpuos.so exports gpuos_kv_get_interface(): the functions above, for the ABI version asked
 * (NULL if it does not speak it). libgpuos_kv.so finds it with dlsym(RTLD_DEFAULT). */
typedef struct gpuos_kv_interface {
  uint32_t abi_version;
  uint32_t size;
  const char* (*result_text)(int);
  int (*pool_create)(const gpuos_kv_pool_options*, gpuos_kv_pool**, uint64_t*);
  int (*pool_destroy)(gpuos_kv_pool*);
  int (*map)(gpuos_kv_pool*, const uint64_t*, size_t);
  int (*unmap)(gpuos_kv_pool*, const uint64_t*, size_t);
  int (*is_mapped)(gpuos_kv_pool*, uint64_t);
  int (*stats_get)(gpuos_kv_pool*, gpuos_kv_stats*);
  int (*target)(uint64_t*, uint32_t*);
  int (*set_pressure_callback)(gpuos_kv_pressure_fn, void*);
  int (*report_queue)(uint32_t);
  int (*report_slots)(uint32_t, uint32_t); /* a table whose size stops before this has none */
  int (*report_phase)(uint32_t);           /* (the same table as report_slots) */
} gpuos_kv_interface;
typedef const gpuos_kv_interface* (*gpuos_kv_get_interface_fn)(uint32_t abi_version);
#define GPUOS_KV_GET_INTERFACE_SYMBOL "gpuos_kv_get_interface"

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPUOS_KV_H_ */
