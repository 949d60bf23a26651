//! `#[rocprof_tool]`: turns a [`ReplayPolicy`] type into an HSA tool library.
//!
//! ```text
//! #[rocprof_replay::rocprof_tool]            // built with Default::default()
//! #[derive(Default)]
//! struct MyTool { /* ... */ }
//!
//! #[rocprof_replay::rocprof_tool(new = MyTool::from_env)]   // or a named constructor
//! struct MyTool { /* ... */ }
//!
//! // With the SDK renamed in Cargo.toml (`sdk = { package = "rocprof-replay", ... }`):
//! #[sdk::rocprof_tool(crate = sdk)]
//! struct MyTool { /* ... */ }
//! ```
//!
//! The attribute leaves the struct as written and adds
//! `rocprof_replay::__export_tool!(MyTool, constructor)`, which emits `OnLoad`, `OnUnload` and
//! `HSA_AMD_TOOL_PRIORITY`. All ABI details live in the SDK; this crate only parses. Parsing and
//! expansion are ordinary functions (`expand`) so they are unit-tested without a compiler run.
//!
//! [`ReplayPolicy`]: https://docs.rs/rocprof-replay/latest/rocprof_replay/trait.ReplayPolicy.html

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{Expr, Ident, ItemStruct, Token};

/// Exports the annotated struct, which must implement `ReplayPolicy`, as the tool of this
/// library (one per library: it defines `OnLoad`). Optional arguments, comma-separated:
/// - `new = path::to::constructor` (a `fn() -> Self`); without it the struct is built with
///   `Default::default()`;
/// - `crate = path` — the path of the SDK crate when the dependency is renamed (default
///   `::rocprof_replay`).
#[proc_macro_attribute]
pub fn rocprof_tool(
    attr: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    match expand(attr.into(), item.into()) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// Parsed attribute arguments.
struct Args {
    constructor: Option<Expr>,
    krate: Option<syn::Path>,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Args {
            constructor: None,
            krate: None,
        };
        while !input.is_empty() {
            if input.peek(Token![crate]) {
                let key: Token![crate] = input.parse()?;
                if args.krate.is_some() {
                    return Err(syn::Error::new(key.span, "`crate` is given twice"));
                }
                input.parse::<Token![=]>()?;
                args.krate = Some(input.parse()?);
            } else {
                let key: Ident = input.parse()?;
                if key != "new" {
                    return Err(syn::Error::new(
                        key.span(),
                        format!(
                            "unknown argument `{key}`: the arguments are `new = path::to::constructor` \
                             and `crate = path::to::rocprof_replay`"
                        ),
                    ));
                }
                if args.constructor.is_some() {
                    return Err(syn::Error::new(key.span(), "`new` is given twice"));
                }
                input.parse::<Token![=]>()?;
                let constructor: Expr = input.parse()?;
                if let Expr::Call(call) = &constructor {
                    if call.args.is_empty() {
                        let func = &call.func;
                        return Err(syn::Error::new_spanned(
                            &constructor,
                            format!(
                                "`new =` takes the constructor itself, not a call: write `new = {}`",
                                quote!(#func).to_string().replace(' ', "")
                            ),
                        ));
                    }
                }
                args.constructor = Some(constructor);
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>().map_err(|_| {
                input.error("expected `,` between arguments (`new = ...`, `crate = ...`)")
            })?;
        }
        Ok(args)
    }
}

/// Expands `#[rocprof_tool(attr)] item`.
fn expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let args: Args = syn::parse2(attr)?;
    let strukt: ItemStruct = syn::parse2(item.clone()).map_err(|e| {
        syn::Error::new(
            e.span(),
            "#[rocprof_tool] goes on a struct that implements rocprof_replay::ReplayPolicy",
        )
    })?;
    if !strukt.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &strukt.generics,
            "#[rocprof_tool] cannot export a generic struct: the library needs one concrete tool type",
        ));
    }
    let name = &strukt.ident;
    let constructor = match args.constructor {
        // Coerced to `fn() -> Self` where the user wrote it, so a constructor of the wrong
        // type is reported there, with the signature it needs.
        Some(c) => quote_spanned! {c.span()=>
            {
                const NEW: fn() -> #name = #c;
                NEW
            }
        },
        None => quote!(<#name as ::core::default::Default>::default),
    };
    let krate = args
        .krate
        .map(|path| quote!(#path))
        .unwrap_or_else(|| quote!(::rocprof_replay));
    Ok(quote! {
        #strukt
        #krate::__export_tool!(#name, #constructor);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(attr: &str, item: &str) -> Result<String, String> {
        expand(attr.parse().unwrap(), item.parse().unwrap())
            .map(|t| t.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn default_constructor_is_used_without_arguments() {
        let out = expand_str("", "struct Tool { x: u32 }").unwrap();
        assert!(out.contains("struct Tool"), "{out}");
        assert!(out.contains(":: rocprof_replay :: __export_tool ! (Tool , < Tool as :: core :: default :: Default > :: default)"), "{out}");
    }

    #[test]
    fn named_constructor_is_passed_through() {
        let out = expand_str("new = Tool::from_env", "pub struct Tool;").unwrap();
        assert!(
            out.contains(
                "__export_tool ! (Tool , { const NEW : fn () -> Tool = Tool :: from_env ; NEW })"
            ),
            "{out}"
        );
    }

    #[test]
    fn a_renamed_sdk_is_named_by_crate() {
        for attr in ["crate = sdk", "crate = sdk,", "new = T::make, crate = sdk"] {
            let out = expand_str(attr, "struct T;").unwrap();
            assert!(out.contains("sdk :: __export_tool ! (T ,"), "{attr}: {out}");
            assert!(!out.contains("rocprof_replay"), "{attr}: {out}");
        }
        let out = expand_str("crate = ::deep::sdk, new = T::make", "struct T;").unwrap();
        assert!(out.contains(":: deep :: sdk :: __export_tool !"), "{out}");
    }

    #[test]
    fn misuse_is_a_clear_error() {
        assert!(
            expand_str("", "enum E { A }")
                .unwrap_err()
                .contains("goes on a struct")
        );
        assert!(
            expand_str("", "fn f() {}")
                .unwrap_err()
                .contains("goes on a struct")
        );
        assert!(
            expand_str("make = f", "struct T;")
                .unwrap_err()
                .contains("unknown argument `make`")
        );
        assert_eq!(
            expand_str("new = T::from_env()", "struct T;").unwrap_err(),
            "`new =` takes the constructor itself, not a call: write `new = T::from_env`"
        );
        assert!(
            expand_str("new = f, x", "struct T;")
                .unwrap_err()
                .contains("unknown argument `x`")
        );
        assert!(
            expand_str("new = f new = g", "struct T;")
                .unwrap_err()
                .contains("expected `,`")
        );
        assert!(
            expand_str("crate = a, crate = b", "struct T;")
                .unwrap_err()
                .contains("`crate` is given twice")
        );
        assert!(
            expand_str("new = f, new = g", "struct T;")
                .unwrap_err()
                .contains("`new` is given twice")
        );
        assert!(
            expand_str("", "struct T<P> { p: P }")
                .unwrap_err()
                .contains("generic")
        );
    }
}
