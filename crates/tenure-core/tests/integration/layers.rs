//! The core's files form layers: no file uses another that uses it back, directly or
//! through others (docs/ARCHITECTURE.md, "The core, bottom-up"). A file uses another
//! when its code (comments and `#[cfg(test)] mod` blocks left out) names a path into it:
//! `crate::a::b::Item` is a use of `a/b.rs` (or `a/b/mod.rs`), the longest module prefix
//! of the path that is a file; `super::` paths count the same way. Declaring a child
//! module and re-exporting from it (`mod x; pub use x::Item;`) does not count: a parent is
//! its children's façade.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Module = Vec<String>;

/// Every `.rs` file under `dir`, as (module path, source).
fn files(dir: &Path) -> BTreeMap<Module, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read src") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(dir).expect("under src").with_extension("");
                let mut m: Module = rel.iter().map(|s| s.to_string_lossy().into()).collect();
                if m.last().is_some_and(|l| l == "mod" || l == "lib") {
                    m.pop();
                }
                out.insert(m, std::fs::read_to_string(&p).expect("read file"));
            }
        }
    }
    out
}

/// The source without comments and without inline `#[cfg(test)] mod … { … }` blocks.
fn code(src: &str) -> String {
    let mut src: String = (src.lines())
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut from = 0;
    while let Some(i) = src[from..].find("#[cfg(test)]").map(|i| i + from) {
        let rest = &src[i..];
        let open = rest.find('{');
        let is_block = rest["#[cfg(test)]".len()..]
            .trim_start()
            .starts_with("mod ")
            && open.is_some_and(|b| rest.find(';').is_none_or(|s| b < s));
        let Some(open) = open.filter(|_| is_block) else {
            from = i + 1;
            continue;
        };
        let mut depth = 0;
        let mut end = src.len();
        for (k, c) in src[i + open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + open + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        src.replace_range(i..end, "");
        from = i;
    }
    src
}

/// Modules declared with `#[cfg(test)] mod name;` in `m`'s file.
fn test_children(m: &Module, src: &str) -> Vec<Module> {
    let mut out = Vec::new();
    let mut rest = src;
    while let Some(i) = rest.find("#[cfg(test)]") {
        rest = &rest[i + "#[cfg(test)]".len()..];
        let t = rest.trim_start();
        let t = t.strip_prefix("pub(crate) ").unwrap_or(t);
        if let Some(t) = t.strip_prefix("mod ") {
            let name: String = t
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if t[name.len()..].trim_start().starts_with(';') {
                let mut c = m.clone();
                c.push(name);
                out.push(c);
            }
        }
    }
    out
}

/// The paths named in `code` that start with `crate::` or `super::`, each as its segments
/// (a group `a::{b, c::d}` gives `a::b` and `a::c::d`).
fn paths(code: &str) -> Vec<(bool, Vec<String>)> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let at = |s: &str| code_at(&bytes, i, s) && (i == 0 || !ident(bytes[i - 1]));
        let (is_crate, skip) = if at("crate::") {
            (true, "crate::".len())
        } else if at("super::") {
            (false, "super::".len())
        } else {
            i += 1;
            continue;
        };
        i += skip;
        let mut segs = if is_crate {
            vec![]
        } else {
            vec!["super".to_string()]
        };
        loop {
            let s: String = bytes[i..].iter().take_while(|c| ident(**c)).collect();
            if s.is_empty() {
                break;
            }
            i += s.len();
            segs.push(s);
            if code_at(&bytes, i, "::") && i + 2 < bytes.len() && ident(bytes[i + 2]) {
                i += 2;
            } else {
                break;
            }
        }
        if code_at(&bytes, i, "::{") {
            let end = (i..bytes.len())
                .find(|j| bytes[*j] == '}')
                .unwrap_or(bytes.len());
            let group: String = bytes[i + 3..end].iter().collect();
            for item in group.split(',') {
                let item = item.split(" as ").next().unwrap_or("").trim();
                let mut p = segs.clone();
                p.extend(
                    item.split("::")
                        .map(|s| s.trim_matches(|c: char| c == '{' || c.is_whitespace()))
                        .filter(|s| !s.is_empty() && *s != "self")
                        .map(String::from),
                );
                out.push((is_crate, p));
            }
            i = end;
        }
        out.push((is_crate, segs));
    }
    out
}

