//! The driver calls that make, free, map, share and import memory: what each tells the
//! backend about the memory a kernel may reach — the inventory of the contexts' own
//! allocations (captured, restored, fingerprinted), host-visible memory (`host_memory`:
//! watched or declined), memory another process or GPU writes (`foreign_memory`: declined),
//! surface objects, and the arena relieved when the application runs short
//! ([`super::memory`] has the kinds).

use super::*;

impl Backend {
    /// Handles the enter or exit callback of a memory call (`api` is one of those
    /// [`on_driver`](Backend::on_driver) hands here).
    ///
    /// # Safety
    /// `cb` is CUPTI's data of that call's callback, valid during this call.
    pub(super) unsafe fn on_memory_call(&self, api: Api, cb: &CUpti_CallbackData) {
        let enter = cb.callbackSite == CUPTI_API_ENTER;
        let result = || call_result(cb);
        let ctx_handle = cb.context as usize;
        let params = cb.functionParams;
        if params.is_null() {
            return;
        }
        match api {
            Api::MemAlloc
            | Api::MemAllocPitch
            | Api::MemAllocManaged
            | Api::MemAllocAsync
            | Api::MemAllocFromPoolAsync => {
                if guarded_thread() || ctx_handle == 0 {
                    return;
                }
                let ctx = self.ctx(ctx_handle);
                if enter {
                    // SAFETY: the parameters of this allocation entry point.
                    let (_, size) = unsafe { allocation_of(api, params, false) };
                    self.relieve(&ctx, size);
                    return;
                }
                let status = match result() {
                    // SAFETY: `cb` is this allocation call's exit callback.
                    CUDA_ERROR_OUT_OF_MEMORY => unsafe { self.after_oom(&ctx, api, cb) },
                    status => status,
                };
                // Read after a retry, which writes the out-parameters (the pitch too).
                // SAFETY: the parameters of this allocation entry point, at its exit.
                let (out, size) = unsafe { allocation_of(api, params, true) };
                match status {
                    CUDA_SUCCESS if !out.is_null() => {
                        // SAFETY: the driver wrote the new address.
                        let base = unsafe { *out } as usize;
                        if api == Api::MemAllocManaged {
                            // The host writes it without an API call, at any time: never
                            // captured, restored or fingerprinted (so no carried fingerprint
                            // describes it); kernels given it are not replayed.
                            self.host_memory.write().insert(
                                base,
                                size,
                                memory::Kind::Managed,
                                ctx_handle,
                            );
                        } else if base != 0 && size != 0 {
                            self.inventory.record(
                                base,
                                size,
                                crate::AgentId(ctx_handle as u64),
                                Origin::Pool,
                            );
                        }
                        // The context's gates are set up now (once), not inside its first
                        // launch, which would wait for their self-test.
                        if api == Api::MemAlloc {
                            window::prepare_gates(self, &ctx);
                        }
                    }
                    _ => {}
                }
            }
            Api::MemCreate => {
                if guarded_thread() || ctx_handle == 0 {
                    return;
                }
                let ctx = self.ctx(ctx_handle);
                // SAFETY: cuMemCreate's parameters.
                let p = unsafe { *params.cast::<cuMemCreate_params>() };
                if enter {
                    // Physical memory, device or host: relieving the arena only acts when the
                    // device is short of the request.
                    self.relieve(&ctx, p.size);
                    return;
                }
                let status = match result() {
                    // SAFETY: `cb` is cuMemCreate's exit callback.
                    CUDA_ERROR_OUT_OF_MEMORY => unsafe { self.after_oom(&ctx, api, cb) },
                    status => status,
                };
                match status {
                    CUDA_SUCCESS if !p.handle.is_null() && !p.prop.is_null() => {
                        // SAFETY: the allocation's properties, as the application passed them;
                        // the driver wrote the handle.
                        let (location, handle) = unsafe {
                            ((*p.prop.cast::<CUmemAllocationProp>()).location, *p.handle)
                        };
                        if matches!(
                            location.type_,
                            CU_MEM_LOCATION_TYPE_HOST
                                | CU_MEM_LOCATION_TYPE_HOST_NUMA
                                | CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT
                        ) {
                            self.host_handles.lock().add(handle);
                        }
                    }
                    _ => {}
                }
            }
            Api::MemFree | Api::MemFreeAsync if enter && !guarded_thread() => {
                // SAFETY: both parameter structs start with the device pointer.
                let ptr = unsafe { *params.cast::<CUdeviceptr>() } as usize;
                if ptr != 0 {
                    // Waits while a snapshot copy uses the memory.
                    self.inventory.remove(ptr);
                    self.host_memory
                        .write()
                        .remove(ptr, &[memory::Kind::Managed]);
                    self.foreign_memory
                        .write()
                        .remove(ptr, &[memory::Kind::IpcExport, memory::Kind::PoolImport]);
                    if ctx_handle != 0 {
                        let stream = (api == Api::MemFreeAsync).then(|| {
                            // SAFETY: cuMemFreeAsync's parameters.
                            unsafe { (*params.cast::<cuMemFreeAsync_params>()).hStream }
                        });
                        window::order_free_after_late_copies(self, &self.ctx(ctx_handle), stream);
                    }
                }
            }
            Api::MemMap if !enter && !guarded_thread() && result() == CUDA_SUCCESS => {
                // SAFETY: cuMemMap's parameters.
                let p = unsafe { *params.cast::<cuMemMap_params>() };
                if self.imported_handles.lock().contains(p.handle) {
                    // Another process's or GPU's memory, not this context's own.
                    self.foreign_memory.write().insert(
                        p.ptr as usize,
                        p.size,
                        memory::Kind::ImportedMapping,
                        ctx_handle,
                    );
                } else if self.host_handles.lock().contains(p.handle) {
                    // Host memory: the application's host code may write it (once it grants
                    // the CPU access), so it is never captured, restored or watched.
                    self.host_memory.write().insert(
                        p.ptr as usize,
                        p.size,
                        memory::Kind::HostMapping,
                        ctx_handle,
                    );
                } else if ctx_handle != 0 {
                    self.inventory.record(
                        p.ptr as usize,
                        p.size,
                        crate::AgentId(ctx_handle as u64),
                        Origin::VmemMapping,
                    );
                    self.mappings
                        .lock()
                        .insert(p.ptr as usize, (p.handle, p.size));
                }
            }
            Api::MemUnmap if enter && !guarded_thread() => {
                // SAFETY: cuMemUnmap's parameters.
                let p = unsafe { *params.cast::<cuMemUnmap_params>() };
                self.inventory.remove_range(p.ptr as usize, p.size);
                self.foreign_memory
                    .write()
                    .remove_range(p.ptr as usize, p.size);
                self.host_memory
                    .write()
                    .remove_range(p.ptr as usize, p.size);
                self.mappings.lock().remove(&(p.ptr as usize));
                // A late copy of ours on the range would fault once it is unmapped.
                if ctx_handle != 0 {
                    window::order_free_after_late_copies(self, &self.ctx(ctx_handle), None);
                }
            }
            Api::ForeignHandle | Api::MemRetain => {
                if enter || guarded_thread() || result() != CUDA_SUCCESS {
                    return;
                }
                // SAFETY: cuMemImportFromShareableHandle's, cuMulticastCreate's and
                // cuMemRetainAllocationHandle's parameters start with the handle's
                // out-pointer.
                let out = unsafe { *params.cast::<*mut CUmemGenericAllocationHandle>() };
                if out.is_null() {
                    return;
                }
                // SAFETY: the driver wrote the handle.
                let handle = unsafe { *out };
                let (foreign, host) = match api {
                    Api::MemRetain => {
                        // SAFETY: cuMemRetainAllocationHandle's parameters.
                        let p = unsafe { *params.cast::<cuMemRetainAllocationHandle_params>() };
                        let at = p.addr as usize;
                        (
                            self.foreign_memory.read().containing(at).is_some(),
                            self.host_memory.read().containing(at)
                                == Some(memory::Kind::HostMapping),
                        )
                    }
                    _ => (true, false),
                };
                if foreign {
                    self.imported_handles.lock().add(handle);
                }
                if host {
                    self.host_handles.lock().add(handle);
                }
            }
            Api::MemRelease if enter && !guarded_thread() => {
                // SAFETY: cuMemRelease's parameters.
                let p = unsafe { *params.cast::<cuMemRelease_params>() };
                self.imported_handles.lock().release(p.handle);
                self.host_handles.lock().release(p.handle);
            }
            Api::SurfCreate => {
                if enter || guarded_thread() || result() != CUDA_SUCCESS {
                    return;
                }
                // SAFETY: cuSurfObjectCreate's parameters, at its successful exit.
                let p = unsafe { *params.cast::<cuSurfObjectCreate_params>() };
                if !p.pSurfObject.is_null() {
                    // SAFETY: the driver wrote the new object there.
                    let surface = unsafe { *p.pSurfObject };
                    self.surfaces.write().insert(surface, ctx_handle);
                }
            }
            Api::SurfDestroy if enter && !guarded_thread() => {
                // SAFETY: cuSurfObjectDestroy's parameters.
                let p = unsafe { *params.cast::<cuSurfObjectDestroy_params>() };
                self.surfaces.write().remove(&p.surfObject);
            }
            Api::IpcOpen => {
                if enter || guarded_thread() || result() != CUDA_SUCCESS {
                    return;
                }
                // SAFETY: both forms' parameters (same shape).
                let p = unsafe { *params.cast::<cuIpcOpenMemHandle_v2_params>() };
                if p.pdptr.is_null() {
                    return;
                }
                // SAFETY: the driver wrote the address of the import.
                let base = unsafe { *p.pdptr } as usize;
                let size = self.extent_of(base);
                self.foreign_memory
                    .write()
                    .insert(base, size, memory::Kind::IpcImport, ctx_handle);
            }
            Api::IpcClose if enter && !guarded_thread() => {
                // SAFETY: cuIpcCloseMemHandle's parameters.
                let p = unsafe { *params.cast::<cuIpcCloseMemHandle_params>() };
                self.foreign_memory
                    .write()
                    .remove(p.dptr as usize, &[memory::Kind::IpcImport]);
            }
            Api::IpcExport => {
                if enter || guarded_thread() || result() != CUDA_SUCCESS {
                    return;
                }
                // SAFETY: cuIpcGetMemHandle's or cuMemPoolExportPointer's parameters (both
                // hold an out-pointer, then the device pointer), at a successful exit.
                let p = unsafe { *params.cast::<cuIpcGetMemHandle_params>() };
                let base = p.dptr as usize;
                // Another process may open and write it from now on: out of the inventory
                // (waits for snapshot copies using it), into the foreign ranges.
                let size = match self.inventory.remove(base) {
                    Some(a) => a.size,
                    None => self.extent_of(base),
                };
                self.foreign_memory
                    .write()
                    .insert(base, size, memory::Kind::IpcExport, ctx_handle);
            }
            Api::PoolImport => {
                if enter || guarded_thread() || result() != CUDA_SUCCESS {
                    return;
                }
                // SAFETY: cuMemPoolImportPointer's parameters, at its successful exit.
                let p = unsafe { *params.cast::<cuMemPoolImportPointer_params>() };
                if p.ptr_out.is_null() {
                    return;
                }
                // SAFETY: the driver wrote the address of the import.
                let base = unsafe { *p.ptr_out } as usize;
                let size = self.extent_of(base);
                self.foreign_memory.write().insert(
                    base,
                    size,
                    memory::Kind::PoolImport,
                    ctx_handle,
                );
            }
            Api::RangeExport => {
                if enter || guarded_thread() || result() != CUDA_SUCCESS {
                    return;
                }
                // SAFETY: cuMemGetHandleForAddressRange's parameters, at its successful exit.
                let p = unsafe { *params.cast::<cuMemGetHandleForAddressRange_params>() };
                let (base, size) = (p.dptr as usize, p.size.max(1));
                // Whatever imports the descriptor (a NIC, another process or device) may write
                // the allocations the range touches, whole.
                let taken = self.inventory.take_range(base, size);
                let mut foreign = self.foreign_memory.write();
                if taken.is_empty() {
                    foreign.insert(base, size, memory::Kind::IpcExport, ctx_handle);
                }
                for a in taken {
                    foreign.insert(a.base, a.size, memory::Kind::IpcExport, ctx_handle);
                }
            }
            Api::HandleExport => {
                if enter || guarded_thread() || result() != CUDA_SUCCESS {
                    return;
                }
                // SAFETY: cuMemExportToShareableHandle's parameters, at its successful exit.
                let p = unsafe { *params.cast::<cuMemExportToShareableHandle_params>() };
                self.imported_handles.lock().add(p.handle);
                // Its mappings so far: another process may map and write the memory now.
                let mapped: Vec<(usize, usize)> = self
                    .mappings
                    .lock()
                    .iter()
                    .filter(|(_, (h, _))| *h == p.handle)
                    .map(|(va, (_, size))| (*va, *size))
                    .collect();
                for (va, size) in mapped {
                    self.inventory.remove_range(va, size);
                    self.foreign_memory.write().insert(
                        va,
                        size,
                        memory::Kind::ImportedMapping,
                        ctx_handle,
                    );
                }
            }
            Api::HostAlloc { register, .. } => {
                if enter || guarded_thread() || result() != CUDA_SUCCESS {
                    return;
                }
                // SAFETY: the three parameter structs start with the pointer (or where the
                // driver wrote it) and the size.
                let p = unsafe { *params.cast::<cuMemAllocHost_v2_params>() };
                let base = if register {
                    p.pp as usize
                } else if p.pp.is_null() {
                    0
                } else {
                    // SAFETY: the driver wrote the new allocation's address.
                    unsafe { *p.pp as usize }
                };
                let kind = if register {
                    memory::Kind::Registered
                } else {
                    memory::Kind::Pinned
                };
                self.host_memory
                    .write()
                    .insert(base, p.bytesize, kind, ctx_handle);
            }
            Api::HostFree if enter && !guarded_thread() => {
                // SAFETY: both parameter structs are the pointer.
                let p = unsafe { (*params.cast::<cuMemFreeHost_params>()).p } as usize;
                self.host_memory
                    .write()
                    .remove(p, &[memory::Kind::Pinned, memory::Kind::Registered]);
            }
            _ => {}
        }
    }

