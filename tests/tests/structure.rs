//! The workspace's shape, held by a test: no two files of one crate import each other, directly
//! or through others. A circle means neither file can be read, changed or moved alone.
//!
//! Each crate root (`lib.rs`, `main.rs`, `bin/*.rs`) is read with the files its `mod x;`
//! declarations name, as the compiler reads them. A file depends on another when one of its paths
//! (`use` trees and paths in code, from `crate::`, `super::`, `self::` or a child module's name)
//! names an item the other file defines, or a module the other file is. A path through a
//! `pub use` is followed to the file that defines the item, so a facade that only re-exports is
//! not a dependency of the files that use it; a file that re-exports a name and also uses it
//! depends on its definer. A glob (`use super::*`) depends on the module it reads.
//!
//! The methods of one type written in several files (an inherent `impl` split by seams) are
//! seen too: `self.m(…)` and `Self::m(…)` inside an `impl T`, and `T::m(…)` anywhere, depend on
//! the file whose inherent `impl T` defines `m`.
//!
//! Not seen: macros (`$crate::` paths, and a `macro_rules!` used by its textual scope), and
//! methods called on a value other than `self` (`store.m()`), whose type a tokenizer cannot know.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

#[test]
fn no_two_files_of_a_crate_import_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut circles = Vec::new();
    let mut read = 0;
    for krate in crates(&root) {
        let src = krate.join("src");
        for root_file in roots(&src) {
            let files = Crate::read(&root_file, &|p| std::fs::read_to_string(src.join(p)).ok());
            read += files.files.len();
            for circle in files.circles() {
                let names: Vec<String> = circle.iter().map(|m| files.file_name(m)).collect();
                let krate = krate.file_name().unwrap().to_string_lossy().into_owned();
                circles.push(format!("{krate}: {}\n{}", names.join(" <-> "), files.explain(&circle)));
            }
        }
    }
    assert!(read > 100, "only {read} source files were read");
    assert!(circles.is_empty(), "files that import each other:\n{}", circles.join("\n"));
}

