//! The workspace's shape, held by a test: no two files of one crate import each other, directly
//! or through others. A circle means neither file can be read, changed or moved alone.
//!
//! Each `.rs` file under a crate's `src/` is a module. A file depends on another when one of its
//! paths (`use` trees and paths in code, from `crate::`, `super::`, `self::` or a child module's
//! name) names an item the other file defines, or a module the other file is. A path through a
//! `pub use` is followed to the file that defines the item, so a facade that re-exports is not
//! a dependency of the files that use it. A glob (`use super::*`) depends on the module it reads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

#[test]
fn no_two_files_of_a_crate_import_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut circles = Vec::new();
    for krate in crates(&root) {
        let files = Crate::read(&krate.join("src"));
        for circle in files.circles() {
            let names: Vec<String> = circle.iter().map(|m| files.file_name(m)).collect();
            let krate = krate.file_name().unwrap().to_string_lossy().into_owned();
            circles.push(format!("{krate}: {}\n{}", names.join(" <-> "), files.explain(&circle)));
        }
    }
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
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut sources = Vec::new();
        walk(src, &mut |file| {
            let rel = file.strip_prefix(src).expect("under src").to_string_lossy().into_owned();
            sources.push((rel, std::fs::read_to_string(file).expect("a source file")));
        });
        let borrowed: Vec<(&str, &str)> = sources.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
        Crate::from_sources(&borrowed)
    }

    fn from_sources(sources: &[(&str, &str)]) -> Crate {
        let files = sources
            .iter()
            .map(|(path, text)| {
                let module = module_of(path);
                let source = Source::parse(path, &module, text);
                (module, source)
            })
            .collect();
        Crate { files }
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

fn walk(dir: &Path, found: &mut dyn FnMut(&Path)) {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("a source folder").map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found(&path);
        }
    }
}

/// `a/b.rs` and `a/b/mod.rs` are module `a::b`; `lib.rs` and `main.rs` are the root. A binary's
/// files (`bin/x.rs`) are a crate of their own in Rust, but share this map harmlessly.
fn module_of(path: &str) -> Module {
    let mut parts: Vec<String> = path.trim_end_matches(".rs").split('/').map(String::from).collect();
    if parts.last().is_some_and(|l| l == "mod") || (parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main")) {
        parts.pop();
    }
    parts
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
    Other,
}

impl Source {
    fn parse(path: &str, module: &Module, text: &str) -> Source {
        let tokens = tokenize(text);
        let mut source = Source { path: path.to_string(), ..Source::default() };
        // The inline modules open at each brace depth, for `super` inside `mod tests { … }`.
        let mut scopes: Vec<(usize, String)> = Vec::new();
        let mut depth = 0usize;
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
                        if let Some(name) = name {
                            source.imports.insert(name, (at.clone(), path.clone()));
                        }
                        if !re_export {
                            source.paths.push((at.clone(), path));
                        }
                    }
                    i = end;
                    continue;
                }
                Token::Ident(word) if word == "mod" => {
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
                    }
                }
                Token::Ident(first)
                    if tokens.get(i + 1) == Some(&Token::Path) && (i == 0 || tokens[i - 1] != Token::Path) =>
                {
                    let mut path = vec![first.clone()];
                    let mut j = i + 1;
                    while tokens.get(j) == Some(&Token::Path) {
                        match tokens.get(j + 1) {
                            Some(Token::Ident(next)) => path.push(next.clone()),
                            _ => break,
                        }
                        j += 2;
                    }
                    source.paths.push((at, path));
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
        source
    }
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
        } else if c == 'r' && (next == Some('"') || (next == Some('#') && raw_string_start(&chars, i + 1))) {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            i += 2 + hashes;
            while i < chars.len()
                && !(chars[i] == '"' && chars[i + 1..].iter().take(hashes).filter(|&&h| h == '#').count() == hashes)
            {
                i += 1;
            }
            i += 1 + hashes;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' && (chars.get(i + 2) == Some(&'\'') || next == Some('\\')) {
            // A character literal; a lifetime (`'a`) has no closing quote two places on.
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            // `$crate` is a macro's own crate, and a raw identifier is a name like any other.
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
                _ => Token::Other,
            });
            i += 1;
        }
    }
    tokens
}

fn raw_string_start(chars: &[char], from: usize) -> bool {
    chars[from..].iter().find(|&&h| h != '#') == Some(&'"')
}
