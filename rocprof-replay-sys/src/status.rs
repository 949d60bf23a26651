//! The checked layer: [`Status`], a typed `hsa_status_t` with its official name, and helpers
//! that turn raw status codes into `Result`s so higher layers never compare raw integers.

use core::fmt;

use crate::enums::*;

/// C `HSA_STATUS_ERROR_INVALID_MEMORY_POOL` (AMD extension).
pub const HSA_STATUS_ERROR_INVALID_MEMORY_POOL: hsa_status_t = 40;
/// C `HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION` (AMD extension).
pub const HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: hsa_status_t = 41;
/// C `HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION` (AMD extension).
pub const HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION: hsa_status_t = 42;
/// C `HSA_STATUS_ERROR_MEMORY_FAULT` (AMD extension).
pub const HSA_STATUS_ERROR_MEMORY_FAULT: hsa_status_t = 43;
/// C `HSA_STATUS_CU_MASK_REDUCED` (AMD extension; a success variant).
pub const HSA_STATUS_CU_MASK_REDUCED: hsa_status_t = 44;

/// A status code returned by an HSA function.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct Status(pub hsa_status_t);

/// Every status code with a name, in one table.
const NAMES: &[(hsa_status_t, &str)] = &[
    (HSA_STATUS_SUCCESS, "HSA_STATUS_SUCCESS"),
    (HSA_STATUS_INFO_BREAK, "HSA_STATUS_INFO_BREAK"),
    (HSA_STATUS_ERROR, "HSA_STATUS_ERROR"),
    (
        HSA_STATUS_ERROR_INVALID_ARGUMENT,
        "HSA_STATUS_ERROR_INVALID_ARGUMENT",
    ),
    (
        HSA_STATUS_ERROR_INVALID_QUEUE_CREATION,
        "HSA_STATUS_ERROR_INVALID_QUEUE_CREATION",
    ),
    (
        HSA_STATUS_ERROR_INVALID_ALLOCATION,
        "HSA_STATUS_ERROR_INVALID_ALLOCATION",
    ),
    (
        HSA_STATUS_ERROR_INVALID_AGENT,
        "HSA_STATUS_ERROR_INVALID_AGENT",
    ),
    (
        HSA_STATUS_ERROR_INVALID_REGION,
        "HSA_STATUS_ERROR_INVALID_REGION",
    ),
    (
        HSA_STATUS_ERROR_INVALID_SIGNAL,
        "HSA_STATUS_ERROR_INVALID_SIGNAL",
    ),
    (
        HSA_STATUS_ERROR_INVALID_QUEUE,
        "HSA_STATUS_ERROR_INVALID_QUEUE",
    ),
    (
        HSA_STATUS_ERROR_OUT_OF_RESOURCES,
        "HSA_STATUS_ERROR_OUT_OF_RESOURCES",
    ),
    (
        HSA_STATUS_ERROR_INVALID_PACKET_FORMAT,
        "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT",
    ),
    (
        HSA_STATUS_ERROR_RESOURCE_FREE,
        "HSA_STATUS_ERROR_RESOURCE_FREE",
    ),
    (
        HSA_STATUS_ERROR_NOT_INITIALIZED,
        "HSA_STATUS_ERROR_NOT_INITIALIZED",
    ),
    (
        HSA_STATUS_ERROR_REFCOUNT_OVERFLOW,
        "HSA_STATUS_ERROR_REFCOUNT_OVERFLOW",
    ),
    (
        HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS,
        "HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS",
    ),
    (
        HSA_STATUS_ERROR_INVALID_INDEX,
        "HSA_STATUS_ERROR_INVALID_INDEX",
    ),
    (HSA_STATUS_ERROR_INVALID_ISA, "HSA_STATUS_ERROR_INVALID_ISA"),
    (
        HSA_STATUS_ERROR_INVALID_ISA_NAME,
        "HSA_STATUS_ERROR_INVALID_ISA_NAME",
    ),
    (
        HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
        "HSA_STATUS_ERROR_INVALID_CODE_OBJECT",
    ),
    (
        HSA_STATUS_ERROR_INVALID_EXECUTABLE,
        "HSA_STATUS_ERROR_INVALID_EXECUTABLE",
    ),
    (
        HSA_STATUS_ERROR_FROZEN_EXECUTABLE,
        "HSA_STATUS_ERROR_FROZEN_EXECUTABLE",
    ),
    (
        HSA_STATUS_ERROR_INVALID_SYMBOL_NAME,
        "HSA_STATUS_ERROR_INVALID_SYMBOL_NAME",
    ),
    (
        HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED,
        "HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED",
    ),
    (
        HSA_STATUS_ERROR_VARIABLE_UNDEFINED,
        "HSA_STATUS_ERROR_VARIABLE_UNDEFINED",
    ),
    (HSA_STATUS_ERROR_EXCEPTION, "HSA_STATUS_ERROR_EXCEPTION"),
    (
        HSA_STATUS_ERROR_INVALID_CODE_SYMBOL,
        "HSA_STATUS_ERROR_INVALID_CODE_SYMBOL",
    ),
    (
        HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL,
        "HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL",
    ),
    (
        HSA_STATUS_ERROR_INVALID_FILE,
        "HSA_STATUS_ERROR_INVALID_FILE",
    ),
    (
        HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER,
        "HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER",
    ),
    (
        HSA_STATUS_ERROR_INVALID_CACHE,
        "HSA_STATUS_ERROR_INVALID_CACHE",
    ),
    (
        HSA_STATUS_ERROR_INVALID_WAVEFRONT,
        "HSA_STATUS_ERROR_INVALID_WAVEFRONT",
    ),
    (
        HSA_STATUS_ERROR_INVALID_SIGNAL_GROUP,
        "HSA_STATUS_ERROR_INVALID_SIGNAL_GROUP",
    ),
    (
        HSA_STATUS_ERROR_INVALID_RUNTIME_STATE,
        "HSA_STATUS_ERROR_INVALID_RUNTIME_STATE",
    ),
    (HSA_STATUS_ERROR_FATAL, "HSA_STATUS_ERROR_FATAL"),
    (
        HSA_STATUS_ERROR_INVALID_MEMORY_POOL,
        "HSA_STATUS_ERROR_INVALID_MEMORY_POOL",
    ),
    (
        HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION,
        "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION",
    ),
    (
        HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION,
        "HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION",
    ),
    (
        HSA_STATUS_ERROR_MEMORY_FAULT,
        "HSA_STATUS_ERROR_MEMORY_FAULT",
    ),
    (HSA_STATUS_CU_MASK_REDUCED, "HSA_STATUS_CU_MASK_REDUCED"),
];