#[test]
fn the_checker_finds_a_circle_and_follows_re_exports() {
    let files = Crate::from_sources(&[
        ("lib.rs", "mod a; mod b; mod c; pub use c::Thing;"),
        ("a.rs", "use crate::b::helper; pub fn top() { helper() }"),
        ("b.rs", "pub fn helper() { super::a::top() }"),
        // `c` uses `crate::Thing`, which the root re-exports from `c` itself: no circle.
        ("c.rs", "pub struct Thing; fn f() -> crate::Thing { Thing }"),
    ]);
    let circles = files.circles();
    assert_eq!(circles.len(), 1, "{circles:?}");
    assert_eq!(circles[0], vec![vec!["a".to_string()], vec!["b".to_string()]]);

    let glob = Crate::from_sources(&[
        ("lib.rs", "mod p;"),
        ("p/mod.rs", "mod q; pub fn own() {} fn g() { q::run() }"),
        ("p/q.rs", "use super::*; pub fn run() { own() }\n#[cfg(test)]\nmod tests { use super::*; }"),
    ]);
    assert_eq!(glob.circles().len(), 1, "a child's glob of a parent that uses it is a circle");

    let test_module = Crate::from_sources(&[
        ("lib.rs", "mod p;"),
        ("p.rs", "pub fn own() {}\n#[cfg(test)]\nmod tests { use super::*; \"crate::q\"; }"),
    ]);
    assert!(test_module.circles().is_empty(), "an inline module's `super` is its own file");

    // A root that re-exports an adapter and uses it, while the adapter uses the root's error.
    let facade_that_uses = Crate::from_sources(&[
        ("lib.rs", "mod memory; pub use memory::Memory; pub struct Error; fn new() -> Memory { Memory }"),
        ("memory.rs", "use crate::Error; pub struct Memory;"),
    ]);
    assert_eq!(facade_that_uses.circles().len(), 1, "a re-export its own file uses is a dependency");

    // Groups, aliases and a re-export of a re-export, each reaching `b`, which uses `a`.
    for a in [
        "use crate::{x::{self}, b::{thing as other}}; fn f() { other() }",
        "use crate::hop::Thing; fn f() -> Thing { Thing }",
    ] {
        let nested = Crate::from_sources(&[
            ("lib.rs", "mod a; mod b; mod hop; mod x;"),
            ("a.rs", a),
            ("b.rs", "pub fn thing() { crate::a::f(); } pub struct Thing;"),
            ("hop.rs", "pub use crate::b::Thing;"),
            ("x.rs", ""),
        ]);
        assert_eq!(nested.circles().len(), 1, "{a}");
    }

    // Literals that hold quotes, and a raw identifier, hide nothing and invent nothing.
    let literals = Crate::from_sources(&[
        ("lib.rs", "mod a; mod b;"),
        (
            "a.rs",
            "const Q: char = '\\\\'; const D: char = '\"'; const B: &[u8] = br#\"x\"y\"#; \
             fn r#type() {} use crate::b::g; pub fn f() { g() }",
        ),
        ("b.rs", "pub fn g() { let _ = \"crate::a::f\"; crate::a::f() }"),
    ]);
    assert_eq!(literals.circles().len(), 1, "the path after the literals is read");

    // One type's methods in two files that call each other: a circle no path names.
    let split = Crate::from_sources(&[
        ("lib.rs", "mod a; mod b; pub struct Service;"),
        ("a.rs", "use crate::Service; impl Service { pub fn outer(&self) { self.inner() } }"),
        (
            "b.rs",
            "use crate::Service;\nimpl<S: Into<u8>> crate::Service where S: Copy { pub(crate) fn inner(&self) { Self::outer(self) } }",
        ),
    ]);
    assert_eq!(split.circles().len(), 1, "a split `impl` whose halves call each other is a circle");
    let one_way = Crate::from_sources(&[
        ("lib.rs", "mod a; mod b; pub struct Service;"),
        ("a.rs", "use crate::Service; impl Service { pub fn outer(&self) { self.inner() } }"),
        (
            "b.rs",
            "use crate::Service; impl Service { fn inner(&self) {} }\nimpl std::fmt::Debug for Service { fn outer(&self) {} }",
        ),
    ]);
    assert!(one_way.circles().is_empty(), "calls one way, and a trait's method of the same name, are no circle");
    // The calling method takes and returns `impl Trait`, calls with a turbofish, and its impl
    // has a higher-ranked bound: still the same type's methods, still a circle.
    let hidden = Crate::from_sources(&[
        ("lib.rs", "mod a; mod b; pub struct Service<F>(F);"),
        (
            "a.rs",
            "use crate::Service;\n#[cfg(unix)]\nimpl<F> Service<F> where F: for<'x> Fn(&'x u8) {\n\
             pub fn outer(&self, r: impl AsRef<str>) -> impl Iterator<Item = u8> { self.inner::<u8>(); None.into_iter() } }",
        ),
        (
            "b.rs",
            "use crate::Service; impl<F> Service<F> { pub(crate) fn inner<T>(&self) { Self::outer(self, \"\"); } }",
        ),
    ]);
    assert_eq!(hidden.circles().len(), 1, "`impl Trait` in a signature is not an impl block");

    // A binary beside a library is a crate of its own: its files are not the library's.
    let roots_found = roots(Path::new(env!("CARGO_MANIFEST_DIR")).join("src").as_path());
    assert!(roots_found.iter().any(|r| r.ends_with("lib.rs")) && roots_found.iter().any(|r| r.starts_with("bin/")));
}

/// A crate folder's roots, relative to `src`: the library, the binary and each `bin/` binary.
fn roots(src: &Path) -> Vec<String> {
    let mut found: Vec<String> =
        ["lib.rs", "main.rs"].into_iter().filter(|r| src.join(r).is_file()).map(String::from).collect();
    if let Ok(bins) = std::fs::read_dir(src.join("bin")) {
        let mut bins: Vec<String> = bins
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".rs"))
            .map(|n| format!("bin/{n}"))
            .collect();
        bins.sort();
        found.extend(bins);
    }
    found
}

fn crates(root: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(root)
        .expect("the workspace folder")
        .map(|e| e.expect("a folder entry").path())
        .filter(|p| p.join("Cargo.toml").is_file() && p.join("src").is_dir())
        .collect();
    found.sort();
    assert!(found.len() > 5, "the workspace's crates were not found under {}", root.display());
    found
}

