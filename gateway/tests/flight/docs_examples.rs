//! `docs-examples`: the fenced examples of docs/run.md and docs/mcp.md, run as written against
//! a running gateway.
//!
//! docs/run.md: every `console` block is read as a shell session. Each `curl` command and each
//! variable assignment runs in bash, in page order, with the assignments before it, `HOME` at a
//! temporary home whose `~/.local/state/halo-gateway` is the gateway's state directory and the
//! address the page's banner shows pointed at the gateway (the one substitution: the test's
//! gateway listens on a port it was given, port 0). What the page shows after a command is what it must print: lines joined
//! without their indentation, `…`, `...` and `<placeholders>` standing for anything; a command
//! the page shows without output must answer without an `"error"`. Before the first command
//! the gateway is in the state the page says an agent's first response needs: the providers
//! publish the running example's sources, `cert-9f2c` covers its `e3`, and the operator has
//! taken off. Commands that start a gateway, build PX4, move the vehicle from the operator's
//! command line or read a finished flight's log are listed, not run (the harness started the
//! gateway itself; the other suites run those commands).
//!
//! docs/mcp.md: both host configurations are used as a host would use them (the binary, the
//! configuration file and the address are this machine's): the stdio one spawns the gateway and
//! the HTTP one connects with the agent credential; each must initialize and list the tools.
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common::service::*;
use crate::common::{BIN, exclusive};

/// One command of a `console` block and the output the page shows for it.
struct Example {
    line: usize,
    command: String,
    expected: Vec<String>,
}

/// The commands of every `console` block of `text`, with their shown output.
fn console_examples(text: &str) -> Vec<Example> {
    let mut out = Vec::new();
    let mut in_console = false;
    let mut in_block = false;
    let mut lines = text.lines().enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        if line.starts_with("```") {
            in_console = !in_block && line.trim_start_matches('`') == "console";
            in_block = !in_block;
            continue;
        }
        if !in_console {
            continue;
        }
        let Some(first) = line.strip_prefix("$ ") else {
            continue;
        };
        let mut command = first.to_string();
        // A command goes on past a trailing backslash and inside an open single quote.
        while command.trim_end().ends_with('\\') || command.matches('\'').count() % 2 == 1 {
            let Some((_, next)) = lines.next() else { break };
            command.push('\n');
            command.push_str(next);
        }
        let mut expected = Vec::new();
        while let Some((_, next)) = lines.peek() {
            if next.starts_with("$ ") || next.starts_with("```") {
                break;
            }
            expected.push((*next).to_string());
            lines.next();
        }
        out.push(Example {
            line: i + 1,
            command,
            expected,
        });
    }
    out
}

/// Why a command is not run here, or `None` when it is.
fn not_run(command: &str) -> Option<&'static str> {
    let first = command.split_whitespace().next().unwrap_or("");
    if first == "curl" || (first.contains('=') && first.contains("=$(")) {
        return None;
    }
    Some(match first {
        "scripts/run_sim.sh" => "starts a gateway (the harness started one)",
        "make" => "builds PX4",
        "halo-gateway" if command.contains(" run ") => "starts a gateway (the harness started one)",
        "halo-gateway" if command.contains(" operator ") => {
            "moves the vehicle from the operator's command line (the service suites run these)"
        }
        "halo-gateway" if command.contains(" plot ") => {
            "draws a finished flight (the statustext suite runs it)"
        }
        "halo-gateway" if command.contains(" audit ") => {
            "reads a finished flight's log (the demo and the faults suite run these)"
        }
        _ => "not a request to the gateway",
    })
}

/// The page's shown output as one string: each line without its indentation, joined.
fn joined(lines: &[String]) -> String {
    lines.iter().map(|l| l.trim()).collect::<String>()
}

