// SPDX-License-Identifier: Apache-2.0
// Spatial placement skips a launch's forward join only while the interposer sees all stream work
// (interpose/stream_work.h). Checked here against the toolkit's own cuda.h, declarations of every
// versioned entry point (_v2, _ptsz, ...) as the driver exports them:
//  - every entry point that puts work on a stream (takes a stream or a launch config, launches,
//    copies or sets memory) is exported by libgpuos.so, so a program that links or resolves it gets gpuos's
//    wrapper, and is judged as stream work by name (a driver that hands it out unwrapped turns
//    skipping off);
//  - every other entry point is judged not to be: cudart resolves all of them at start-up, and a
//    wrong judgement would turn skipping off in every program.
#include "interpose/stream_work.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

namespace gi = gpuos::interpose;

namespace {

// name -> parameter list, from the preprocessed header (GPUOS_CUDA_DECLS, made by the build).
std::map<std::string, std::string> declarations() {
  std::ifstream in(GPUOS_CUDA_DECLS);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  std::map<std::string, std::string> out;
  static const std::regex proto(R"(CUresult\s+(cu\w+)\s*\(([^;{]*?)\)\s*;)");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), proto); it != std::sregex_iterator(); ++it) {
    out[(*it)[1]] = (*it)[2];
  }
  return out;
}

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// The test's own judgement, independent of the interposer's: stream work unless it only manages,
// queries or synchronises streams, records events (markers), or computes occupancy.
bool issues_stream_work(const std::string& name, const std::string& params) {
  static const std::regex takes_stream(R"(\bCUstream\b|\bCUlaunchConfig\b|\bCUDA_LAUNCH_PARAMS\b)");
  if (!std::regex_search(params, takes_stream) && !starts_with(name, "cuMemcpy") && !starts_with(name, "cuMemset") &&
      !starts_with(name, "cuLaunch")) {  // cuLaunch, cuLaunchGrid: the legacy stream's
    return false;
  }
  for (const char* quiet : {"cuEventRecord", "cuStreamCreate", "cuStreamDestroy", "cuStreamQuery", "cuStreamSynchronize",
                            "cuStreamGet", "cuStreamSetAttribute", "cuStreamCopyAttributes", "cuStreamIsCapturing",
                            "cuStreamUpdateCaptureDependencies", "cuGreenCtxStreamCreate", "cuOccupancy"}) {
    if (starts_with(name, quiet)) return false;
  }
  return true;
}

TEST(StreamWork, EveryEntryPointThatIssuesStreamWorkIsWrappedAndJudgedSo) {
  const auto decls = declarations();
  ASSERT_GT(decls.size(), 500u) << "no declarations read from " << GPUOS_CUDA_DECLS;
  void* lib = dlopen(GPUOS_INTERPOSER, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  int work = 0;
  for (const auto& [name, params] : decls) {
    if (issues_stream_work(name, params)) {
      ++work;
      EXPECT_NE(dlsym(lib, name.c_str()), nullptr) << name << " issues stream work but gpuos does not wrap it";
      EXPECT_TRUE(gi::may_issue_stream_work(name.c_str())) << name;
    } else {
      EXPECT_FALSE(gi::may_issue_stream_work(name.c_str())) << name << " would turn skipping off needlessly";
    }
  }
  EXPECT_GT(work, 150);  // launches, copies, memsets and the rest, in all their versions
  dlclose(lib);
}

// cudart also resolves the OpenGL interop entry points of cudaGL.h (which needs GL headers, so it
// is not read here); the H200 showed that an unwrapped one turned skipping off for every program.
TEST(StreamWork, OpenGlInteropStreamWorkIsWrapped) {
  void* lib = dlopen(GPUOS_INTERPOSER, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  for (const char* name : {"cuGLMapBufferObjectAsync", "cuGLMapBufferObjectAsync_v2", "cuGLMapBufferObjectAsync_v2_ptsz",
                           "cuGLUnmapBufferObjectAsync"}) {
    EXPECT_TRUE(gi::may_issue_stream_work(name)) << name;
    EXPECT_NE(dlsym(lib, name), nullptr) << name;
  }
  dlclose(lib);
}

TEST(StreamWork, NamesNotInTheHeaderErrTowardsStreamWork) {
  EXPECT_TRUE(gi::may_issue_stream_work("cuStreamFutureEnqueueThing"));
  EXPECT_TRUE(gi::may_issue_stream_work("cuMemFutureAsync"));
  EXPECT_TRUE(gi::may_issue_stream_work("cuLaunchSomethingNew_ptsz"));
  EXPECT_FALSE(gi::may_issue_stream_work("cuStreamGetSomethingNew"));
  EXPECT_FALSE(gi::may_issue_stream_work(nullptr));
  EXPECT_FALSE(gi::may_issue_stream_work("nvFutureAsync"));  // not a driver entry point
}

TEST(StreamWork, CountsCallsBeforeAndAfter) {
  gi::g_stream_work_counted.store(true);  // as once the process has a partition stream
  const uint64_t before = gi::g_stream_work.load();
  { gi::StreamWorkCall call; EXPECT_EQ(gi::g_stream_work.load(), before + 1); }
  EXPECT_EQ(gi::g_stream_work.load(), before + 2);
}

}  // namespace
