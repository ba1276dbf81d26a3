// SPDX-License-Identifier: Apache-2.0
#include "policies/registry.h"

#include <iterator>
#include <map>
#include <sstream>
#include <type_traits>
#include <vector>

#include "policies/budget/budget.h"
#include "policies/builtin/builtin.h"
#include "policies/exclusive/exclusive.h"
#include "policies/partition/partition.h"
#include "policies/priority/priority.h"
#include "policies/swap/swap.h"

namespace gpuos::policies {
namespace {

// The one list of the policies gpuos has.
constexpr const PolicyEntry* kPolicies[] = {
    &kOpenPolicy,      &kPriorityPolicy, &kBudgetPolicy, &kExclusivePolicy,  // time gate
    &kPartitionPolicy, &kUnconfinedPolicy,                    // space
    &kSwapPolicy,      &kResidentPolicy,                      // memory
};

template <typename P>
bool build(const Config& config, const std::string& chosen, SlotKind slot, std::unique_ptr<P>* out,
           std::string* error) {
  const PolicyEntry* e = find_policy(chosen);
  const char* table = slot == SlotKind::kTimeGate ? "scheduler" : slot == SlotKind::kSpace ? "spatial" : "memory";
  if (e == nullptr || e->slot != slot) {
    *error = (config.source.empty() ? std::string("config") : config.source) + ": [" + table + "] policy: \"" +
             chosen + "\" is not a " + slot_name(slot) + " policy (known: " + policy_names(slot) + ")";
    return false;
  }
  ConfigSection empty;
  empty.name = e->name;
  const ConfigSection* sec = config.section(e->name);
  PolicyContext ctx{sec != nullptr ? *sec : empty};
  if constexpr (std::is_same_v<P, slots::TimeGate>) {
    *out = e->make_time_gate(ctx, error);
  } else if constexpr (std::is_same_v<P, slots::SpacePolicy>) {
    *out = e->make_space(ctx, error);
  } else {
    *out = e->make_memory(ctx, error);
  }
  return *out != nullptr;
}

// Every section's policy exists, and its section is right (built and dropped).
bool check_sections(const Config& config, std::string* error) {
  for (const ConfigSection& sec : config.policy_sections) {
    const PolicyEntry* e = find_policy(sec.name);
    if (e == nullptr) {
      const std::string where = sec.entries.empty() ? config.source : sec.entries.front().second.where;
      *error = where + ": [policy." + sec.name + "]: no such policy (known: " + policy_names(SlotKind::kTimeGate) +
               ", " + policy_names(SlotKind::kSpace) + ", " + policy_names(SlotKind::kMemory) + ")";
      return false;
    }
    PolicyContext ctx{sec};
    bool ok = e->make_time_gate ? e->make_time_gate(ctx, error) != nullptr
              : e->make_space   ? e->make_space(ctx, error) != nullptr
                                : e->make_memory(ctx, error) != nullptr;
    if (!ok) return false;
  }
  return true;
}

}  // namespace

const char* slot_name(SlotKind slot) {
  switch (slot) {
    case SlotKind::kTimeGate: return "time gate";
    case SlotKind::kSpace: return "space";
    case SlotKind::kMemory: return "memory";
  }
  return "?";
}

std::span<const PolicyEntry* const> all_policies() { return kPolicies; }

const PolicyEntry* find_policy(std::string_view name) {
  for (const PolicyEntry* e : kPolicies) {
    if (name == e->name) return e;
  }
  return nullptr;
}

std::string policy_names(SlotKind slot) {
  std::string out;
  for (const PolicyEntry* e : kPolicies) {
    if (e->slot == slot) out += (out.empty() ? "" : ", ") + std::string(e->name);
  }
  return out;
}

std::string not_a_policy(SlotKind slot, std::string_view name) {
  const PolicyEntry* e = find_policy(name);
  if (e != nullptr && e->slot == slot) return "";
  return "\"" + std::string(name) + "\" is not a " + slot_name(slot) + " policy (known: " + policy_names(slot) + ")";
}

bool make_policies(const Config& config, PolicySet* out, std::string* error) {
  PolicySet set;
  if (!check_sections(config, error) ||
      !build(config, config.policies.time_gate, SlotKind::kTimeGate, &set.time_gate, error) ||
      !build(config, config.policies.space, SlotKind::kSpace, &set.space, error) ||
      !build(config, config.policies.memory, SlotKind::kMemory, &set.memory, error)) {
    return false;
  }
  *out = std::move(set);
  return true;
}

std::string format_policy_settings(const Config& config) {
  std::string out;
  for (const PolicyEntry* e : kPolicies) {
    if (e->settings == nullptr) continue;
    ConfigSection empty;
    empty.name = e->name;
    const ConfigSection* sec = config.section(e->name);
    out += "[policy." + std::string(e->name) + "]\n" + e->settings(sec != nullptr ? *sec : empty);
  }
  return out;
}

namespace {

constexpr std::size_t kDefaultsWidth = 100;

// text as "# " comment lines of at most kDefaultsWidth columns (a word longer than that stands
// alone); continuation lines start with `indent` after the "#".
std::string comment_lines(std::string_view text, std::string_view first = "# ", std::string_view indent = "# ") {
  std::string out, line(first);
  bool empty = true;
  std::istringstream words{std::string(text)};
  for (std::string w; words >> w;) {
    if (!empty && line.size() + 1 + w.size() > kDefaultsWidth) {
      out += line + "\n";
      line = std::string(indent);
      empty = true;
    }
    line += (empty ? "" : " ") + w;
    empty = false;
  }
  return out + line + "\n";
}

// A table's "key = value" lines (and "# key: ..." notes) as documented, commented-out keys.
std::string documented_keys(const std::vector<std::string>& lines, std::span<const KeyDoc> docs,
                            std::string_view slot_table) {
  std::string out;
  for (const std::string& l : lines) {
    const bool note = l.rfind("# ", 0) == 0;
    const std::size_t end = note ? l.find(':') : l.find(" = ");
    if (end == std::string::npos) continue;
    const std::string key = l.substr(note ? 2 : 0, end - (note ? 2 : 0));
    const KeyDoc* d = find_key_doc(docs, key);
    if (note && d == nullptr) continue;  // a note of no key ("# no [[spatial.domain]]")
    out += "# " + (d != nullptr ? std::string(d->doc) : key + ": UNDOCUMENTED") + "\n";
    if (key == "policy" && !slot_table.empty()) {
      const SlotKind slot = slot_table == "scheduler" ? SlotKind::kTimeGate
                            : slot_table == "memory"  ? SlotKind::kMemory
                                                      : SlotKind::kSpace;
      for (const PolicyEntry* e : kPolicies) {
        if (e->slot == slot) out += comment_lines(std::string(e->name) + ": " + e->summary, "#   ", "#     ");
      }
    }
    out += note ? l + "\n" : "#" + l + "\n";
  }
  return out;
}

// The [policy.<name>] tables of a slot's policies that have settings, at their defaults.
std::string policy_tables(SlotKind slot) {
  std::string out;
  ConfigSection empty;
  for (const PolicyEntry* e : kPolicies) {
    if (e->slot != slot || e->settings == nullptr) continue;
    empty.name = e->name;
    std::vector<std::string> lines;
    std::istringstream in(e->settings(empty));
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    out += "\n" + comment_lines(std::string("The ") + e->name + " policy's settings: " + e->summary + ".");
    out += "[policy." + std::string(e->name) + "]\n" + documented_keys(lines, e->keys, "");
  }
  return out;
}

}  // namespace

std::string format_default_config() {
  // format_config's defaults, table by table: the values are the code's (Config's initialisers).
  std::map<std::string, std::vector<std::string>> tables;
  std::string table;
  std::istringstream in(format_config(Config{}));
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("[", 0) == 0) {
      table = l.substr(1, l.find(']') - 1);
    } else if (!table.empty()) {
      tables[table].push_back(l);
    }
  }
  std::string out =
      "# gpuos configuration: read by gpuosd (`--config`, $GPUOS_CONFIG, then /etc/gpuos/gpuos.toml) and\n"
      "# by the gpuos CLI. Every key is optional; each is shown commented out at its built-in default,\n"
      "# under a line on what it does: uncomment a key to set it. `gpuos config defaults` prints this file\n"
      "# for the gpuos installed.\n"
      "# Validate a change with: gpuos config check /etc/gpuos/gpuos.toml\n"
      "# Reference: docs/OPERATIONS.md (installed under share/doc/gpuos/).\n";
  for (const TableDoc& t : config_tables()) {
    out += "\n" + comment_lines(t.about);
    if (t.table == "spatial.domain") {  // no default: an example, commented out
      out += "#[[spatial.domain]]\n";
      for (const KeyDoc& k : t.keys) out += "# " + std::string(k.doc) + "\n#" + std::string(k.key) + " = " + std::string(k.example) + "\n";
      out += policy_tables(SlotKind::kSpace);
      continue;
    }
    const bool slot = t.table == "scheduler" || t.table == "memory" || t.table == "spatial";
    out += "[" + std::string(t.table) + "]\n" + documented_keys(tables[std::string(t.table)], t.keys, slot ? t.table : "");
    if (t.table == "scheduler") out += policy_tables(SlotKind::kTimeGate);
    if (t.table == "memory") out += policy_tables(SlotKind::kMemory);
  }
  return out;
}

bool check_policy_config(const Config& config, std::string* error) {
  PolicySet unused;
  return make_policies(config, &unused, error);
}

bool check_startup_config(const Config& config, HostConfig* host, PolicySet* policies, std::string* error) {
  return resolve_host_config(config, host, error) && make_policies(config, policies, error);
}

}  // namespace gpuos::policies
