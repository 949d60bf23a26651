//! The AMD signal layout (`amd_signal_t`) that an `hsa_signal_t` handle points at.

use crate::layout::{const_assert_layout, const_assert_offsets};
use crate::queue::amd_queue_t;

/// C `amd_signal_kind64_t` value: an ordinary user signal.
pub const AMD_SIGNAL_KIND_USER: i64 = 1;
/// C `amd_signal_kind64_t` value: an invalid signal.
pub const AMD_SIGNAL_KIND_INVALID: i64 = 0;
/// C `amd_signal_kind64_t` value: a hardware doorbell.
pub const AMD_SIGNAL_KIND_DOORBELL: i64 = -1;
/// C `amd_signal_kind64_t` value: a legacy hardware doorbell.
pub const AMD_SIGNAL_KIND_LEGACY_DOORBELL: i64 = -2;

/// C `amd_signal_t`: 64 bytes, 64-byte aligned. Tools read `value` directly.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct amd_signal_t {
    /// Signal kind (`AMD_SIGNAL_KIND_*`).
    pub kind: i64,
    /// Current value (a doorbell pointer for doorbell kinds).
    pub value: i64,
    /// Address of the interrupt event mailbox, 0 if none.
    pub event_mailbox_ptr: u64,
    /// Interrupt event id.
    pub event_id: u32,
    /// Reserved.
    pub reserved1: u32,
    /// Start timestamp of the last operation that used this signal for completion.
    pub start_ts: u64,
    /// End timestamp of that operation.
    pub end_ts: u64,
    /// Queue of a doorbell signal.
    pub queue_ptr: *mut amd_queue_t,
    /// Reserved.
    pub reserved3: [u32; 2],
}
const_assert_layout!(amd_signal_t, size = 64, align = 64);
const_assert_offsets!(amd_signal_t {
    kind: 0,
    value: 8,
    event_mailbox_ptr: 16,
    event_id: 24,
    reserved1: 28,
    start_ts: 32,
    end_ts: 40,
    queue_ptr: 48,
    reserved3: 56,
});