/// One crate's files: what each defines, what each re-exports, and the paths each names.
struct Crate {
    files: BTreeMap<Module, Source>,
}

#[derive(Default)]
struct Source {
    path: String,
    defines: BTreeSet<String>,
    /// Names a `use` brings in, with the path each came from and the inline module it sits in.
    imports: BTreeMap<String, (Module, Vec<String>)>,
    /// Every path the file names, with the inline module it sits in.
    paths: Vec<(Module, Vec<String>)>,
    /// The files it declares (`mod x;` outside any inline module).
    children: Vec<String>,
    /// The methods its inherent `impl` blocks define, as (type, method).
    methods: BTreeSet<(String, String)>,
    /// The methods it calls on a type's own inherent `impl`s: `self.m(…)` and `Self::m` inside
    /// an `impl T`, and `T::m` anywhere.
    calls: Vec<(String, String)>,
}

impl Crate {
    /// The crate rooted at `root` (a path under `src`), following its `mod x;` declarations to
    /// `x.rs` or `x/mod.rs` beside the declaring file (in its own folder for a non-root file).
    fn read(root: &str, read: &dyn Fn(&str) -> Option<String>) -> Crate {
        let mut files = BTreeMap::new();
        let mut todo = vec![(Vec::new(), root.to_owned())];
        while let Some((module, path)) = todo.pop() {
            let text = read(&path).unwrap_or_else(|| panic!("{path} is declared but cannot be read"));
            let source = Source::parse(&path, &module, &text);
            let (dir, stem) = path.rsplit_once('/').map_or(("", path.as_str()), |(d, f)| (d, f));
            let stem = stem.trim_end_matches(".rs");
            let own_folder = if path == root || stem == "mod" {
                dir.to_owned()
            } else if dir.is_empty() {
                stem.to_owned()
            } else {
                format!("{dir}/{stem}")
            };
            for child in &source.children {
                let base = if own_folder.is_empty() { child.clone() } else { format!("{own_folder}/{child}") };
                let file = [format!("{base}.rs"), format!("{base}/mod.rs")]
                    .into_iter()
                    .find(|f| read(f).is_some())
                    .unwrap_or_else(|| panic!("{path} declares `mod {child};`, found in no file"));
                let mut m = module.clone();
                m.push(child.clone());
                todo.push((m, file));
            }
            files.insert(module, source);
        }
        Crate { files }
    }

    /// A crate of made-up files, rooted at `lib.rs`.
    fn from_sources(sources: &[(&str, &str)]) -> Crate {
        let map: BTreeMap<String, String> = sources.iter().map(|(p, t)| ((*p).to_owned(), (*t).to_owned())).collect();
        Crate::read("lib.rs", &|p| map.get(p).cloned())
    }

    fn file_name(&self, module: &Module) -> String {
        self.files[module].path.clone()
    }

    /// The file `module` lives in: the longest prefix of it that is a file.
    fn file_of(&self, module: &[String]) -> Module {
        (0..=module.len()).rev().map(|n| module[..n].to_vec()).find(|m| self.files.contains_key(m)).unwrap_or_default()
    }

