//! The crate's source as `syn` sees it, shared by `tests/public_api.rs` (the API's soundness
//! audit) and `tests/public_items.rs` (the committed list of public items): its modules,
//! followed from `lib.rs`, their `use` bindings, and which items are reachable from outside.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// A module: its path from the crate root and its items (file or inline).
pub(crate) struct Module {
    pub(crate) path: Vec<String>,
    pub(crate) items: Vec<syn::Item>,
}

/// Where a `use` binding points: a path (resolved later, relative to the module) or a glob.
#[derive(Clone)]
pub(crate) struct UseBinding {
    public: bool,
    /// `None` for a glob (`use a::b::*`): then `target` is the module path.
    name: Option<String>,
    target: Vec<String>,
}

/// Reads the crate's source files by path relative to its `src/` folder.
pub(crate) type Reader<'a> = dyn Fn(&Path) -> Option<String> + 'a;

pub(crate) struct Crate {
    /// The cargo features the crate is seen with: an item under `#[cfg(..)]` that is false for
    /// them (`feature = "x"`, `not`, `all`, `any`; `test` is false, any other predicate true)
    /// is left out, as rustc leaves it out.
    features: Vec<String>,
    pub(crate) modules: Vec<Module>,
    by_path: HashMap<Vec<String>, usize>,
    /// Errors found while loading (unreadable files, unscannable macros).
    pub(crate) load_errors: Vec<String>,
}

pub(crate) fn is_pub(v: &syn::Visibility) -> bool {
    matches!(v, syn::Visibility::Public(_))
}

pub(crate) fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .map(|m| m.path().is_ident("test"))
                .unwrap_or(false)
    })
}

pub(crate) fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

pub(crate) fn show(path: &[String]) -> String {
    let mut s = String::from("crate");
    for p in path {
        s.push_str("::");
        s.push_str(p);
    }
    s
}

impl Crate {
    /// Loads the crate from `lib.rs`, following `mod` declarations, as built with `features`.
    pub(crate) fn load(read: &Reader<'_>, features: &[&str]) -> Crate {
        let mut c = Crate {
            features: features.iter().map(|f| f.to_string()).collect(),
            modules: Vec::new(),
            by_path: HashMap::new(),
            load_errors: Vec::new(),
        };
        match read(Path::new("lib.rs")) {
            Some(text) => match syn::parse_file(&text) {
                Ok(f) => c.add_module(read, Vec::new(), PathBuf::new(), f.items),
                Err(e) => c.load_errors.push(format!("lib.rs: parse error: {e}")),
            },
            None => c.load_errors.push("lib.rs: not found".into()),
        }
        c
    }

    /// Adds module `path` with `items`; its child modules' files are looked up under `dir`.
    fn add_module(
        &mut self,
        read: &Reader<'_>,
        path: Vec<String>,
        dir: PathBuf,
        mut items: Vec<syn::Item>,
    ) {
        expand_internal(&mut items);
        strip_cfg(&mut items, &self.features);
        let mut children = Vec::new();
        for item in &items {
            let syn::Item::Mod(m) = item else { continue };
            if is_cfg_test(&m.attrs) {
                continue;
            }
            let name = m.ident.to_string();
            let mut child = path.clone();
            child.push(name.clone());
            if let Some((_, inline)) = &m.content {
                children.push((child, dir.join(&name), inline.clone()));
                continue;
            }
            let candidates = match path_attr(&m.attrs) {
                Some(p) => vec![(dir.join(&p), dir.join(&p).with_extension(""))],
                None => vec![
                    (dir.join(format!("{name}.rs")), dir.join(&name)),
                    (dir.join(&name).join("mod.rs"), dir.join(&name)),
                ],
            };
            let found = candidates
                .into_iter()
                .find_map(|(file, sub)| read(&file).map(|t| (file, sub, t)));
            match found {
                Some((file, sub, text)) => match syn::parse_file(&text) {
                    Ok(f) => children.push((child, sub, f.items)),
                    Err(e) => self
                        .load_errors
                        .push(format!("{}: parse error: {e}", file.display())),
                },
                None => self
                    .load_errors
                    .push(format!("{}: module file not found", show(&child))),
            }
        }
        self.by_path.insert(path.clone(), self.modules.len());
        self.modules.push(Module { path, items });
        for (child, sub, items) in children {
            self.add_module(read, child, sub, items);
        }
    }

    pub(crate) fn module(&self, path: &[String]) -> Option<&Module> {
        self.by_path.get(path).map(|&i| &self.modules[i])
    }

