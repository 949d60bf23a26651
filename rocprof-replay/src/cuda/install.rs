//! Installing the backend into a process (CUPTI subscription, the callback, the kernel clock)
//! and taking it down (shutdown, the wait for windows at exit, a forked child).

use super::*;

static BACKEND: OnceLock<Backend> = OnceLock::new();

/// The callback registered with CUPTI; `userdata` is the backend.
pub(crate) unsafe extern "C" fn callback(
    userdata: *mut c_void,
    domain: CUpti_CallbackDomain,
    cbid: CUpti_CallbackId,
    cbdata: *const c_void,
) {
    if userdata.is_null() {
        return;
    }
    // SAFETY: `userdata` is the &'static Backend given to cuptiSubscribe.
    let be: &'static Backend = unsafe { &*userdata.cast::<Backend>() };
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: CUPTI's data for this callback.
        unsafe { be.on_callback(domain, cbid, cbdata) }
    }));
    if r.is_err() {
        tracing::error!("internal error (panic) in a CUPTI callback; continuing without it");
    }
}

/// Why the CUDA backend did not attach.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InstallError {
    #[error(transparent)]
    Load(#[from] api::LoadError),
    #[error(
        "CUPTI already has a subscriber in this process (a profiler such as Nsight Systems or \
         Nsight Compute, a debugger, or the application's own CUPTI use)"
    )]
    Taken,
    #[error("{0}")]
    Cupti(String),
    #[error("this library's CUDA backend is already installed")]
    Twice,
}

