//! Kernel handles: what the application obtained (CUfunction or CUkernel, and from which
//! module), and the facts of a launched handle the windows need — its name, memory sizes,
//! module and parameter layout — asked of the driver once per handle and context.

use super::*;

/// Cached facts about a launched kernel handle in one context.
#[derive(Clone)]
pub(crate) struct KernelFacts {
    pub(crate) name: Option<Arc<str>>,
    pub(crate) static_shared: u32,
    pub(crate) local: u32,
    /// The kernel's module, when the handle is known (`None`: its `__device__` variables
    /// cannot be looked up).
    pub(crate) module: Option<usize>,
    /// The kernel's `CUfunction` (a `CUkernel`'s, in this context), when the handle is known.
    pub(crate) function: Option<usize>,
    /// Offset and size of each parameter (`None`: unknown — no handle to ask, or a driver
    /// before CUDA 12.4).
    pub(crate) params: Option<Arc<[(usize, usize)]>>,
}

/// Kernel handles the application obtained, by kind. A launch takes either a `CUfunction` or
/// a `CUkernel`; the driver's `cuFunc*` and `cuKernel*` queries must each be given their own
/// kind (a handle of the other kind can crash the driver), so a handle seen nowhere is never
/// queried.
#[derive(Default)]
pub(crate) struct Handles {
    pub(crate) kernels: std::collections::HashSet<usize>,
    /// `CUfunction`s, with the module they came from (`cuModuleGetFunction`,
    /// `cuModuleEnumerateFunctions`; 0: not known, as for `cuKernelGetFunction`).
    pub(crate) functions: HashMap<usize, usize>,
}

impl Handles {
    /// Forgets the functions of module `module` (it is being unloaded: the driver may reuse
    /// their handles); returns them.
    pub(super) fn forget_module(&mut self, module: usize) -> Vec<usize> {
        let gone: Vec<usize> = self
            .functions
            .iter()
            .filter(|(_, m)| **m == module)
            .map(|(f, _)| *f)
            .collect();
        for f in &gone {
            self.functions.remove(f);
        }
        gone
    }
}

/// Decides on the launching thread whether a launch enters the replay window (the engine's
/// [`Engine::decide`], or a test's own policy): `None`: it ran once through the
/// [`Ordinary`] (skipped, or declined before the window — its outcome is recorded); `Some`:
/// the window, to run against the launch's [`ReplayTarget`] on the companion thread.
pub(crate) type Decider =
    Box<dyn Fn(&DispatchInfo, &mut dyn Ordinary) -> Option<WindowRun> + Send + Sync>;

impl Backend {
    /// Name, static shared memory, local memory and module of a kernel handle launched in
    /// `ctx` (current on this thread), cached.
    pub(crate) fn kernel_facts(
        &self,
        ctx: usize,
        f: CUfunction,
        symbol: *const std::ffi::c_char,
    ) -> KernelFacts {
        let key = (f as usize, ctx);
        if let Some(k) = self.kernels.read().get(&key) {
            return k.clone();
        }
        let name = (!symbol.is_null())
            // SAFETY: CUPTI's symbol name, NUL-terminated, valid during the callback.
            .then(|| unsafe { CStr::from_ptr(symbol) }.to_string_lossy().into());
        // Asking for a kernel's function may load its module, which must not overlap a
        // replay window ([`gate::Behind`]).
        let _loading = (!guarded_thread()).then(|| {
            gate::BEHIND.begin_load(
                self.settings.lock,
                self.settings.pass.saturating_add(self.settings.late_pass),
            )
        });
        let (is_kernel, is_function) = {
            let h = self.handles.read();
            (
                h.kernels.contains(&(f as usize)),
                h.functions.contains_key(&(f as usize)),
            )
        };
        let _g = Guard::new();
        let function = if is_kernel {
            let mut g: CUfunction = std::ptr::null_mut();
            // SAFETY: `f` is a CUkernel the application obtained; the context is current.
            let r = unsafe { (self.drv.kernel_get_function)(&mut g, f.cast()) };
            (r == CUDA_SUCCESS && !g.is_null()).then_some(g)
        } else if is_function {
            Some(f)
        } else {
            // A handle obtained where the callbacks do not show it (cuFFT's kernels come
            // through its own static runtime). A launch takes a CUfunction or a CUkernel and
            // the driver tells them apart, so it is asked: as a kernel first (its function in
            // this context), then as a function (its module).
            let mut g: CUfunction = std::ptr::null_mut();
            // SAFETY: `f` is the handle of a launch being made in this context; a handle that
            // is no CUkernel is an error of this call.
            let r = unsafe { (self.drv.kernel_get_function)(&mut g, f.cast()) };
            let as_function = || {
                let mut m: CUmodule = std::ptr::null_mut();
                // SAFETY: as above; a handle that is no CUfunction is an error of this call.
                let r = unsafe { (self.drv.func_get_module)(&mut m, f) };
                r == CUDA_SUCCESS && !m.is_null()
            };
            if r == CUDA_SUCCESS && !g.is_null() {
                Some(g)
            } else if as_function() {
                Some(f)
            } else {
                warn_once(&UNKNOWN_HANDLE, || {
                    tracing::warn!(
                        kernel = name.as_deref().unwrap_or("<unknown>"),
                        "a kernel was launched through a handle the application never obtained \
                         and the driver answers for neither as a kernel nor as a function: \
                         its module cannot be queried"
                    )
                });
                None
            }
        };
        let attr = |func: CUfunction, a: CUfunction_attribute| {
            let mut v: std::ffi::c_int = 0;
            // SAFETY: a plain out-parameter; `func` is a CUfunction of this context.
            let r = unsafe { (self.drv.func_get_attribute)(&mut v, a, func) };
            if r == CUDA_SUCCESS {
                v.max(0) as u32
            } else {
                0
            }
        };
        let module = function.and_then(|func| {
            let mut m: CUmodule = std::ptr::null_mut();
            // SAFETY: a plain out-parameter; `func` is a CUfunction of this context.
            let r = unsafe { (self.drv.func_get_module)(&mut m, func) };
            (r == CUDA_SUCCESS && !m.is_null()).then_some(m as usize)
        });
        let params = function.and_then(|func| {
            let get = self.drv.func_get_param_info?;
            let mut out = Vec::new();
            loop {
                let (mut offset, mut size) = (0usize, 0usize);
                // SAFETY: plain out-parameters; `func` is a CUfunction of this context; an
                // index past the last parameter is an error, not undefined.
                let r = unsafe { get(func, out.len(), &mut offset, &mut size) };
                if r != CUDA_SUCCESS || out.len() >= 4096 {
                    break;
                }
                out.push((offset, size));
            }
            Some(Arc::from(out))
        });
        let facts = KernelFacts {
            name,
            params,
            static_shared: function.map_or(0, |g| attr(g, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)),
            local: function.map_or(0, |g| attr(g, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)),
            module,
            function: function.map(|g| g as usize),
        };
        let mut kernels = self.kernels.write();
        if kernels.len() > 65_536 {
            kernels.clear();
        }
        kernels.insert(key, facts.clone());
        facts
    }

