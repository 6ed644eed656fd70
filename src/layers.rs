//! The layers, checked: every module of this crate and of the app may name
//! only the modules below it (the README's architecture section draws the
//! same table). It reads the sources, so a new import that points up, or a
//! new top-level module without a row, fails here rather than in review.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The engine crate, bottom first: each module and what it may name.
const ENGINE: &[(&str, &[&str])] = &[
    ("model", &[]),
    ("storage", &["model"]),
    ("config", &["model", "storage"]),
    ("net", &["model"]),
    ("store", &["model", "config"]),
    ("providers", &["model", "config", "net"]),
    ("wire", &["model", "store"]),
    (
        "usecases",
        &[
            "model",
            "storage",
            "config",
            "net",
            "store",
            "providers",
            "wire",
        ],
    ),
    (
        "engine",
        &[
            "model",
            "storage",
            "config",
            "net",
            "store",
            "providers",
            "wire",
            "usecases",
        ],
    ),
    (
        "api",
        &[
            "model", "storage", "config", "net", "store", "wire", "usecases",
        ],
    ),
];

/// The app crate, bottom first. `data` is what pages show and the server
/// functions that fetch it; `server` is the axum router and form handlers.
const APP: &[(&str, &[&str])] = &[
    ("data", &[]),
    ("islands", &["data"]),
    ("pages", &["data", "islands"]),
    ("app", &["data", "pages"]),
    ("server", &["data", "islands", "pages", "app"]),
];

/// Names the crate root re-exports, and the module they come from.
const ROOT_REEXPORTS: &[(&str, &str)] = &[
    ("Tollgate", "usecases"),
    ("Error", "usecases"),
    ("Result", "usecases"),
];

/// Files that are a crate's root (or, `bin`, other crates: binaries that
/// use the library as any client does), or its tests of the whole
/// (`layers`, `properties`, which reach anywhere as unit tests do): not a
/// layer.
const ROOTS: &[&str] = &["lib", "main", "layers", "properties", "bin"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("source folder") {
        let path = entry.expect("folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file under `root`: `store/ops/mod.rs` is
/// `["store", "ops"]`, `wire/mod.rs` is `["wire"]`.
fn module_path(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).expect("file under root");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The source without its unit tests, which may reach anywhere.
fn without_tests(src: &str) -> &str {
    match src.find("#[cfg(test)]\nmod tests") {
        Some(i) => &src[..i],
        None => src,
    }
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The crate's top-level modules this file names, through `crate::`,
/// `crate::{…}` groups or enough `super::` to reach the root.
fn named_tops(module: &[String], src: &str) -> BTreeSet<String> {
    let mut tops = BTreeSet::new();
    for (i, _) in src.match_indices("crate::") {
        let before = src[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue; // `tollgate_app::…` or a longer name ending in "crate"
        }
        let rest = &src[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 1 => break,
                    '}' => depth -= 1,
                    ',' if depth == 1 => start = true,
                    c if start && !c.is_whitespace() => {
                        tops.insert(ident_at(&group[j..]).to_string());
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            tops.insert(ident_at(rest).to_string());
        }
    }
    for (i, _) in src.match_indices("super::") {
        if src[..i].ends_with("super::") {
            continue; // counted from the first `super`
        }
        let mut rest = &src[i..];
        let mut depth = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            depth += 1;
            rest = r;
        }
        if depth == module.len() {
            tops.insert(ident_at(rest).to_string());
        }
    }
    tops.retain(|t| !t.is_empty() && t != "self");
    tops
}

/// Every name a module uses that its row does not allow, as readable lines.
fn violations(root: &Path, layers: &[(&str, &[&str])], reexports: &[(&str, &str)]) -> Vec<String> {
    let allowed: BTreeMap<&str, &[&str]> = layers.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let mut found = Vec::new();
    for file in files {
        let module = module_path(root, &file);
        let top = module[0].as_str();
        if ROOTS.contains(&top) {
            continue;
        }
        let Some(may) = allowed.get(top) else {
            found.push(format!(
                "{}: module `{top}` has no row in the layer table",
                file.display()
            ));
            continue;
        };
        let src = std::fs::read_to_string(&file).expect("source file");
        for named in named_tops(&module, without_tests(&src)) {
            let named = reexports
                .iter()
                .find(|(name, _)| *name == named)
                .map_or(named.as_str(), |(_, from)| from);
            if named != top && allowed.contains_key(named) && !may.contains(&named) {
                found.push(format!(
                    "{}: `{top}` names `{named}`, a layer it may not use",
                    file.display()
                ));
            }
        }
    }
    found
}

/// Each row names only rows above it in the table, so the table is an order.
fn assert_ordered(layers: &[(&str, &[&str])]) {
    for (i, (name, may)) in layers.iter().enumerate() {
        for below in *may {
            let at = layers.iter().position(|(n, _)| n == below);
            assert!(
                at.is_some_and(|at| at < i),
                "`{name}` may use `{below}`, which is not below it"
            );
        }
    }
}

#[test]
fn the_layer_tables_are_orders() {
    assert_ordered(ENGINE);
    assert_ordered(APP);
}

#[test]
fn engine_modules_name_only_layers_below() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&root, ENGINE, ROOT_REEXPORTS);
    assert!(
        found.is_empty(),
        "imports that point up:\n{}",
        found.join("\n")
    );
}

#[test]
fn app_modules_name_only_layers_below() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("app/src");
    let found = violations(&root, APP, &[]);
    assert!(
        found.is_empty(),
        "imports that point up:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checker_sees_an_import_that_points_up() {
    let store = ["store".to_string(), "ops".to_string()];
    let src = "use crate::{model::JobId, wire::envelope};\nfn f() { super::super::api::x(); }";
    let tops = named_tops(&store, src);
    assert!(tops.contains("wire") && tops.contains("model"), "{tops:?}");
    let nested = ["store".into(), "ops".into(), "jobs".into()];
    assert!(named_tops(&nested, "super::super::super::api::x()").contains("api"));
    assert!(!named_tops(&nested, "super::super::codec::x()").contains("codec"));
}
