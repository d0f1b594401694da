//! The rooms of `zlink` open one way: a module of `src/` imports only its own room and lower
//! ones. The order is written once, in `docs/ARCHITECTURE.md` (the line starting with
//! `Room order`); this test reads it there, reads every `crate::` path of `src/` and fails on an
//! upward edge, and on a room of `src/` the order does not place.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The room order of `docs/ARCHITECTURE.md`, lowest first.
fn room_order(root: &Path) -> Vec<String> {
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let line = doc
        .lines()
        .find(|l| l.starts_with("Room order"))
        .expect("docs/ARCHITECTURE.md has a line starting with `Room order`");
    let rooms: Vec<String> = line
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(rooms.len() > 1, "no rooms in {line:?}");
    rooms
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The room of a file: its first path component under `src/` (`actor/fence.rs` → `actor`,
/// `config.rs` → `config`); `None` for the crate root.
fn room_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel.components().next()?.as_os_str().to_str()?.to_owned();
    let room = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
    (room != "lib").then_some(room)
}

/// The code of a line without its comment (doc comments included: a doc link is no import).
fn code(line: &str) -> &str {
    line.split("//").next().unwrap_or("")
}

/// The rooms a piece of code names through `crate::`, with the byte offset of each: `crate::a::…`
/// names `a`, and `crate::{a::…, b}` names `a` and `b` (a group may span lines).
fn named_rooms(code: &str) -> Vec<(usize, String)> {
    let ident = |c: &char| c.is_alphanumeric() || *c == '_';
    let mut rooms = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("crate::") {
        let at = from + found;
        from = at + "crate::".len();
        if code[..at].chars().next_back().is_some_and(|c| ident(&c)) {
            continue;
        }
        let rest = &code[from..];
        let Some(group) = rest.strip_prefix('{') else {
            let name: String = rest.chars().take_while(ident).collect();
            if !name.is_empty() {
                rooms.push((at, name));
            }
            continue;
        };
        // The group's top-level items (a nested group belongs to its item).
        let mut depth = 0usize;
        let mut items = vec![String::new()];
        for c in group.chars() {
            match c {
                '}' if depth == 0 => break,
                ',' if depth == 0 => items.push(String::new()),
                '{' => depth += 1,
                '}' => depth -= 1,
                _ if depth == 0 => items.last_mut().expect("one item").push(c),
                _ => {}
            }
        }
        for item in items {
            let name: String = item.trim_start().chars().take_while(ident).collect();
            if !name.is_empty() {
                rooms.push((at, name));
            }
        }
    }
    rooms
}

#[test]
fn no_room_imports_a_higher_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let order = room_order(root);
    let rank: BTreeMap<&str, usize> = order
        .iter()
        .enumerate()
        .map(|(i, r)| (r.as_str(), i))
        .collect();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut unplaced = Vec::new();
    let mut upward = Vec::new();
    for file in &files {
        let Some(room) = room_of(&src, file) else {
            continue;
        };
        let Some(&from) = rank.get(room.as_str()) else {
            unplaced.push(room);
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read source");
        let stripped: String = text.lines().map(|l| format!("{}\n", code(l))).collect();
        for (at, to) in named_rooms(&stripped) {
            // Its own room, a lower one, or a crate-root item (no room) pass.
            if rank.get(to.as_str()).is_some_and(|&r| r > from) {
                let line = stripped[..at].matches('\n').count() + 1;
                let name = file.strip_prefix(root).unwrap_or(file).display();
                upward.push(format!("{name}:{line}: {room} → {to}"));
            }
        }
    }
    unplaced.dedup();
    assert!(
        unplaced.is_empty(),
        "rooms of src/ missing from the `Room order` line of docs/ARCHITECTURE.md: {unplaced:?}"
    );
    assert!(
        upward.is_empty(),
        "a room imports a higher one (order, lowest first: {}):\n{}",
        order.join(" → "),
        upward.join("\n")
    );
}

#[test]
fn the_edge_reader_sees_paths_and_groups() {
    let names = |code: &str| -> Vec<String> {
        named_rooms(code)
            .into_iter()
            .map(|(_, name)| name)
            .collect()
    };
    assert_eq!(names("use crate::session::Clock;"), ["session"]);
    assert_eq!(
        names("use crate::{\n    actor::{A, B},\n    store,\n    node::Node,\n};"),
        ["actor", "store", "node"]
    );
    assert_eq!(
        names("let s = crate::node::renewal_slack(ttl); $crate::sync::x"),
        ["node", "sync"]
    );
    assert!(names("my_crate::node::x").is_empty());
    assert_eq!(code("let a = 1; // crate::node"), "let a = 1; ");
}