impl Status {
    /// `HSA_STATUS_SUCCESS`.
    pub const SUCCESS: Status = Status(HSA_STATUS_SUCCESS);
    /// `HSA_STATUS_INFO_BREAK`: an iteration was stopped on purpose.
    pub const INFO_BREAK: Status = Status(HSA_STATUS_INFO_BREAK);
    /// `HSA_STATUS_ERROR`: a generic error.
    pub const ERROR: Status = Status(HSA_STATUS_ERROR);
    /// `HSA_STATUS_ERROR_INVALID_ARGUMENT`.
    pub const INVALID_ARGUMENT: Status = Status(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    /// `HSA_STATUS_ERROR_OUT_OF_RESOURCES`.
    pub const OUT_OF_RESOURCES: Status = Status(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    /// `HSA_STATUS_ERROR_NOT_INITIALIZED`.
    pub const NOT_INITIALIZED: Status = Status(HSA_STATUS_ERROR_NOT_INITIALIZED);

    /// The official C name, e.g. `"HSA_STATUS_ERROR_OUT_OF_RESOURCES"`, if the code has one.
    pub fn name(self) -> Option<&'static str> {
        NAMES
            .iter()
            .find(|(code, _)| *code == self.0)
            .map(|(_, name)| *name)
    }

    /// Whether the code reports success (`SUCCESS`, or the success variant `CU_MASK_REDUCED`).
    pub const fn is_success(self) -> bool {
        self.0 == HSA_STATUS_SUCCESS || self.0 == HSA_STATUS_CU_MASK_REDUCED
    }

    /// Whether the code is an error (everything from `HSA_STATUS_ERROR` up, and the AMD errors).
    pub const fn is_error(self) -> bool {
        !self.is_success() && self.0 != HSA_STATUS_INFO_BREAK
    }

    /// The raw code, for returning across the C ABI.
    pub const fn raw(self) -> hsa_status_t {
        self.0
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name} ({:#x})", self.0),
            None => write!(f, "unknown HSA status {:#x}", self.0),
        }
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl core::error::Error for Status {}

impl From<Status> for hsa_status_t {
    fn from(s: Status) -> hsa_status_t {
        s.0
    }
}

/// `Result` of a checked HSA call: the error is the non-success [`Status`].
pub type HsaResult<T> = Result<T, Status>;

/// Turns a raw status into `Ok(())` on success and `Err(status)` otherwise (INFO_BREAK included).
#[inline]
pub fn check(raw: hsa_status_t) -> HsaResult<()> {
    let status = Status(raw);
    if status.is_success() {
        Ok(())
    } else {
        Err(status)
    }
}

/// Like [`check`], but for iterations: `Ok(true)` when the walk completed, `Ok(false)` when a
/// callback stopped it with `HSA_STATUS_INFO_BREAK`.
#[inline]
pub fn check_iteration(raw: hsa_status_t) -> HsaResult<bool> {
    match Status(raw) {
        Status::INFO_BREAK => Ok(false),
        s if s.is_success() => Ok(true),
        s => Err(s),
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;

    #[test]
    fn display_uses_the_official_name_and_code() {
        assert_eq!(
            format!("{}", Status(HSA_STATUS_ERROR_OUT_OF_RESOURCES)),
            "HSA_STATUS_ERROR_OUT_OF_RESOURCES (0x1008)"
        );
        assert_eq!(format!("{}", Status(0x4242)), "unknown HSA status 0x4242");
        assert_eq!(
            Status(40).name(),
            Some("HSA_STATUS_ERROR_INVALID_MEMORY_POOL")
        );
    }

    #[test]
    fn every_named_code_is_unique() {
        for (i, (a, _)) in NAMES.iter().enumerate() {
            for (b, name) in &NAMES[i + 1..] {
                assert_ne!(a, b, "{name} duplicates a code");
            }
        }
    }

    #[test]
    fn check_splits_success_break_and_errors() {
        assert_eq!(check(HSA_STATUS_SUCCESS), Ok(()));
        assert_eq!(check(HSA_STATUS_CU_MASK_REDUCED), Ok(()));
        assert_eq!(check(HSA_STATUS_INFO_BREAK), Err(Status::INFO_BREAK));
        assert_eq!(
            check(HSA_STATUS_ERROR_NOT_INITIALIZED),
            Err(Status::NOT_INITIALIZED)
        );
        assert_eq!(check_iteration(HSA_STATUS_INFO_BREAK), Ok(false));
        assert_eq!(check_iteration(HSA_STATUS_SUCCESS), Ok(true));
        assert_eq!(check_iteration(HSA_STATUS_ERROR), Err(Status::ERROR));
        assert!(!Status::INFO_BREAK.is_error());
        assert!(Status::ERROR.is_error());
    }
}
