// retval_probe: does the application see what a CUPTI exit callback writes into
// `functionReturnValue` and the call's out-parameters? Issue 13 asks that an application
// allocation failing for lack of memory while the snapshot arena holds device memory succeeds:
// the SDK can release the arena inside the allocation's exit callback, but only a retry inside
// that callback, with its status written back, makes the application's call succeed without
// intercepting the driver's entry points. Standalone (no SDK).
//
// The callback watches cuMemAlloc_v2 and cuMemAllocAsync. When one fails with
// CUDA_ERROR_OUT_OF_MEMORY for a request of exactly `kHuge` bytes (more than any GPU has), it
// allocates `kSmall` bytes with the same entry point (its own nested call is left alone),
// writes the address into the call's out-parameter and CUDA_SUCCESS into
// `*functionReturnValue`. The application then makes each call and prints what it saw:
//
//   case=driver status=0 ptr=0x7f... usable=1
//   case=runtime status=0 ptr=0x7f... usable=1
//   case=async status=0 ptr=0x7f... usable=1
//   RESULT honoured=3/3
//
// `usable` writes the memory with cuMemsetD8 and reads it back. A status other than 0 means
// CUPTI does not hand a written return value back (through that path).
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

#include <cstdio>
#include <cstring>
#include <vector>
#include "check.cuh"
#include "cupti_check.cuh"

static const size_t kHuge = size_t(1) << 50;  // 1 PiB
static const size_t kSmall = size_t(1) << 20;
static thread_local bool t_inside = false;
static int g_rewrites = 0;

static void CUPTIAPI on_call(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                             const void* data) {
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || t_inside) return;
  const CUpti_CallbackData* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite != CUPTI_API_EXIT) return;
  CUresult* status = static_cast<CUresult*>(cb->functionReturnValue);
  if (status == nullptr || *status != CUDA_ERROR_OUT_OF_MEMORY) return;
  t_inside = true;
  if (id == CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2) {
    const cuMemAlloc_v2_params* p = static_cast<const cuMemAlloc_v2_params*>(cb->functionParams);
    if (p->bytesize == kHuge) {
      CUresult r = cuMemAlloc(p->dptr, kSmall);
      printf("callback: cuMemAlloc_v2 failed for lack of memory; retry of %zu bytes: %d\n", kSmall,
             int(r));
      *status = r;
      ++g_rewrites;
    }
  } else if (id == CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync) {
    const cuMemAllocAsync_params* p = static_cast<const cuMemAllocAsync_params*>(cb->functionParams);
    if (p->bytesize == kHuge) {
      CUresult r = cuMemAllocAsync(p->dptr, kSmall, p->hStream);
      printf("callback: cuMemAllocAsync failed for lack of memory; retry of %zu bytes: %d\n", kSmall,
             int(r));
      *status = r;
      ++g_rewrites;
    }
  }
  t_inside = false;
}

// Writes the memory and reads it back: 1 when every byte came back.
static int usable(CUdeviceptr p) {
  if (p == 0) return 0;
  if (cuMemsetD8(p, 0x5a, kSmall) != CUDA_SUCCESS) return 0;
  std::vector<unsigned char> host(kSmall);
  if (cuMemcpyDtoH(host.data(), p, kSmall) != CUDA_SUCCESS) return 0;
  for (unsigned char b : host)
    if (b != 0x5a) return 0;
  return 1;
}

int main() {
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  CUpti_SubscriberHandle sub;
  CP(cuptiSubscribe(&sub, on_call, nullptr));
  CP(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2));
  CP(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync));
  int honoured = 0, cases = 0;

  CUdeviceptr d = 0;
  CUresult r = cuMemAlloc(&d, kHuge);
  int ok = usable(r == CUDA_SUCCESS ? d : 0);
  printf("case=driver status=%d ptr=%#llx usable=%d\n", int(r), (unsigned long long)d, ok);
  honoured += r == CUDA_SUCCESS && ok;
  ++cases;
  if (r == CUDA_SUCCESS) cuMemFree(d);

  void* v = nullptr;
  cudaError_t e = cudaMalloc(&v, kHuge);
  ok = usable(e == cudaSuccess ? CUdeviceptr(v) : 0);
  printf("case=runtime status=%d ptr=%p usable=%d\n", int(e), v, ok);
  if (e != cudaSuccess) cudaGetLastError();  // not sticky, but clear it
  honoured += e == cudaSuccess && ok;
  ++cases;
  if (e == cudaSuccess) cudaFree(v);

  CUstream s;
  CUresult rs = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  if (rs == CUDA_SUCCESS) {
    d = 0;
    r = cuMemAllocAsync(&d, kHuge, s);
    CUresult sync = cuStreamSynchronize(s);
    ok = sync == CUDA_SUCCESS ? usable(r == CUDA_SUCCESS ? d : 0) : 0;
    printf("case=async status=%d ptr=%#llx usable=%d\n", int(r), (unsigned long long)d, ok);
    honoured += r == CUDA_SUCCESS && ok;
    ++cases;
    if (r == CUDA_SUCCESS) {
      cuMemFreeAsync(d, s);
      cuStreamSynchronize(s);
    }
  }
  printf("callback rewrites: %d\n", g_rewrites);
  printf("RESULT honoured=%d/%d\n", honoured, cases);
  cuptiUnsubscribe(sub);
  return 0;
}