    /// The `use` bindings of a module.
    pub(crate) fn uses(m: &Module) -> Vec<UseBinding> {
        fn walk(
            t: &syn::UseTree,
            prefix: &mut Vec<String>,
            public: bool,
            out: &mut Vec<UseBinding>,
        ) {
            match t {
                syn::UseTree::Path(p) => {
                    prefix.push(p.ident.to_string());
                    walk(&p.tree, prefix, public, out);
                    prefix.pop();
                }
                syn::UseTree::Name(n) if n.ident == "self" => out.push(UseBinding {
                    public,
                    name: prefix.last().cloned(),
                    target: prefix.clone(),
                }),
                syn::UseTree::Name(n) => {
                    let mut target = prefix.clone();
                    target.push(n.ident.to_string());
                    out.push(UseBinding {
                        public,
                        name: Some(n.ident.to_string()),
                        target,
                    });
                }
                syn::UseTree::Rename(r) => {
                    let mut target = prefix.clone();
                    target.push(r.ident.to_string());
                    out.push(UseBinding {
                        public,
                        name: Some(r.rename.to_string()),
                        target,
                    });
                }
                syn::UseTree::Glob(_) => out.push(UseBinding {
                    public,
                    name: None,
                    target: prefix.clone(),
                }),
                syn::UseTree::Group(g) => {
                    for t in &g.items {
                        walk(t, prefix, public, out);
                    }
                }
            }
        }
        let mut out = Vec::new();
        for item in &m.items {
            if let syn::Item::Use(u) = item {
                walk(&u.tree, &mut Vec::new(), is_pub(&u.vis), &mut out);
            }
        }
        out
    }

    /// Resolves a module path written in module `from` (`crate::`, `self::`, `super::`, a child
    /// module, or a name a `use` brought in). `None`: outside this crate (std, libc, ...).
    pub(crate) fn resolve_module(
        &self,
        from: &[String],
        segs: &[String],
        depth: usize,
    ) -> Option<Vec<String>> {
        if depth > 16 {
            return None;
        }
        let mut cur: Vec<String> = from.to_vec();
        for (i, s) in segs.iter().enumerate() {
            match s.as_str() {
                "crate" if i == 0 => cur.clear(),
                "self" if i == 0 => {}
                "super" => {
                    cur.pop()?;
                }
                _ => {
                    let mut child = cur.clone();
                    child.push(s.clone());
                    if self.by_path.contains_key(&child) {
                        cur = child;
                        continue;
                    }
                    let m = self.module(&cur)?;
                    let b = Self::uses(m)
                        .into_iter()
                        .find(|b| b.name.as_deref() == Some(s.as_str()))?;
                    cur = self.resolve_module(&cur, &b.target, depth + 1)?;
                }
            }
        }
        Some(cur)
    }

    /// Resolves the item `segs` (module path + name) written in module `from` to where the
    /// name is bound: `(module, name)`. `None`: outside this crate.
    pub(crate) fn resolve_item(
        &self,
        from: &[String],
        segs: &[String],
    ) -> Option<(Vec<String>, String)> {
        let (name, prefix) = segs.split_last()?;
        let m = self.resolve_module(from, prefix, 0)?;
        Some((m, name.clone()))
    }

    /// Where the item `segs` written in module `from` is defined, following `use` bindings.
    /// `None`: outside this crate.
    pub(crate) fn definition(
        &self,
        from: &[String],
        segs: &[String],
        depth: usize,
    ) -> Option<(Vec<String>, String)> {
        if depth > 16 {
            return None;
        }
        let (m, name) = self.resolve_item(from, segs)?;
        let module = self.module(&m)?;
        if item_names(&module.items).iter().any(|(n, _)| *n == name) {
            return Some((m, name));
        }
        let b = Self::uses(module)
            .into_iter()
            .find(|b| b.name.as_deref() == Some(name.as_str()))?;
        self.definition(&m, &b.target, depth + 1)
    }

