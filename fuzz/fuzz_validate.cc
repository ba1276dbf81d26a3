// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: gpuos::validate_message (src/common/ipc.cc), the one gate every received
// datagram passes, plus the fixed-array string helpers it relies on.
//
// Beyond "no crash, no UB": OK only for a datagram of exactly the size its (known) type names, with
// magic, version and header size right; otherwise a non-OK status and a NUL-terminated reason that
// fits the given buffer, whatever its size (the first input byte picks 1..256).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/ipc.h"

using namespace gpuos;

#define FUZZ_CHECK(cond)                                                                     \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "fuzz_validate: invariant failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t why_len = 1 + data[0];
  const uint8_t* msg = data + 1;
  const std::size_t len = size - 1;

  // Exact-size heap copy: ASan catches any read past the datagram.
  std::vector<uint8_t> buf(msg, msg + len);
  std::vector<char> why(why_len + 8, '\x7f');
  gpuos_status st = validate_message(buf.data(), len, why.data(), why_len);
  for (std::size_t i = why_len; i < why.size(); ++i) FUZZ_CHECK(why[i] == '\x7f');  // no overrun
  if (st == GPUOS_OK) {
    FUZZ_CHECK(len >= sizeof(gpuos_msg_header));
    gpuos_msg_header h;
    std::memcpy(&h, buf.data(), sizeof(h));
    FUZZ_CHECK(h.magic == GPUOS_ABI_MAGIC && h.abi_version == GPUOS_ABI_VERSION);
    FUZZ_CHECK(h.type >= 1 && h.type <= GPUOS_MSG_TYPE_MAX);
    FUZZ_CHECK(message_size(h.type) == len && h.size == len);
    FUZZ_CHECK(len <= GPUOS_MSG_MAX_SIZE);
  } else {
    FUZZ_CHECK(st == GPUOS_ERR_BAD_MESSAGE || st == GPUOS_ERR_VERSION);
    FUZZ_CHECK(std::memchr(why.data(), '\0', why_len) != nullptr);
    FUZZ_CHECK(why[0] != '\0' || why_len == 1);
  }

  // copy_name/has_nul on the same bytes, as the daemon uses them on names.
  char name[GPUOS_NAME_MAX];
  std::vector<char> src(buf.begin(), buf.end());
  src.push_back('\0');
  copy_name(name, sizeof(name), src.data());
  FUZZ_CHECK(has_nul(name, sizeof(name)));
  if (len > 0) (void)has_nul(reinterpret_cast<const char*>(buf.data()), len);
  return 0;
}
