// What one counter pass costs in CUPTI, by the shape of the API calls: a standalone measurement
// (gpu.sh step `counters-api`), no rocprof-replay involved. One context, one tiny kernel
// (a grid-stride add over 1 MiB, a few µs, launched and synchronized on its own stream), each
// CUPTI call timed on its own with std::chrono::steady_clock.
//
//   cupti_pass_cost [-k K] [--modes LIST] [--metrics LIST] [--small LIST|none]
//                   [--decode last|pass] [--cache none|all] [--legacy-image range|nvpw]
//
// Modes (LIST comma-separated; default range1,auto1,range8,range32,auto8,startstop,legacy1,
// legacys1,legacy8), each run K times ("kernels", default 8) per metric set:
//   rangeN    range profiler, user range, user replay, maxRangesPerPass=N: per pass Start, N x
//             (PushRange, launch, PopRange), Stop, until Stop says isAllPassSubmitted; then
//             DecodeData, GetCounterDataInfo and EvaluateToGpuValues of every range. range1 is
//             what rocprof-replay does today.
//   autoN     the same with CUPTI's auto range (no push/pop; one range per launch).
//   nosyncN   rangeN, but each range's launch is not synchronized before its PopRange (the
//             pass's stream is synchronized after the last PopRange).
//   gatedN    nosyncN behind a gate: before each PushRange the stream waits
//             (cuStreamWaitValue32) on a word of mapped host memory that is set after the
//             PopRange, so the kernel runs only once both are enqueued; a watchdog opens the
//             gate after 3 s (`gate_rescued=1` on the mode line: a call waited for the GPU).
//             Whether a range then counts the kernel alone (sm__cycles_elapsed.avg) is what
//             this mode measures.
//   startstop SetConfig, then Start/Stop with nothing in between, as many times as the
//             configuration has passes: the fixed cost of a pass. Run after the other range
//             profiler modes, each set's followed by Disable and Enable (the replay is left
//             unfinished).
//   legacyN   the deprecated Profiler API of cupti_profiler_target.h (BeginSession once for the
//             K kernels, per kernel SetConfig, per pass BeginPass, EnableProfiling, N x (PushRange,
//             launch, PopRange), DisableProfiling, EndPass; FlushCounterData, UnsetConfig),
//             configuration image from the profiler host API, counter data image from the range
//             profiler (or NVPW's counter data builder, if that one is refused).
//   legacysN  the same with a session per kernel (BeginSession/EndSession timed per kernel).
//   legacyautoN  legacyN with CUPTI's auto range: no push/pop; per launch EnableProfiling,
//             launch, DisableProfiling, with a kernel launched before it while profiling is
//             disabled (it must not become a range): whether a range can hold the kernel alone.
//
// PROBE=sidegate|worker|worker-sync|worker-callback (range and legacy modes; default none) asks
// what a multi-dispatch counter window could live with:
//   sidegate         during every pass a second stream holds a closed gate (a stream wait on
//                    mapped host memory, as a run's gate behind the application's launch);
//                    gate_rescued>0 on the mode line: a call waited for that stream.
//   worker           every CUPTI call and launch of the mode runs on a second thread (the
//                    context current there) while the main thread sleeps.
//   worker-sync      the same while the main thread waits in cudaStreamSynchronize on a second
//                    stream held by a closed gate, opened when the worker is done (at most 20 s).
//   worker-callback  the same while the main thread waits inside a CUPTI driver-API callback
//                    (PROBE_CB=query: cuStreamQuery's; launch: cuLaunchKernel's) for the worker
//                    to finish, at most 20 s; a worker not done then: `probe ... outcome=stuck`
//                    and the program exits (the worker may be stuck in CUPTI).
// Each probed mode prints `probe mode=... probe=... outcome=ok|failed|stuck wait_ms=...`.
//
// NESTING=num,min,target sets SetConfig's numNestingLevels, minNestingLevel and
// targetNestingLevel (default 1,1,1).
//
// TREE_NODES=a,b sizes the counter data image's range tree at a * N + b nodes (default 1,0):
// on the H200 (CUDA 13.0) 1,0 / 2,1 / 4,8 / 1,64 all left range4 and range8 with 2 ranges in
// the image, so the tree's size is not what limits a pass to 2 user ranges.
//
// Order: warm-up (one range1 kernel of the first set, not counted: CUPTI's one-time set-up),
// the range and auto modes of each set, startstop, Disable, then the legacy modes.
//
// Output, one line per measurement, `key=value` separated by spaces:
//   mode=setup|config|enable|warmup|disable ...   one-time costs (ms)
//   mode=<mode> set=<big|small> metrics=M host_passes=P passes=P' ranges_per_pass=N kernels=K
//       <call>_ms=<median over every call of the mode> ... per_pass_ms=<median of a pass's
//       calls, launches included> per_kernel_ms=<median of one kernel's whole collection>
//       per_range_ms=per_pass_ms/N per_launch_ms=per_kernel_ms/N
//   values mode=... range=i/n name=... <metric>=<value> ...   decoded values (sanity)
//   error mode=... call=... status=... msg=...                 a failed call; the mode stops
//   skip mode=... reason="..."                                 a mode not run, and why
// Every `_ms` of a mode line is a median; launch_ms includes the kernel's completion
// (cudaStreamSynchronize), as the replay engine waits for the pass's launch.

#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#include <dlfcn.h>
#include <unistd.h>
#include <nvperf_cuda_host.h>
#include <nvperf_host.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>
#include <atomic>
#include <thread>

namespace {

constexpr int MAX_PASSES = 64;   // every pass loop stops here
constexpr int MAX_RANGES = 64;   // N of a mode
constexpr int MAX_KERNELS = 64;  // K

using clk = std::chrono::steady_clock;
double ms_since(clk::time_point t) {
  return std::chrono::duration<double, std::milli>(clk::now() - t).count();
}

std::string g_mode = "setup";  // the label of error lines

const char* cupti_str(CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) return "(no string)";
  return s;
}

bool ok(CUptiResult r, const char* call) {
  if (r == CUPTI_SUCCESS) return true;
  printf("error mode=%s call=%s status=%d msg=\"%s\"\n", g_mode.c_str(), call, (int)r,
         cupti_str(r));
  return false;
}

bool cuda_ok(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return true;
  printf("error mode=%s call=%s status=%d msg=\"%s\"\n", g_mode.c_str(), call, (int)e,
         cudaGetErrorString(e));
  return false;
}

// Per-call samples of one mode, keys in first-use order.
struct Stats {
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> v;
  void add(const std::string& k, double x) {
    auto it = v.find(k);
    if (it == v.end()) {
      order.push_back(k);
      v[k].push_back(x);
    } else {
      it->second.push_back(x);
    }
  }
  size_t count(const std::string& k) const {
    auto it = v.find(k);
    return it == v.end() ? 0 : it->second.size();
  }
  double median(const std::string& k) const {
    auto it = v.find(k);
    if (it == v.end() || it->second.empty()) return -1;
    std::vector<double> s = it->second;
    std::sort(s.begin(), s.end());
    size_t n = s.size();
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  }
  std::string line() const {
    std::string out;
    char buf[128];
    for (auto& k : order) {
      snprintf(buf, sizeof buf, " %s_ms=%.4f", k.c_str(), median(k));
      out += buf;
    }
    return out;
  }
};

// Times `f` (returning CUptiResult) into st[key]; prints the error.
template <class F>
bool tcall(Stats& st, const char* key, const char* call, F&& f) {
  auto t = clk::now();
  CUptiResult r = f();
  st.add(key, ms_since(t));
  return ok(r, call);
}

// ---- the kernel ----
__global__ void add_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] += x[i];
}

constexpr int N_ELEMS = (1 << 20) / sizeof(float);  // 1 MiB of floats
cudaStream_t g_stream;
float *g_x, *g_y;
CUcontext g_ctx;

// The gate of the gated modes: a word of mapped host memory and its device address.
volatile uint32_t* g_gate = nullptr;
CUdeviceptr g_gate_dev = 0;
uint32_t g_gate_gen = 0;
std::atomic<int> g_gate_rescued{0};

// Enqueues a wait for the gate's next generation on the stream.
bool gate_close(cudaStream_t on = nullptr) {
  g_gate_gen++;
  CUresult r = cuStreamWaitValue32((CUstream)(on ? on : g_stream), g_gate_dev, g_gate_gen,
                                   CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS) {
    printf("error mode=%s call=cuStreamWaitValue32 status=%d msg=\"\"\n", g_mode.c_str(), (int)r);
    return false;
  }
  return true;
}

void gate_open() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *g_gate = g_gate_gen;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