    /// Every `(module, name)` reachable from outside the crate, definitions and bindings alike.
    pub(crate) fn reachable(&self) -> HashSet<(Vec<String>, String)> {
        let mut seen: HashSet<(Vec<String>, String)> = HashSet::new();
        let mut work: Vec<(Vec<String>, String)> = Vec::new();
        let open_module = |m: &Module, work: &mut Vec<(Vec<String>, String)>| {
            for (name, public) in item_names(&m.items) {
                if public {
                    work.push((m.path.clone(), name));
                }
            }
            for b in Self::uses(m) {
                if !b.public {
                    continue;
                }
                match &b.name {
                    Some(n) => work.push((m.path.clone(), n.clone())),
                    None => {
                        if let Some(t) = self.resolve_module(&m.path, &b.target, 0) {
                            if let Some(tm) = self.module(&t) {
                                for (name, public) in item_names(&tm.items) {
                                    if public {
                                        work.push((t.clone(), name));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        };
        if let Some(root) = self.module(&[]) {
            open_module(root, &mut work);
        }
        while let Some((mpath, name)) = work.pop() {
            if !seen.insert((mpath.clone(), name.clone())) {
                continue;
            }
            let Some(m) = self.module(&mpath) else {
                continue;
            };
            // A public child module: all its public items. (Not a crate-private one that shares
            // its name with a re-exported function, as `send` and `send::send`.)
            let mut child = mpath.clone();
            child.push(name.clone());
            if let Some(cm) = self.module(&child) {
                if item_names(&m.items).iter().any(|(n, p)| *n == name && *p) {
                    open_module(cm, &mut work);
                }
            }
            // A re-export: follow it to where it points.
            for b in Self::uses(m) {
                if b.name.as_deref() == Some(name.as_str()) {
                    if let Some(t) = self.resolve_item(&mpath, &b.target) {
                        work.push(t.clone());
                        // `pub use a::b` of a module `b`: that module is opened by the loop.
                    }
                }
            }
        }
        seen
    }
}

/// Whether the `#[cfg(..)]` attributes among `attrs` hold with `features` on.
pub(crate) fn cfg_on(attrs: &[syn::Attribute], features: &[String]) -> bool {
    fn eval(m: &syn::Meta, features: &[String]) -> bool {
        match m {
            syn::Meta::Path(p) => !p.is_ident("test"),
            syn::Meta::NameValue(nv) if nv.path.is_ident("feature") => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => features.contains(&s.value()),
                _ => true,
            },
            syn::Meta::NameValue(_) => true,
            syn::Meta::List(l) => {
                let args = l
                    .parse_args_with(
                        syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
                    )
                    .map(|p| p.into_iter().collect::<Vec<_>>())
                    .unwrap_or_default();
                if l.path.is_ident("not") {
                    !args.first().is_some_and(|a| eval(a, features))
                } else if l.path.is_ident("all") {
                    args.iter().all(|a| eval(a, features))
                } else if l.path.is_ident("any") {
                    args.iter().any(|a| eval(a, features))
                } else {
                    true
                }
            }
        }
    }
    attrs.iter().all(|a| {
        !a.path().is_ident("cfg")
            || a.parse_args::<syn::Meta>()
                .map(|m| eval(&m, features))
                .unwrap_or(true)
    })
}

/// An item that may be a macro call: its macro and attributes.
trait MacroCall {
    fn call(&self) -> Option<(&syn::Macro, &[syn::Attribute])>;
}

impl MacroCall for syn::Item {
    fn call(&self) -> Option<(&syn::Macro, &[syn::Attribute])> {
        match self {
            syn::Item::Macro(m) => Some((&m.mac, &m.attrs)),
            _ => None,
        }
    }
}

impl MacroCall for syn::ImplItem {
    fn call(&self) -> Option<(&syn::Macro, &[syn::Attribute])> {
        match self {
            syn::ImplItem::Macro(m) => Some((&m.mac, &m.attrs)),
            _ => None,
        }
    }
}

/// Replaces each call of the macro `name` with what `f` expands it to; a call `f` cannot read
/// (`None`) stays.
fn expand<T: MacroCall>(
    items: &mut Vec<T>,
    name: &str,
    f: impl Fn(&syn::Macro, &[syn::Attribute]) -> Option<Vec<T>>,
) {
    *items = std::mem::take(items)
        .into_iter()
        .flat_map(|i| {
            let call = i.call().filter(|(m, _)| m.path.is_ident(name));
            call.and_then(|(m, a)| f(m, a)).unwrap_or_else(|| vec![i])
        })
        .collect();
}

/// Expands the crate's `internal! { mod a; mod b; }` (`src/lib.rs`) as rustc does: each module
/// twice, `pub` under `cfg(feature = "internals")` and `pub(crate)` under its `not`. A call it
/// cannot read stays a macro call (which `tests/public_api.rs` reports).
fn expand_internal(items: &mut Vec<syn::Item>) {
    expand(items, "internal", |m, _| {
        let f = syn::parse2::<syn::File>(m.tokens.clone()).ok()?;
        let mut out = Vec::new();
        for i in f.items {
            let syn::Item::Mod(md) = i else { continue };
            let mut on = md.clone();
            on.vis = syn::parse_quote!(pub);
            on.attrs
                .push(syn::parse_quote!(#[cfg(feature = "internals")]));
            let mut off = md;
            off.vis = syn::parse_quote!(pub(crate));
            off.attrs
                .push(syn::parse_quote!(#[cfg(not(feature = "internals"))]));
            out.extend([syn::Item::Mod(on), syn::Item::Mod(off)]);
        }
        Some(out)
    });
}

/// Expands the crate's `setters! { field: Type, .. }` (`src/lib.rs`) in an impl block as rustc
/// does: `pub fn field(mut self, field: Type) -> Self` each, under the call's attributes (its
/// `cfg`). A call it cannot read stays.
fn expand_setters(items: &mut Vec<syn::ImplItem>) {
    expand(items, "setters", |m, attrs| {
        let fields = syn::parse_str::<syn::FieldsNamed>(&format!("{{ {} }}", m.tokens)).ok()?;
        let setter = |f: syn::Field| -> syn::ImplItem {
            let (name, ty) = (f.ident, f.ty);
            syn::parse_quote! {
                #(#attrs)*
                pub fn #name(mut self, #name: #ty) -> Self { self.#name = #name; self }
            }
        };
        Some(fields.named.into_iter().map(setter).collect())
    });
}

/// Leaves out of `items` (and of their fields, variants and impl and trait items) what a
/// `#[cfg(..)]` turns off with `features`. Inline modules are stripped when they are loaded.
fn strip_cfg(items: &mut Vec<syn::Item>, features: &[String]) {
    fn attrs(item: &syn::Item) -> &[syn::Attribute] {
        match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Union(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => &[],
        }
    }
    let on = |a: &[syn::Attribute]| cfg_on(a, features);
    items.retain(|i| on(attrs(i)));
    for item in items.iter_mut() {
        match item {
            syn::Item::Struct(s) => {
                if let syn::Fields::Named(f) = &mut s.fields {
                    f.named = std::mem::take(&mut f.named)
                        .into_iter()
                        .filter(|f| on(&f.attrs))
                        .collect();
                }
            }
            syn::Item::Enum(e) => {
                e.variants = std::mem::take(&mut e.variants)
                    .into_iter()
                    .filter(|v| on(&v.attrs))
                    .collect();
            }
            syn::Item::Impl(i) => {
                expand_setters(&mut i.items);
                i.items.retain(|ii| match ii {
                    syn::ImplItem::Fn(f) => on(&f.attrs),
                    syn::ImplItem::Const(c) => on(&c.attrs),
                    syn::ImplItem::Type(t) => on(&t.attrs),
                    _ => true,
                })
            }
            syn::Item::Trait(t) => t.items.retain(|ti| match ti {
                syn::TraitItem::Fn(f) => on(&f.attrs),
                syn::TraitItem::Const(c) => on(&c.attrs),
                _ => true,
            }),
            _ => {}
        }
    }
}

/// Names an item list defines, each with whether it is declared `pub`.
pub(crate) fn item_names(items: &[syn::Item]) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for item in items {
        let (id, vis) = match item {
            syn::Item::Const(i) => (&i.ident, &i.vis),
            syn::Item::Enum(i) => (&i.ident, &i.vis),
            syn::Item::Fn(i) => (&i.sig.ident, &i.vis),
            syn::Item::Mod(i) if !is_cfg_test(&i.attrs) => (&i.ident, &i.vis),
            syn::Item::Static(i) => (&i.ident, &i.vis),
            syn::Item::Struct(i) => (&i.ident, &i.vis),
            syn::Item::Trait(i) => (&i.ident, &i.vis),
            syn::Item::Type(i) => (&i.ident, &i.vis),
            syn::Item::Union(i) => (&i.ident, &i.vis),
            _ => continue,
        };
        out.push((id.to_string(), is_pub(vis)));
    }
    out
}

/// Collects the impl blocks of one module, including those inside function bodies (an impl
/// anywhere applies crate-wide), but not those of inline child modules (scanned on their own).
#[derive(Default)]
pub(crate) struct Impls<'ast>(pub(crate) Vec<&'ast syn::ItemImpl>);

impl<'ast> Visit<'ast> for Impls<'ast> {
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        self.0.push(i);
        syn::visit::visit_item_impl(self, i);
    }
    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {}
}