    /// Whether `api` is a plain device allocation (`cuMemAlloc`, `cuMemAllocPitch`) in
    /// context `ctx_handle` that the snapshot arenas leave room for: nothing to release or
    /// wait for ([`relieve`](Self::relieve)) — no arena of the process holds device memory,
    /// or the device keeps its reserve after the allocation. Another context's arena counts
    /// too: `relieve` would free it, on this thread, while a counter run may hold it.
    ///
    /// # Safety
    /// `params` are the parameters of `api`'s enter callback.
    pub(super) unsafe fn allocation_finds_room(
        &self,
        api: Api,
        ctx_handle: usize,
        params: *const c_void,
    ) -> bool {
        if !matches!(api, Api::MemAlloc | Api::MemAllocPitch) || ctx_handle == 0 {
            return false;
        }
        // SAFETY: caller contract.
        let (_, size) = unsafe { allocation_of(api, params, false) };
        let ctx = self.ctx(ctx_handle);
        let holding = ctx.arena.lock().device_bytes() > 0
            || self.contexts.read().values().any(|o| {
                o.handle != ctx.handle && o.arena.try_lock().is_some_and(|a| a.device_bytes() > 0)
            });
        if !holding {
            return true;
        }
        let mem = window::ArenaMemory { drv: &self.drv };
        let _g = Guard::new();
        !crate::engine::arena::device_short(&mem, size)
    }

