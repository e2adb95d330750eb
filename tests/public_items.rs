//! The crate's public items, one line each, against the committed list `tests/public-items.txt`:
//! any change to the surface (an item, a public field, an enum variant, a method of a public
//! type, `#[non_exhaustive]` on a struct or enum) is a visible diff in review. "Public" is what `tests/public_api.rs` audits (reachable
//! from outside the crate, followed through re-exports), with the features a user turns on
//! ([`USER_FEATURES`]): not `internals` (rdmaxfer's own fuzzers, tests and tool), `test-hooks`,
//! `cli` or `capi`, whose items are marked in the source. After a deliberate change, rewrite
//! the list with `RDMAXFER_BLESS=1 cargo test --all-features --test public_items`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

#[path = "api_model/mod.rs"]
mod api_model;
use api_model::{is_pub, show, Crate, Impls, Reader};

/// The cargo features of a user's build (as `[package.metadata.docs.rs]` in Cargo.toml).
const USER_FEATURES: &[&str] = &["tokio"];

/// One line per public item of the crate `read` gives, sorted: `KIND crate::PATH`.
fn public_items(read: &Reader<'_>) -> BTreeSet<String> {
    let c = Crate::load(read, USER_FEATURES);
    let reach = c.reachable();
    let mut out = BTreeSet::new();
    for e in &c.load_errors {
        out.insert(format!("error {e}"));
    }
    for m in &c.modules {
        let here = |name: &dyn std::fmt::Display| {
            let mut p = m.path.clone();
            p.push(name.to_string());
            show(&p)
        };
        let public = |name: &syn::Ident| reach.contains(&(m.path.clone(), name.to_string()));
        for item in &m.items {
            let (kind, id) = match item {
                syn::Item::Const(i) => ("const", &i.ident),
                syn::Item::Enum(i) => ("enum", &i.ident),
                syn::Item::Fn(i) => ("fn", &i.sig.ident),
                syn::Item::Mod(i) => ("mod", &i.ident),
                syn::Item::Static(i) => ("static", &i.ident),
                syn::Item::Struct(i) => ("struct", &i.ident),
                syn::Item::Trait(i) => ("trait", &i.ident),
                syn::Item::Type(i) => ("type", &i.ident),
                syn::Item::Union(i) => ("union", &i.ident),
                _ => continue,
            };
            // (A module is never public through a function of its name: `send` and `send::send`.)
            let pub_mod = !matches!(item, syn::Item::Mod(i) if !is_pub(&i.vis));
            if !public(id) || !pub_mod {
                continue;
            }
            // `#[non_exhaustive]` is part of the surface: whether users may build or match it.
            let attrs: &[syn::Attribute] = match item {
                syn::Item::Struct(i) => &i.attrs,
                syn::Item::Enum(i) => &i.attrs,
                _ => &[],
            };
            let open = attrs.iter().any(|a| a.path().is_ident("non_exhaustive"));
            let mark = if open { " #[non_exhaustive]" } else { "" };
            out.insert(format!("{kind} {}{mark}", here(id)));
            match item {
                syn::Item::Struct(s) => {
                    for (i, f) in s.fields.iter().enumerate() {
                        if is_pub(&f.vis) {
                            let n = f.ident.as_ref().map_or(i.to_string(), |x| x.to_string());
                            out.insert(format!("field {}.{n}", here(id)));
                        }
                    }
                }
                syn::Item::Enum(e) => {
                    for v in &e.variants {
                        out.insert(format!("variant {}::{}", here(id), v.ident));
                    }
                }
                syn::Item::Trait(t) => {
                    for ti in &t.items {
                        if let syn::TraitItem::Fn(f) = ti {
                            out.insert(format!("trait-fn {}::{}", here(id), f.sig.ident));
                        }
                    }
                }
                _ => {}
            }
        }
        // Methods of inherent impls of public types (trait impls are left out: derives).
        let mut impls = Impls::default();
        for item in &m.items {
            impls.visit_item(item);
        }
        for imp in impls.0.iter().filter(|i| i.trait_.is_none()) {
            let syn::Type::Path(t) = &*imp.self_ty else {
                continue;
            };
            let segs: Vec<String> = t
                .path
                .segments
                .iter()
                .map(|s| s.ident.to_string())
                .collect();
            let Some(def) = c.definition(&m.path, &segs, 0) else {
                continue;
            };
            if !reach.contains(&def) {
                continue;
            }
            let mut p = def.0.clone();
            p.push(def.1.clone());
            for ii in &imp.items {
                match ii {
                    syn::ImplItem::Fn(f) if is_pub(&f.vis) => {
                        out.insert(format!("method {}::{}", show(&p), f.sig.ident));
                    }
                    syn::ImplItem::Const(k) if is_pub(&k.vis) => {
                        out.insert(format!("assoc-const {}::{}", show(&p), k.ident));
                    }
                    _ => {}
                }
            }
        }
    }
    out
}

fn list_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/public-items.txt")
}

#[test]
fn the_public_items_are_the_committed_list() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let read = move |rel: &Path| std::fs::read_to_string(src.join(rel)).ok();
    let now = public_items(&read);
    assert!(
        now.contains("struct crate::xfer::endpoint::conn::Endpoint"),
        "the walk found no Endpoint: did it break?"
    );
    let text: String = now.iter().map(|l| format!("{l}\n")).collect();
    if std::env::var_os("RDMAXFER_BLESS").is_some() {
        std::fs::write(list_path(), &text).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(list_path()).unwrap_or_default();
    let was: BTreeSet<String> = committed.lines().map(str::to_string).collect();
    let added: Vec<&String> = now.difference(&was).collect();
    let gone: Vec<&String> = was.difference(&now).collect();
    assert!(
        added.is_empty() && gone.is_empty(),
        "the public API changed ({} items now): new {added:#?}, gone {gone:#?}; if deliberate, \
         RDMAXFER_BLESS=1 cargo test --all-features --test public_items",
        now.len()
    );
}

#[test]
fn a_new_public_item_is_listed_and_a_private_one_is_not() {
    let files = [(
        "lib.rs",
        "pub mod a { pub struct S { pub x: u8, y: u8 } impl S { pub fn f(&self) {} fn g() {} } \
         pub(crate) fn h() {} #[non_exhaustive] pub enum E { V } }\nmod b { pub fn i() {} }\npub use b::i;\n\
         internal! { mod c; }\n#[cfg(feature = \"internals\")] pub mod d {}\n\
         #[cfg(not(feature = \"internals\"))] pub(crate) mod d {}\n\
         pub struct T { #[cfg(feature = \"test-hooks\")] pub hooks: u8, #[cfg(all(feature = \"tokio\", not(test)))] pub t: u8 }",
    ), (
        "c.rs",
        "pub fn internal() {}",
    )];
    let read = move |p: &Path| {
        files
            .iter()
            .find(|(n, _)| Path::new(n) == p)
            .map(|(_, t)| t.to_string())
    };
    let got: Vec<String> = public_items(&read).into_iter().collect();
    assert_eq!(
        got,
        [
            "enum crate::a::E #[non_exhaustive]",
            "field crate::T.t",
            "field crate::a::S.x",
            "fn crate::b::i",
            "method crate::a::S::f",
            "mod crate::a",
            "struct crate::T",
            "struct crate::a::S",
            "variant crate::a::E::V",
        ]
    );
}
