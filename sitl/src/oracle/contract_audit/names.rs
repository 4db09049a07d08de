//! The id rule every name in an operation must follow, read from the documentation.

#[allow(
    clippy::wildcard_imports,
    reason = "one module split by part; the parts share its items"
)]
use super::*;

pub(super) fn claimed(body: &Value) -> Value {
    json!({
        "after": body["after"],
        "root": body["root"],
        "state": body["state"],
        "trace": body["trace"],
    })
}

/// The id rule, read from docs/envelope.md: 1 to 64 bytes, each an ASCII letter or digit, `.`,
/// `_` or `-`.
pub(super) fn id_ok(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Whether every name in an operation follows the id rule (docs/contracts.md): goal ids and
/// parents, the root id, replaced, delegated, joined and precedence goals, the worker, a
/// non-blank approver, and the name part (before `(`) of every effect text, in traces too.
/// Empty names are left to the other checks (both sides refuse them there).
pub(super) fn names_ok(op: &Value) -> bool {
    let text = |v: &Value| v.as_str().map(str::to_string);
    let mut names: Vec<Option<String>> = Vec::new();
    let mut effects: Vec<Option<String>> = Vec::new();
    let traces = |v: &Value, out: &mut Vec<Option<String>>| {
        for t in v.as_array().into_iter().flatten() {
            for e in t.as_array().into_iter().flatten() {
                out.push(text(e));
            }
        }
    };
    match op["op"].as_str().unwrap_or("") {
        "register_root" => {
            if op["approved_by"]
                .as_str()
                .is_some_and(|a| !a.trim().is_empty())
            {
                names.push(text(&op["approved_by"]));
            }
            let at = |p: &str| op.pointer(p).unwrap_or(&Value::Null);
            names.push(text(at("/contract/root")));
            traces(at("/contract/traces"), &mut effects);
        }
        k @ ("propose_goal" | "replace_goal" | "join_goals") => {
            let g = if k == "join_goals" {
                &op["joined"]
            } else {
                &op["goal"]
            };
            names.push(text(&g["id"]));
            names.push(text(&g["parent"]));
            traces(&g["traces"], &mut effects);
            if k == "replace_goal" {
                names.push(text(&op["old"]));
            }
            if k == "join_goals" {
                for x in op["sources"].as_array().into_iter().flatten() {
                    names.push(text(x));
                }
                for pair in op["precedence"].as_array().into_iter().flatten() {
                    for x in pair.as_array().into_iter().flatten() {
                        names.push(text(x));
                    }
                }
            } else {
                names.push(text(op.pointer("/witness/root").unwrap_or(&Value::Null)));
            }
        }
        "delegate_goal" => {
            for k in ["goal", "root", "worker"] {
                names.push(text(&op[k]).filter(|w| !w.is_empty()));
            }
        }
        "authorize_effect" => {
            names.push(text(&op["goal"]));
            effects.push(text(&op["effect"]));
        }
        "commit_effect" => effects.push(text(&op["effect"])),
        "reauthorize" | "cancel_goal" | "close_goal" => names.push(text(&op["goal"])),
        _ => {}
    }
    for e in effects {
        names.push(e.map(|e| e.split('(').next().unwrap_or("").trim().to_string()));
    }
    // A missing field is the schema's business, not this rule's; a goal of another root is
    // named `ROOT/GOAL`, each part an id.
    names.iter().flatten().all(|n| n.splitn(2, '/').all(id_ok))
}