    /// An allocation that passed its thread's run by at its entry
    /// ([`allocation_finds_room`](Self::allocation_finds_room)) and must wait for a window
    /// after all: it ends the run now (counted as a call between launches, so the run stops
    /// waiting for a next launch) and, while a counter run holds the thread, waits for it,
    /// serving its profiler calls — the window it would otherwise wait for needs them.
    fn end_own_run(&self, call: &dyn Fn() -> String) {
        if self.settings.run > 1 {
            self.breaks.fetch_add(OTHER_CALL, Ordering::AcqRel);
        }
        window::wait_while_held(&self.settings, call);
    }

    /// Before an application allocation: releases an idle arena that would leave the
    /// allocation short of memory.
    fn relieve(&self, ctx: &Ctx, request: usize) {
        let mem = window::ArenaMemory { drv: &self.drv };
        let _g = Guard::new();
        let (short, in_window) = {
            let arena = ctx.arena.lock();
            (arena.short_for(&mem, request), arena.in_window())
        };
        // Other contexts' arenas on the device, where they hold memory the request needs.
        self.release_other_arenas(ctx, Some(request));
        if !short {
            return;
        }
        // A window uses the arena: the allocation waits for it to end (the reader side,
        // bounded by the lock deadline, after which the window stops after its current pass),
        // so that it finds the memory the window held.
        let waited = in_window;
        if waited {
            // The thread's own counter run first (an allocation that found room when its call
            // began passed it by, and memory may have run short since): its window needs this
            // thread to serve its profiler calls before it can end.
            self.end_own_run(&|| "an allocation short of memory".into());
            ctx.lock.hold_outside_window(self.settings.lock);
        }
        // On the application's thread, inside its allocation call (which may be captured).
        let freed = self.drv.relaxed(|| ctx.arena.lock().relieve(&mem, request));
        if waited {
            // SAFETY: held just above.
            unsafe { ctx.lock.release_held() };
        }
        if freed > 0 {
            tracing::info!(
                bytes = freed,
                "snapshot arena released for an application allocation"
            );
        }
    }

