// SPDX-License-Identifier: Apache-2.0
// The policies gpuos has, by slot and name: one list (registry.cc). A policy declares, in its own
// folder, a PolicyEntry: its name, its slot, one line about it and its factory, which reads the
// policy's config section ([policy.<name>]) itself. Adding a policy touches its folder and the list.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/config.h"
#include "slots/memory.h"
#include "slots/space.h"
#include "slots/time_gate.h"

namespace gpuos::policies {

enum class SlotKind { kTimeGate, kSpace, kMemory };
const char* slot_name(SlotKind slot);  // "time gate", "space", "memory"

// What a factory gets: the policy's section (empty when the config has none) and facts of the node.
struct PolicyContext {
  const ConfigSection& section;
};

struct PolicyEntry {
  const char* name;
  SlotKind slot;
  const char* summary;  // one line, for `gpuosd --list-policies` and errors
  // Exactly the factory of its slot is set. Each returns null and sets *error (naming the file, line,
  // table and key: ConfigSection's getters do) when the section is not right.
  std::unique_ptr<slots::TimeGate> (*make_time_gate)(const PolicyContext&, std::string* error) = nullptr;
  std::unique_ptr<slots::SpacePolicy> (*make_space)(const PolicyContext&, std::string* error) = nullptr;
  std::unique_ptr<slots::MemoryPolicy> (*make_memory)(const PolicyContext&, std::string* error) = nullptr;
  // Its effective settings from a good section, as TOML lines ("key = value\n", or "# key: why it
  // has no value" for a key whose default is not a value); null: it has none.
  std::string (*settings)(const ConfigSection&) = nullptr;
  // Its keys, each with one line on what it does, beside the code that reads them: exactly the
  // keys its factory asks its section for, in settings' order (test/policies holds them to both).
  std::span<const KeyDoc> keys = {};
};

std::span<const PolicyEntry* const> all_policies();
const PolicyEntry* find_policy(std::string_view name);
// "open, priority, budget, exclusive": the names of a slot's policies.
std::string policy_names(SlotKind slot);
// "" when `name` is a policy of `slot`, else why not ("\"fifo\" is not a time gate policy (known:
// open, ...)"): the command lines' --policy options check their value with it, as a usage error.
std::string not_a_policy(SlotKind slot, std::string_view name);

// One policy per slot, as a config chooses them.
struct PolicySet {
  std::unique_ptr<slots::TimeGate> time_gate;
  std::unique_ptr<slots::SpacePolicy> space;
  std::unique_ptr<slots::MemoryPolicy> memory;
};
// Builds the policies the config chooses, each from its section. False with *error for an unknown
// name, a policy chosen for the wrong slot, a [policy.<name>] of no policy, or a bad section (every
// section is checked, chosen or not, so that a typo never waits for the day it is chosen).
bool make_policies(const Config& config, PolicySet* out, std::string* error);
// make_policies without keeping them: `gpuos config check`.
bool check_policy_config(const Config& config, std::string* error);
// Everything gpuosd checks of a parsed config before it serves: what it names on this host
// (resolve_host_config) and its policies (make_policies). gpuosd's start-up and `gpuos config check`
// both run this one function, so a config that passes the check starts the daemon.
bool check_startup_config(const Config& config, HostConfig* host, PolicySet* policies, std::string* error);
// Every policy's effective settings, one [policy.<name>] table each (defaults filled in), for
// `gpuos config check`. The config must have passed check_policy_config.
std::string format_policy_settings(const Config& config);
// `gpuos config defaults`: every table and key gpuos has, each key commented out at its built-in
// default under its one line of KeyDoc (config.h), the policies listed at their slot's key and
// each policy's table after its slot's. packaging/gpuos.toml is this text (a test compares them).
std::string format_default_config();

}  // namespace gpuos::policies
