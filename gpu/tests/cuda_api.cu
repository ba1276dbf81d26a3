// SPDX-License-Identifier: Apache-2.0
// GPU suite test (a): plain CUDA C++ through every common entry path, counted two ways.
//
// The program issues kernels through the runtime API (<<<>>>), the driver API (cuLaunchKernel on a
// function from a PTX module loaded with cuModuleLoadData, and on a runtime kernel obtained with
// cudaGetFuncBySymbol; cuLaunchKernelEx with and without a cluster attribute), and a CUDA graph made by
// stream capture and launched K times; it uses cudaMalloc, cudaMallocAsync/cudaFreeAsync,
// cudaMallocManaged and cudaMemcpy on the way, and checks every result numerically.
//
// It counts what it issued itself and compares that with what gpuosd counted for this process
// (`$GPUOS_CLI ps --json`, the record whose pid is getpid()): delta of launches, graph_launches and
// captured_launches between a baseline taken after context creation and the end.
//
// Built twice by gpu/run_suite.sh: normally, and with `--default-stream per-thread` (then cuda.h maps
// the driver calls to their _ptsz/_ptds entry points and cudart uses the per-thread ones too).
//
// usage: cuda_api [RESULT.json] [--no-daemon]
// Prints one line of JSON (and writes it to RESULT.json); exit 0 only if everything matched.

#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
static const char* kBuild = "per-thread";
#else
static const char* kBuild = "legacy";
#endif

// ------------------------------------------------------------------------------------------------
// Error handling: any failed call ends the test (exit 2) naming the call and the error.

static const char* g_result_path = nullptr;  // where the one-line JSON result also goes

static std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o + "\"";
}

static void emit(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  if (g_result_path != nullptr) {
    if (FILE* f = std::fopen(g_result_path, "w")) {
      std::fprintf(f, "%s\n", line.c_str());
      std::fclose(f);
    }
  }
}

[[noreturn]] static void die(const char* what, const char* err) {
  std::fprintf(stderr, "cuda_api: %s failed: %s\n", what, err);
  emit(std::string("{\"name\":\"cuda_api\",\"build\":\"") + kBuild + "\",\"pid\":" +
       std::to_string(getpid()) + ",\"passed\":false,\"error\":" +
       json_str(std::string(what) + " failed: " + err) + "}");
  std::exit(2);
}
#define RT(call)                                            \
  do {                                                      \
    cudaError_t e_ = (call);                                \
    if (e_ != cudaSuccess) die(#call, cudaGetErrorName(e_)); \
  } while (0)
#define DRV(call)                                   \
  do {                                              \
    CUresult r_ = (call);                           \
    if (r_ != CUDA_SUCCESS) {                       \
      const char* n_ = "CUDA_ERROR_?";              \
      cuGetErrorName(r_, &n_);                      \
      die(#call, n_);                               \
    }                                               \
  } while (0)

// ------------------------------------------------------------------------------------------------
// Kernels

__global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
__global__ void add_f32(float* v, float c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] += c;
}
__global__ void inc_i32(int* v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] += i;
}

// The same add_f32 as PTX, JIT-compiled by the driver from cuModuleLoadData (produced by
// `nvcc -ptx -arch=compute_90` from an extern "C" copy of add_f32, PTX ISA lowered to 8.0).
static const char kPtx[] = R"PTX(
.version 8.0
.target sm_90
.address_size 64

.visible .entry gpuos_add_f32(
	.param .u64 gpuos_add_f32_param_0,
	.param .f32 gpuos_add_f32_param_1,
	.param .u32 gpuos_add_f32_param_2
)
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<4>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [gpuos_add_f32_param_0];
	ld.param.f32 	%f1, [gpuos_add_f32_param_1];
	ld.param.u32 	%r2, [gpuos_add_f32_param_2];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.s32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;

	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.s32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	ld.global.f32 	%f2, [%rd4];
	add.f32 	%f3, %f2, %f1;
	st.global.f32 	[%rd4], %f3;

$L__BB0_2:
	ret;
}
)PTX";

// ------------------------------------------------------------------------------------------------
// A minimal JSON reader, enough for `gpuos ps --json` (objects, arrays, strings, numbers, literals).

