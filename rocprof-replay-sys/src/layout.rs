//! Compile-time layout assertions placed next to every `#[repr(C)]` mirror.

/// Asserts at compile time that a type has the given size and alignment.
macro_rules! const_assert_layout {
    ($t:ty, size = $size:expr, align = $align:expr) => {
        const _: () = {
            assert!(::core::mem::size_of::<$t>() == $size, "size mismatch");
            assert!(
                ::core::mem::align_of::<$t>() == $align,
                "alignment mismatch"
            );
        };
    };
}

/// Asserts at compile time the byte offsets of named fields of a type.
macro_rules! const_assert_offsets {
    ($t:ty { $($field:ident : $offset:expr),* $(,)? }) => {
        const _: () = {
            $(assert!(::core::mem::offset_of!($t, $field) == $offset, "offset mismatch");)*
        };
    };
}

pub(crate) use {const_assert_layout, const_assert_offsets};