    /// The module a path's leading `crate`, `super`, `self` or child name stands for, and the
    /// segments after it; `None` for a path outside the crate.
    fn anchor<'p>(&self, at: &Module, path: &'p [String]) -> Option<(Module, &'p [String])> {
        let first = path.first()?;
        match first.as_str() {
            "crate" => Some((Vec::new(), &path[1..])),
            "self" => Some((at.clone(), &path[1..])),
            "super" => {
                let mut base = at.clone();
                let mut rest = path;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
                Some((base, rest))
            }
            name => {
                let mut child = at.clone();
                child.push(name.to_string());
                self.files.contains_key(&child).then_some((child, &path[1..]))
            }
        }
    }

    /// The file that defines what `path`, named inside module `at`, names.
    fn target(&self, at: &Module, path: &[String], depth: usize) -> Option<Module> {
        let (mut module, rest) = self.anchor(at, path)?;
        let mut rest = rest;
        while let Some(next) = rest.first() {
            let mut child = module.clone();
            child.push(next.clone());
            if !self.files.contains_key(&child) {
                break;
            }
            module = child;
            rest = &rest[1..];
        }
        let file = self.file_of(&module);
        let Some(item) = rest.first().filter(|s| *s != "*") else { return Some(file) };
        let source = self.files.get(&file)?;
        if source.defines.contains(item) || depth > 8 {
            return Some(file);
        }
        match source.imports.get(item) {
            // A name brought in from outside the crate is no file's.
            Some((inner, from)) => self.target(inner, from, depth + 1),
            None => Some(file),
        }
    }

    /// Each file's dependencies, each with the first path that made it one.
    fn edges(&self) -> BTreeMap<Module, BTreeMap<Module, String>> {
        self.files
            .iter()
            .map(|(module, source)| {
                let mut targets = BTreeMap::new();
                for (at, path) in &source.paths {
                    if let Some(t) = self.target(at, path, 0).filter(|t| t != module) {
                        targets.entry(t).or_insert_with(|| path.join("::"));
                    }
                }
                // One type's `impl` split over files: a call to a method another file defines.
                for call in &source.calls {
                    if source.methods.contains(call) {
                        continue;
                    }
                    for (other, o) in &self.files {
                        if other != module && o.methods.contains(call) {
                            targets
                                .entry(other.clone())
                                .or_insert_with(|| format!("{}::{} (split impl)", call.0, call.1));
                        }
                    }
                }
                (module.clone(), targets)
            })
            .collect()
    }

    /// A circle's files, each with what it takes from the others.
    fn explain(&self, circle: &[Module]) -> String {
        let edges = self.edges();
        let mut out = Vec::new();
        for m in circle {
            for (t, why) in &edges[m] {
                if circle.contains(t) {
                    out.push(format!("    {} -> {} ({why})", self.file_name(m), self.file_name(t)));
                }
            }
        }
        out.join("\n")
    }

    /// Groups of two or more files that reach each other (strongly connected components).
    fn circles(&self) -> Vec<Vec<Module>> {
        let edges = self.edges();
        let reach = |from: &Module| {
            let mut seen = BTreeSet::new();
            let mut todo = vec![from.clone()];
            while let Some(m) = todo.pop() {
                for t in edges[&m].keys() {
                    if seen.insert(t.clone()) {
                        todo.push(t.clone());
                    }
                }
            }
            seen
        };
        let reaches: BTreeMap<&Module, BTreeSet<Module>> = edges.keys().map(|m| (m, reach(m))).collect();
        let mut placed = BTreeSet::new();
        let mut circles = Vec::new();
        for m in edges.keys() {
            if placed.contains(m) {
                continue;
            }
            let group: Vec<Module> = edges
                .keys()
                .filter(|o| *o == m || (reaches[m].contains(*o) && reaches[*o].contains(m)))
                .cloned()
                .collect();
            if group.len() > 1 {
                placed.extend(group.iter().cloned());
                circles.push(group);
            }
        }
        circles
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Path,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Dot,
    Paren,
    Lt,
    Gt,
    CloseBracket,
    Other,
}