struct Json {
  enum Kind { kNull, kBool, kNum, kStr, kArr, kObj } kind = kNull;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Json> arr;
  std::vector<std::pair<std::string, Json>> obj;
  const Json* get(const char* key) const {
    for (const auto& kv : obj)
      if (kv.first == key) return &kv.second;
    return nullptr;
  }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& s) : p_(s.c_str()), end_(s.c_str() + s.size()) {}
  bool parse(Json* out) {
    if (!value(out)) return false;
    ws();
    return p_ == end_;
  }

 private:
  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool lit(const char* w) {
    size_t n = std::strlen(w);
    if (static_cast<size_t>(end_ - p_) < n || std::strncmp(p_, w, n) != 0) return false;
    p_ += n;
    return true;
  }
  bool string(std::string* s) {
    if (p_ >= end_ || *p_ != '"') return false;
    ++p_;
    while (p_ < end_ && *p_ != '"') {
      if (*p_ == '\\') {
        if (++p_ >= end_) return false;
        switch (*p_) {
          case 'n': s->push_back('\n'); break;
          case 't': s->push_back('\t'); break;
          case 'r': s->push_back('\r'); break;
          case 'b': s->push_back('\b'); break;
          case 'f': s->push_back('\f'); break;
          case 'u':  // names here are ASCII; keep a placeholder for anything else
            if (end_ - p_ < 5) return false;
            p_ += 4;
            s->push_back('?');
            break;
          default: s->push_back(*p_);
        }
        ++p_;
      } else {
        s->push_back(*p_++);
      }
    }
    if (p_ >= end_) return false;
    ++p_;
    return true;
  }
  bool value(Json* v) {
    ws();
    if (p_ >= end_) return false;
    if (*p_ == '{') {
      v->kind = Json::kObj;
      ++p_;
      ws();
      if (p_ < end_ && *p_ == '}') return ++p_, true;
      for (;;) {
        std::string key;
        ws();
        if (!string(&key)) return false;
        ws();
        if (p_ >= end_ || *p_++ != ':') return false;
        Json child;
        if (!value(&child)) return false;
        v->obj.emplace_back(std::move(key), std::move(child));
        ws();
        if (p_ < end_ && *p_ == ',') { ++p_; continue; }
        if (p_ < end_ && *p_ == '}') return ++p_, true;
        return false;
      }
    }
    if (*p_ == '[') {
      v->kind = Json::kArr;
      ++p_;
      ws();
      if (p_ < end_ && *p_ == ']') return ++p_, true;
      for (;;) {
        Json child;
        if (!value(&child)) return false;
        v->arr.push_back(std::move(child));
        ws();
        if (p_ < end_ && *p_ == ',') { ++p_; continue; }
        if (p_ < end_ && *p_ == ']') return ++p_, true;
        return false;
      }
    }
    if (*p_ == '"') { v->kind = Json::kStr; return string(&v->str); }
    if (lit("true")) { v->kind = Json::kBool; v->b = true; return true; }
    if (lit("false")) { v->kind = Json::kBool; return true; }
    if (lit("null")) { v->kind = Json::kNull; return true; }
    char* e = nullptr;
    v->num = std::strtod(p_, &e);
    if (e == p_ || e > end_) return false;
    v->kind = Json::kNum;
    p_ = e;
    return true;
  }
  const char* p_;
  const char* end_;
};

// ------------------------------------------------------------------------------------------------
// The daemon's view of this process

struct Counters {
  bool found = false;
  std::string error;
  std::string name, state;
  double launches = 0, graph_launches = 0, captured_launches = 0;
};

