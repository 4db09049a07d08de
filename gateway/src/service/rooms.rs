//! The service's rooms, held to their order: read from the sources, no two modules import each
//! other (a module and its parent aside) and no room imports a room that imports it back. The
//! reading is textual (paths written as `crate::service::…`, `super::…` and a `mod.rs`'s own
//! `use child::…`), which is how this code base writes every import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Module = Vec<String>;

/// Every module under `dir` by its path below `service` (`faces/http.rs` is `["faces", "http"]`),
/// with its text, comments and the test module dropped.
fn modules(dir: &Path, prefix: &[String], out: &mut BTreeMap<Module, String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        if p.is_dir() {
            let mut sub = prefix.to_vec();
            sub.push(name);
            modules(&p, &sub, out);
        } else if let Some(stem) = name.strip_suffix(".rs") {
            let mut m = prefix.to_vec();
            if stem != "mod" {
                m.push(stem.to_string());
            }
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            let code: String = code
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            out.insert(m, code);
        }
    }
}

/// The identifier path that starts at `s`: `a::b::C` gives `["a", "b", "C"]`.
fn path_at(s: &str) -> Vec<String> {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(s.len());
    s[..end]
        .split("::")
        .filter(|x| !x.is_empty())
        .map(str::to_string)
        .collect()
}

/// The longest prefix of `path` that is a module.
fn resolve(mods: &BTreeMap<Module, String>, path: &[String]) -> Option<Module> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| mods.contains_key(p))
}

fn imports(mods: &BTreeMap<Module, String>) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut deps = BTreeMap::new();
    for (me, code) in mods {
        let is_dir_mod = mods.keys().any(|k| k.len() > me.len() && k.starts_with(me));
        let mut d = BTreeSet::new();
        for (i, _) in code.match_indices("crate::service::") {
            let p = path_at(&code[i + "crate::service::".len()..]);
            d.extend(resolve(mods, &p));
        }
        // `super` of `a/b` (a file `a/b.rs` or a directory's `a/b/mod.rs`) is `a`.
        let mut rest = code.as_str();
        while let Some(i) = rest.find("super::") {
            let preceded = rest[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_');
            let mut ups = 0;
            let mut t = &rest[i..];
            while let Some(x) = t.strip_prefix("super::") {
                ups += 1;
                t = x;
            }
            if !preceded && ups <= me.len() {
                let mut p: Vec<String> = me[..me.len() - ups].to_vec();
                p.extend(path_at(t));
                d.extend(resolve(mods, &p));
            }
            rest = t;
        }
        if is_dir_mod {
            for line in code.lines() {
                let l = line.trim_start();
                let l = l.strip_prefix("pub ").unwrap_or(l);
                if let Some(u) = l.strip_prefix("use ") {
                    let p = path_at(u);
                    if let Some(first) = p.first()
                        && !["crate", "super", "self", "std", "halo_core"].contains(&first.as_str())
                    {
                        let mut full = me.clone();
                        full.extend(p);
                        d.extend(resolve(mods, &full));
                    }
                }
            }
        }
        d.remove(me);
        deps.insert(me.clone(), d);
    }
    deps
}

/// The mutual imports and the room cycles of the service's sources.
fn problems(deps: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<String> {
    let mut out = Vec::new();
    let related = |a: &Module, b: &Module| a.starts_with(b) || b.starts_with(a);
    for (a, da) in deps {
        for b in da {
            if a < b && !related(a, b) && deps.get(b).is_some_and(|db| db.contains(a)) {
                out.push(format!(
                    "{} and {} import each other",
                    a.join("/"),
                    b.join("/")
                ));
            }
        }
    }
    let room = |m: &Module| m.first().cloned();
    let mut rooms: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, da) in deps {
        for b in da {
            if let (Some(ra), Some(rb)) = (room(a), room(b))
                && ra != rb
            {
                rooms.entry(ra).or_default().insert(rb);
            }
        }
    }
    for (ra, to) in &rooms {
        for rb in to {
            if ra < rb && rooms.get(rb).is_some_and(|t| t.contains(ra)) {
                out.push(format!("the rooms {ra} and {rb} import each other"));
            }
        }
    }
    out
}

#[test]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "a test")]
fn no_two_modules_and_no_two_rooms_import_each_other() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/service");
    let mut mods = BTreeMap::new();
    modules(&dir, &[], &mut mods);
    assert!(
        mods.len() > 20,
        "the service's sources were not found under {}",
        dir.display()
    );
    let deps = imports(&mods);
    // The reading sees what it must: the faces stand on the task and the api.
    let faces_http: Module = vec!["faces".into(), "http".into()];
    assert!(deps[&faces_http].contains(&vec!["api".to_string(), "routes".to_string()]));
    assert!(deps[&faces_http].contains(&vec!["task".to_string()]));
    let found = problems(&deps);
    assert!(found.is_empty(), "{}", found.join("\n"));

    // A planted circle is caught: the api importing a face back.
    let mut planted = mods.clone();
    planted
        .get_mut(&vec!["api".to_string(), "routes".to_string()])
        .unwrap()
        .push_str("\nuse crate::service::faces::http::AppState;\n");
    let caught = problems(&imports(&planted));
    assert!(
        caught
            .iter()
            .any(|p| p.contains("api/routes and faces/http"))
            && caught.iter().any(|p| p.contains("the rooms api and faces")),
        "{caught:?}"
    );
}