    /// Records kernel handles an application call returned.
    ///
    /// # Safety
    /// `params` are the parameters of `api`, whose exit callback this is.
    pub(super) unsafe fn record_handles(&self, api: Api, params: *const c_void) {
        let mut found: Vec<usize> = Vec::new();
        let mut module = 0usize;
        // SAFETY: caller contract; each arm reads that entry point's parameters and the
        // outputs the driver wrote.
        unsafe {
            let one = |p: *const usize| (!p.is_null()).then(|| *p).filter(|h| *h != 0);
            let many = |p: *const usize, n: u32| {
                if p.is_null() {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(p, n as usize).to_vec()
                }
            };
            match api {
                Api::LibraryGetKernel => {
                    let p = *params.cast::<cuLibraryGetKernel_params>();
                    found.extend(one(p.pKernel.cast()));
                }
                Api::LibraryEnumerateKernels => {
                    let p = *params.cast::<cuLibraryEnumerateKernels_params>();
                    found = many(p.kernels.cast(), p.numKernels);
                }
                Api::KernelGetFunction => {
                    let p = *params.cast::<cuKernelGetFunction_params>();
                    found.extend(one(p.pFunc.cast()));
                }
                Api::ModuleGetFunction => {
                    let p = *params.cast::<cuModuleGetFunction_params>();
                    found.extend(one(p.hfunc.cast()));
                    module = p.hmod as usize;
                }
                Api::ModuleEnumerateFunctions => {
                    let p = *params.cast::<cuModuleEnumerateFunctions_params>();
                    found = many(p.functions.cast(), p.numFunctions);
                    module = p.r#mod as usize;
                }
                _ => {}
            }
        }
        found.retain(|h| *h != 0);
        if found.is_empty() {
            return;
        }
        let kernels = matches!(api, Api::LibraryGetKernel | Api::LibraryEnumerateKernels);
        let mut h = self.handles.write();
        if kernels {
            h.kernels.extend(found);
        } else {
            h.functions.extend(found.into_iter().map(|f| (f, module)));
        }
    }

    /// A module is being unloaded: forgets what is keyed by handles the driver may reuse.
    /// Where the unload is the application's `cuModuleUnload` on this thread (`unloading`),
    /// only that module's functions, their facts and its variable scan go; otherwise (a
    /// library's modules, the runtime's own unloads: CUPTI names the module by its id, not its
    /// handle) every handle cache goes.
    pub(super) fn forget_unloaded(&self, unloading: Option<usize>) {
        let Some(module) = unloading.filter(|m| *m != 0) else {
            self.kernels.write().clear();
            *self.handles.write() = Handles::default();
            for ctx in self.contexts.read().values() {
                ctx.modules.lock().clear();
            }
            return;
        };
        let gone = self.handles.write().forget_module(module);
        self.kernels.write().retain(|(f, _), facts| {
            facts.module != Some(module)
                && !gone.contains(f)
                && !facts.function.is_some_and(|g| gone.contains(&g))
        });
        for ctx in self.contexts.read().values() {
            ctx.modules.lock().remove(&module);
        }
    }
}