/// Whether `actual` is what `shown` says, `…`, `...` and `<…>` standing for any text.
fn shows(shown: &str, actual: &str) -> bool {
    // The literal pieces between the wildcards, in order.
    let mut pieces = Vec::new();
    let mut rest = shown;
    loop {
        let next = ["…", "...", "<"]
            .iter()
            .filter_map(|w| rest.find(w).map(|i| (i, *w)))
            .min();
        match next {
            None => {
                pieces.push(rest);
                break;
            }
            Some((i, w)) => {
                pieces.push(&rest[..i]);
                let after = &rest[i + w.len()..];
                rest = if w == "<" {
                    after.find('>').map_or("", |j| &after[j + 1..])
                } else {
                    after
                };
            }
        }
    }
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if pieces.len() == 1 {
        return actual == first;
    }
    if !actual.starts_with(first) || !actual.ends_with(last) {
        return false;
    }
    let mut at = first.len();
    for p in &pieces[1..pieces.len() - 1] {
        match actual[at..].find(p) {
            Some(j) => at += j + p.len(),
            None => return false,
        }
    }
    at <= actual.len() - last.len()
}

#[test]
fn the_shows_matcher_reads_wildcards() {
    assert!(shows(r#"{"a":1,"b":…}"#, r#"{"a":1,"b":[2,3]}"#));
    assert!(shows(
        r#"{"d":"<64 hex>","id":"e3"}"#,
        r#"{"d":"ab12","id":"e3"}"#
    ));
    assert!(shows(r#"{"a":1,...}"#, r#"{"a":1,"z":0}"#));
    assert!(!shows(r#"{"a":1,...}"#, r#"{"a":2,"z":0}"#));
    assert!(!shows(r#"{"a":1}"#, r#"{"a":1,"z":0}"#));
    assert!(!shows(r#"{"a":…,"b":2}"#, r#"{"a":1,"b":3}"#));
}

/// Runs `page`'s examples against `g`, calling `publish` (the providers' updates) right before
/// each one.
fn run_page(
    g: &Gateway,
    home: &Path,
    work: &Path,
    page: &str,
    publish: &dyn Fn(),
    c: &mut Vec<(String, bool)>,
) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join(page)).unwrap();
    // The address the page's examples use: the one its banner says the gateway listens on.
    let page_url = text
        .lines()
        .find_map(|l| {
            l.split_once(" listening on ")
                .map(|(_, u)| u.trim().to_string())
        })
        .expect("the page shows the gateway's banner");
    let mut assignments = String::new();
    for ex in console_examples(&text) {
        let name = format!(
            "{page}:{} {}",
            ex.line,
            ex.command.lines().next().unwrap_or("")
        );
        if let Some(why) = not_run(&ex.command) {
            println!("  not run: {name:<80} — {why}");
            continue;
        }
        let command = ex.command.replace(&page_url, &g.url);
        publish();
        let script = format!("set -e -o pipefail\n{assignments}{command}\n");
        let out = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .current_dir(work)
            .env("HOME", home)
            .output()
            .expect("bash");
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let shown = joined(&ex.expected);
        let good = out.status.success()
            && if shown.is_empty() {
                !stdout.contains("\"error\"")
            } else {
                shows(&shown, &stdout)
            };
        if !good {
            println!(
                "  MISMATCH {name}\n    shown:   {shown}\n    printed: {stdout}\n    stderr:  {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        if ex
            .command
            .split_whitespace()
            .next()
            .is_some_and(|w| w.contains("=$("))
        {
            assignments.push_str(&command);
            assignments.push('\n');
        }
        c.push((name, good));
    }
}

/// The `mcpServers` entry of each `json` block of docs/mcp.md that has one.
fn host_configs(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        match (&mut block, line.starts_with("```")) {
            (None, true) if line == "```json" => block = Some(String::new()),
            (Some(b), true) => {
                if let Ok(v) = serde_json::from_str::<Value>(b)
                    && let Some(s) = v["mcpServers"]["halo-gateway"].as_object()
                {
                    out.push(Value::Object(s.clone()));
                }
                block = None;
            }
            (Some(b), false) => {
                b.push_str(line);
                b.push('\n');
            }
            _ => {}
        }
    }
    out
}

#[test]
fn the_docs_examples_run_as_written() {
    let _x = exclusive();
    let dir = tmp("docs-examples");
    let home = dir.join("home");
    let state = home.join(".local/state/halo-gateway");
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::os::unix::fs::symlink(root.join("docs"), work.join("docs")).unwrap();
    let g = Gateway::start_in(&dir, &state, "sim", "[certifier]\nenabled = true\n");
    let sim = g.own_sim.as_ref().unwrap();
    // What docs/run.md says an agent's first response needs.
    // Published here, in the test's own thread, and again right before each command: a
    // background publisher would race the page's own provider example (an update stamped a
    // moment after the page's `date` makes the page's `OUT_OF_ORDER_UPDATE`).
    let publish = || Providers::publish_once(&g.url, &g.provider, 7);
    publish();
    let example: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("docs/examples/response.json")).unwrap(),
    )
    .unwrap();
    take_off(&g, sim);
    // Issued once the vehicle is up, so its 30 s are not spent on a slow takeoff.
    certify(&g, &example, "e3", "cert-9f2c");

    let mut c = Vec::new();
    run_page(&g, &home, &work, "docs/run.md", &publish, &mut c);

    // docs/mcp.md's host configurations, as a host uses them.
    let text = std::fs::read_to_string(root.join("docs/mcp.md")).unwrap();
    let configs = host_configs(&text);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for cfg in &configs {
        use rmcp::ServiceExt;
        let tools = if let Some(url) = cfg["url"].as_str() {
            // The host's address is this gateway's; the header carries the agent credential.
            let path = url.split_once("/mcp").map_or("", |_| "/mcp");
            let header = cfg["headers"]["Authorization"].as_str().unwrap_or("");
            assert!(header.starts_with("Bearer "), "{cfg}");
            rt.block_on(async {
                let transport = rmcp::transport::StreamableHttpClientTransport::from_config(
                    rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                        format!("{}{path}", g.url),
                    )
                    .auth_header(g.agent.clone()),
                );
                let client = ().serve(transport).await.unwrap();
                let t = client.list_all_tools().await.unwrap();
                let _ = client.cancel().await;
                t
            })
        } else {
            // The command is this build's binary; `--config` names a configuration of this
            // machine's (its own state directory, the same simulated vehicle).
            assert_eq!(cfg["command"], "halo-gateway", "{cfg}");
            let own = dir.join("stdio.toml");
            std::fs::write(
                &own,
                format!(
                    "[vehicle]\nurl = \"udpout:{}\"\n[listen]\nhttp = \"127.0.0.1:0\"\noperator = \"127.0.0.1:0\"\n\
                     [state]\ndir = \"{}\"\n[log]\nlevel = \"warn\"\n",
                    sim.addr,
                    dir.join("stdio-state").display()
                ),
            )
            .unwrap();
            let args: Vec<String> = cfg["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect();
            let at = args.iter().position(|a| a == "--config").unwrap();
            rt.block_on(async {
                let mut cmd = tokio::process::Command::new(BIN);
                for (i, a) in args.iter().enumerate() {
                    if i == at + 1 {
                        cmd.arg(&own);
                    } else {
                        cmd.arg(a);
                    }
                }
                let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
                let client = ().serve(transport).await.unwrap();
                let t = client.list_all_tools().await.unwrap();
                let _ = client.cancel().await;
                t
            })
        };
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        let transport = if cfg["url"].is_string() {
            "http"
        } else {
            "stdio"
        };
        let good = [
            "route_action",
            "submit_response",
            "submit_candidate",
            "obligations",
        ]
        .iter()
        .all(|n| names.contains(n));
        if !good {
            println!("  MISMATCH docs/mcp.md {transport}: tools {names:?}");
        }
        c.push((format!("docs/mcp.md {transport} host configuration"), good));
    }
    for (name, good) in &c {
        println!("  {name:<96} {}", if *good { "ok" } else { "MISMATCH" });
    }
    let matched = c.iter().filter(|(_, g)| *g).count();
    println!("docs-examples: {matched}/{} matched", c.len());
    assert_eq!(
        configs.len(),
        2,
        "docs/mcp.md's stdio and HTTP host configurations"
    );
    assert_eq!((matched, c.len()), (c.len(), DOCS_EXAMPLES));
    assert_eq!(g.stop(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The examples run, pinned: a page that gains or loses one changes this.
const DOCS_EXAMPLES: usize = 12;