// Opens the gate if `done` is not set within 3 s (a call that waits for the GPU while the
// gate is closed would otherwise wait forever).
struct GateWatchdog {
  std::atomic<bool> done{false};
  std::thread t;
  GateWatchdog() {
    t = std::thread([this] {
      auto until = clk::now() + std::chrono::seconds(3);
      while (!done.load() && clk::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (!done.load()) {
        g_gate_rescued++;
        gate_open();
      }
    });
  }
  ~GateWatchdog() {
    done = true;
    t.join();
  }
};

// ---- probes (PROBE=...) ----
std::string g_probe;           // "", sidegate, worker, worker-callback
cudaStream_t g_side = nullptr;  // the second stream of `sidegate` and of the callback's call

// A closed gate on the side stream for the life of this object (sidegate only).
struct SideGate {
  GateWatchdog* dog = nullptr;
  SideGate() {
    if (g_probe != "sidegate") return;
    dog = new GateWatchdog;
    gate_close(g_side);
  }
  ~SideGate() {
    if (!dog) return;
    gate_open();
    delete dog;
  }
};

// worker-callback: the main thread's wait inside a driver-API callback.
std::atomic<std::atomic<bool>*> g_cb_wait{nullptr};
std::atomic<bool> g_cb_entered{false};
std::thread::id g_main_id;
std::string g_probe_cb = "query";

void CUPTIAPI probe_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void* data) {
  auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite != CUPTI_API_ENTER || std::this_thread::get_id() != g_main_id) return;
  const char* want = g_probe_cb == "launch" ? "cuLaunchKernel" : "cuStreamQuery";
  if (!cb->functionName || !strstr(cb->functionName, want)) return;
  std::atomic<bool>* done = g_cb_wait.exchange(nullptr);
  if (!done) return;
  g_cb_entered = true;
  auto t = clk::now();
  while (!done->load() && ms_since(t) < 20000)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

__global__ void noop_kernel() {}

// One launch, not waited for.
bool launch_only(Stats& st) {
  auto t = clk::now();
  add_kernel<<<128, 256, 0, g_stream>>>(g_x, g_y, N_ELEMS);
  cudaError_t e = cudaGetLastError();
  st.add("launch", ms_since(t));
  return cuda_ok(e, "launch");
}

// One launch and its completion.
bool launch(Stats& st) {
  auto t = clk::now();
  add_kernel<<<128, 256, 0, g_stream>>>(g_x, g_y, N_ELEMS);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaStreamSynchronize(g_stream);
  st.add("launch", ms_since(t));
  return cuda_ok(e, "launch+cudaStreamSynchronize");
}

// ---- options ----
struct Options {
  int kernels = 8;
  std::vector<std::string> modes;
  bool decode_each = false;
  bool cache_all = false;
  bool legacy_nvpw_first = false;
};
Options g_opt;

const char* DEFAULT_BIG =
    "sm__cycles_elapsed.avg,sm__cycles_active.avg,sm__inst_executed.sum,smsp__inst_executed.sum,"
    "sm__warps_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_"
    "elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read."
    "sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_"
    "op_read.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_atom.sum,lts__t_sectors_op_red.sum,"
    "lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__t_"
    "sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,l1tex__"
    "t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,"
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_"
    "shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_"
    "conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__throughput.avg.pct_of_peak_sustained_active,"
    "smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_long_"
    "scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active."
    "pct,smsp__thread_inst_executed_per_inst_executed.ratio";
const char* DEFAULT_SMALL = "sm__inst_executed.sum,sm__cycles_elapsed.avg,dram__bytes_read.sum";
const char* DEFAULT_MODES = "range1,auto1,range8,range32,auto8,startstop,legacy1,legacys1,legacy8";

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

// ---- metric sets: host object and configuration image ----
struct MetricSet {
  std::string label;
  std::vector<std::string> names;
  std::vector<const char*> ptrs;
  CUpti_Profiler_Host_Object* host = nullptr;
  std::vector<uint8_t> config;
  size_t passes = 0;
  int measured_passes = 0;  // by the first range mode that completed
  std::string measured_mode;
  bool ok = false;
};

const char* g_chip = nullptr;

bool build_config(MetricSet& m) {
  g_mode = "config";
  m.ptrs.clear();
  for (auto& n : m.names) m.ptrs.push_back(n.c_str());
  Stats st;
  CUpti_Profiler_Host_Initialize_Params hi = {};
  hi.structSize = CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE;
  hi.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
  hi.pChipName = g_chip;
  if (!tcall(st, "host_initialize", "cuptiProfilerHostInitialize",
             [&] { return cuptiProfilerHostInitialize(&hi); }))
    return false;
  m.host = hi.pHostObject;
  CUpti_Profiler_Host_ConfigAddMetrics_Params am = {};
  am.structSize = CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE;
  am.pHostObject = m.host;
  am.ppMetricNames = m.ptrs.data();
  am.numMetrics = m.ptrs.size();
  if (!tcall(st, "add_metrics", "cuptiProfilerHostConfigAddMetrics",
             [&] { return cuptiProfilerHostConfigAddMetrics(&am); }))
    return false;
  CUpti_Profiler_Host_GetConfigImageSize_Params cs = {};
  cs.structSize = CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE;
  cs.pHostObject = m.host;
  if (!tcall(st, "config_size", "cuptiProfilerHostGetConfigImageSize",
             [&] { return cuptiProfilerHostGetConfigImageSize(&cs); }))
    return false;
  m.config.assign(cs.configImageSize, 0);
  CUpti_Profiler_Host_GetConfigImage_Params ci = {};
  ci.structSize = CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE;
  ci.pHostObject = m.host;
  ci.configImageSize = m.config.size();
  ci.pConfigImage = m.config.data();
  if (!tcall(st, "config_image", "cuptiProfilerHostGetConfigImage",
             [&] { return cuptiProfilerHostGetConfigImage(&ci); }))
    return false;
  CUpti_Profiler_Host_GetNumOfPasses_Params np = {};
  np.structSize = CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE;
  np.configImageSize = m.config.size();
  np.pConfigImage = m.config.data();
  if (!tcall(st, "num_passes", "cuptiProfilerHostGetNumOfPasses",
             [&] { return cuptiProfilerHostGetNumOfPasses(&np); }))
    return false;
  m.passes = np.numOfPasses;
  printf("mode=config set=%s metrics=%zu host_passes=%zu config_bytes=%zu%s\n", m.label.c_str(),
         m.names.size(), m.passes, m.config.size(), st.line().c_str());
  m.ok = true;
  return true;
}

// ---- evaluation of a decoded image ----
bool evaluate_range(MetricSet& m, const std::vector<uint8_t>& image, size_t idx,
                    std::vector<double>& values) {
  values.assign(m.ptrs.size(), 0.0);
  CUpti_Profiler_Host_EvaluateToGpuValues_Params ev = {};
  ev.structSize = CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE;
  ev.pHostObject = m.host;
  ev.pCounterDataImage = image.data();
  ev.counterDataImageSize = image.size();
  ev.rangeIndex = idx;
  ev.ppMetricNames = m.ptrs.data();
  ev.numMetrics = m.ptrs.size();
  ev.pMetricValues = values.data();
  return ok(cuptiProfilerHostEvaluateToGpuValues(&ev), "cuptiProfilerHostEvaluateToGpuValues");
}

bool range_count(const std::vector<uint8_t>& image, size_t* n) {
  CUpti_RangeProfiler_GetCounterDataInfo_Params gi = {};
  gi.structSize = CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE;
  gi.pCounterDataImage = image.data();
  gi.counterDataImageSize = image.size();
  if (!ok(cuptiRangeProfilerGetCounterDataInfo(&gi), "cuptiRangeProfilerGetCounterDataInfo"))
    return false;
  *n = gi.numTotalRanges;
  return true;
}

void print_values(MetricSet& m, const std::vector<uint8_t>& image, size_t idx, size_t total,
                  const std::vector<double>& values) {
  CUpti_Profiler_Host_GetRangeName_Params rn = {};
  rn.structSize = CUpti_Profiler_Host_GetRangeName_Params_STRUCT_SIZE;
  rn.pCounterDataImage = image.data();
  rn.counterDataImageSize = image.size();
  rn.rangeIndex = idx;
  rn.delimiter = "/";
  const char* name = "?";
  if (cuptiProfilerHostGetRangeName(&rn) == CUPTI_SUCCESS && rn.pRangeName) name = rn.pRangeName;
  printf("values mode=%s range=%zu/%zu name=%s", g_mode.c_str(), idx, total, name);
  for (size_t i = 0; i < values.size() && i < 6; i++)
    printf(" %s=%.6g", m.names[i].c_str(), values[i]);
  printf("\n");
}