fn code_at(bytes: &[char], i: usize, s: &str) -> bool {
    s.chars()
        .enumerate()
        .all(|(k, c)| bytes.get(i + k) == Some(&c))
}

/// Which files each file uses.
fn graph(files: &BTreeMap<Module, String>) -> BTreeMap<Module, BTreeSet<Module>> {
    let tests: BTreeSet<Module> = (files.iter())
        .flat_map(|(m, s)| test_children(m, s))
        .collect();
    let is_test = |m: &Module| (1..=m.len()).any(|k| tests.contains(&m[..k]));
    let resolve = |p: &[String]| {
        (0..=p.len())
            .rev()
            .map(|n| p[..n].to_vec())
            .find(|m| files.contains_key(m))
    };
    let mut g = BTreeMap::new();
    for (m, src) in files {
        if is_test(m) {
            continue;
        }
        let mut uses = BTreeSet::new();
        for (is_crate, segs) in paths(&code(src)) {
            let mut full: Module = if is_crate {
                vec![]
            } else {
                m[..m.len().saturating_sub(1)].to_vec()
            };
            let mut rest = &segs[..];
            if !is_crate {
                rest = &rest[1..];
                while rest.first().is_some_and(|s| s == "super") {
                    full.pop();
                    rest = &rest[1..];
                }
            }
            full.extend(rest.iter().cloned());
            if let Some(r) = resolve(&full)
                && &r != m
                && !is_test(&r)
            {
                uses.insert(r);
            }
        }
        g.insert(m.clone(), uses);
    }
    g
}

/// One cycle of the graph, if it has any.
fn cycle(g: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        v: &Module,
        g: &BTreeMap<Module, BTreeSet<Module>>,
        marks: &mut BTreeMap<Module, Mark>,
        path: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        match marks.get(v) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = path.iter().position(|p| p == v).expect("open on the path");
                return Some(path[from..].to_vec());
            }
            None => {}
        }
        marks.insert(v.clone(), Mark::Open);
        path.push(v.clone());
        for w in g.get(v).into_iter().flatten() {
            if let Some(c) = visit(w, g, marks, path) {
                return Some(c);
            }
        }
        path.pop();
        marks.insert(v.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    g.keys()
        .find_map(|v| visit(v, g, &mut marks, &mut Vec::new()))
}

fn show(c: &[Module]) -> String {
    let name = |m: &Module| {
        if m.is_empty() {
            "lib".into()
        } else {
            m.join("/")
        }
    };
    let mut s: Vec<String> = c.iter().map(name).collect();
    s.push(name(&c[0]));
    s.join(" → ")
}

#[test]
fn no_core_file_uses_one_that_uses_it_back() {
    // `LAYERS_SRC=<dir>` checks another tree (an older checkout, say).
    let src = std::env::var_os("LAYERS_SRC")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let files = files(&src);
    assert!(files.len() > 50, "read {} files", files.len());
    let g = graph(&files);
    if let Some(c) = cycle(&g) {
        panic!("import cycle between core files: {}", show(&c));
    }
}

#[test]
fn a_planted_cycle_is_found() {
    let file = |m: &str, s: &str| {
        (
            m.split('/').map(String::from).collect::<Module>(),
            s.to_string(),
        )
    };
    let mut files: BTreeMap<Module, String> = [
        file("ids", "pub struct Id;"),
        file("a", "use crate::ids::Id;\nuse crate::b::{B, deep::D};"),
        file("b", "pub mod deep;\npub struct B;"),
        file(
            "b/deep",
            "// crate::a::A in a comment is not a use\npub struct D;",
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(cycle(&graph(&files)), None);
    // b/deep now uses a, which uses b/deep (through the group import).
    files.insert(
        file("b/deep", "use super::super::a::A;\npub struct D;").0,
        "use super::super::a::A;".into(),
    );
    let c = cycle(&graph(&files)).expect("the planted cycle");
    assert_eq!(show(&c), "a → b/deep → a");
    // A use only inside a test module does not count.
    files.insert(
        file("b/deep", "").0,
        "pub struct D;\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n".into(),
    );
    assert_eq!(cycle(&graph(&files)), None);
    // A use after a test module does.
    files.insert(
        file("b/deep", "").0,
        "#[cfg(test)]\nmod tests {\n    fn f() {}\n}\nuse crate::a::A;\n".into(),
    );
    assert_eq!(
        show(&cycle(&graph(&files)).expect("found")),
        "a → b/deep → a"
    );
}
