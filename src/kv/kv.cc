// SPDX-License-Identifier: Apache-2.0
// libgpuos_kv.so: include/gpuos/kv.h's functions, forwarded to the pools inside the interposer.
//
// The interposer (libgpuos.so, preloaded by `gpuos run`) exports gpuos_kv_get_interface(); the table
// it returns is looked up once per process, on the first call that needs it, with dlsym
// (RTLD_DEFAULT). Without it every call answers NOT_GOVERNED (an engine falls back to static
// allocation); with a table for another ABI version, or one too short, VERSION. Nothing here
// throws: the C ABI is the boundary.
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>

#include "gpuos/kv.h"
#include "gpuos/result_text.h"

namespace {

struct Binding {
  const gpuos_kv_interface* table = nullptr;  // set when usable
  int unusable_result = GPUOS_KV_ERR_NOT_GOVERNED;  // what calls answer when table is null
};

Binding find_interface() {
  Binding binding;
  auto* lookup = reinterpret_cast<gpuos_kv_get_interface_fn>(dlsym(RTLD_DEFAULT, GPUOS_KV_GET_INTERFACE_SYMBOL));
  if (lookup == nullptr) return binding;  // not under gpuos
  const gpuos_kv_interface* table = lookup(GPUOS_KV_ABI_VERSION);
  binding.unusable_result = GPUOS_KV_ERR_VERSION;
  // The functions up to report_queue are the ABI's first table; later ones are checked per call.
  if (table == nullptr || table->abi_version < GPUOS_KV_ABI_VERSION ||
      table->size < offsetof(gpuos_kv_interface, report_slots))
    return binding;
  // A table of this version has every function; a null one would be the interposer's bug, and
  // calling it would crash the engine: refuse the table instead.
  if (!table->result_text || !table->pool_create || !table->pool_destroy || !table->map ||
      !table->unmap || !table->is_mapped || !table->stats_get || !table->target ||
      !table->set_pressure_callback || !table->report_queue)
    return binding;
  binding.table = table;
  return binding;
}

// Whether the table has an entry added after the ABI's first table: an interposer that predates it
// has a table that stops before it.
template <typename Fn>
bool offers(const gpuos_kv_interface& table, Fn gpuos_kv_interface::*entry) {
  const auto end = reinterpret_cast<uintptr_t>(&(table.*entry)) + sizeof(Fn) - reinterpret_cast<uintptr_t>(&table);
  return table.size >= end && table.*entry != nullptr;
}

// Thread-safe: a function-local static is initialised once (the compiler's guard).
const Binding& binding() {
  static const Binding found = find_interface();
  return found;
}

}  // namespace

extern "C" {

uint32_t gpuos_kv_abi_version(void) { return GPUOS_KV_ABI_VERSION; }

const char* gpuos_kv_result_text(int result) {
  if (gpuos::kv::result_known(result)) return gpuos::kv::result_text(result);
  // A result from a newer interposer: its own text, when it has one.
  if (const gpuos_kv_interface* table = binding().table) {
    if (const char* text = table->result_text(result)) return text;
  }
  return gpuos::kv::result_text(result);
}

int gpuos_kv_pool_create(const gpuos_kv_pool_options* options, gpuos_kv_pool** pool, uint64_t* base) {
  const Binding& b = binding();
  if (b.table == nullptr) {
    if (pool != nullptr) *pool = nullptr;
    return b.unusable_result;
  }
  return b.table->pool_create(options, pool, base);
}

int gpuos_kv_pool_destroy(gpuos_kv_pool* pool) {
  const Binding& b = binding();
  return b.table ? b.table->pool_destroy(pool) : b.unusable_result;
}

int gpuos_kv_map(gpuos_kv_pool* pool, const uint64_t* pages, size_t count) {
  const Binding& b = binding();
  return b.table ? b.table->map(pool, pages, count) : b.unusable_result;
}

int gpuos_kv_unmap(gpuos_kv_pool* pool, const uint64_t* pages, size_t count) {
  const Binding& b = binding();
  return b.table ? b.table->unmap(pool, pages, count) : b.unusable_result;
}

int gpuos_kv_is_mapped(gpuos_kv_pool* pool, uint64_t page) {
  const Binding& b = binding();
  return b.table ? b.table->is_mapped(pool, page) : -1;
}

int gpuos_kv_stats_get(gpuos_kv_pool* pool, gpuos_kv_stats* stats) {
  const Binding& b = binding();
  return b.table ? b.table->stats_get(pool, stats) : b.unusable_result;
}

int gpuos_kv_target(uint64_t* target_bytes, uint32_t* deadline_ms) {
  const Binding& b = binding();
  if (b.table == nullptr) {
    // Nothing governs this process: no target (the outputs are defined even on this error).
    if (target_bytes != nullptr) *target_bytes = GPUOS_KV_NO_TARGET;
    if (deadline_ms != nullptr) *deadline_ms = 0;
    return b.unusable_result;
  }
  return b.table->target(target_bytes, deadline_ms);
}

int gpuos_kv_set_pressure_callback(gpuos_kv_pressure_fn fn, void* user) {
  const Binding& b = binding();
  return b.table ? b.table->set_pressure_callback(fn, user) : b.unusable_result;
}

int gpuos_kv_report_queue(uint32_t waiting_requests) {
  const Binding& b = binding();
  return b.table ? b.table->report_queue(waiting_requests) : b.unusable_result;
}

int gpuos_kv_report_slots(uint32_t active, uint32_t capacity) {
  const Binding& b = binding();
  if (b.table == nullptr) return b.unusable_result;
  return offers(*b.table, &gpuos_kv_interface::report_slots) ? b.table->report_slots(active, capacity)
                                                              : GPUOS_KV_ERR_VERSION;
}

int gpuos_kv_report_phase(uint32_t phase) {
  const Binding& b = binding();
  if (b.table == nullptr) return b.unusable_result;
  return offers(*b.table, &gpuos_kv_interface::report_phase) ? b.table->report_phase(phase) : GPUOS_KV_ERR_VERSION;
}

}  // extern "C"