    /// The size of the allocation starting at `base` (an IPC import, in the current context):
    /// `cuMemGetAddressRange`, or 1 where the driver does not say (only pointers to its first
    /// byte are then recognised).
    fn extent_of(&self, base: usize) -> usize {
        let Some(range) = self.drv.mem_get_address_range else {
            return 1;
        };
        let (mut b, mut size): (CUdeviceptr, usize) = (0, 0);
        let _g = Guard::new();
        // SAFETY: plain out-parameters; `base` is a live import of the current context.
        let r = unsafe { range(&mut b, &mut size, base as CUdeviceptr) };
        if r == CUDA_SUCCESS && b as usize <= base && size > 0 {
            (b as usize).saturating_add(size).saturating_sub(base)
        } else {
            tracing::debug!(status = %api::error_name(&self.drv, r), "the extent of an IPC import is unknown");
            1
        }
    }

    /// After an application allocation failed for lack of memory: releases the snapshot arena
    /// (once a window that uses it has ended: the reader side, bounded by the lock deadline)
    /// and, where it held device memory, makes the allocation again with the application's own
    /// arguments. Returns the status the application gets: written into the call's
    /// `functionReturnValue`, which CUPTI hands back to the caller, so the retry's success is
    /// the application's (`gpu.sh retval-probe` checks that on a GPU, for the driver's and the
    /// runtime's allocations).
    ///
    /// # Safety
    /// `cb` is the exit callback's data of allocation call `api` (its parameters, its return
    /// value).
    unsafe fn after_oom(&self, ctx: &Ctx, api: Api, cb: &CUpti_CallbackData) -> CUresult {
        // A counter run holding this thread ends first (the allocation may have passed it by
        // at its entry): waiting below for a window that needs this thread would not end.
        self.end_own_run(&|| function_name(cb));
        let mem = window::ArenaMemory { drv: &self.drv };
        let _g = Guard::new();
        let in_window = ctx.arena.lock().in_window();
        let held = in_window.then(|| ctx.lock.read_outside_window(self.settings.lock));
        // As in `relieve`: the application's thread, inside its allocation call.
        let mut freed = self.drv.relaxed(|| ctx.arena.lock().release_now(&mem));
        drop(held);
        if freed == 0 {
            freed = self.release_other_arenas(ctx, None);
        }
        if freed == 0 {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        // SAFETY: caller contract.
        let retried = unsafe { self.retry_allocation(api, cb) };
        let status = retried.unwrap_or(CUDA_ERROR_OUT_OF_MEMORY);
        if let Some(status) = retried
            && !cb.functionReturnValue.is_null()
        {
            // SAFETY: CUPTI's pointer to the call's CUresult, valid in its exit callback.
            unsafe { *cb.functionReturnValue.cast::<CUresult>() = status };
        }
        match retried {
            Some(CUDA_SUCCESS) => tracing::warn!(
                bytes = freed,
                call = %function_name(cb),
                "an application allocation failed while the snapshot arena held device memory; \
                 the arena was released and the allocation made again, successfully"
            ),
            Some(r) => tracing::warn!(
                bytes = freed,
                call = %function_name(cb),
                status = %api::error_name(&self.drv, r),
                "an application allocation failed while the snapshot arena held device memory; \
                 the arena was released and the allocation made again, which failed too"
            ),
            None => tracing::warn!(
                bytes = freed,
                call = %function_name(cb),
                "an application allocation failed while the snapshot arena held device memory; \
                 the arena was released (this call is not made again: a retry finds the memory)"
            ),
        }
        status
    }

    /// Releases the idle snapshot arenas of the process's other contexts on `ctx`'s device,
    /// each freed with its own context current (and `ctx` current again after): an allocation
    /// in one context can be short of memory another context's arena holds. With `request`,
    /// only where an allocation of that many bytes would leave less than the reserve free
    /// (asked of the driver only when another context's arena holds device memory: nothing
    /// otherwise); without, whatever the device has free (the allocation failed). An arena a
    /// window uses keeps its memory (no wait for another context's window); a context whose
    /// device is not known yet (it never launched) holds no arena. Returns the device bytes
    /// released.
    fn release_other_arenas(&self, ctx: &Ctx, request: Option<usize>) -> usize {
        let holding = |o: &Ctx| o.arena.try_lock().is_some_and(|a| a.device_bytes() > 0);
        let candidates: Vec<Arc<Ctx>> = self
            .contexts
            .read()
            .values()
            .filter(|o| o.handle != ctx.handle && holding(o))
            .cloned()
            .collect();
        if candidates.is_empty() {
            return 0;
        }
        let mem = window::ArenaMemory { drv: &self.drv };
        let _g = Guard::new();
        if request.is_some_and(|r| !crate::engine::arena::device_short(&mem, r)) {
            return 0;
        }
        let device = self.ordinal(ctx);
        let others = candidates
            .into_iter()
            .filter(|o| o.ordinal.load(Ordering::Relaxed) == device);
        let mut freed = 0;
        for other in others {
            let Some(mut arena) = other.arena.try_lock() else {
                continue;
            };
            if arena.device_bytes() == 0 || arena.in_window() {
                continue;
            }
            // SAFETY: a live context of the process (its destruction removes it from the
            // map under the write lock, and its arena with it); `ctx` is made current again
            // below.
            if unsafe { (self.drv.ctx_set_current)(other.handle as CUcontext) } != CUDA_SUCCESS {
                continue;
            }
            // A free may synchronise: with another window's gate closed it waits for that
            // window (bounded by its deadlines; its companion thread opens the gate and waits
            // for nothing of this thread, whose own counter run, if any, ended at the call's
            // entry). Unlike the arena's trim after a window, which can wait for a quiet
            // moment, the application's allocation needs the memory now.
            let released = self.drv.relaxed(|| arena.release_now(&mem));
            // SAFETY: the application's context of this call, current when the call began.
            unsafe { (self.drv.ctx_set_current)(ctx.handle as CUcontext) };
            if released > 0 {
                tracing::info!(
                    bytes = released,
                    "another context's snapshot arena on the device was released for an \
                     application allocation"
                );
            }
            freed += released;
        }
        freed
    }

    /// Makes the failed allocation `api` again with the parameters of its exit callback `cb`
    /// (the out-parameters are the application's, written on success). `None` where that
    /// entry point is not retried: managed memory, an entry point the driver does not offer,
    /// or an asynchronous allocation on a capturing stream (the retry would add to the graph).
    ///
    /// # Safety
    /// As [`after_oom`](Self::after_oom).
    unsafe fn retry_allocation(&self, api: Api, cb: &CUpti_CallbackData) -> Option<CUresult> {
        let params = cb.functionParams;
        let ptsz = function_name(cb).ends_with("_ptsz");
        // The `_ptsz` entry points' stream 0 is the thread's own default stream.
        let stream = |s: CUstream| {
            if ptsz && s.is_null() {
                CU_STREAM_PER_THREAD as CUstream
            } else {
                s
            }
        };
        let capturing = |s: CUstream| {
            let mut status: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
            // SAFETY: a plain out-parameter; `s` is the application's stream of this call.
            let r = unsafe { (self.drv.stream_is_capturing)(s, &mut status) };
            r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE
        };
        // SAFETY: caller contract — in each arm `params` are that entry point's parameters,
        // whose out-pointers the application handed the driver.
        unsafe {
            match api {
                Api::MemAlloc => {
                    let p = *params.cast::<cuMemAlloc_v2_params>();
                    Some((self.drv.mem_alloc)(p.dptr, p.bytesize))
                }
                Api::MemAllocPitch => {
                    let p = *params.cast::<cuMemAllocPitch_v2_params>();
                    let f = self.drv.mem_alloc_pitch?;
                    Some(f(
                        p.dptr,
                        p.pPitch,
                        p.WidthInBytes,
                        p.Height,
                        p.ElementSizeBytes,
                    ))
                }
                Api::MemAllocAsync => {
                    let p = *params.cast::<cuMemAllocAsync_params>();
                    let (f, s) = (self.drv.mem_alloc_async?, stream(p.hStream));
                    (!capturing(s)).then(|| f(p.dptr, p.bytesize, s))
                }
                Api::MemAllocFromPoolAsync => {
                    let p = *params.cast::<cuMemAllocFromPoolAsync_params>();
                    let (f, s) = (self.drv.mem_alloc_from_pool_async?, stream(p.hStream));
                    (!capturing(s)).then(|| f(p.dptr, p.bytesize, p.pool, s))
                }
                Api::MemCreate => {
                    let p = *params.cast::<cuMemCreate_params>();
                    Some((self.drv.mem_create?)(p.handle, p.size, p.prop, p.flags))
                }
                _ => None,
            }
        }
    }
}

/// The out-pointer and size of an allocation call (`exit`: the call has returned, so its
/// outputs are written).
///
/// # Safety
/// `params` are the parameters of `api`.
unsafe fn allocation_of(api: Api, params: *const c_void, exit: bool) -> (*mut CUdeviceptr, usize) {
    // SAFETY: caller contract; each arm reads that entry point's parameter struct.
    unsafe {
        match api {
            Api::MemAlloc => {
                let p = *params.cast::<cuMemAlloc_v2_params>();
                (p.dptr, p.bytesize)
            }
            Api::MemAllocPitch => {
                let p = *params.cast::<cuMemAllocPitch_v2_params>();
                // The pitch is known only at exit; before it, the unpadded size.
                let pitch = if exit && !p.pPitch.is_null() {
                    *p.pPitch
                } else {
                    0
                };
                (p.dptr, pitch.max(p.WidthInBytes).saturating_mul(p.Height))
            }
            Api::MemAllocManaged => {
                let p = *params.cast::<cuMemAllocManaged_params>();
                (p.dptr, p.bytesize)
            }
            Api::MemAllocAsync => {
                let p = *params.cast::<cuMemAllocAsync_params>();
                (p.dptr, p.bytesize)
            }
            Api::MemAllocFromPoolAsync => {
                let p = *params.cast::<cuMemAllocFromPoolAsync_params>();
                (p.dptr, p.bytesize)
            }
            _ => (std::ptr::null_mut(), 0),
        }
    }
}