// Evaluates the last `want` ranges of `image` (all of one kernel), timed as "evaluate";
// prints the first and last when `print`.
bool evaluate_kernel(MetricSet& m, const std::vector<uint8_t>& image, size_t want, Stats& st,
                     bool print) {
  auto t = clk::now();
  size_t n = 0;
  if (!range_count(image, &n)) return false;
  if (n < want) {
    printf("error mode=%s call=GetCounterDataInfo status=0 msg=\"%zu range(s) in the image, "
           "expected at least %zu\"\n",
           g_mode.c_str(), n, want);
    return false;
  }
  std::vector<double> first, last, v;
  for (size_t i = n - want; i < n; i++) {
    if (!evaluate_range(m, image, i, v)) return false;
    if (i == n - want) first = v;
    if (i == n - 1) last = v;
  }
  st.add("evaluate", ms_since(t));
  if (print) {
    print_values(m, image, n - want, n, first);
    if (want > 1) print_values(m, image, n - 1, n, last);
  }
  return true;
}

// ---- range profiler ----
CUpti_RangeProfiler_Object* g_rp = nullptr;

// CUDA 13.4's CUpti_RangeProfiler_Enable_Params (cacheControlMode), for an older header.
struct EnableParamsWithCache {
  size_t structSize;
  void* pPriv;
  CUcontext ctx;
  CUpti_RangeProfiler_Object* pRangeProfilerObject;
  uint32_t cacheControlMode;
};

bool enable_range_profiler() {
  g_mode = "enable";
  auto t = clk::now();
  CUptiResult r;
  const char* cache = "none";
  if (g_opt.cache_all) {
    EnableParamsWithCache p = {};
    p.structSize = offsetof(EnableParamsWithCache, cacheControlMode) + sizeof(uint32_t);
    p.ctx = g_ctx;
    p.cacheControlMode = 1;  // CUPTI_CACHE_CONTROL_MODE_ALL
    r = cuptiRangeProfilerEnable(reinterpret_cast<CUpti_RangeProfiler_Enable_Params*>(&p));
    if (r == CUPTI_SUCCESS) {
      g_rp = p.pRangeProfilerObject;
      cache = "all";
    } else {
      printf("skip mode=enable reason=\"cache control refused (%s); enabling without\"\n",
             cupti_str(r));
    }
  }
  if (!g_rp) {
    CUpti_RangeProfiler_Enable_Params p = {};
    p.structSize = CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE;
    p.ctx = g_ctx;
    r = cuptiRangeProfilerEnable(&p);
    if (!ok(r, "cuptiRangeProfilerEnable")) return false;
    g_rp = p.pRangeProfilerObject;
  }
  printf("mode=enable cache=%s enable_ms=%.4f\n", cache, ms_since(t));
  return g_rp != nullptr;
}

bool disable_range_profiler() {
  std::string mode = g_mode;
  g_mode = "disable";
  CUpti_RangeProfiler_Disable_Params dp = {};
  dp.structSize = CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE;
  dp.pRangeProfilerObject = g_rp;
  auto t = clk::now();
  bool r = ok(cuptiRangeProfilerDisable(&dp), "cuptiRangeProfilerDisable");
  if (r) printf("mode=disable after=%s disable_ms=%.4f\n", mode.c_str(), ms_since(t));
  g_rp = nullptr;
  g_mode = mode;
  return r;
}

bool counter_data_size(MetricSet& m, size_t ranges, size_t* size) {
  CUpti_RangeProfiler_GetCounterDataSize_Params p = {};
  p.structSize = CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE;
  p.pRangeProfilerObject = g_rp;
  p.pMetricNames = m.ptrs.data();
  p.numMetrics = m.ptrs.size();
  p.maxNumOfRanges = ranges;
  // TREE_NODES=a,b: a range tree of a * ranges + b nodes (default 1,0), to see whether the
  // tree's size limits how many user ranges a pass collects.
  size_t a = 1, b = 0;
  if (const char* t = getenv("TREE_NODES")) sscanf(t, "%zu,%zu", &a, &b);
  p.maxNumRangeTreeNodes = (uint32_t)(a * ranges + b);
  if (!ok(cuptiRangeProfilerGetCounterDataSize(&p), "cuptiRangeProfilerGetCounterDataSize"))
    return false;
  *size = p.counterDataSize;
  return true;
}

bool counter_data_init(std::vector<uint8_t>& image) {
  CUpti_RangeProfiler_CounterDataImage_Initialize_Params p = {};
  p.structSize = CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE;
  p.pRangeProfilerObject = g_rp;
  p.counterDataSize = image.size();
  p.pCounterData = image.data();
  return ok(cuptiRangeProfilerCounterDataImageInitialize(&p),
            "cuptiRangeProfilerCounterDataImageInitialize");
}

bool rp_set_config(MetricSet& m, std::vector<uint8_t>& image, bool user, int ranges, Stats& st) {
  CUpti_RangeProfiler_SetConfig_Params p = {};
  p.structSize = CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE;
  p.pRangeProfilerObject = g_rp;
  p.configSize = m.config.size();
  p.pConfig = m.config.data();
  p.counterDataImageSize = image.size();
  p.pCounterDataImage = image.data();
  p.range = user ? CUPTI_UserRange : CUPTI_AutoRange;
  p.replayMode = CUPTI_UserReplay;
  p.maxRangesPerPass = (size_t)ranges;
  p.numNestingLevels = 1;
  p.minNestingLevel = 1;
  p.passIndex = 0;
  p.targetNestingLevel = 1;
  // NESTING=num,min,target: other nesting values, to see whether they change how many user
  // ranges one pass collects (1,1,1 by default).
  if (const char* t = getenv("NESTING")) {
    unsigned num = 1, min = 1, target = 1;
    sscanf(t, "%u,%u,%u", &num, &min, &target);
    p.numNestingLevels = (uint16_t)num;
    p.minNestingLevel = (uint16_t)min;
    p.targetNestingLevel = (uint16_t)target;
  }
  return tcall(st, "setconfig", "cuptiRangeProfilerSetConfig",
               [&] { return cuptiRangeProfilerSetConfig(&p); });
}

bool rp_start(Stats& st, const char* extra_key) {
  CUpti_RangeProfiler_Start_Params p = {};
  p.structSize = CUpti_RangeProfiler_Start_Params_STRUCT_SIZE;
  p.pRangeProfilerObject = g_rp;
  auto t = clk::now();
  CUptiResult r = cuptiRangeProfilerStart(&p);
  double d = ms_since(t);
  st.add("start", d);
  if (extra_key) st.add(extra_key, d);
  return ok(r, "cuptiRangeProfilerStart");
}

bool rp_stop(Stats& st, bool* all) {
  CUpti_RangeProfiler_Stop_Params p = {};
  p.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE;
  p.pRangeProfilerObject = g_rp;
  bool r = tcall(st, "stop", "cuptiRangeProfilerStop", [&] { return cuptiRangeProfilerStop(&p); });
  *all = p.isAllPassSubmitted != 0;
  return r;
}

bool rp_push(Stats& st, const char* name) {
  CUpti_RangeProfiler_PushRange_Params p = {};
  p.structSize = CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE;
  p.pRangeProfilerObject = g_rp;
  p.pRangeName = name;
  return tcall(st, "push", "cuptiRangeProfilerPushRange",
               [&] { return cuptiRangeProfilerPushRange(&p); });
}

bool rp_pop(Stats& st) {
  CUpti_RangeProfiler_PopRange_Params p = {};
  p.structSize = CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE;
  p.pRangeProfilerObject = g_rp;
  return tcall(st, "pop", "cuptiRangeProfilerPopRange",
               [&] { return cuptiRangeProfilerPopRange(&p); });
}

bool rp_decode(Stats& st) {
  CUpti_RangeProfiler_DecodeData_Params p = {};
  p.structSize = CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE;
  p.pRangeProfilerObject = g_rp;
  if (!tcall(st, "decode", "cuptiRangeProfilerDecodeData",
             [&] { return cuptiRangeProfilerDecodeData(&p); }))
    return false;
  if (p.numOfRangeDropped) {
    printf("error mode=%s call=cuptiRangeProfilerDecodeData status=0 msg=\"%zu range(s) "
           "dropped\"\n",
           g_mode.c_str(), p.numOfRangeDropped);
    return false;
  }
  return true;
}

std::vector<std::string> range_names(int n, const char* prefix) {
  std::vector<std::string> v;
  for (int i = 0; i < n; i++) v.push_back(std::string(prefix) + std::to_string(i));
  return v;
}

// One kernel's collection with the range profiler: `ranges` launches per pass (each in its own
// user range when `user`). `passes` gets the number of Stops until isAllPassSubmitted.
enum class Shape { Sync, NoSync, Gated };