/// With `ROCPROF_REPLAY_DEBUG_SIGNALS=1`, a fatal signal (a crash in the driver, CUPTI or this
/// library) first prints the crashing thread's backtrace on stderr, then takes its default
/// action. A debugging aid for machines without a debugger; off by default.
pub(super) fn report_fatal_signals() {
    if std::env::var_os("ROCPROF_REPLAY_DEBUG_SIGNALS").is_none_or(|v| v != "1") {
        return;
    }
    extern "C" fn on_fatal(sig: libc::c_int) {
        let bt = std::backtrace::Backtrace::force_capture();
        eprintln!(
            "rocprof-replay: fatal signal {sig} on thread {:?}\n{bt}",
            std::thread::current().name()
        );
        // SAFETY: restores the default action and re-raises: the process ends as it would
        // have without the handler.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
    for sig in [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGABRT,
    ] {
        // SAFETY: installs a handler for a fatal signal; see above.
        unsafe {
            libc::signal(
                sig,
                on_fatal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
}

/// Attaches the CUDA backend to the engine: loads the driver and CUPTI, subscribes to the
/// driver callbacks and resource events.
pub(crate) fn install(engine: &'static Engine) -> Result<(), InstallError> {
    report_fatal_signals();
    tracing::debug!("loading the CUDA driver and CUPTI");
    let drv = api::load_driver()?;
    let cupti = api::load_cupti()?;
    // Resolve callback ids by name: CUPTI versions number them differently.
    let mut names = Vec::new();
    for id in 1..4096u32 {
        let mut p: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: a plain out-parameter.
        let r = unsafe { (cupti.get_callback_name)(CUPTI_CB_DOMAIN_DRIVER_API, id, &mut p) };
        if r == CUPTI_SUCCESS && !p.is_null() {
            // SAFETY: CUPTI's static NUL-terminated name.
            names.push((
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned(),
                id,
            ));
        }
    }
    tracing::debug!(names = names.len(), "CUPTI callback names read");
    let mut ids = Ids::from_names(names.iter().map(|(n, i)| (n.as_str(), *i)));
    if !ids.has_launches() {
        tracing::warn!("CUPTI did not name its callbacks; using CUPTI 13.0's callback ids");
        ids = Ids::from_names(cbid::ALL.iter().copied());
    }
    if engine.settings.run <= 1 {
        // The calls that only end runs are not needed: not subscribed.
        ids = ids.without_run_breaks();
    }
    let decider: Decider = Box::new(move |info, ordinary| {
        engine.decide(info, ordinary).map(|window| WindowRun {
            counters: window.collects_counters(),
            run: Runner::Engine(window),
        })
    });
    let mut backend = Backend::new(
        drv,
        decider,
        &crate::engine::state::INVENTORY,
        engine.settings,
        ids,
    );
    let activity = cupti.activity.filter(|_| kernel_clock::wanted_from_env());
    if let Some(api) = activity {
        kernel_clock::set_callback_api(api);
    }
    backend.clock = kernel_clock::KernelClock::new(activity, kernel_clock::Span::from_env());
    if BACKEND.set(backend).is_err() {
        return Err(InstallError::Twice);
    }
    let be = BACKEND.get().ok_or(InstallError::Twice)?;
    let mut sub: CUpti_SubscriberHandle = std::ptr::null_mut();
    // SAFETY: `callback` handles every domain; `be` lives for the process.
    let r = unsafe {
        (cupti.subscribe)(
            &mut sub,
            Some(callback),
            (be as *const Backend).cast_mut().cast(),
        )
    };
    match r {
        CUPTI_SUCCESS => {}
        CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED => return Err(InstallError::Taken),
        other => {
            return Err(InstallError::Cupti(format!(
                "cuptiSubscribe failed: {}",
                api::cupti_error(&cupti, other)
            )));
        }
    }
    let enable = |domain: u32, id: u32| {
        // SAFETY: our subscriber; a plain id.
        let r = unsafe { (cupti.enable_callback)(1, sub, domain, id) };
        (r == CUPTI_SUCCESS).then_some(()).ok_or(r)
    };
    let mut failed = Vec::new();
    for id in be.ids.ids() {
        if let Err(r) = enable(CUPTI_CB_DOMAIN_DRIVER_API, id) {
            failed.push((id, r));
        }
    }
    for id in [
        CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING,
        CUPTI_CBID_RESOURCE_STREAM_CREATED,
        CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING,
        CUPTI_CBID_RESOURCE_MODULE_LOADED,
        CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING,
    ] {
        if let Err(r) = enable(CUPTI_CB_DOMAIN_RESOURCE, id) {
            failed.push((id, r));
        }
    }
    if let Some((id, r)) = failed.first() {
        // SAFETY: our subscriber, no longer used.
        unsafe { (cupti.unsubscribe)(sub) };
        return Err(InstallError::Cupti(format!(
            "cuptiEnableCallback({id}) failed: {}",
            api::cupti_error(&cupti, *r)
        )));
    }
    // Kernel records get our buffers now (the subscription is ours, so no other profiler is
    // attached), before the application can register its own.
    be.clock.register();
    crate::engine::state::INVENTORY.enable();
    be.active.store(true, Ordering::Release);
    // Counters through CUPTI's range profiler: each device's catalog reaches the policy when
    // the device is first seen (device ordinals are not known before the application's cuInit).
    profiler::install(Box::new(|agent, counters| engine.on_agent(agent, counters)));
    tracing::info!(
        callbacks = be.ids.ids().count(),
        "kernel replay installed on CUDA"
    );
    Ok(())
}

/// Stops replay (the tool's `OnUnload`): callbacks pass everything through from now on. A
/// window already running finishes; nothing is freed.
pub(crate) fn shutdown() {
    if let Some(be) = BACKEND.get() {
        be.active.store(false, Ordering::Release);
        wait_for_windows(be);
        super::profiler::end_sessions();
    }
}

/// Makes the process's exit wait (bounded, [`wait_for_windows`]) for windows behind returned
/// launch calls, and write their records. Registered at the first such window, after the CUDA
/// runtime registered its own teardown, so it runs before that teardown.
pub(crate) fn wait_at_exit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn at_exit() {
        let _ = catch_unwind(|| {
            if let Some(be) = BACKEND.get() {
                wait_for_windows(be);
            }
        });
    }
    ONCE.call_once(|| {
        // SAFETY: registering a plain extern "C" function with no captured state.
        unsafe { libc::atexit(at_exit) };
    });
}

/// Waits (bounded by one pass and its late-pass deadline) for the windows still running
/// behind launch calls that returned, so none is cut off by the backend's teardown.
pub(super) fn wait_for_windows(be: &Backend) {
    let pending = gate::BEHIND.pending();
    if pending == 0 {
        return;
    }
    let limit = be.settings.pass.saturating_add(be.settings.late_pass);
    tracing::debug!(pending, "waiting for replay windows before shutdown");
    if !gate::BEHIND.wait_idle(limit) {
        tracing::warn!(
            pending = gate::BEHIND.pending(),
            "replay windows still running at shutdown after {limit:?}"
        );
    }
}

/// In a forked child: replay is off, callbacks only pass through.
pub(crate) fn disable_in_child() {
    if let Some(be) = BACKEND.get() {
        be.active.store(false, Ordering::Relaxed);
    }
}