// Runs `$GPUOS_CLI ps --json` (without our LD_PRELOAD: the CLI is not a tenant) and returns the record
// whose pid is ours.
static Counters read_daemon_counters() {
  Counters c;
  const char* cli = std::getenv("GPUOS_CLI");
  if (cli == nullptr || *cli == '\0') {
    c.error = "GPUOS_CLI not set";
    return c;
  }
  std::string quoted = "'";
  for (const char* p = cli; *p; ++p) quoted += (*p == '\'') ? std::string("'\\''") : std::string(1, *p);
  quoted += "'";
  std::string cmd = "env -u LD_PRELOAD " + quoted + " ps --json";
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) {
    c.error = "popen failed";
    return c;
  }
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int status = pclose(f);
  if (status != 0) {
    c.error = "`" + cmd + "` exited with status " + std::to_string(status);
    return c;
  }
  Json root;
  if (!JsonReader(out).parse(&root) || root.kind != Json::kObj) {
    c.error = "cannot parse ps --json output";
    return c;
  }
  const Json* tenants = root.get("tenants");
  if (tenants == nullptr || tenants->kind != Json::kArr) {
    c.error = "no tenants array in ps --json";
    return c;
  }
  const double me = static_cast<double>(getpid());
  for (const Json& t : tenants->arr) {
    const Json* pid = t.get("pid");
    if (pid == nullptr || pid->kind != Json::kNum || pid->num != me) continue;
    auto num = [&](const char* k) {
      const Json* v = t.get(k);
      return (v != nullptr && v->kind == Json::kNum) ? v->num : -1.0;
    };
    auto str = [&](const char* k) {
      const Json* v = t.get(k);
      return (v != nullptr && v->kind == Json::kStr) ? v->str : std::string();
    };
    c.found = true;
    c.name = str("name");
    c.state = str("state");
    c.launches = num("launches");
    c.graph_launches = num("graph_launches");
    c.captured_launches = num("captured_launches");
    return c;
  }
  c.error = "no tenant with pid " + std::to_string(getpid()) + " in ps --json (not registered?)";
  return c;
}

// ------------------------------------------------------------------------------------------------

struct Issued {
  long runtime_launches = 0;  // <<<>>> outside capture
  long driver_launches = 0;   // cuLaunchKernel / cuLaunchKernelEx outside capture
  long graph_launches = 0;
  long captured_launches = 0;  // launches (either API) recorded into the graph
};

static std::vector<std::string> g_failures;
static void expect(bool ok, const std::string& what) {
  if (!ok) g_failures.push_back(what);
}