bool range_kernel(MetricSet& m, int ranges, bool user, std::vector<uint8_t>& image, Stats& st,
                  int* passes, bool print, double* first_start, Shape shape = Shape::Sync) {
  static const std::vector<std::string> names = range_names(MAX_RANGES, "r");
  auto tk = clk::now();
  {
    auto t = clk::now();
    if (!counter_data_init(image)) return false;
    st.add("image_init", ms_since(t));
  }
  if (!rp_set_config(m, image, user, ranges, st)) return false;
  bool all = false;
  int n = 0;
  for (; n < MAX_PASSES && !all; n++) {
    auto tp = clk::now();
    size_t before = st.count("start");
    SideGate side;
    if (!rp_start(st, n == 0 ? "start_p0" : "start_later")) return false;
    if (first_start && before == 0) *first_start = st.v.at("start").back();
    bool good = true;
    for (int r = 0; r < ranges && good; r++) {
      if (shape == Shape::Gated) {
        GateWatchdog dog;
        if (!gate_close()) return false;
        if (user && !rp_push(st, names[r].c_str())) return false;
        good = launch_only(st);
        if (user && !rp_pop(st)) good = false;
        gate_open();
        continue;
      }
      if (user && !rp_push(st, names[r].c_str())) {
        good = false;
        break;
      }
      good = shape == Shape::Sync ? launch(st) : launch_only(st);
      if (user && !rp_pop(st)) good = false;
    }
    if (shape != Shape::Sync) good = cuda_ok(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize") && good;
    bool stopped = rp_stop(st, &all);
    if (!good || !stopped) return false;
    st.add("per_pass", ms_since(tp));
    if (g_opt.decode_each && !rp_decode(st)) return false;
  }
  *passes = n;
  if (!all) {
    printf("error mode=%s call=cuptiRangeProfilerStop status=0 msg=\"not every pass submitted "
           "after %d passes\"\n",
           g_mode.c_str(), MAX_PASSES);
    return false;
  }
  if (!g_opt.decode_each && !rp_decode(st)) return false;
  st.add("per_kernel", ms_since(tk));
  // A failed evaluation is reported (an `error` line) without losing the pass timings.
  evaluate_kernel(m, image, (size_t)ranges, st, print);
  return true;
}

void print_mode_line(const std::string& mode, MetricSet& m, int passes, int ranges, int kernels,
                     Stats& st, const char* extra = "") {
  double pp = st.median("per_pass"), pk = st.median("per_kernel");
  printf("mode=%s set=%s metrics=%zu host_passes=%zu passes=%d ranges_per_pass=%d kernels=%d%s"
         " per_range_ms=%.4f per_launch_ms=%.4f%s\n",
         mode.c_str(), m.label.c_str(), m.names.size(), m.passes, passes, ranges, kernels,
         st.line().c_str(), pp >= 0 ? pp / ranges : -1.0, pk >= 0 ? pk / ranges : -1.0, extra);
}

void range_mode(const std::string& mode, MetricSet& m, int ranges, bool user,
                Shape shape = Shape::Sync) {
  g_mode = mode + "/" + m.label;
  size_t size = 0;
  if (!counter_data_size(m, (size_t)ranges, &size)) return;
  std::vector<uint8_t> image(size);
  Stats st;
  int passes = 0, done = 0;
  for (int k = 0; k < g_opt.kernels; k++) {
    int p = 0;
    if (!range_kernel(m, ranges, user, image, st, &p, k == g_opt.kernels - 1, nullptr, shape))
      break;
    if (done && p != passes) printf("note mode=%s kernel=%d passes=%d (kernel 0: %d)\n",
                                    g_mode.c_str(), k, p, passes);
    passes = p;
    done++;
  }
  if (!done) return;
  if (m.measured_passes == 0) {
    m.measured_passes = passes;
    m.measured_mode = mode;
  }
  char extra[200];
  snprintf(extra, sizeof extra,
           " image_bytes=%zu ref_mode=%s ref_passes=%d same_passes=%s gate_rescued=%d", size,
           m.measured_mode.c_str(), m.measured_passes, m.measured_passes == passes ? "yes" : "no",
           g_gate_rescued.exchange(0));
  print_mode_line(mode, m, passes, ranges, done, st, extra);
}

// Start/Stop with nothing in between, host_passes times per kernel, after a SetConfig.
void startstop_mode(MetricSet& m) {
  g_mode = "startstop/" + m.label;
  size_t size = 0;
  if (!counter_data_size(m, 1, &size)) return;
  std::vector<uint8_t> image(size);
  Stats st;
  int done = 0, said_all_at = 0;
  size_t n = std::min<size_t>(std::max<size_t>(m.passes, 1), MAX_PASSES);
  bool decode_failed = false;
  for (int k = 0; k < g_opt.kernels; k++) {
    auto tk = clk::now();
    if (!counter_data_init(image) || !rp_set_config(m, image, true, 1, st)) break;
    bool good = true;
    for (size_t p = 0; p < n; p++) {
      auto tp = clk::now();
      bool all = false;
      if (!rp_start(st, p == 0 ? "start_p0" : "start_later") || !rp_stop(st, &all)) {
        good = false;
        break;
      }
      st.add("per_pass", ms_since(tp));
      if (all) {
        said_all_at = (int)p + 1;
        break;
      }
    }
    if (!good) break;
    // No range was profiled: a refusal here is only noted.
    CUpti_RangeProfiler_DecodeData_Params dp = {};
    dp.structSize = CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE;
    dp.pRangeProfilerObject = g_rp;
    auto td = clk::now();
    CUptiResult r = cuptiRangeProfilerDecodeData(&dp);
    st.add("decode", ms_since(td));
    if (r != CUPTI_SUCCESS && !decode_failed) {
      decode_failed = true;
      printf("note mode=%s DecodeData with no range: %s\n", g_mode.c_str(), cupti_str(r));
    }
    st.add("per_kernel", ms_since(tk));
    done++;
  }
  if (!done) return;
  char extra[96];
  snprintf(extra, sizeof extra, " all_submitted_after=%d", said_all_at);
  print_mode_line("startstop", m, (int)n, 1, done, st, extra);
}

// ---- the legacy Profiler API (cupti_profiler_target.h), looked up at run time ----
struct Legacy {
  decltype(&cuptiProfilerCounterDataImageCalculateSize) calc_size = nullptr;
  decltype(&cuptiProfilerCounterDataImageInitialize) image_init = nullptr;
  decltype(&cuptiProfilerCounterDataImageCalculateScratchBufferSize) scratch_size = nullptr;
  decltype(&cuptiProfilerCounterDataImageInitializeScratchBuffer) scratch_init = nullptr;
  decltype(&cuptiProfilerBeginSession) begin_session = nullptr;
  decltype(&cuptiProfilerEndSession) end_session = nullptr;
  decltype(&cuptiProfilerSetConfig) set_config = nullptr;
  decltype(&cuptiProfilerUnsetConfig) unset_config = nullptr;
  decltype(&cuptiProfilerBeginPass) begin_pass = nullptr;
  decltype(&cuptiProfilerEndPass) end_pass = nullptr;
  decltype(&cuptiProfilerEnableProfiling) enable = nullptr;
  decltype(&cuptiProfilerDisableProfiling) disable = nullptr;
  decltype(&cuptiProfilerPushRange) push = nullptr;
  decltype(&cuptiProfilerPopRange) pop = nullptr;
  decltype(&cuptiProfilerFlushCounterData) flush = nullptr;
  std::string missing;
  bool load() {
#define LEGACY_SYM(field, name)                                               \
  field = reinterpret_cast<decltype(field)>(dlsym(RTLD_DEFAULT, #name));      \
  if (!field && missing.empty()) missing = #name;
    LEGACY_SYM(calc_size, cuptiProfilerCounterDataImageCalculateSize)
    LEGACY_SYM(image_init, cuptiProfilerCounterDataImageInitialize)
    LEGACY_SYM(scratch_size, cuptiProfilerCounterDataImageCalculateScratchBufferSize)
    LEGACY_SYM(scratch_init, cuptiProfilerCounterDataImageInitializeScratchBuffer)
    LEGACY_SYM(begin_session, cuptiProfilerBeginSession)
    LEGACY_SYM(end_session, cuptiProfilerEndSession)
    LEGACY_SYM(set_config, cuptiProfilerSetConfig)
    LEGACY_SYM(unset_config, cuptiProfilerUnsetConfig)
    LEGACY_SYM(begin_pass, cuptiProfilerBeginPass)
    LEGACY_SYM(end_pass, cuptiProfilerEndPass)
    LEGACY_SYM(enable, cuptiProfilerEnableProfiling)
    LEGACY_SYM(disable, cuptiProfilerDisableProfiling)
    LEGACY_SYM(push, cuptiProfilerPushRange)
    LEGACY_SYM(pop, cuptiProfilerPopRange)
    LEGACY_SYM(flush, cuptiProfilerFlushCounterData)
#undef LEGACY_SYM
    return missing.empty();
  }
};
Legacy g_legacy;

// NVPW (libnvperf_host), for a counter data prefix the legacy way; dlopen'ed.
struct Nvpw {
  void* lib = nullptr;
  decltype(&NVPW_InitializeHost) init = nullptr;
  decltype(&NVPW_CUDA_MetricsEvaluator_CalculateScratchBufferSize) eval_scratch = nullptr;
  decltype(&NVPW_CUDA_MetricsEvaluator_Initialize) eval_init = nullptr;
  decltype(&NVPW_MetricsEvaluator_ConvertMetricNameToMetricEvalRequest) to_request = nullptr;
  decltype(&NVPW_MetricsEvaluator_GetMetricRawDependencies) raw_deps = nullptr;
  decltype(&NVPW_MetricsEvaluator_Destroy) eval_destroy = nullptr;
  decltype(&NVPW_CUDA_CounterDataBuilder_Create) builder_create = nullptr;
  decltype(&NVPW_CounterDataBuilder_AddMetrics) builder_add = nullptr;
  decltype(&NVPW_CounterDataBuilder_GetCounterDataPrefix) builder_prefix = nullptr;
  decltype(&NVPW_CounterDataBuilder_Destroy) builder_destroy = nullptr;
  std::string why;
  bool loaded = false;
  bool load() {
    if (loaded) return true;
    if (!why.empty()) return false;
    // Next to libcupti first, then the loader's search path.
    Dl_info info = {};
    if (dladdr(reinterpret_cast<void*>(&cuptiGetResultString), &info) && info.dli_fname) {
      std::string dir = info.dli_fname;
      size_t slash = dir.rfind('/');
      if (slash != std::string::npos) {
        dir.resize(slash + 1);
        lib = dlopen((dir + "libnvperf_host.so").c_str(), RTLD_NOW | RTLD_GLOBAL);
      }
    }
    if (!lib) lib = dlopen("libnvperf_host.so", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
      why = std::string("dlopen libnvperf_host.so: ") + dlerror();
      return false;
    }
#define NVPW_SYM(field, name)                                                   \
  field = reinterpret_cast<decltype(field)>(dlsym(lib, #name));                 \
  if (!field) {                                                                 \
    why = "libnvperf_host.so lacks " #name;                                     \
    return false;                                                               \
  }
    NVPW_SYM(init, NVPW_InitializeHost)
    NVPW_SYM(eval_scratch, NVPW_CUDA_MetricsEvaluator_CalculateScratchBufferSize)
    NVPW_SYM(eval_init, NVPW_CUDA_MetricsEvaluator_Initialize)
    NVPW_SYM(to_request, NVPW_MetricsEvaluator_ConvertMetricNameToMetricEvalRequest)
    NVPW_SYM(raw_deps, NVPW_MetricsEvaluator_GetMetricRawDependencies)
    NVPW_SYM(eval_destroy, NVPW_MetricsEvaluator_Destroy)
    NVPW_SYM(builder_create, NVPW_CUDA_CounterDataBuilder_Create)
    NVPW_SYM(builder_add, NVPW_CounterDataBuilder_AddMetrics)
    NVPW_SYM(builder_prefix, NVPW_CounterDataBuilder_GetCounterDataPrefix)
    NVPW_SYM(builder_destroy, NVPW_CounterDataBuilder_Destroy)
#undef NVPW_SYM
    NVPW_InitializeHost_Params ip = {};
    ip.structSize = NVPW_InitializeHost_Params_STRUCT_SIZE;
    if (init(&ip) != NVPA_STATUS_SUCCESS) {
      why = "NVPW_InitializeHost failed";
      return false;
    }
    loaded = true;
    return true;
  }
};
Nvpw g_nvpw;

bool nvpw_fail(const char* call, NVPA_Status s) {
  printf("error mode=%s call=%s status=%d msg=\"NVPA status\"\n", g_mode.c_str(), call, (int)s);
  return false;
}

// A counter data prefix for `m` from NVPW's metrics evaluator and counter data builder.
bool nvpw_prefix(MetricSet& m, std::vector<uint8_t>& prefix) {
  if (!g_nvpw.load()) {
    printf("skip mode=%s reason=\"%s\"\n", g_mode.c_str(), g_nvpw.why.c_str());
    return false;
  }
  NVPW_CUDA_MetricsEvaluator_CalculateScratchBufferSize_Params ss = {};
  ss.structSize = NVPW_CUDA_MetricsEvaluator_CalculateScratchBufferSize_Params_STRUCT_SIZE;
  ss.pChipName = g_chip;
  NVPA_Status s = g_nvpw.eval_scratch(&ss);
  if (s != NVPA_STATUS_SUCCESS) return nvpw_fail("NVPW_CUDA_MetricsEvaluator_CalculateScratchBufferSize", s);
  std::vector<uint8_t> scratch(ss.scratchBufferSize);
  NVPW_CUDA_MetricsEvaluator_Initialize_Params ei = {};
  ei.structSize = NVPW_CUDA_MetricsEvaluator_Initialize_Params_STRUCT_SIZE;
  ei.pScratchBuffer = scratch.data();
  ei.scratchBufferSize = scratch.size();
  ei.pChipName = g_chip;
  s = g_nvpw.eval_init(&ei);
  if (s != NVPA_STATUS_SUCCESS) return nvpw_fail("NVPW_CUDA_MetricsEvaluator_Initialize", s);
  NVPW_MetricsEvaluator* ev = ei.pMetricsEvaluator;
  bool good = true;
  std::vector<NVPW_MetricEvalRequest> reqs(m.names.size());
  for (size_t i = 0; i < m.names.size() && good; i++) {
    NVPW_MetricsEvaluator_ConvertMetricNameToMetricEvalRequest_Params cp = {};
    cp.structSize = NVPW_MetricsEvaluator_ConvertMetricNameToMetricEvalRequest_Params_STRUCT_SIZE;
    cp.pMetricsEvaluator = ev;
    cp.pMetricName = m.ptrs[i];
    cp.pMetricEvalRequest = &reqs[i];
    cp.metricEvalRequestStructSize = NVPW_MetricEvalRequest_STRUCT_SIZE;
    s = g_nvpw.to_request(&cp);
    if (s != NVPA_STATUS_SUCCESS) good = nvpw_fail("NVPW_MetricsEvaluator_ConvertMetricNameToMetricEvalRequest", s);
  }
  std::vector<const char*> raw;
  if (good) {
    NVPW_MetricsEvaluator_GetMetricRawDependencies_Params rd = {};
    rd.structSize = NVPW_MetricsEvaluator_GetMetricRawDependencies_Params_STRUCT_SIZE;
    rd.pMetricsEvaluator = ev;
    rd.pMetricEvalRequests = reqs.data();
    rd.numMetricEvalRequests = reqs.size();
    rd.metricEvalRequestStructSize = NVPW_MetricEvalRequest_STRUCT_SIZE;
    rd.metricEvalRequestStrideSize = sizeof(NVPW_MetricEvalRequest);
    s = g_nvpw.raw_deps(&rd);
    if (s != NVPA_STATUS_SUCCESS) {
      good = nvpw_fail("NVPW_MetricsEvaluator_GetMetricRawDependencies", s);
    } else {
      raw.resize(rd.numRawDependencies);
      rd.ppRawDependencies = raw.data();
      s = g_nvpw.raw_deps(&rd);
      if (s != NVPA_STATUS_SUCCESS) good = nvpw_fail("NVPW_MetricsEvaluator_GetMetricRawDependencies", s);
      raw.resize(rd.numRawDependencies);
    }
  }
  // The raw names belong to the evaluator: the builder gets them before it is destroyed.
  NVPA_CounterDataBuilder* builder = nullptr;
  if (good) {
    NVPW_CUDA_CounterDataBuilder_Create_Params bc = {};
    bc.structSize = NVPW_CUDA_CounterDataBuilder_Create_Params_STRUCT_SIZE;
    bc.pChipName = g_chip;
    s = g_nvpw.builder_create(&bc);
    if (s != NVPA_STATUS_SUCCESS) good = nvpw_fail("NVPW_CUDA_CounterDataBuilder_Create", s);
    builder = bc.pCounterDataBuilder;
  }
  if (good) {
    std::vector<NVPA_RawMetricRequest> rr(raw.size());
    for (size_t i = 0; i < raw.size(); i++) {
      rr[i] = {};
      rr[i].structSize = NVPA_RAW_METRIC_REQUEST_STRUCT_SIZE;
      rr[i].pMetricName = raw[i];
      rr[i].isolated = 1;
      rr[i].keepInstances = 1;
    }
    NVPW_CounterDataBuilder_AddMetrics_Params ba = {};
    ba.structSize = NVPW_CounterDataBuilder_AddMetrics_Params_STRUCT_SIZE;
    ba.pCounterDataBuilder = builder;
    ba.pRawMetricRequests = rr.data();
    ba.numMetricRequests = rr.size();
    s = g_nvpw.builder_add(&ba);
    if (s != NVPA_STATUS_SUCCESS) good = nvpw_fail("NVPW_CounterDataBuilder_AddMetrics", s);
  }
  if (good) {
    NVPW_CounterDataBuilder_GetCounterDataPrefix_Params gp = {};
    gp.structSize = NVPW_CounterDataBuilder_GetCounterDataPrefix_Params_STRUCT_SIZE;
    gp.pCounterDataBuilder = builder;
    s = g_nvpw.builder_prefix(&gp);  // size first
    if (s != NVPA_STATUS_SUCCESS) {
      good = nvpw_fail("NVPW_CounterDataBuilder_GetCounterDataPrefix", s);
    } else {
      prefix.assign(gp.bytesCopied, 0);
      gp.bytesAllocated = prefix.size();
      gp.pBuffer = prefix.data();
      s = g_nvpw.builder_prefix(&gp);
      if (s != NVPA_STATUS_SUCCESS) good = nvpw_fail("NVPW_CounterDataBuilder_GetCounterDataPrefix", s);
      prefix.resize(gp.bytesCopied);
    }
  }
  if (builder) {
    NVPW_CounterDataBuilder_Destroy_Params bd = {};
    bd.structSize = NVPW_CounterDataBuilder_Destroy_Params_STRUCT_SIZE;
    bd.pCounterDataBuilder = builder;
    g_nvpw.builder_destroy(&bd);
  }
  NVPW_MetricsEvaluator_Destroy_Params ed = {};
  ed.structSize = NVPW_MetricsEvaluator_Destroy_Params_STRUCT_SIZE;
  ed.pMetricsEvaluator = ev;
  g_nvpw.eval_destroy(&ed);
  return good;
}

// A legacy counter data image for `ranges` ranges from an NVPW prefix.
bool nvpw_image(MetricSet& m, size_t ranges, std::vector<uint8_t>& image) {
  std::vector<uint8_t> prefix;
  if (!nvpw_prefix(m, prefix)) return false;
  CUpti_Profiler_CounterDataImageOptions o = {};
  o.structSize = CUpti_Profiler_CounterDataImageOptions_STRUCT_SIZE;
  o.pCounterDataPrefix = prefix.data();
  o.counterDataPrefixSize = prefix.size();
  o.maxNumRanges = (uint32_t)ranges;
  o.maxNumRangeTreeNodes = (uint32_t)ranges;
  o.maxRangeNameLength = 64;
  CUpti_Profiler_CounterDataImage_CalculateSize_Params cs = {};
  cs.structSize = CUpti_Profiler_CounterDataImage_CalculateSize_Params_STRUCT_SIZE;
  cs.sizeofCounterDataImageOptions = CUpti_Profiler_CounterDataImageOptions_STRUCT_SIZE;
  cs.pOptions = &o;
  if (!ok(g_legacy.calc_size(&cs), "cuptiProfilerCounterDataImageCalculateSize")) return false;
  image.assign(cs.counterDataImageSize, 0);
  CUpti_Profiler_CounterDataImage_Initialize_Params ci = {};
  ci.structSize = CUpti_Profiler_CounterDataImage_Initialize_Params_STRUCT_SIZE;
  ci.sizeofCounterDataImageOptions = CUpti_Profiler_CounterDataImageOptions_STRUCT_SIZE;
  ci.pOptions = &o;
  ci.counterDataImageSize = image.size();
  ci.pCounterDataImage = image.data();
  return ok(g_legacy.image_init(&ci), "cuptiProfilerCounterDataImageInitialize");
}

bool legacy_scratch(std::vector<uint8_t>& image, std::vector<uint8_t>& scratch) {
  CUpti_Profiler_CounterDataImage_CalculateScratchBufferSize_Params sp = {};
  sp.structSize = CUpti_Profiler_CounterDataImage_CalculateScratchBufferSize_Params_STRUCT_SIZE;
  sp.counterDataImageSize = image.size();
  sp.pCounterDataImage = image.data();
  if (!ok(g_legacy.scratch_size(&sp), "cuptiProfilerCounterDataImageCalculateScratchBufferSize"))
    return false;
  scratch.assign(sp.counterDataScratchBufferSize, 0);
  CUpti_Profiler_CounterDataImage_InitializeScratchBuffer_Params ip = {};
  ip.structSize = CUpti_Profiler_CounterDataImage_InitializeScratchBuffer_Params_STRUCT_SIZE;
  ip.counterDataImageSize = image.size();
  ip.pCounterDataImage = image.data();
  ip.counterDataScratchBufferSize = scratch.size();
  ip.pCounterDataScratchBuffer = scratch.data();
  return ok(g_legacy.scratch_init(&ip), "cuptiProfilerCounterDataImageInitializeScratchBuffer");
}

// Pristine legacy images from the range profiler (built while it is enabled), per (set, ranges).
std::map<std::pair<std::string, size_t>, std::vector<uint8_t>> g_legacy_images;

struct LegacyMode {
  std::string mode;
  int ranges;
  bool session_per_kernel;
  bool auto_range = false;  // legacyautoN: CUPTI's auto range, profiling enabled per launch
  size_t image_ranges() const {
    return session_per_kernel ? (size_t)ranges : (size_t)ranges * (size_t)g_opt.kernels;
  }
};

enum class LegacyResult { Ok, ImageRefused, Failed };

bool legacy_begin(std::vector<uint8_t>& image, std::vector<uint8_t>& scratch, int ranges,
                  Stats& st, bool auto_range = false) {
  CUpti_Profiler_BeginSession_Params p = {};
  p.structSize = CUpti_Profiler_BeginSession_Params_STRUCT_SIZE;
  p.ctx = g_ctx;
  p.counterDataImageSize = image.size();
  p.pCounterDataImage = image.data();
  p.counterDataScratchBufferSize = scratch.size();
  p.pCounterDataScratchBuffer = scratch.data();
  p.range = auto_range ? CUPTI_AutoRange : CUPTI_UserRange;
  p.replayMode = CUPTI_UserReplay;
  p.maxRangesPerPass = (size_t)ranges;
  p.maxLaunchesPerPass = (size_t)ranges;
  return tcall(st, "begin_session", "cuptiProfilerBeginSession",
               [&] { return g_legacy.begin_session(&p); });
}

bool legacy_end(Stats& st) {
  CUpti_Profiler_EndSession_Params p = {};
  p.structSize = CUpti_Profiler_EndSession_Params_STRUCT_SIZE;
  p.ctx = g_ctx;
  return tcall(st, "end_session", "cuptiProfilerEndSession",
               [&] { return g_legacy.end_session(&p); });
}

LegacyResult legacy_run(const LegacyMode& lm, MetricSet& m, const std::vector<uint8_t>& pristine,
                        const char* source) {
  Stats st;
  std::vector<uint8_t> image = pristine, scratch;
  if (!legacy_scratch(image, scratch)) return LegacyResult::ImageRefused;
  bool in_session = false;
  if (!lm.session_per_kernel) {
    if (!legacy_begin(image, scratch, lm.ranges, st, lm.auto_range)) return LegacyResult::ImageRefused;
    in_session = true;
  }
  int passes = 0, done = 0;
  bool failed = false;
  for (int k = 0; k < g_opt.kernels && !failed; k++) {
    auto tk = clk::now();
    if (lm.session_per_kernel) {
      auto t = clk::now();
      image = pristine;
      if (!legacy_scratch(image, scratch)) break;
      st.add("image_init", ms_since(t));
      if (!legacy_begin(image, scratch, lm.ranges, st, lm.auto_range)) {
        if (k == 0) return LegacyResult::ImageRefused;
        break;
      }
      in_session = true;
    }
    CUpti_Profiler_SetConfig_Params sc = {};
    sc.structSize = CUpti_Profiler_SetConfig_Params_STRUCT_SIZE;
    sc.ctx = g_ctx;
    sc.pConfig = m.config.data();
    sc.configSize = m.config.size();
    sc.minNestingLevel = 1;
    sc.numNestingLevels = 1;
    sc.passIndex = 0;
    sc.targetNestingLevel = 1;
    if (!tcall(st, "setconfig", "cuptiProfilerSetConfig", [&] { return g_legacy.set_config(&sc); }))
      break;
    std::vector<std::string> names;
    for (int r = 0; r < lm.ranges; r++)
      names.push_back(lm.session_per_kernel ? "r" + std::to_string(r)
                                            : "k" + std::to_string(k) + "_r" + std::to_string(r));
    bool all = false;
    int n = 0;
    for (; n < MAX_PASSES && !all && !failed; n++) {
      auto tp = clk::now();
      SideGate side;
      CUpti_Profiler_BeginPass_Params bp = {};
      bp.structSize = CUpti_Profiler_BeginPass_Params_STRUCT_SIZE;
      bp.ctx = g_ctx;
      if (!tcall(st, "begin_pass", "cuptiProfilerBeginPass", [&] { return g_legacy.begin_pass(&bp); })) {
        failed = true;
        break;
      }
      CUpti_Profiler_EnableProfiling_Params ep = {};
      ep.structSize = CUpti_Profiler_EnableProfiling_Params_STRUCT_SIZE;
      ep.ctx = g_ctx;
      CUpti_Profiler_DisableProfiling_Params dp = {};
      dp.structSize = CUpti_Profiler_DisableProfiling_Params_STRUCT_SIZE;
      dp.ctx = g_ctx;
      bool good = true;
      if (lm.auto_range) {
        // Each launch its own range: profiling enabled around it alone, and a kernel of ours
        // (as the replay's L2 flush) launched before it with profiling disabled.
        for (int r = 0; r < lm.ranges && good; r++) {
          noop_kernel<<<1, 1, 0, g_stream>>>();
          good = tcall(st, "enable_profiling", "cuptiProfilerEnableProfiling",
                       [&] { return g_legacy.enable(&ep); });
          if (good) good = launch(st);
          if (!tcall(st, "disable_profiling", "cuptiProfilerDisableProfiling",
                     [&] { return g_legacy.disable(&dp); }))
            good = false;
        }
      } else {
        good = tcall(st, "enable_profiling", "cuptiProfilerEnableProfiling",
                     [&] { return g_legacy.enable(&ep); });
      }
      for (int r = 0; r < lm.ranges && good && !lm.auto_range; r++) {
        CUpti_Profiler_PushRange_Params pp = {};
        pp.structSize = CUpti_Profiler_PushRange_Params_STRUCT_SIZE;
        pp.ctx = g_ctx;
        pp.pRangeName = names[r].c_str();
        pp.rangeNameLength = names[r].size();
        if (!tcall(st, "push", "cuptiProfilerPushRange", [&] { return g_legacy.push(&pp); })) {
          good = false;
          break;
        }
        good = launch(st);
        CUpti_Profiler_PopRange_Params po = {};
        po.structSize = CUpti_Profiler_PopRange_Params_STRUCT_SIZE;
        po.ctx = g_ctx;
        if (!tcall(st, "pop", "cuptiProfilerPopRange", [&] { return g_legacy.pop(&po); }))
          good = false;
      }
      if (!lm.auto_range && !tcall(st, "disable_profiling", "cuptiProfilerDisableProfiling",
                                   [&] { return g_legacy.disable(&dp); }))
        good = false;
      CUpti_Profiler_EndPass_Params e = {};
      e.structSize = CUpti_Profiler_EndPass_Params_STRUCT_SIZE;
      e.ctx = g_ctx;
      if (!tcall(st, "end_pass", "cuptiProfilerEndPass", [&] { return g_legacy.end_pass(&e); }))
        good = false;
      all = e.allPassesSubmitted != 0;
      if (!good) {
        failed = true;
        break;
      }
      st.add("per_pass", ms_since(tp));
    }
    if (failed) break;
    if (!all) {
      printf("error mode=%s call=cuptiProfilerEndPass status=0 msg=\"not every pass submitted "
             "after %d passes\"\n",
             g_mode.c_str(), MAX_PASSES);
      failed = true;
      break;
    }
    CUpti_Profiler_FlushCounterData_Params fp = {};
    fp.structSize = CUpti_Profiler_FlushCounterData_Params_STRUCT_SIZE;
    fp.ctx = g_ctx;
    if (!tcall(st, "flush", "cuptiProfilerFlushCounterData", [&] { return g_legacy.flush(&fp); })) {
      failed = true;
      break;
    }
    if (fp.numRangesDropped)
      printf("note mode=%s kernel=%d ranges_dropped=%zu\n", g_mode.c_str(), k, fp.numRangesDropped);
    CUpti_Profiler_UnsetConfig_Params up = {};
    up.structSize = CUpti_Profiler_UnsetConfig_Params_STRUCT_SIZE;
    up.ctx = g_ctx;
    if (!tcall(st, "unset", "cuptiProfilerUnsetConfig", [&] { return g_legacy.unset_config(&up); })) {
      failed = true;
      break;
    }
    if (!evaluate_kernel(m, image, (size_t)lm.ranges, st, k == g_opt.kernels - 1)) {
      failed = true;
      break;
    }
    if (lm.session_per_kernel) {
      in_session = false;
      if (!legacy_end(st)) break;
    }
    st.add("per_kernel", ms_since(tk));
    passes = n;
    done++;
  }
  if (in_session) {
    if (failed) {  // leave no pass or configuration behind
      CUpti_Profiler_UnsetConfig_Params up = {};
      up.structSize = CUpti_Profiler_UnsetConfig_Params_STRUCT_SIZE;
      up.ctx = g_ctx;
      g_legacy.unset_config(&up);
    }
    legacy_end(st);
  }
  if (!done) return LegacyResult::Failed;
  char extra[200];
  snprintf(extra, sizeof extra,
           " image=%s image_bytes=%zu ref_mode=%s ref_passes=%d same_passes=%s gate_rescued=%d",
           source, image.size(), m.measured_mode.empty() ? "none" : m.measured_mode.c_str(),
           m.measured_passes, m.measured_passes == passes ? "yes" : "no",
           g_gate_rescued.exchange(0));
  print_mode_line(lm.mode, m, passes, lm.ranges, done, st, extra);
  return LegacyResult::Ok;
}

void legacy_mode(const LegacyMode& lm, MetricSet& m) {
  g_mode = lm.mode + "/" + m.label;
  if (!g_legacy.missing.empty()) {
    printf("skip mode=%s reason=\"this CUPTI has no %s (legacy Profiler API removed)\"\n",
           g_mode.c_str(), g_legacy.missing.c_str());
    return;
  }
  size_t ranges = lm.image_ranges();
  auto it = g_legacy_images.find({m.label, ranges});
  bool have_range_image = it != g_legacy_images.end() && !it->second.empty();
  if (!g_opt.legacy_nvpw_first && have_range_image) {
    LegacyResult r = legacy_run(lm, m, it->second, "range_profiler");
    if (r != LegacyResult::ImageRefused) return;
    printf("note mode=%s the range profiler's counter data image was refused; trying NVPW's\n",
           g_mode.c_str());
  }
  std::vector<uint8_t> image;
  if (!nvpw_image(m, ranges, image)) {
    printf("skip mode=%s reason=\"no counter data image the legacy API accepts\"\n",
           g_mode.c_str());
    return;
  }
  if (legacy_run(lm, m, image, "nvpw") == LegacyResult::ImageRefused)
    printf("skip mode=%s reason=\"the legacy API refused NVPW's counter data image too\"\n",
           g_mode.c_str());
}

bool parse_mode(const std::string& s, std::string* kind, int* n) {
  static const char* kinds[] = {"legacyauto", "legacys", "legacy", "range", "auto", "nosync", "gated"};
  if (s == "startstop") {
    *kind = s;
    *n = 1;
    return true;
  }
  for (const char* k : kinds) {
    size_t len = strlen(k);
    if (s.compare(0, len, k) == 0 && s.size() > len) {
      int v = atoi(s.c_str() + len);
      if (v < 1 || v > MAX_RANGES) return false;
      *kind = k;
      *n = v;
      return true;
    }
  }
  return false;
}

// Runs `f` (one mode) as PROBE says: on this thread, or on a worker while this thread sleeps
// or waits inside a CUPTI callback.
template <class F>
void probed(const std::string& mode, F&& f) {
  if (g_probe != "worker" && g_probe != "worker-sync" && g_probe != "worker-callback") {
    f();
    return;
  }
  std::atomic<bool> fin{false};
  auto t = clk::now();
  std::thread w([&] {
    cuCtxSetCurrent(g_ctx);
    f();
    fin = true;
  });
  if (g_probe == "worker") {
    while (!fin.load() && ms_since(t) < 60000)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } else if (g_probe == "worker-sync") {
    // The gate opens when the worker is done, or after 20 s.
    gate_close(g_side);
    std::thread opener([&] {
      while (!fin.load() && ms_since(t) < 20000)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      gate_open();
    });
    cudaStreamSynchronize(g_side);
    opener.join();
  } else {
    g_cb_entered = false;
    g_cb_wait = &fin;
    if (g_probe_cb == "launch") {
      noop_kernel<<<1, 1, 0, g_side>>>();
    } else {
      cuStreamQuery((CUstream)g_side);
    }
    g_cb_wait = nullptr;
  }
  bool done = fin.load();
  printf("probe mode=%s probe=%s%s%s outcome=%s callback_entered=%d wait_ms=%.1f\n", mode.c_str(),
         g_probe.c_str(), g_probe == "worker-callback" ? "/" : "",
         g_probe == "worker-callback" ? g_probe_cb.c_str() : "", done ? "ok" : "stuck",
         (int)g_cb_entered.load(), ms_since(t));
  if (!done) {
    fflush(stdout);
    _exit(3);  // the worker may be stuck inside CUPTI: nothing more can be measured
  }
  w.join();
}

void usage() {
  fprintf(stderr,
          "usage: cupti_pass_cost [-k K] [--modes LIST] [--metrics LIST] [--small LIST|none]\n"
          "                       [--decode last|pass] [--cache none|all] "
          "[--legacy-image range|nvpw]\n  modes: rangeN autoN nosyncN gatedN startstop legacyN legacysN "
          "(N <= %d); default %s\n",
          MAX_RANGES, DEFAULT_MODES);
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string big = DEFAULT_BIG, small = DEFAULT_SMALL, modes = DEFAULT_MODES;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage();
        exit(2);
      }
      return argv[++i];
    };
    if (a == "-k") g_opt.kernels = atoi(next().c_str());
    else if (a == "--modes") modes = next();
    else if (a == "--metrics") big = next();
    else if (a == "--small") small = next();
    else if (a == "--decode") g_opt.decode_each = next() == "pass";
    else if (a == "--cache") g_opt.cache_all = next() == "all";
    else if (a == "--legacy-image") g_opt.legacy_nvpw_first = next() == "nvpw";
    else {
      usage();
      return 2;
    }
  }
  g_opt.kernels = std::max(1, std::min(g_opt.kernels, MAX_KERNELS));
  g_opt.modes = split(modes);
  for (auto& md : g_opt.modes) {
    std::string k;
    int n;
    if (!parse_mode(md, &k, &n)) {
      fprintf(stderr, "unknown mode %s\n", md.c_str());
      usage();
      return 2;
    }
  }

  g_main_id = std::this_thread::get_id();
  if (const char* pr = getenv("PROBE")) g_probe = pr;
  if (const char* pc = getenv("PROBE_CB")) g_probe_cb = pc;
  if (!g_probe.empty() && g_probe != "sidegate" && g_probe != "worker" &&
      g_probe != "worker-sync" && g_probe != "worker-callback") {
    fprintf(stderr, "unknown PROBE %s\n", g_probe.c_str());
    return 2;
  }
  // The context, the buffers, the kernel loaded and run once.
  auto t0 = clk::now();
  if (!cuda_ok(cudaFree(0), "cudaFree(0)")) return 1;
  if (cuCtxGetCurrent(&g_ctx) != CUDA_SUCCESS || !g_ctx) {
    printf("error mode=setup call=cuCtxGetCurrent status=0 msg=\"no current context\"\n");
    return 1;
  }
  if (!cuda_ok(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreate") ||
      !cuda_ok(cudaMalloc(&g_x, N_ELEMS * sizeof(float)), "cudaMalloc") ||
      !cuda_ok(cudaMalloc(&g_y, N_ELEMS * sizeof(float)), "cudaMalloc") ||
      !cuda_ok(cudaMemset(g_x, 0, N_ELEMS * sizeof(float)), "cudaMemset") ||
      !cuda_ok(cudaMemset(g_y, 0, N_ELEMS * sizeof(float)), "cudaMemset"))
    return 1;
  {
    void* gate = nullptr;
    if (!cuda_ok(cudaHostAlloc(&gate, 4096, cudaHostAllocMapped), "cudaHostAlloc") ||
        !cuda_ok(cudaHostGetDevicePointer((void**)&g_gate_dev, gate, 0), "cudaHostGetDevicePointer"))
      return 1;
    g_gate = (volatile uint32_t*)gate;
    *g_gate = 0;
  }
  if (!cuda_ok(cudaStreamCreateWithFlags(&g_side, cudaStreamNonBlocking), "cudaStreamCreate"))
    return 1;
  if (g_probe == "worker-callback") {
    CUpti_SubscriberHandle sub;
    if (!ok(cuptiSubscribe(&sub, (CUpti_CallbackFunc)probe_callback, nullptr), "cuptiSubscribe") ||
        !ok(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API), "cuptiEnableDomain"))
      return 1;
  }
  {
    Stats warm;
    for (int i = 0; i < 3; i++)
      if (!launch(warm)) return 1;
    Stats plain;
    for (int i = 0; i < 16; i++) launch(plain);
    double context_ms = ms_since(t0);
    cudaDeviceProp prop = {};
    cudaGetDeviceProperties(&prop, 0);
    int driver = 0;
    cudaDriverGetVersion(&driver);
    uint32_t cupti_version = 0;
    cuptiGetVersion(&cupti_version);
    printf("mode=setup device=\"%s\" driver=%d cupti_api=%u header_cupti_api=%d kernels=%d "
           "decode=%s context_ms=%.3f plain_launch_ms=%.4f\n",
           prop.name, driver, cupti_version, (int)CUPTI_API_VERSION, g_opt.kernels,
           g_opt.decode_each ? "pass" : "last", context_ms, plain.median("launch"));
  }

  // CUPTI's profiler: initialize, chip, the configuration images.
  {
    Stats st;
    CUpti_Profiler_Initialize_Params ip = {};
    ip.structSize = CUpti_Profiler_Initialize_Params_STRUCT_SIZE;
    if (!tcall(st, "profiler_initialize", "cuptiProfilerInitialize",
               [&] { return cuptiProfilerInitialize(&ip); }))
      return 1;
    CUpti_Device_GetChipName_Params cn = {};
    cn.structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE;
    cn.deviceIndex = 0;
    if (!tcall(st, "chip_name", "cuptiDeviceGetChipName", [&] { return cuptiDeviceGetChipName(&cn); }))
      return 1;
    g_chip = cn.pChipName;
    printf("mode=setup chip=%s%s\n", g_chip, st.line().c_str());
  }
  std::vector<MetricSet> sets;
  {
    MetricSet b;
    b.label = "big";
    b.names = split(big);
    sets.push_back(b);
    if (small != "none" && !small.empty()) {
      MetricSet s;
      s.label = "small";
      s.names = split(small);
      sets.push_back(s);
    }
  }
  for (auto& m : sets) build_config(m);
  g_legacy.load();

  // The range profiler modes.
  if (enable_range_profiler()) {
    // Warm-up: one range1 kernel, not counted: CUPTI's one-time set-up is in its first Start.
    for (auto& m : sets) {
      if (!m.ok) continue;
      g_mode = "warmup/" + m.label;
      size_t size = 0;
      if (!counter_data_size(m, 1, &size)) continue;
      std::vector<uint8_t> image(size);
      Stats st;
      int p = 0;
      double first = -1;
      auto t = clk::now();
      bool good = range_kernel(m, 1, true, image, st, &p, false, &first);
      printf("mode=warmup set=%s ok=%d passes=%d first_start_ms=%.4f first_kernel_ms=%.4f "
             "setconfig_ms=%.4f\n",
             m.label.c_str(), (int)good, p, first, ms_since(t), st.median("setconfig"));
      break;  // once is enough: the set-up is per context
    }
    for (auto& m : sets) {
      if (!m.ok) continue;
      for (auto& md : g_opt.modes) {
        std::string kind;
        int n = 1;
        parse_mode(md, &kind, &n);
        if (kind == "range" || kind == "auto")
          probed(md, [&] { range_mode(md, m, n, kind == "range"); });
        if (kind == "nosync") probed(md, [&] { range_mode(md, m, n, true, Shape::NoSync); });
        if (kind == "gated") probed(md, [&] { range_mode(md, m, n, true, Shape::Gated); });
      }
    }
    // The legacy modes' images, from the range profiler while it is enabled.
    if (g_legacy.missing.empty() && !g_opt.legacy_nvpw_first) {
      g_mode = "legacy-images";
      for (auto& m : sets) {
        if (!m.ok) continue;
        for (auto& md : g_opt.modes) {
          std::string kind;
          int n = 1;
          parse_mode(md, &kind, &n);
          if (kind != "legacy" && kind != "legacys" && kind != "legacyauto") continue;
          LegacyMode lm{md, n, kind == "legacys", kind == "legacyauto"};
          size_t r = lm.image_ranges();
          auto& img = g_legacy_images[{m.label, r}];
          if (!img.empty()) continue;
          size_t size = 0;
          if (!counter_data_size(m, r, &size)) continue;
          img.assign(size, 0);
          if (!counter_data_init(img)) img.clear();
        }
      }
    }
    // Start/Stop alone leaves a replay unfinished: last, each followed by Disable and Enable.
    bool startstop = std::find(g_opt.modes.begin(), g_opt.modes.end(), "startstop") != g_opt.modes.end();
    for (auto& m : sets) {
      if (!m.ok || !startstop || !g_rp) continue;
      startstop_mode(m);
      if (disable_range_profiler()) enable_range_profiler();
    }
    if (g_rp) disable_range_profiler();
  }

  // The legacy Profiler API.
  for (auto& m : sets) {
    if (!m.ok) continue;
    for (auto& md : g_opt.modes) {
      std::string kind;
      int n = 1;
      parse_mode(md, &kind, &n);
      if (kind == "legacy" || kind == "legacys" || kind == "legacyauto")
        probed(md, [&] {
          legacy_mode(LegacyMode{md, n, kind == "legacys", kind == "legacyauto"}, m);
        });
    }
  }

  for (auto& m : sets) {
    if (!m.host) continue;
    CUpti_Profiler_Host_Deinitialize_Params hd = {};
    hd.structSize = CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE;
    hd.pHostObject = m.host;
    cuptiProfilerHostDeinitialize(&hd);
  }
  printf("done\n");
  return 0;
}
