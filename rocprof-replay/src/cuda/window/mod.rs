//! The replay window on CUDA: the launch callbacks, the companion thread that runs the engine,
//! and [`CudaTarget`], the engine's handle on one intercepted launch.
//!
//! The application thread hands each launch to its companion thread at API enter and waits
//! for one of two answers: *release as pass 1* (the window has drained the context and
//! captured the memory: the original launch is the first pass) or *release as the ordinary
//! run* (the policy skipped it, or the window declined before any pass). Either way the
//! original launch is enqueued exactly once, by the driver, after the enter callback returns.
//!
//! **Asynchronous window** (the usual case): the arguments were copied at enter
//! ([`params`](super::params)), so the relaunches do not need the application's call to last.
//! Pass 1's start event waits behind a gate ([`gate`](super::gate)) that opens at exit, once
//! the launch and its end event are enqueued (kernel-only timing); at exit a second gate goes
//! on the application's stream after the end event, and the call returns. The companion
//! thread waits for pass 1's end event, restores and relaunches on the backend's private
//! stream (each relaunch bracketed the same way), and opens the second gate when the window is
//! over: the application's later work on its stream sees one completion, on final memory.
//! **Synchronous window** (arguments that cannot be copied, no stream memory operations, a
//! stream that began capturing): the exit callback waits until the window is over, and the
//! launch's own arguments stay valid throughout because the application is still inside the
//! call.
//!
//! Every wait of the companion thread has a deadline (drain, copy, pass, lock); the application
//! thread waits for the companion thread (at enter until the release, in a synchronous window
//! also at exit), which is bounded by those deadlines plus the policy's own callbacks.

//!
//! By concern: [`launch`] (the callbacks on the launching thread), [`companion`] (the hand-off
//! and the thread that runs windows), [`target`] (the engine's operations on one launch) and
//! [`compare`] (the device compare kernel of write-set restore).

mod companion;
pub(crate) mod compare;
mod l2;
mod launch;
mod target;

pub(crate) use companion::wait_while_held;
use companion::*;
#[cfg(test)]
pub(crate) use launch::asynchronous_windows;
use launch::*;
pub(crate) use launch::{
    asynchronous_windows_from_env, enter_launch, exit_launch, order_free_after_late_copies,
    prepare_gates, prune_foreign, record_marker, retire_stream, wait_for_late_work,
    wait_for_synchronous_windows,
};
use target::*;
pub(crate) use target::{ArenaMemory, LateEvents, Poll, poll};