impl Source {
    fn parse(path: &str, module: &Module, text: &str) -> Source {
        let tokens = tokenize(text);
        let mut source = Source { path: path.to_string(), ..Source::default() };
        // The inline modules open at each brace depth, for `super` inside `mod tests { … }`.
        let mut scopes: Vec<(usize, String)> = Vec::new();
        // The `impl` blocks open: the depth each opened at, its type, and whether it is inherent.
        let mut impls: Vec<(usize, String, bool)> = Vec::new();
        let mut depth = 0usize;
        // Names the file uses outside its `use` lines, and the re-exports that may be among them.
        let mut used = BTreeSet::new();
        let mut re_exports = Vec::new();
        let mut i = 0;
        while i < tokens.len() {
            let at: Module = module.iter().cloned().chain(scopes.iter().map(|(_, n)| n.clone())).collect();
            match &tokens[i] {
                Token::Open => depth += 1,
                Token::Close => {
                    depth = depth.saturating_sub(1);
                    if scopes.last().is_some_and(|(d, _)| *d == depth) {
                        scopes.pop();
                    }
                    if impls.last().is_some_and(|(d, _, _)| *d == depth) {
                        impls.pop();
                    }
                }
                // An item's `impl`, not `impl Trait` in a signature: it starts an item.
                Token::Ident(word)
                    if word == "impl"
                        && (i == 0
                            || matches!(&tokens[i - 1], Token::Open | Token::Close | Token::Semi | Token::CloseBracket)
                            || matches!(&tokens[i - 1], Token::Ident(w) if w == "unsafe" || w == "default")) =>
                {
                    // The header's paths are read as any others (the loop goes on through them).
                    if let Some((_, ty, inherent)) = impl_header(&tokens[i + 1..]) {
                        impls.push((depth, ty, inherent));
                    }
                }
                Token::Ident(word)
                    // `self.m(…)`, or with a turbofish `self.m::<T>(…)`.
                    if word == "self"
                        && tokens.get(i + 1) == Some(&Token::Dot)
                        && matches!(tokens.get(i + 3), Some(Token::Paren | Token::Path)) =>
                {
                    if let (Some((_, ty, _)), Some(Token::Ident(method))) = (impls.last(), tokens.get(i + 2)) {
                        source.calls.push((ty.clone(), method.clone()));
                    }
                }
                Token::Ident(word) if word == "use" => {
                    let end = tokens[i..].iter().position(|t| *t == Token::Semi).map_or(tokens.len(), |n| i + n);
                    let mut leaves = Vec::new();
                    use_tree(&tokens[i + 1..end], Vec::new(), &mut leaves);
                    // A re-export (`pub use`, `pub(crate) use`) is a facade's name list: the
                    // files that use the names depend on where they are defined, not on it.
                    let re_export = tokens[..i].iter().rev().take(5).any(|t| *t == Token::Ident("pub".into()))
                        && !tokens[..i]
                            .iter()
                            .rev()
                            .take_while(|t| **t != Token::Ident("pub".into()))
                            .any(|t| *t == Token::Semi || *t == Token::Close || *t == Token::Open);
                    for (path, name) in leaves {
                        if let Some(name) = &name {
                            source.imports.insert(name.clone(), (at.clone(), path.clone()));
                        }
                        match name {
                            Some(name) if re_export => re_exports.push((name, at.clone(), path)),
                            None if re_export => {}
                            _ => source.paths.push((at.clone(), path)),
                        }
                    }
                    i = end;
                    continue;
                }
                Token::Ident(word) if word == "mod" => {
                    if let (Some(Token::Ident(name)), Some(Token::Semi), true) =
                        (tokens.get(i + 1), tokens.get(i + 2), scopes.is_empty())
                    {
                        source.children.push(name.clone());
                        i += 3;
                        continue;
                    }
                    if let (Some(Token::Ident(name)), Some(Token::Open)) = (tokens.get(i + 1), tokens.get(i + 2)) {
                        scopes.push((depth, name.clone()));
                        depth += 1;
                        i += 3;
                        continue;
                    }
                }
                Token::Ident(word) if is_item_keyword(word) => {
                    if let Some(Token::Ident(name)) = tokens.get(i + 1) {
                        source.defines.insert(name.clone());
                        if let Some((d, ty, true)) = impls.last()
                            && word == "fn"
                            && depth == d + 1
                        {
                            source.methods.insert((ty.clone(), name.clone()));
                        }
                    }
                }
                Token::Ident(first)
                    if tokens.get(i + 1) == Some(&Token::Path) && (i == 0 || tokens[i - 1] != Token::Path) =>
                {
                    used.insert(first.clone());
                    let mut path = vec![first.clone()];
                    let mut j = i + 1;
                    while tokens.get(j) == Some(&Token::Path) {
                        match tokens.get(j + 1) {
                            Some(Token::Ident(next)) => path.push(next.clone()),
                            _ => break,
                        }
                        j += 2;
                    }
                    if let [.., ty, method] = path.as_slice() {
                        let ty = if ty == "Self" { impls.last().map(|(_, t, _)| t.clone()) } else { Some(ty.clone()) };
                        let called = matches!(tokens.get(j), Some(Token::Paren | Token::Path));
                        if let Some(ty) = ty.filter(|_| called) {
                            source.calls.push((ty, method.clone()));
                        }
                    }
                    source.paths.push((at, path));
                    i = j;
                    continue;
                }
                Token::Ident(word) => {
                    used.insert(word.clone());
                }
                _ => {}
            }
            i += 1;
        }
        // A re-export the file also uses itself is one of its dependencies.
        for (name, at, path) in re_exports {
            if used.contains(&name) {
                source.paths.push((at, path));
            }
        }
        source
    }
}

