// SPDX-License-Identifier: Apache-2.0
// A main for the fuzz harnesses when not built with libFuzzer (e.g. g++): runs every file named on
// the command line (or every file in a named directory) through LLVMFuzzerTestOneInput once. The
// regular build uses it to replay the seed corpora as a regression test.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {
int run_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  int failures = 0, runs = 0;
  for (int i = 1; i < argc; ++i) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      std::fprintf(stderr, "no such file: %s\n", argv[i]);
      ++failures;
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      DIR* d = opendir(argv[i]);
      while (dirent* e = d ? readdir(d) : nullptr) {
        if (e->d_name[0] == '.') continue;
        failures += run_file(std::string(argv[i]) + "/" + e->d_name);
        ++runs;
      }
      if (d) closedir(d);
    } else {
      failures += run_file(argv[i]);
      ++runs;
    }
  }
  std::printf("replayed %d inputs, %d unreadable\n", runs, failures);
  return failures == 0 && runs > 0 ? 0 : 1;
}
