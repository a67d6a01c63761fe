//! The layer list in `lib.rs`'s header is the crate's map: each module imports only from the
//! modules before it. This test reads the list and every module's source, and fails when a
//! module is missing from the list or reaches (`crate::name`, outside comments and in-file
//! tests) a module listed after it.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The modules `lib.rs` declares (`mod x;` / `pub mod x;`).
fn declared(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("mod "))?;
            Some(rest.trim_end_matches(';').to_string())
        })
        .collect()
}

/// The header's layer list: the module names in backticks, in order, from "Layers" to the
/// sentence that states the rule.
fn layer_list(lib: &str, modules: &BTreeSet<String>) -> Vec<String> {
    let header: String = lib
        .lines()
        .take_while(|line| line.starts_with("//!"))
        .map(|line| line.trim_start_matches("//!"))
        .collect::<Vec<_>>()
        .join(" ");
    let start = header
        .find("Layers, from the bottom")
        .expect("lib.rs names its layers");
    let end = header
        .find("Each module imports only")
        .expect("lib.rs states the rule");
    let mut order = Vec::new();
    for (index, piece) in header[start..end].split('`').enumerate() {
        if index % 2 == 1 && modules.contains(piece) && !order.iter().any(|seen| seen == piece) {
            order.push(piece.to_string());
        }
    }
    order
}

/// The source files of module `name` (its file, or every file of its folder).
fn files_of(name: &str) -> Vec<PathBuf> {
    let file = src().join(format!("{name}.rs"));
    let mut files = Vec::new();
    if file.exists() {
        files.push(file);
    }
    let folder = src().join(name);
    if folder.is_dir() {
        let mut stack = vec![folder];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|ext| ext == "rs") {
                    files.push(path);
                }
            }
        }
    }
    files
}

/// The crate modules a source file reaches, outside comments and its `#[cfg(test)]` part.
fn reached(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let code = match text.find("#[cfg(test)]") {
        Some(at) => &text[..at],
        None => text,
    };
    let mut found = BTreeSet::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or("");
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // `crate::{a::X, b}`: every first segment in the braces (on this line).
                let inside = group.split('}').next().unwrap_or("");
                for item in inside.split(',') {
                    let first = item.trim().split("::").next().unwrap_or("");
                    if modules.contains(first) {
                        found.insert(first.to_string());
                    }
                }
            } else {
                let first: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if modules.contains(&first) {
                    found.insert(first);
                }
            }
        }
    }
    found
}

#[test]
fn every_module_imports_only_from_the_modules_before_it() {
    let lib = fs::read_to_string(src().join("lib.rs")).unwrap();
    let modules = declared(&lib);
    let order = layer_list(&lib, &modules);
    let unlisted: Vec<_> = modules
        .iter()
        .filter(|name| !order.contains(name))
        .collect();
    assert!(
        unlisted.is_empty(),
        "modules missing from lib.rs's layer list: {unlisted:?}"
    );
    let mut wrong = Vec::new();
    for (position, name) in order.iter().enumerate() {
        for file in files_of(name) {
            let text = fs::read_to_string(&file).unwrap();
            for target in reached(&text, &modules) {
                if target != *name && order.iter().position(|m| *m == target) > Some(position) {
                    wrong.push(format!("{} -> {target}", file.display()));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "imports from a later layer: {wrong:#?}");
}

#[test]
fn the_check_sees_an_import_from_a_later_layer() {
    let modules: BTreeSet<String> = ["io", "reactor", "exchange"].map(String::from).into();
    let text = "use crate::{io::read, exchange::Exchange};\n// crate::reactor in a comment\n\
                fn f() { crate::reactor::run() }\n#[cfg(test)]\nuse crate::io;";
    let expected: BTreeSet<String> = ["exchange", "io", "reactor"].map(String::from).into();
    assert_eq!(reached(text, &modules), expected);
    let lib = "//! Layers, from the bottom: [`io`] (x), `reactor`, [`exchange`]. Each module \
               imports only from those before.\n\npub mod exchange;\nmod io;\npub mod reactor;\n";
    let declared = declared(lib);
    assert_eq!(declared, modules);
    assert_eq!(layer_list(lib, &declared), ["io", "reactor", "exchange"]);
}