/// An `impl` header (the tokens after `impl`): where its body opens, the type it is for, and
/// whether it is inherent (no `for`).
fn impl_header(tokens: &[Token]) -> Option<(usize, String, bool)> {
    let mut angles = 0usize;
    let mut ty = None;
    let mut inherent = true;
    let mut bounds = false;
    for (k, t) in tokens.iter().enumerate() {
        match t {
            Token::Lt => angles += 1,
            Token::Gt => angles = angles.saturating_sub(1),
            Token::Open if angles == 0 => return ty.map(|ty| (k, ty, inherent)),
            Token::Semi | Token::Close => return None,
            // `for` of a trait impl; `for<'a>` is a bound's lifetime, in a `where` clause.
            Token::Ident(w) if angles == 0 && w == "for" && tokens.get(k + 1) != Some(&Token::Lt) && !bounds => {
                inherent = false;
                ty = None;
            }
            Token::Ident(w) if angles == 0 && w == "where" => bounds = true,
            Token::Ident(w) if angles == 0 && !bounds && w != "dyn" && w != "mut" => ty = Some(w.clone()),
            _ => {}
        }
    }
    None
}

fn is_item_keyword(word: &str) -> bool {
    matches!(word, "struct" | "enum" | "fn" | "trait" | "type" | "const" | "static" | "union" | "macro_rules")
}

/// The leaves of a `use` tree: each full path, and the name it binds (none for a glob).
fn use_tree(tokens: &[Token], prefix: Vec<String>, leaves: &mut Vec<(Vec<String>, Option<String>)>) {
    let mut path = prefix;
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Ident(word) if word == "as" => {
                if let Some(Token::Ident(alias)) = tokens.get(i + 1) {
                    leaves.push((path, Some(alias.clone())));
                }
                return;
            }
            Token::Ident(word) => path.push(word.clone()),
            Token::Star => {
                path.push("*".into());
                leaves.push((path, None));
                return;
            }
            Token::Open => {
                // The group runs to its matching brace; its members split at top-level commas.
                let mut depth = 0;
                let mut start = i + 1;
                for j in i..tokens.len() {
                    match tokens[j] {
                        Token::Open => depth += 1,
                        Token::Close => {
                            depth -= 1;
                            if depth == 0 {
                                use_tree(&tokens[start..j], path.clone(), leaves);
                                return;
                            }
                        }
                        Token::Comma if depth == 1 => {
                            use_tree(&tokens[start..j], path.clone(), leaves);
                            start = j + 1;
                        }
                        _ => {}
                    }
                }
                return;
            }
            _ => {}
        }
        i += 1;
    }
    let name = path.last().filter(|n| *n != "self").cloned().or_else(|| path.iter().rev().nth(1).cloned());
    if !path.is_empty() {
        leaves.push((path, name));
    }
}

