//! Only what an application uses is public. `docs/ARCHITECTURE.md` ("Public API") lists the
//! public modules of the library crates (the line starting with `Public modules`) and those public
//! only with the feature `testing` (the line starting with `With testing`); this test walks the
//! module declarations of `src/`, `mesh/src/` and `wire/src/` from each crate root and fails on a
//! public module the lists do not name, or a listed one that is not public. A new `pub mod` is
//! therefore a decision written down; items inside a public module are kept honest by the
//! compiler (`#![warn(unnameable_types)]`, `#[non_exhaustive]`) and by review.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The backticked paths of the line of `docs/ARCHITECTURE.md` that starts with `prefix`.
fn listed(root: &Path, prefix: &str) -> BTreeSet<String> {
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let line = doc
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("docs/ARCHITECTURE.md has a line starting with `{prefix}`"));
    line.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// How a module is declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Visibility {
    /// `pub mod` with no cfg, or a cfg that does not name the feature `testing`.
    Public,
    /// `pub mod` under `#[cfg(feature = "testing")]` (or `any(test, feature = "testing")`).
    Testing,
    /// Anything else (`mod`, `pub(crate) mod`, `pub mod` under a `not(feature = "testing")`).
    Private,
}

/// The file-backed module declarations of one source file: (name, visibility). Inline modules
/// (`mod tests { … }`) are skipped: no public one exists.
fn declarations(text: &str) -> Vec<(String, Visibility)> {
    let mut out = Vec::new();
    let mut attrs: Vec<&str> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with("#[") {
            attrs.push(line);
            continue;
        }
        if line.starts_with("//") || line.is_empty() {
            continue;
        }
        let decl = line
            .strip_prefix("pub mod ")
            .map(|rest| (rest, true))
            .or_else(|| line.strip_prefix("mod ").map(|rest| (rest, false)))
            .or_else(|| {
                line.strip_prefix("pub(crate) mod ")
                    .map(|rest| (rest, false))
            });
        if let Some((rest, public)) = decl
            && let Some(name) = rest.strip_suffix(';')
        {
            let cfg = attrs.iter().find(|a| a.starts_with("#[cfg("));
            let testing = cfg.is_some_and(|c| c.contains("feature = \"testing\""));
            let negated = cfg.is_some_and(|c| c.contains("not(feature = \"testing\")"));
            let visibility = match (public, testing, negated) {
                (true, _, true) | (false, _, _) => Visibility::Private,
                (true, true, false) => Visibility::Testing,
                (true, false, false) => Visibility::Public,
            };
            out.push((name.to_owned(), visibility));
        }
        attrs.clear();
    }
    out
}

/// The file of module `name` declared in `file`.
fn module_file(file: &Path, name: &str) -> PathBuf {
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("file name");
    let dir = if matches!(stem, "lib" | "mod") {
        file.parent().expect("parent").to_path_buf()
    } else {
        file.with_extension("")
    };
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        flat
    } else {
        dir.join(name).join("mod.rs")
    }
}

/// Every public module under `file` (the module `path`), with whether it needs `testing`.
fn walk(file: &Path, path: &str, testing: bool, out: &mut Vec<(String, bool)>) {
    let text =
        std::fs::read_to_string(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
    for (name, visibility) in declarations(&text) {
        let needs_testing = match visibility {
            Visibility::Private => continue,
            Visibility::Public => testing,
            Visibility::Testing => true,
        };
        let child = format!("{path}::{name}");
        walk(&module_file(file, &name), &child, needs_testing, out);
        out.push((child, needs_testing));
    }
}

#[test]
fn public_modules_are_those_the_architecture_lists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for (krate, lib) in [
        ("zlink", "src/lib.rs"),
        ("zlink_mesh", "mesh/src/lib.rs"),
        ("zlink_wire", "wire/src/lib.rs"),
    ] {
        walk(&root.join(lib), krate, false, &mut found);
    }
    let public: BTreeSet<String> = found
        .iter()
        .filter(|(_, t)| !t)
        .map(|(p, _)| p.clone())
        .collect();
    let testing: BTreeSet<String> = found
        .iter()
        .filter(|(_, t)| *t)
        .map(|(p, _)| p.clone())
        .collect();
    let listed_public = listed(root, "Public modules");
    let listed_testing = listed(root, "With testing");
    assert_eq!(
        public, listed_public,
        "the public modules (left) differ from docs/ARCHITECTURE.md's `Public modules` (right): \
         make the module private (a re-export serves), gate it behind `testing`, or list it"
    );
    assert_eq!(
        testing, listed_testing,
        "the modules public with `testing` (left) differ from docs/ARCHITECTURE.md's \
         `With testing` (right)"
    );
}

#[test]
fn the_declaration_reader_sees_cfg_and_visibility() {
    let text = "pub mod a;\nmod b;\n#[cfg(feature = \"testing\")]\npub mod c;\n\
                #[cfg(not(feature = \"testing\"))]\n#[allow(dead_code)] // why\npub(crate) mod c;\n\
                #[cfg(any(test, feature = \"testing\"))]\npub mod d;\n\
                #[cfg(not(feature = \"loom\"))]\npub mod e;\nmod tests {\n}\n";
    assert_eq!(
        declarations(text),
        [
            ("a".to_owned(), Visibility::Public),
            ("b".to_owned(), Visibility::Private),
            ("c".to_owned(), Visibility::Testing),
            ("c".to_owned(), Visibility::Private),
            ("d".to_owned(), Visibility::Testing),
            ("e".to_owned(), Visibility::Public),
        ]
    );
}