int main(int argc, char** argv) {
  bool use_daemon = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-daemon") == 0) use_daemon = false;
    else g_result_path = argv[i];
  }

  constexpr int n = 1 << 20;
  constexpr int threads = 256;
  constexpr int blocks = (n + threads - 1) / threads;
  constexpr int kGraphReplays = 20;
  Issued issued;

  // Context creation (and, under gpuos, registration with the daemon) happens here.
  RT(cudaSetDevice(0));
  RT(cudaFree(nullptr));
  cudaDeviceProp prop{};
  RT(cudaGetDeviceProperties(&prop, 0));
  int driver_version = 0;
  DRV(cuDriverGetVersion(&driver_version));

  Counters before;
  if (use_daemon) {
    before = read_daemon_counters();
    expect(before.found, "baseline: " + before.error);
  }

  // --- runtime API: cudaMalloc + cudaMemcpy + <<<>>> on the default stream --------------------
  std::vector<float> hx(n), hy(n), out(n);
  for (int i = 0; i < n; ++i) {
    hx[i] = static_cast<float>(i % 1000);
    hy[i] = 1.0f;
  }
  float *dx = nullptr, *dy = nullptr;
  RT(cudaMalloc(&dx, n * sizeof(float)));
  RT(cudaMalloc(&dy, n * sizeof(float)));
  RT(cudaMemcpy(dx, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  RT(cudaMemcpy(dy, hy.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  saxpy<<<blocks, threads>>>(2.0f, dx, dy, n);  // y = 2x + 1
  RT(cudaGetLastError());
  ++issued.runtime_launches;
  add_f32<<<blocks, threads>>>(dy, 0.5f, n);  // y = 2x + 1.5
  RT(cudaGetLastError());
  ++issued.runtime_launches;
  RT(cudaMemcpy(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  {
    int bad = 0;
    for (int i = 0; i < n; ++i) bad += out[i] != 2.0f * hx[i] + 1.5f;
    expect(bad == 0, "runtime saxpy/add: " + std::to_string(bad) + " wrong elements");
  }

  // --- driver API: PTX module, cuLaunchKernel, cuLaunchKernelEx; cudaGetFuncBySymbol -------------
  cudaStream_t stream;
  RT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUstream cs = reinterpret_cast<CUstream>(stream);
  CUmodule mod;
  CUfunction ptx_add;
  DRV(cuModuleLoadData(&mod, kPtx));
  DRV(cuModuleGetFunction(&ptx_add, mod, "gpuos_add_f32"));
  {
    CUdeviceptr v = reinterpret_cast<CUdeviceptr>(dy);
    float c = 1.0f;
    int nn = n;
    void* params[] = {&v, &c, &nn};
    DRV(cuLaunchKernel(ptx_add, blocks, 1, 1, threads, 1, 1, 0, cs, params, nullptr));  // +1
    ++issued.driver_launches;
    DRV(cuStreamSynchronize(cs));  // cs is non-blocking: it does not order with the default stream
    DRV(cuLaunchKernel(ptx_add, blocks, 1, 1, threads, 1, 1, 0, nullptr, params, nullptr));  // +1, default stream
    ++issued.driver_launches;
    DRV(cuCtxSynchronize());

    CUlaunchConfig cfg{};
    cfg.gridDimX = blocks;  // even: divisible by the cluster size below
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = threads;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.sharedMemBytes = 0;
    cfg.hStream = cs;
    cfg.attrs = nullptr;
    cfg.numAttrs = 0;
    DRV(cuLaunchKernelEx(&cfg, ptx_add, params, nullptr));  // +1
    ++issued.driver_launches;
    CUlaunchAttribute cluster{};
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;  // what cuBLAS does on Hopper
    cluster.value.clusterDim.x = 2;
    cluster.value.clusterDim.y = 1;
    cluster.value.clusterDim.z = 1;
    cfg.attrs = &cluster;
    cfg.numAttrs = 1;
    DRV(cuLaunchKernelEx(&cfg, ptx_add, params, nullptr));  // +1
    ++issued.driver_launches;

    // A runtime kernel launched through the driver API.
    cudaFunction_t rf;
    RT(cudaGetFuncBySymbol(&rf, reinterpret_cast<const void*>(add_f32)));
    void* p2[] = {&v, &c, &nn};
    DRV(cuLaunchKernel(reinterpret_cast<CUfunction>(rf), blocks, 1, 1, threads, 1, 1, 0, cs, p2, nullptr));
    ++issued.driver_launches;
    DRV(cuStreamSynchronize(cs));
  }
  RT(cudaMemcpy(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  {
    int bad = 0;
    for (int i = 0; i < n; ++i) bad += out[i] != 2.0f * hx[i] + 6.5f;  // five more +1s
    expect(bad == 0, "driver launches: " + std::to_string(bad) + " wrong elements");
  }

  // --- stream-ordered allocator: cudaMallocAsync / cudaFreeAsync ----------------------------------
  {
    float* tmp = nullptr;
    RT(cudaMallocAsync(&tmp, n * sizeof(float), stream));
    RT(cudaMemsetAsync(tmp, 0, n * sizeof(float), stream));
    add_f32<<<blocks, threads, 0, stream>>>(tmp, 3.0f, n);
    RT(cudaGetLastError());
    ++issued.runtime_launches;
    saxpy<<<blocks, threads, 0, stream>>>(1.0f, dx, tmp, n);  // tmp = x + 3
    RT(cudaGetLastError());
    ++issued.runtime_launches;
    RT(cudaMemcpyAsync(out.data(), tmp, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    RT(cudaFreeAsync(tmp, stream));
    RT(cudaStreamSynchronize(stream));
    int bad = 0;
    for (int i = 0; i < n; ++i) bad += out[i] != hx[i] + 3.0f;
    expect(bad == 0, "cudaMallocAsync buffer: " + std::to_string(bad) + " wrong elements");
  }

  // --- managed memory ------------------------------------------------------------------------------
  {
    int* m = nullptr;
    RT(cudaMallocManaged(&m, n * sizeof(int)));
    for (int i = 0; i < n; ++i) m[i] = 7;
    inc_i32<<<blocks, threads>>>(m, n);
    RT(cudaGetLastError());
    ++issued.runtime_launches;
    RT(cudaDeviceSynchronize());
    int bad = 0;
    for (int i = 0; i < n; ++i) bad += m[i] != 7 + i;
    expect(bad == 0, "managed memory: " + std::to_string(bad) + " wrong elements");
    RT(cudaFree(m));
  }

  // --- a graph made by stream capture, launched kGraphReplays times -------------------------------
  {
    float* g = nullptr;
    RT(cudaMalloc(&g, n * sizeof(float)));
    RT(cudaMemset(g, 0, n * sizeof(float)));
    RT(cudaDeviceSynchronize());  // the graph runs on a non-blocking stream
    RT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < 3; ++k) {
      add_f32<<<blocks, threads, 0, stream>>>(g, 1.0f, n);  // captured, not launched
      ++issued.captured_launches;
    }
    CUdeviceptr v = reinterpret_cast<CUdeviceptr>(g);
    float c = 2.0f;
    int nn = n;
    void* params[] = {&v, &c, &nn};
    DRV(cuLaunchKernel(ptx_add, blocks, 1, 1, threads, 1, 1, 0, cs, params, nullptr));  // captured
    ++issued.captured_launches;
    cudaGraph_t graph;
    RT(cudaStreamEndCapture(stream, &graph));
    RT(cudaGetLastError());
    cudaGraphExec_t exec;
    RT(cudaGraphInstantiate(&exec, graph, 0));
    for (int r = 0; r < kGraphReplays; ++r) {
      RT(cudaGraphLaunch(exec, stream));
      ++issued.graph_launches;
    }
    RT(cudaStreamSynchronize(stream));
    RT(cudaMemcpy(out.data(), g, n * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < n; ++i) bad += out[i] != 5.0f * kGraphReplays;  // 3 x 1 + 2 per replay
    expect(bad == 0, "graph replays: " + std::to_string(bad) + " wrong elements");
    RT(cudaGraphExecDestroy(exec));
    RT(cudaGraphDestroy(graph));
    RT(cudaFree(g));
  }

  DRV(cuModuleUnload(mod));
  RT(cudaStreamDestroy(stream));
  RT(cudaFree(dx));
  RT(cudaFree(dy));
  RT(cudaDeviceSynchronize());

  // --- compare with the daemon ---------------------------------------------------------------------
  const long issued_launches = issued.runtime_launches + issued.driver_launches;
  Counters after;
  std::string counted = "null";
  if (use_daemon) {
    after = read_daemon_counters();
    expect(after.found, "final: " + after.error);
    if (before.found && after.found) {
      const double dl = after.launches - before.launches;
      const double dg = after.graph_launches - before.graph_launches;
      const double dc = after.captured_launches - before.captured_launches;
      expect(dl == issued_launches, "daemon launches delta " + std::to_string(static_cast<long>(dl)) +
                                        " != issued " + std::to_string(issued_launches));
      expect(dg == issued.graph_launches, "daemon graph_launches delta " +
                                              std::to_string(static_cast<long>(dg)) + " != issued " +
                                              std::to_string(issued.graph_launches));
      expect(dc == issued.captured_launches, "daemon captured_launches delta " +
                                                 std::to_string(static_cast<long>(dc)) + " != issued " +
                                                 std::to_string(issued.captured_launches));
      char buf[512];
      std::snprintf(buf, sizeof buf,
                    "{\"launches\":%ld,\"graph_launches\":%ld,\"captured_launches\":%ld,"
                    "\"absolute\":{\"launches\":%.0f,\"graph_launches\":%.0f,\"captured_launches\":%.0f},"
                    "\"tenant_name\":%s,\"state\":%s}",
                    static_cast<long>(dl), static_cast<long>(dg), static_cast<long>(dc), after.launches,
                    after.graph_launches, after.captured_launches, json_str(after.name).c_str(),
                    json_str(after.state).c_str());
      counted = buf;
    }
  }

  std::string failures = "[";
  for (size_t i = 0; i < g_failures.size(); ++i) failures += (i ? "," : "") + json_str(g_failures[i]);
  failures += "]";
  char head[1024];
  std::snprintf(head, sizeof head,
                "{\"name\":\"cuda_api\",\"build\":\"%s\",\"pid\":%d,\"passed\":%s,\"gpu\":%s,"
                "\"driver_version\":%d,\"daemon_checked\":%s,"
                "\"issued\":{\"launches\":%ld,\"runtime_launches\":%ld,\"driver_launches\":%ld,"
                "\"graph_launches\":%ld,\"captured_launches\":%ld},",
                kBuild, static_cast<int>(getpid()), g_failures.empty() ? "true" : "false",
                json_str(prop.name).c_str(), driver_version, use_daemon ? "true" : "false",
                issued_launches, issued.runtime_launches, issued.driver_launches, issued.graph_launches,
                issued.captured_launches);
  std::string line = std::string(head) + "\"counted\":" + counted + ",\"failures\":" + failures + "}";
  emit(line);
  return g_failures.empty() ? 0 : 1;
}