/// Identifiers and the punctuation paths are made of; comments, strings and characters dropped.
fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some((skip, raw)) = string_prefix(&chars, i) {
            // A byte string (`b"…"`) or a raw one (`r#"…"#`, `br"…"`), from its quote or `#`s on.
            i += skip;
            if raw {
                let hashes = chars[i..].iter().take_while(|&&h| h == '#').count();
                i += hashes + 1;
                while i < chars.len() && !(chars[i] == '"' && chars[i + 1..].iter().take(hashes).all(|&h| h == '#')) {
                    i += 1;
                }
                i += 1 + hashes;
            } else {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            // An escaped character (`'\\'`, `'\''`, `'\u{7f}'`): the escaped one, then to the quote.
            i += 3;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            // A character literal; a lifetime (`'a`) has no closing quote two places on.
            i += 3;
        } else if c.is_alphabetic() || c == '_' {
            // A raw identifier (`r#type`) is the name after its `r#`.
            if c == 'r' && next == Some('#') && chars.get(i + 2).is_some_and(|n| n.is_alphabetic() || *n == '_') {
                i += 2;
            }
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            // `$crate` is a macro's own crate: no file's.
            let macro_crate = start > 0 && chars[start - 1] == '$';
            tokens.push(Token::Ident(if macro_crate { "$crate".into() } else { word }));
        } else {
            tokens.push(match (c, next) {
                (':', Some(':')) => {
                    i += 1;
                    Token::Path
                }
                ('{', _) => Token::Open,
                ('}', _) => Token::Close,
                (',', _) => Token::Comma,
                (';', _) => Token::Semi,
                ('*', _) => Token::Star,
                ('.', _) => Token::Dot,
                ('(', _) => Token::Paren,
                ('<', _) => Token::Lt,
                (']', _) => Token::CloseBracket,
                // `->` and `=>` close no generics.
                ('>', _) if i == 0 || !matches!(chars[i - 1], '-' | '=') => Token::Gt,
                _ => Token::Other,
            });
            i += 1;
        }
    }
    tokens
}

/// The length of the prefix (`b`, `r`, `br`) of a string literal starting at `i`, and whether
/// it is raw; `None` for anything else, an identifier that merely begins with `b` or `r`
/// included.
fn string_prefix(chars: &[char], i: usize) -> Option<(usize, bool)> {
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    let prefix = match (chars[i], chars.get(i + 1)) {
        ('b', Some('r')) => 2,
        ('b' | 'r', _) => 1,
        _ => return None,
    };
    let raw = chars[i..i + prefix].contains(&'r');
    let quote = chars[i + prefix..].iter().position(|&h| h != '#')? + i + prefix;
    let hashes = quote - (i + prefix);
    (chars[quote] == '"' && (raw || hashes == 0)).then_some((prefix, raw))
}

/// The map names every crate: in its bird's-eye view, and with a code-map section of its own.
#[test]
fn the_architecture_map_names_every_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let (view, code_map) = map.split_once("## Code map").expect("a `## Code map` heading");
    let missing: Vec<String> = crates(&root)
        .iter()
        .map(|c| c.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|name| !view.contains(&format!("`{name}`")) || !code_map.contains(&format!("### `{name}/`")))
        .collect();
    assert!(missing.is_empty(), "ARCHITECTURE.md does not map these crates: {missing:?}");
}

/// Every test binary that starts Chromium through the kit (`tests::browser`, `tests::console`)
/// runs in nextest's `browser` group, in every profile: Chromium on two cores is the bound.
#[test]
fn every_test_that_starts_chromium_is_in_the_browser_group() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = std::fs::read_to_string(root.join("../.config/nextest.toml")).expect(".config/nextest.toml");
    let filters: Vec<&str> = config
        .split("[[profile.")
        .filter(|block| block.contains("test-group = \"browser\""))
        .filter_map(|block| block.lines().find(|l| l.starts_with("filter = ")))
        .collect();
    assert!(filters.len() >= 2, "a browser filter in each profile: {filters:?}");
    let mut starts = Vec::new();
    for entry in std::fs::read_dir(root.join("tests")).expect("tests/tests").flatten() {
        let path = entry.path();
        let (binary, files): (String, Vec<PathBuf>) = if path.is_dir() {
            let files = std::fs::read_dir(&path).unwrap().flatten().map(|e| e.path()).collect();
            (entry.file_name().to_string_lossy().into_owned(), files)
        } else {
            (path.file_stem().unwrap().to_string_lossy().into_owned(), vec![path.clone()])
        };
        let text: String = files.iter().filter_map(|f| std::fs::read_to_string(f).ok()).collect();
        // This file names the modules; it starts nothing.
        if binary != "structure" && (text.contains("tests::browser") || text.contains("tests::console")) {
            starts.push(binary);
        }
    }
    assert!(starts.len() >= 5, "only {starts:?} start Chromium");
    for filter in filters {
        let missing: Vec<&String> = starts.iter().filter(|b| !filter.contains(&format!("binary({b})"))).collect();
        assert!(missing.is_empty(), "these start Chromium but are not in the browser group ({filter}): {missing:?}");
    }
}
