//! Command-line shell. Parses arguments, reads files, calls the core, prints results.
//!
//! Exit codes (stable, for scripts):
//! - 0: every component retained (or the command succeeded);
//! - 1: the response was admitted but some components were withheld or invalidated;
//! - 2: the response was rejected whole;
//! - 3: usage, file or catalog error.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use crate::core::engine::{AdmissionReport, Config, Gateway};
use crate::core::obligation::Obligation;
use crate::core::phase::Phase;
use crate::core::statefile::parse_state;
use crate::core::variant::Variant;

/// Exit code: everything retained.
pub const EXIT_OK: i32 = 0;
/// Exit code: admitted with some components withheld.
pub const EXIT_PARTIAL: i32 = 1;
/// Exit code: rejected whole.
pub const EXIT_REJECTED: i32 = 2;
/// Exit code: usage, file or catalog error.
pub const EXIT_ERROR: i32 = 3;
/// Exit code of `run`: the receipt log failed during the run (a write failed, or the file cap
/// was reached): the gateway held the vehicle and refused new work; receipts may be lost.
pub const EXIT_RECEIPTS: i32 = 4;

#[derive(Parser, Debug)]
#[command(
    name = "halo-gateway",
    version,
    about = "Runtime between LLM agents and UAV flight controllers"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the gateway as a service: the agent link, providers and the operator over HTTP, the
    /// vehicle over MAVLink. With no arguments: the embedded simulated PX4, the embedded catalog,
    /// 127.0.0.1:8640. Stops cleanly on Ctrl-C or SIGTERM (holds the vehicle, flushes receipts).
    Run {
        /// Configuration file (TOML); see configs/ and docs/run.md.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Catalog file; overrides the configuration and the embedded catalog.
        #[arg(long)]
        catalog: Option<PathBuf>,
        /// Vehicle: `sim` or a MAVLink URL (`udpin:0.0.0.0:14540`, `serial:/dev/ttyAMA0:921600`),
        /// or a Crazyflie URI (`radio://0/80/2M/E7E7E7E7E7`, `usb://0`).
        #[arg(long)]
        vehicle: Option<String>,
        /// Vehicle kind: `px4` or `crazyflie` (with `--vehicle sim`: which simulator).
        #[arg(long, value_enum)]
        vehicle_kind: Option<crate::service::config::VehicleKind>,
        /// HTTP listen address, e.g. 127.0.0.1:8640 (port 0 picks one).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// State directory (boot epoch, credentials, receipts).
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Log filter (`info`, `debug`, `halo_gateway=debug`); `RUST_LOG` wins.
        #[arg(long)]
        log_level: Option<String>,
        /// Log format.
        #[arg(long, value_enum)]
        log_format: Option<crate::service::config::LogFormat>,
        /// Agent link: `http` (always on) or also `stdio`, JSON lines on standard input and
        /// output for an agent that spawns the gateway; end of input stops the gateway.
        #[arg(long, value_enum, default_value = "http")]
        agent: AgentLink,
    },
    /// Operator commands against a running gateway: arm, disarm, takeoff, land, rtl, hold,
    /// release, status, heads (the signed receipt heads, kept off the machine with
    /// `--follow DIR`).
    Operator {
        /// What to do.
        #[arg(value_enum)]
        action: OperatorAction,
        /// Takeoff height above home, m.
        #[arg(long)]
        altitude: Option<f64>,
        /// The gateway's base URL: its operator listener by default (`listen.operator`; the
        /// main listener takes operator commands too).
        #[arg(long, default_value = "http://127.0.0.1:8641")]
        url: String,
        /// With `heads`: keep every signed head in this directory as it is made (one file each,
        /// written durably, then confirmed to the gateway so rotation may delete what it
        /// covers); runs until interrupted.
        #[arg(long)]
        follow: Option<PathBuf>,
        /// File holding the operator credential; `STATE/credentials/operator.token` when absent.
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// The gateway's state directory (to find the operator credential).
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Print the admission decision of every component of a response against a catalog and a
    /// state snapshot. Catalog authors use it to test a catalog before flight.
    Check {
        /// Catalog file (TOML); the embedded `uav-px4` catalog when absent.
        #[arg(long)]
        catalog: Option<PathBuf>,
        /// State snapshot (JSON: now_ms, sources, certificates).
        #[arg(long)]
        state: PathBuf,
        /// Response envelope (JSON).
        response: PathBuf,
        /// Print machine-readable JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Mechanism variant: full (the product); for comparison whole_response,
        /// independent_filter (no_dependency), admission_only, agent_spec_global,
        /// agent_spec_scoped, global_snapshot, local_unbound (docs/protocol.md).
        #[arg(long, default_value = "full")]
        variant: Variant,
    },
    /// Replay recorded agent responses (JSON lines: family, provenance with the envelope's
    /// digest, envelope) under twelve drift conditions through every mechanism variant, and
    /// print the replay panel against an independent oracle (docs/conformance.md,
    /// `replay-panel`). Exit 0 when the product (Full) keeps every supported component and
    /// leaks nothing, 2 when not; each reduced variant's expected failure is reported.
    Replay {
        /// A `.jsonl` cohort, or a directory of them.
        cohort: PathBuf,
        /// Catalog file (TOML); the embedded `uav-px4` catalog when absent.
        #[arg(long)]
        catalog: Option<PathBuf>,
        /// Baseline state the responses' claims refer to; `docs/examples/state.json` (embedded)
        /// when absent.
        #[arg(long)]
        state: Option<PathBuf>,
    },
    /// Print the canonical digest of every component of a response (what a certificate must
    /// cover).
    Digest {
        /// Catalog file (TOML); the embedded `uav-px4` catalog when absent.
        #[arg(long)]
        catalog: Option<PathBuf>,
        /// Response envelope (JSON); `-` reads standard input.
        response: PathBuf,
        /// Print `{"component id": "digest", ...}` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Fly the running example on the embedded simulated PX4 through the real MAVLink bridge:
    /// admission, the final gate, drift caught before dispatch, fresh recovery, landing. Checks
    /// the vehicle's own setpoint log and the receipt chain at the end. `--vehicle crazyflie`
    /// flies the paper's Crazyflie sequence on the embedded simulated Crazyflie instead.
    Demo {
        /// Catalog file (TOML); the embedded `uav-px4` catalog when absent (PX4 only).
        #[arg(long)]
        catalog: Option<PathBuf>,
        /// Which simulated vehicle: `px4` (default) or `crazyflie`.
        #[arg(long, value_enum, default_value = "px4")]
        vehicle: crate::service::config::VehicleKind,
        /// Where to write receipts and setpoint logs.
        #[arg(long, default_value = "target/halo-demo")]
        out: PathBuf,
        /// Print only the summary.
        #[arg(long)]
        quiet: bool,
    },
    /// Receipt-log tools.
    Audit {
        #[command(subcommand)]
        cmd: AuditCmd,
    },
    /// Mission contracts: run a workflow through the monitor, or audit its receipts.
    Contract {
        #[command(subcommand)]
        cmd: ContractCmd,
    },
    /// Validate a catalog file and print a summary.
    Catalog {
        /// Catalog file (TOML).
        path: PathBuf,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum AgentLink {
    Http,
    Stdio,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum OperatorAction {
    Arm,
    Disarm,
    Takeoff,
    Land,
    Rtl,
    Hold,
    Release,
    Status,
    Heads,
}

#[derive(Subcommand, Debug)]
enum AuditCmd {
    /// Print a receipt log for people, one line per record: time, index, what was decided.
    Show {
        /// The receipt log file(s), oldest first.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Only the decisions: admissions, rejections, phase changes, gate outcomes,
        /// obligations, readmissions, deny-holds and contract decisions (no provider updates).
        #[arg(long)]
        decisions: bool,
    },
    /// Recompute the hash chain and every receipt hash of a JSON-lines receipt log, reading
    /// each record strictly. Give the files of a rotated log in order (`boot-3.jsonl
    /// boot-3.1.jsonl ...`): the chain runs across them. With `--key`, check the signed
    /// checkpoints too: every receipt must be covered by a signature of that key and the log
    /// must end with the gateway's shutdown checkpoint. Exit 0 when it verifies, 2 when not.
    Verify {
        /// The receipt log file(s), oldest first.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// The gateway's audit public key: 64 hex digits, or a file holding them
        /// (`STATE/audit-key.pub`; the demo writes `receipts.pub`).
        #[arg(long)]
        key: Option<String>,
        /// A signed head kept off the vehicle: the body of `GET /v1/audit/head` as it is, a
        /// file `halo-gateway operator heads --follow` wrote, or a bare checkpoint. The log must
        /// hold exactly that checkpoint. Needs `--key`.
        #[arg(long, requires = "key")]
        head: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum ContractCmd {
    /// Register a workflow's root contract (as the operator) and run its steps through the
    /// mission-contract monitor, printing every decision. Stops at the first refusal unless
    /// `--keep-going`. Exit 0 when every step was allowed, 1 when one was refused.
    Run {
        /// The registered domain (TOML); the embedded `uav-survey` domain when absent.
        #[arg(long)]
        domain: Option<PathBuf>,
        /// Workflow (JSON: `approved_by`, `contract`, `steps`); see docs/contracts.md.
        workflow: PathBuf,
        /// Where to write the receipt log (JSON lines).
        #[arg(long, default_value = "target/halo-contract/receipts.jsonl")]
        receipts: PathBuf,
        /// Run every step even after a refusal (as an agent that does not listen would).
        #[arg(long)]
        keep_going: bool,
        /// Sign the log: end it with a checkpoint signed by this Ed25519 audit key (created,
        /// mode 0600, with `KEY.pub` beside it, when it does not exist).
        #[arg(long)]
        signing_key: Option<PathBuf>,
    },
    /// Validate a mission-contract domain file and print a summary: variables and effects,
    /// each with its parameters. Exit 0 when it is valid, 3 when not.
    Domain {
        /// The domain (TOML).
        path: PathBuf,
    },
    /// Replay a contract receipt log with the independent checker (it shares no decision code
    /// with the monitor): every decision, version, state, trace digest and reservation. Exit 0
    /// when the log verifies, 2 when it does not.
    Audit {
        /// The registered domain (TOML); the embedded `uav-survey` domain when absent.
        #[arg(long)]
        domain: Option<PathBuf>,
        /// The receipt log.
        receipts: PathBuf,
        /// The audit public key the log's checkpoint must verify under (64 hex digits, or a
        /// file holding them); every receipt must then be covered by its signature.
        #[arg(long)]
        key: Option<String>,
    },
}

/// Runs the command line with the process arguments; returns the exit code.
pub fn run() -> i32 {
    run_with(std::env::args_os())
}

/// Runs the command line with the given arguments (the first is the program name).
pub fn run_with<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_ERROR } else { EXIT_OK };
            let _ = e.print();
            return code;
        }
    };
    match cli.cmd {
        Cmd::Run {
            config,
            catalog,
            vehicle,
            vehicle_kind,
            listen,
            state_dir,
            log_level,
            log_format,
            agent,
        } => run_service(RunArgs {
            config,
            catalog,
            vehicle,
            vehicle_kind,
            listen,
            state_dir,
            log_level,
            log_format,
            stdio: agent == AgentLink::Stdio,
        }),
        Cmd::Operator {
            action,
            altitude,
            url,
            follow,
            token_file,
            state_dir,
        } => operator(
            action,
            altitude,
            &url,
            follow.as_deref(),
            token_file,
            state_dir,
        ),
        Cmd::Check {
            catalog,
            state,
            response,
            json,
            variant,
        } => check(catalog.as_deref(), &state, &response, json, variant),
        Cmd::Replay {
            cohort,
            catalog,
            state,
        } => replay(&cohort, catalog.as_deref(), state.as_deref()),
        Cmd::Digest {
            catalog,
            response,
            json,
        } => digest(catalog.as_deref(), &response, json),
        Cmd::Demo {
            catalog,
            vehicle: crate::service::config::VehicleKind::Crazyflie,
            out,
            quiet,
        } => {
            if catalog.is_some() {
                eprintln!(
                    "error: --catalog is for the PX4 demo; the Crazyflie demo flies the embedded crazyflie catalog"
                );
                return EXIT_ERROR;
            }
            demo_crazyflie(&out, quiet)
        }
        Cmd::Demo {
            catalog,
            vehicle: crate::service::config::VehicleKind::Px4,
            out,
            quiet,
        } => demo(catalog.as_deref(), &out, quiet),
        Cmd::Audit {
            cmd: AuditCmd::Verify { paths, key, head },
        } => audit_verify(&paths, key.as_deref(), head.as_deref()),
        Cmd::Audit {
            cmd: AuditCmd::Show { paths, decisions },
        } => audit_show(&paths, decisions),
        Cmd::Contract {
            cmd:
                ContractCmd::Run {
                    domain,
                    workflow,
                    receipts,
                    keep_going,
                    signing_key,
                },
        } => contract_run(
            domain.as_deref(),
            &workflow,
            &receipts,
            keep_going,
            signing_key.as_deref(),
        ),
        Cmd::Contract {
            cmd:
                ContractCmd::Audit {
                    domain,
                    receipts,
                    key,
                },
        } => contract_audit(domain.as_deref(), &receipts, key.as_deref()),
        Cmd::Contract {
            cmd: ContractCmd::Domain { path },
        } => contract_domain(&path),
        Cmd::Catalog { path } => match crate::io::load_catalog(&path) {
            Ok(cat) => {
                println!(
                    "catalog `{}` v{}: {} sources, {} component types",
                    cat.id(),
                    cat.version(),
                    cat.sources().len(),
                    cat.types().len()
                );
                for t in cat.types() {
                    println!(
                        "  {:<16} {:<10} payload {:<16} footprint {:>2} rules {:>2}",
                        t.name.as_str(),
                        if t.class == crate::core::Class::Action {
                            "action"
                        } else {
                            "non-action"
                        },
                        t.payload.name(),
                        t.footprint.len(),
                        t.rules.len()
                    );
                }
                EXIT_OK
            }
            Err(e) => {
                if toml_has_table(&path, "domain", "catalog") {
                    eprintln!(
                        "error: {}: this is a mission-contract domain (it has a [domain] table), not a HALO catalog; check it with `halo-gateway contract domain {}`",
                        path.display(),
                        path.display()
                    );
                } else {
                    eprintln!("error: {e}");
                }
                EXIT_ERROR
            }
        },
    }
}

/// One receipt as a line for people.
fn receipt_line(r: &crate::core::receipt::Receipt) -> Option<(bool, String)> {
    let body = r.body.value();
    let b = &body;
    let s = |k: &str| b.get(k).and_then(serde_json::Value::as_str).unwrap_or("");
    let code = |k: &str| {
        b.get(k)
            .and_then(serde_json::Value::as_str)
            .map(|c| format!(" ({c})"))
            .unwrap_or_default()
    };
    let kind = s("kind");
    let (decision, text) = match kind {
        "admitted" | "readmitted" => {
            let comps = b
                .get("components")
                .and_then(serde_json::Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|c| {
                            let g = |k: &str| {
                                c.get(k).and_then(serde_json::Value::as_str).unwrap_or("")
                            };
                            let why = c
                                .get("reason")
                                .and_then(serde_json::Value::as_str)
                                .map(|x| format!(" ({x})"))
                                .unwrap_or_default();
                            format!("{} {}{why}", g("id"), g("phase"))
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            (true, format!("{kind} {}: {comps}", s("response")))
        }
        "rejected" | "candidate_rejected" => {
            (true, format!("{kind} {}{}", s("response"), code("code")))
        }
        "phase" => (
            true,
            format!(
                "{}/{} {}{}",
                s("response"),
                s("component"),
                s("phase"),
                code("reason")
            ),
        ),
        "gate" => (
            true,
            format!(
                "gate {}/{} {}{}{}",
                s("response"),
                s("component"),
                s("outcome"),
                code("code"),
                b.get("effect")
                    .and_then(serde_json::Value::as_str)
                    .map(|e| format!(", effect {e}"))
                    .unwrap_or_default()
            ),
        ),
        "gate_refused" => (true, format!("gate refused a token{}", code("code"))),
        "obligation" => (
            true,
            format!(
                "obligation {} for {}/{}: {}{}",
                b.get("id").map(ToString::to_string).unwrap_or_default(),
                s("response"),
                s("component"),
                s("state"),
                code("reason")
            ),
        ),
        "support_lost" => (
            true,
            format!(
                "support lost while streaming {}/{}{}",
                s("response"),
                s("component"),
                code("code")
            ),
        ),
        "external" => {
            let what = s("what");
            let detail = b.get("detail").cloned().unwrap_or_default();
            let decision = matches!(
                what,
                "deny_hold"
                    | "deny_hold_done"
                    | "contract"
                    | "operator_hold"
                    | "operator_command"
                    | "shutdown"
            );
            let text = if what == "contract" {
                let body = detail.get("body").cloned().unwrap_or_default();
                let op = body
                    .get("request")
                    .and_then(|r| r.get("op"))
                    .and_then(|o| o.get("op"))
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("?")
                    .to_string();
                let verdict = body
                    .get("verdict")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("?");
                let reason = body
                    .get("reason")
                    .and_then(serde_json::Value::as_str)
                    .map(|x| format!(" ({x})"))
                    .unwrap_or_default();
                format!("contract {op}: {verdict}{reason}")
            } else {
                format!("{what} {detail}")
            };
            (decision, text)
        }
        "source_update" => (
            false,
            format!(
                "source {} epoch {} from {}",
                s("source"),
                b.get("epoch").map(ToString::to_string).unwrap_or_default(),
                s("provenance")
            ),
        ),
        "source_summary" => (
            false,
            format!(
                "source {}: {} updates summarized",
                s("source"),
                b.get("updates")
                    .map(ToString::to_string)
                    .unwrap_or_default()
            ),
        ),
        "update_refused" => (
            true,
            format!("update of {} refused{}", s("source"), code("code")),
        ),
        "certificate" => (
            false,
            format!(
                "certificate {}{}",
                s("id"),
                if b.get("revoked") == Some(&serde_json::Value::Bool(true)) {
                    " revoked"
                } else {
                    ""
                }
            ),
        ),
        "checkpoint" => (
            false,
            format!(
                "{}checkpoint over {} receipts, signed by key {}…",
                if b.get("final") == Some(&serde_json::Value::Bool(true)) {
                    "shutdown "
                } else {
                    ""
                },
                b.get("count").map(ToString::to_string).unwrap_or_default(),
                s("key").get(..8).unwrap_or("?")
            ),
        ),
        _ => (false, kind.to_string()),
    };
    Some((decision, text))
}

fn audit_show(paths: &[PathBuf], decisions_only: bool) -> i32 {
    for p in paths {
        // A log torn by a crash is shown up to its last whole record, then said to be torn.
        let log = match crate::audit::read_log(std::slice::from_ref(p)) {
            Ok(log) => log,
            Err(e) => {
                eprintln!("error: {e}");
                return EXIT_ERROR;
            }
        };
        let rs = log.receipts;
        for r in &rs {
            let Some((decision, text)) = receipt_line(r) else {
                continue;
            };
            if decisions_only && !decision {
                continue;
            }
            #[allow(clippy::cast_precision_loss, reason = "seconds for people")]
            let t = r.at_ns as f64 / 1e9;
            println!("{:>6} {t:>10.3}s  {text}", r.index);
        }
        if let Some(t) = log.torn {
            eprintln!(
                "warning: {}:{}: the last record is torn at byte {} ({} bytes of it, a crash while \
                 writing); shown above is everything before it. `halo-gateway audit verify` \
                 checks the intact part.",
                t.file.display(),
                t.line,
                t.offset,
                t.bytes
            );
        }
    }
    EXIT_OK
}

fn audit_verify(paths: &[PathBuf], key: Option<&str>, head: Option<&Path>) -> i32 {
    let key = match key.map(crate::audit::public_key).transpose() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("error: --key {e}");
            return EXIT_ERROR;
        }
    };
    let kept = match head {
        Some(p) => match crate::io::read_capped(p, crate::io::MAX_CONFIG_BYTES, "signed head")
            .and_then(|b| kept_heads(&b).map_err(|e| format!("{}: {e}", p.display())))
        {
            Ok(h) => Some(h),
            Err(e) => {
                eprintln!("error: {e}");
                return EXIT_ERROR;
            }
        },
        None => None,
    };
    let label = if paths.len() == 1 {
        paths
            .first()
            .map_or(String::new(), |p| p.display().to_string())
    } else {
        format!("{} files", paths.len())
    };
    let log = match crate::audit::read_log(paths) {
        Ok(l) => l,
        Err(crate::audit::ReadError::Io(e)) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
        Err(crate::audit::ReadError::Record(e)) => {
            println!("{e}");
            return EXIT_REJECTED;
        }
    };
    let v = match crate::audit::verify(&log.receipts, key.as_ref()) {
        Ok(v) => v,
        Err(f) => {
            println!("{label}: receipt {}: {}", f.index, f.why);
            return EXIT_REJECTED;
        }
    };
    let mut ok = true;
    let last = (v.first + v.count).saturating_sub(1);
    if v.count == 0 {
        println!("{label}: no receipts");
    } else if v.first == 0 {
        println!("{label}: {} receipts, chain and hashes verify", v.count);
    } else {
        println!(
            "{label}: receipts {}..{last} ({}) verify; the chain starts at receipt {}: the files \
             before it were rotated away or not given, so the link into the first file is taken \
             as given",
            v.first, v.count, v.first
        );
    }
    match (key.as_ref(), v.covered) {
        (Some(_), Some(covered)) => {
            println!(
                "  {} signed checkpoint{} under the given key",
                v.checkpoints,
                if v.checkpoints == 1 {
                    " verifies"
                } else {
                    "s verify"
                }
            );
            if covered < v.first + v.count {
                ok = false;
                println!(
                    "  receipts {covered}..{last} are not covered by any signature: the log was cut or \
                     appended to after its last checkpoint (or the gateway is still running, or stopped \
                     without its shutdown checkpoint)"
                );
            } else if !v.ends_final && v.count > 0 {
                ok = false;
                println!(
                    "  the log ends at a periodic checkpoint, not the shutdown one: receipts written \
                     after it may have been cut (or the gateway is still running, or crashed); compare \
                     with a signed head kept off the vehicle (--head)"
                );
            } else if v.count > 0 {
                println!(
                    "  every receipt is covered; the log ends with the gateway's shutdown checkpoint"
                );
            }
        }
        _ => {
            println!(
                "  integrity only: without --key this shows the log is internally consistent, not who \
                 wrote it; a rewrite that recomputes every hash passes too{}",
                if v.keys.is_empty() {
                    String::new()
                } else {
                    format!(
                        ". {} signed checkpoint{} present (key {}…): give --key to check them",
                        v.checkpoints,
                        if v.checkpoints == 1 { " is" } else { "s are" },
                        v.keys.first().and_then(|k| k.get(..8)).unwrap_or("")
                    )
                }
            );
        }
    }
    if let (Some(heads), Some(k)) = (&kept, key.as_ref()) {
        // A body of `GET /v1/audit/head` may carry this start's head and the previous
        // start's: the one for these files is the one whose log they are, else the one that
        // holds.
        let stem = paths
            .first()
            .and_then(|p| crate::service::receipts::stem_of(p));
        let named = heads
            .iter()
            .find(|(log, _)| log.is_some() && *log == stem)
            .map(|(_, h)| h);
        let result = match named {
            Some(h) => crate::audit::check_head(&log.receipts, h, k).map(|()| h.count),
            None => heads
                .iter()
                .map(|(_, h)| crate::audit::check_head(&log.receipts, h, k).map(|()| h.count))
                .find(Result::is_ok)
                .unwrap_or_else(|| {
                    heads
                        .first()
                        .map_or(Err("no signed head in the file".into()), |(_, h)| {
                            crate::audit::check_head(&log.receipts, h, k).map(|()| h.count)
                        })
                }),
        };
        match result {
            Ok(count) => println!("  the log holds the signed head you kept (receipt {count})"),
            Err(e) => {
                ok = false;
                println!("  {e}");
            }
        }
    }
    if key.is_some() && v.count == 0 {
        ok = false;
        println!("  no evidence: the log holds no receipts, so nothing is covered by a signature");
    }
    if let Some(t) = &log.torn {
        ok = false;
        println!(
            "  {}:{}: torn record at byte {} ({} bytes, no newline): the log was cut off mid-write; \
             the {} receipts before it are the ones checked above",
            t.file.display(),
            t.line,
            t.offset,
            t.bytes,
            v.count
        );
    }
    if ok { EXIT_OK } else { EXIT_REJECTED }
}

/// The signed heads in a kept file: a bare checkpoint (as `--head` took before), the body of
/// `GET /v1/audit/head` (its `checkpoint` and `previous`), or a file `operator heads --follow`
/// wrote (`{"log", "public_key", "checkpoint"}`); each with the log it names, if any.
fn kept_heads(
    bytes: &[u8],
) -> Result<Vec<(Option<String>, crate::core::receipt::Checkpoint)>, String> {
    use crate::core::receipt::Checkpoint;
    if let Ok(c) = serde_json::from_slice::<Checkpoint>(bytes) {
        return Ok(vec![(None, c)]);
    }
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not a signed head: {e}"))?;
    let mut out = Vec::new();
    let log = v.get("log").and_then(|l| l.as_str()).map(str::to_owned);
    if let Some(c) = v.get("checkpoint").filter(|c| !c.is_null()) {
        let c: Checkpoint = serde_json::from_value(c.clone())
            .map_err(|e| format!("`checkpoint` is not a signed head: {e}"))?;
        out.push((log, c));
    }
    if let Some(p) = v.get("previous").filter(|p| !p.is_null()) {
        let plog = p.get("log").and_then(|l| l.as_str()).map(str::to_owned);
        let c: Checkpoint =
            serde_json::from_value(p.get("checkpoint").cloned().unwrap_or_default())
                .map_err(|e| format!("`previous.checkpoint` is not a signed head: {e}"))?;
        out.push((plog, c));
    }
    if out.is_empty() {
        return Err(
            "no signed head in it (the gateway had signed none yet when it was fetched)".into(),
        );
    }
    Ok(out)
}

struct RunArgs {
    config: Option<PathBuf>,
    catalog: Option<PathBuf>,
    vehicle: Option<String>,
    vehicle_kind: Option<crate::service::config::VehicleKind>,
    listen: Option<std::net::SocketAddr>,
    state_dir: Option<PathBuf>,
    log_level: Option<String>,
    log_format: Option<crate::service::config::LogFormat>,
    stdio: bool,
}

fn run_service(a: RunArgs) -> i32 {
    use crate::service::{Config, Service, banner, init_tracing, load_catalog};
    let mut cfg = match &a.config {
        Some(p) => match Config::load(p) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return EXIT_ERROR;
            }
        },
        None => Config::default(),
    };
    if let Some(c) = a.catalog {
        cfg.catalog.path = Some(c);
    }
    if let Some(v) = a.vehicle {
        cfg.vehicle.url = v;
    }
    if let Some(l) = a.listen {
        cfg.listen.http = l;
    }
    if let Some(d) = a.state_dir {
        cfg.state.dir = Some(d);
    }
    if let Some(l) = a.log_level {
        cfg.log.level = l;
    }
    if let Some(f) = a.log_format {
        cfg.log.format = f;
    }
    if let Some(k) = a.vehicle_kind {
        cfg.vehicle.kind = k;
    }
    if let Err(e) = cfg.vehicle.check_url() {
        eprintln!("error: vehicle: {e}");
        return EXIT_ERROR;
    }
    init_tracing(cfg.log.format, &cfg.log.level);
    let cat = match load_catalog(&cfg) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    let Some(rt) = tokio_runtime() else {
        return EXIT_ERROR;
    };
    rt.block_on(async move {
        let svc = match Service::start(cfg, cat).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return EXIT_ERROR;
            }
        };
        // Stdout may be a closed pipe (a supervisor that stopped reading): never panic on it.
        use std::io::Write as _;
        let say = |s: &str| {
            let mut out = std::io::stdout();
            let _ = out.write_all(s.as_bytes());
            let _ = out.flush();
        };
        // With the stdio agent link, standard output is the protocol: people read stderr.
        let stdio = a.stdio;
        let tell = |s: &str| {
            if stdio {
                eprint!("{s}");
            } else {
                say(s);
            }
        };
        use std::io::IsTerminal as _;
        tell(&banner(&svc, !stdio && std::io::stdout().is_terminal()));
        if stdio {
            let link = svc.serve_stdio();
            tokio::select! {
                () = wait_for_signal() => {}
                _ = link => tell("the agent closed standard input\n"),
            }
        } else {
            wait_for_signal().await;
        }
        tell("shutting down: holding the vehicle, flushing receipts\n");
        let receipts = svc.receipts_path.clone();
        svc.shutdown();
        match svc.wait().await {
            Ok(n) => match &n.failure {
                None => {
                    tell(&format!(
                        "stopped; {} receipts in {}\n",
                        n.written,
                        receipts.display()
                    ));
                    EXIT_OK
                }
                Some(why) => {
                    eprintln!(
                        "error: the receipt log failed during the run ({why}): {} receipts are on disk in {}, {} could not be written{}",
                        n.written,
                        receipts.display(),
                        n.lost,
                        if n.lost == 0 {
                            " (the reserve took every record)"
                        } else {
                            "; `halo-gateway audit verify` checks the part on disk"
                        }
                    );
                    EXIT_RECEIPTS
                }
            },
            Err(e) => {
                eprintln!("error: {e}");
                EXIT_ERROR
            }
        }
    })
}

/// The two-worker runtime the service and the demo run on; says why on stderr when it cannot
/// start.
fn tokio_runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            None
        }
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn operator(
    action: OperatorAction,
    altitude: Option<f64>,
    url: &str,
    follow: Option<&Path>,
    token_file: Option<PathBuf>,
    state_dir: Option<PathBuf>,
) -> i32 {
    let url = url.trim_end_matches('/');
    let token_path = token_file.unwrap_or_else(|| {
        let mut c = crate::service::Config::default();
        c.state.dir = state_dir;
        c.state_dir().join("credentials").join("operator.token")
    });
    let token = match crate::service::read_capped(&token_path, 4096) {
        Ok(t) => t.trim().to_string(),
        Err(e) => {
            eprintln!(
                "error: operator credential {}: {e} (pass --token-file or --state-dir)",
                token_path.display()
            );
            return EXIT_ERROR;
        }
    };
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(20)))
        .build()
        .new_agent();
    let auth = format!("Bearer {token}");
    if action == OperatorAction::Heads {
        return heads(&agent, url, &auth, follow);
    }
    if follow.is_some() {
        eprintln!("error: --follow goes with `heads`");
        return EXIT_ERROR;
    }
    let result = if action == OperatorAction::Status {
        agent
            .get(format!("{url}/v1/status"))
            .header("Authorization", &auth)
            .call()
    } else {
        let name = match action {
            OperatorAction::Arm => "arm",
            OperatorAction::Disarm => "disarm",
            OperatorAction::Takeoff => "takeoff",
            OperatorAction::Land => "land",
            OperatorAction::Rtl => "rtl",
            OperatorAction::Hold => "hold",
            OperatorAction::Release => "release",
            OperatorAction::Status | OperatorAction::Heads => "status",
        };
        let body = match (action, altitude) {
            (OperatorAction::Takeoff, Some(a)) => serde_json::json!({"altitude_m": a}),
            (OperatorAction::Takeoff, None) => {
                eprintln!("error: takeoff needs --altitude <m above home>");
                return EXIT_ERROR;
            }
            _ => serde_json::json!({}),
        };
        agent
            .post(format!("{url}/v1/operator/{name}"))
            .header("Authorization", &auth)
            .send_json(&body)
    };
    match result {
        Ok(mut resp) => {
            let status = resp.status().as_u16();
            let text = resp.body_mut().read_to_string().unwrap_or_default();
            let v: serde_json::Value =
                serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
            if status == 200 {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&v).unwrap_or(text.clone())
                );
                EXIT_OK
            } else {
                let err = v.get("error");
                let code = err
                    .and_then(|e| e.get("code"))
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("?");
                let msg = err
                    .and_then(|e| e.get("message"))
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or(&text);
                eprintln!("error: {status} {code}: {msg}");
                EXIT_PARTIAL
            }
        }
        Err(e) => {
            eprintln!("error: cannot reach the gateway at {url}: {e}");
            EXIT_ERROR
        }
    }
}

/// `operator heads`: prints the gateway's signed heads; with `--follow DIR` keeps each new one
/// in `DIR/<log>-<count>.json` (the head with its log and key, written durably) and confirms it
/// to the gateway (`POST /v1/audit/exported`), until interrupted. `halo-gateway audit verify
/// --key KEY --head FILE` checks a log against such a file.
fn heads(agent: &ureq::Agent, url: &str, auth: &str, follow: Option<&Path>) -> i32 {
    use serde_json::{Value, json};
    let fetch = || -> Result<Value, String> {
        let mut r = agent
            .get(format!("{url}/v1/audit/head"))
            .header("Authorization", auth)
            .call()
            .map_err(|e| format!("cannot reach the gateway at {url}: {e}"))?;
        let text = r.body_mut().read_to_string().unwrap_or_default();
        if r.status().as_u16() != 200 {
            return Err(format!("{} {text}", r.status().as_u16()));
        }
        serde_json::from_str(&text).map_err(|e| format!("not a head: {e}"))
    };
    let Some(dir) = follow else {
        return match fetch() {
            Ok(v) => {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                EXIT_OK
            }
            Err(e) => {
                eprintln!("error: {e}");
                EXIT_ERROR
            }
        };
    };
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("error: {}: {e}", dir.display());
        return EXIT_ERROR;
    }
    eprintln!(
        "keeping the signed heads of {url} in {} (Ctrl-C stops)",
        dir.display()
    );
    let mut warned = false;
    loop {
        match fetch() {
            Ok(v) => {
                warned = false;
                let key = v.get("public_key").cloned().unwrap_or(Value::Null);
                let mut found = Vec::new();
                if let Some(c) = v.get("checkpoint").filter(|c| !c.is_null()) {
                    found.push((v.get("log").cloned().unwrap_or(Value::Null), c.clone()));
                }
                if let Some(p) = v.get("previous").filter(|p| !p.is_null()) {
                    found.push((
                        p.get("log").cloned().unwrap_or(Value::Null),
                        p.get("checkpoint").cloned().unwrap_or(Value::Null),
                    ));
                }
                for (log, cp) in found {
                    let (Some(name), Some(count), Some(head)) = (
                        log.as_str(),
                        cp.get("count").and_then(Value::as_u64),
                        cp.get("head").and_then(Value::as_str),
                    ) else {
                        continue;
                    };
                    let file = dir.join(format!("{name}-{count:012}.json"));
                    if file.exists() {
                        continue;
                    }
                    let body = json!({"log": name, "public_key": key, "checkpoint": cp});
                    if let Err(e) = crate::service::statedir::write_atomic(
                        &file,
                        format!("{body}\n").as_bytes(),
                        0o644,
                    ) {
                        eprintln!("error: {}: {e}", file.display());
                        return EXIT_ERROR;
                    }
                    let ack = agent
                        .post(format!("{url}/v1/audit/exported"))
                        .header("Authorization", auth)
                        .send_json(json!({"log": name, "count": count, "head": head}));
                    let confirmed = ack.is_ok_and(|r| r.status().as_u16() == 200);
                    println!(
                        "{name} receipt {count}: kept in {}{}",
                        file.display(),
                        if confirmed {
                            ""
                        } else {
                            " (the gateway did not confirm it; it will not delete what it covers)"
                        }
                    );
                }
            }
            Err(e) => {
                if !warned {
                    eprintln!("warning: {e}; retrying every second");
                    warned = true;
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

use crate::contract::workflow::WorkflowFile;

/// The contract domain's text and a name for it: the file, or the one compiled in.
fn domain_text(domain: Option<&Path>) -> Result<(String, String), String> {
    match domain {
        Some(p) => read(p, crate::io::MAX_CONFIG_BYTES, "contract domain")
            .and_then(|b| String::from_utf8(b).map_err(|e| format!("{}: {e}", p.display())))
            .map(|t| (t, p.display().to_string())),
        None => Ok((
            crate::service::EMBEDDED_CONTRACT_DOMAIN.to_string(),
            "embedded contract-uav.toml".to_string(),
        )),
    }
}

/// A value's snake_case wire name (`allow`, `closed`), for people.
fn snake(v: &impl serde::Serialize) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|x| x.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Whether a TOML file has the top-level table `has` and not `lacks`: how a catalog
/// (`[catalog]`) and a contract domain (`[domain]`) given to the other's command are told apart.
fn toml_has_table(path: &Path, has: &str, lacks: &str) -> bool {
    crate::io::read_text_capped(path, crate::io::MAX_CONFIG_BYTES, "TOML file")
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .is_some_and(|t| t.contains_key(has) && !t.contains_key(lacks))
}

fn contract_domain(path: &Path) -> i32 {
    let d = match domain_text(Some(path))
        .and_then(|(t, name)| crate::contract::Domain::parse(&t, &name).map_err(|e| e.0))
    {
        Ok(d) => d,
        Err(e) => {
            if toml_has_table(path, "catalog", "domain") {
                eprintln!(
                    "error: {}: this is a HALO catalog (it has a [catalog] table), not a contract domain; check it with `halo-gateway catalog {}`",
                    path.display(),
                    path.display()
                );
            } else {
                eprintln!("error: {e}");
            }
            return EXIT_ERROR;
        }
    };
    println!(
        "contract domain `{}` v{}: {} variables, {} effect types ({} normalized effects)",
        d.id,
        d.version,
        d.vars.len(),
        d.effects.len(),
        d.table.len()
    );
    for v in &d.vars {
        println!("  variable {}", v.name);
    }
    for e in &d.effects {
        let params: Vec<String> = e
            .params
            .iter()
            .map(|(p, vals)| format!("{p}: {}", vals.join("|")))
            .collect();
        println!("  effect   {}({})", e.name, params.join(", "));
    }
    EXIT_OK
}

fn contract_run(
    domain: Option<&Path>,
    workflow: &Path,
    receipts: &Path,
    keep_going: bool,
    signing_key: Option<&Path>,
) -> i32 {
    let signer = match signing_key
        .map(crate::audit::Signer::load_or_create)
        .transpose()
    {
        Ok(s) => s.map(|(s, created)| {
            if created {
                if let Some(k) = signing_key {
                    println!(
                        "created the audit key {} (public key in {})",
                        k.display(),
                        crate::audit::public_path(k).display()
                    );
                }
            }
            s
        }),
        Err(e) => {
            eprintln!("error: --signing-key {e}");
            return EXIT_ERROR;
        }
    };
    use crate::contract::workflow::{Runner, Step};
    let loaded = domain_text(domain)
        .and_then(|(t, name)| crate::contract::Domain::parse(&t, &name).map_err(|e| e.0))
        .and_then(|d| {
            let wf: WorkflowFile = read(workflow, crate::io::MAX_WORKFLOW_BYTES, "workflow")
                .and_then(|b| {
                    serde_json::from_slice(&b).map_err(|e| {
                        format!(
                            "{}: {}",
                            workflow.display(),
                            crate::core::strict::explain(&b, &e)
                        )
                    })
                })?;
            Ok((d, wf))
        });
    let (d, wf) = match loaded {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    let mut runner = Runner::new(crate::contract::Monitor::new(d), "cli");
    let reg = runner.register(&wf.contract, &wf.approved_by);
    println!(
        "register root `{}` (epoch {}): {}{}",
        wf.contract.root,
        wf.contract.epoch,
        snake(&reg.verdict),
        reg.reason
            .map(|r| format!(" {r}: {}", reg.detail))
            .unwrap_or_default()
    );
    let mut refused = !reg.allowed();
    if reg.allowed() {
        for (i, step) in wf.steps.iter().enumerate() {
            let o = runner.step(step);
            let what = match step {
                Step::Effect { goal, effect, .. } => format!("effect {effect} on {goal}"),
                Step::Propose { goal, .. } => format!("propose {} under {}", goal.id, goal.parent),
                Step::Replace { old, goal, .. } => format!("replace {old} by {}", goal.id),
                Step::Delegate { goal, worker, .. } => format!("delegate {goal} to {worker}"),
                Step::Join {
                    joined, sources, ..
                } => format!("join {} into {}", sources.join(", "), joined.id),
                Step::Observe { values, .. } => format!(
                    "observe {}",
                    serde_json::to_string(values).unwrap_or_default()
                ),
                Step::Policy { rules, .. } => format!("policy ({} rules)", rules.len()),
                Step::Reauthorize { goal, .. } => format!("reauthorize {goal}"),
                Step::Cancel { goal, .. } => format!("cancel {goal}"),
                Step::Close { goal, .. } => format!("close {goal}"),
                Step::CloseRoot { .. } => "close the root".to_string(),
                Step::Plan { label } => format!("plan `{label}`"),
            };
            match o.reason {
                None => println!("{:>3}  {what:<48} {}", i + 1, snake(&o.verdict)),
                Some(r) => println!(
                    "{:>3}  {what:<48} {} {r}: {}",
                    i + 1,
                    snake(&o.verdict),
                    o.detail
                ),
            }
            if !o.allowed() {
                refused = true;
                if !keep_going {
                    println!("stopped at the first refusal (use --keep-going to continue)");
                    break;
                }
            }
        }
    }
    let m = runner.monitor();
    let v = m.versions();
    println!(
        "trace: {}
root: {}
versions: epoch {}, policy {}, state {}, graph {}",
        m.trace().join(" "),
        m.root_state()
            .map(|r| snake(&r))
            .unwrap_or_else(|| "not registered".into()),
        v.epoch,
        v.policy,
        v.state,
        v.graph
    );
    let mut lines = String::new();
    let mut n = 0;
    let mut last = None;
    while let Some(r) = runner.monitor_mut().poll_receipt() {
        lines.push_str(&r.to_json_line());
        lines.push('\n');
        n += 1;
        last = Some(r);
    }
    if let Some(s) = &signer {
        let at = last.as_ref().map_or(0, |r| r.at_ns);
        let cp = s.seal_after(last.as_ref(), at, crate::service::core_task::wall_now_ms());
        lines.push_str(&cp.to_json_line());
        lines.push('\n');
        n += 1;
    }
    let written = receipts
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(receipts, lines));
    match written {
        Ok(()) => println!("{n} receipts written to {}", receipts.display()),
        Err(e) => {
            eprintln!("error: {}: {e}", receipts.display());
            return EXIT_ERROR;
        }
    }
    if refused { EXIT_PARTIAL } else { EXIT_OK }
}

fn contract_audit(domain: Option<&Path>, receipts: &Path, key: Option<&str>) -> i32 {
    let key = match key.map(crate::audit::public_key).transpose() {
        Ok(k) => k.map(|k| k.to_bytes()),
        Err(e) => {
            eprintln!("error: --key {e}");
            return EXIT_ERROR;
        }
    };
    let d = match domain_text(domain).and_then(|(t, name)| {
        sitl::contract_audit::AuditDomain::from_toml(&t).map_err(|e| format!("{name}: {e}"))
    }) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    let name = receipts.display().to_string();
    let mut lines: Vec<String> = Vec::new();
    let mut torn = None;
    let read = crate::io::for_each_line(receipts, crate::io::MAX_RECORD_BYTES, |l| {
        if torn.is_some() {
            return Err(format!(
                "{name}:{}: unexpected data after a torn record",
                l.no
            ));
        }
        let text = match std::str::from_utf8(l.bytes) {
            Ok(t) if l.terminated || serde_json::from_str::<serde_json::Value>(t).is_ok() => t,
            _ if !l.terminated && crate::audit::is_torn_record(l.bytes) => {
                torn = Some((l.no, l.offset, l.bytes.len()));
                return Ok(());
            }
            Ok(t) => t,
            Err(e) => return Err(format!("{name}:{}: the record is not UTF-8: {e}", l.no)),
        };
        lines.push(text.to_string());
        Ok(())
    });
    if let Err(e) = read {
        eprintln!("error: {e}");
        return EXIT_ERROR;
    }
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let torn_note = |n: usize| {
        torn.map(|(line, offset, bytes)| {
            format!(
                "{name}:{line}: torn record at byte {offset} ({bytes} bytes, no newline): the log was cut off mid-write; the {n} receipts before it are the ones checked"
            )
        })
    };
    match sitl::contract_audit::audit_lines(&d, &refs, key.as_ref()) {
        Ok(r) => {
            println!(
                "{name}: {} receipts verify independently: {} allowed, {} goals created, {} effects committed against their reservations, {} exact replays, root {}",
                r.receipts,
                r.allowed,
                r.goals,
                r.commits,
                r.replays,
                if r.closed { "closed" } else { "open" }
            );
            if r.signed {
                println!(
                    "  signed: every receipt is covered by a checkpoint of the given key ({} checkpoint{}), the last one final",
                    r.checkpoints,
                    if r.checkpoints == 1 { "" } else { "s" }
                );
            } else {
                println!(
                    "  integrity only: without --key this shows the log is consistent, not who wrote it; a rewrite that recomputes every hash passes too{}",
                    if r.checkpoints > 0 {
                        format!(
                            " ({} signed checkpoint(s) present: give --key)",
                            r.checkpoints
                        )
                    } else {
                        String::new()
                    }
                );
            }
            match torn_note(lines.len()) {
                Some(t) => {
                    println!("  {t}");
                    EXIT_REJECTED
                }
                None => EXIT_OK,
            }
        }
        Err(e) => {
            println!("{name}: {e}");
            if let Some(t) = torn_note(lines.len()) {
                println!("  {t}");
            }
            EXIT_REJECTED
        }
    }
}

/// Reads a file (or standard input for `-`) through a size cap: a response at most the
/// envelope limit, everything else at most [`crate::io::MAX_CONFIG_BYTES`].
fn read(path: &Path, cap: u64, what: &str) -> Result<Vec<u8>, String> {
    crate::io::read_capped(path, cap, what)
}

/// The baseline state `replay` uses when none is given.
const EXAMPLE_STATE: &str = include_str!("../../docs/examples/state.json");

fn replay(cohort: &Path, catalog: Option<&Path>, state: Option<&Path>) -> i32 {
    let text = |p: &Path, what: &str| -> Result<String, String> {
        let b = read(p, crate::io::MAX_CONFIG_BYTES, what)?;
        String::from_utf8(b).map_err(|_| format!("{}: not UTF-8", p.display()))
    };
    let cat = match catalog {
        Some(p) => text(p, "catalog").map(|t| (t, p.display().to_string())),
        None => Ok((
            crate::service::EMBEDDED_CATALOG.to_string(),
            "embedded uav-px4.toml".to_string(),
        )),
    };
    let st = match state {
        Some(p) => text(p, "state file"),
        None => Ok(EXAMPLE_STATE.to_string()),
    };
    let prepared =
        cat.and_then(|(c, name)| st.and_then(|s| crate::replay::Replay::new(&c, &name, &s)));
    let r = match prepared.and_then(|r| crate::replay::read_cohort(cohort).map(|c| (r, c))) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    let (replay, records) = r;
    eprintln!(
        "replaying {} recorded responses × {} conditions × {} variants ...",
        records.len(),
        crate::replay::conditions().len(),
        Variant::ALL.len()
    );
    let panel = replay.run(&records, &Variant::ALL);
    print!("{}", crate::replay::render(&panel));
    let claims = crate::replay::claims(&panel);
    let matched = claims.iter().filter(|(_, ok, _)| *ok).count();
    println!("replay-panel: {matched}/{} matched", claims.len());
    print!("{}", crate::replay::render_claims(&claims));
    // The product's row decides the exit code; a reduced variant can only show its failure
    // where the cohort gives it an opportunity (a cohort of notices has none).
    let full_ok = claims.iter().any(|(v, ok, _)| *v == Variant::Full && *ok);
    if full_ok { EXIT_OK } else { EXIT_REJECTED }
}

/// The envelope's own size limit.
const RESPONSE_READ_CAP: u64 = crate::core::envelope::MAX_RESPONSE_BYTES as u64;

fn check(
    catalog: Option<&Path>,
    state: &Path,
    response: &Path,
    json: bool,
    variant: Variant,
) -> i32 {
    let cat = match catalog_or_embedded(catalog) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    let state_bytes = match read(state, crate::io::MAX_CONFIG_BYTES, "state file") {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    let st = match parse_state(&cat, &state_bytes) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}: {e}", state.display());
            return EXIT_ERROR;
        }
    };
    let resp_bytes = match read(response, RESPONSE_READ_CAP, "response") {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    let cat_label = format!("`{}` v{}", cat.id(), cat.version());
    let mut gw = Gateway::new(
        cat,
        Config {
            variant,
            ..Config::default()
        },
    );
    for u in st.updates {
        let name = gw
            .catalog()
            .source(u.source)
            .map(|s| s.name.to_string())
            .unwrap_or_default();
        if let Err(e) = gw.handle_source_update(st.now, u) {
            eprintln!("error: {}: source `{name}`: {e}", state.display());
            return EXIT_ERROR;
        }
    }
    for c in st.certificates {
        if let Err(e) = gw.handle_certificate(st.now, c) {
            eprintln!("error: {}: {e}", state.display());
            return EXIT_ERROR;
        }
    }
    match gw.handle_response(st.now, &resp_bytes) {
        Err(rej) => {
            if json {
                println!("{}", serde_json::json!({ "rejected": rej }));
            } else {
                println!(
                    "response rejected whole: {} — {}",
                    rej.code(),
                    rej.code().description()
                );
                println!("  {rej}");
            }
            EXIT_REJECTED
        }
        Ok(report) => {
            let obligations: Vec<Obligation> = gw.obligations().cloned().collect();
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "admitted": report, "obligations": obligations })
                );
            } else {
                print_report(&cat_label, st.now.as_ms(), &report, &obligations, &gw);
            }
            let all_kept = report.components.iter().all(|c| {
                !matches!(
                    c.phase,
                    Phase::Withheld | Phase::Invalidated | Phase::Failed
                )
            });
            if all_kept { EXIT_OK } else { EXIT_PARTIAL }
        }
    }
}

fn print_demo_files(out: &Path) {
    println!("files (this run's, overwritten each run):");
    for (f, what) in crate::runtime::demo::FILES {
        println!("  {:<42} {what}", out.join(f).display());
    }
}

/// The demo's last line and exit code.
fn demo_verdict(ok: bool) -> i32 {
    if ok {
        println!("demo: all checks passed");
        EXIT_OK
    } else {
        println!("demo: a check failed");
        EXIT_PARTIAL
    }
}

fn demo_crazyflie(out: &Path, quiet: bool) -> i32 {
    let Some(rt) = tokio_runtime() else {
        return EXIT_ERROR;
    };
    match rt.block_on(crate::runtime::cf_sequence::demo(out, quiet)) {
        Ok((o, receipts_ok)) => {
            let yes = |b: bool| if b { "yes" } else { "NO" };
            println!();
            println!("demo summary ({}):", out.display());
            println!("  forward action streamed             {}", yes(o.streamed));
            println!("  stale forward action withheld       {}", yes(o.withheld));
            println!(
                "  REPORT(z_range) emitted meanwhile   {}",
                yes(o.range_report)
            );
            println!(
                "  stale setpoints at the vehicle      {}",
                o.stale_at_vehicle
            );
            println!(
                "  fresh backtrack-and-land readmitted {} (new binding: {})",
                yes(o.readmitted),
                yes(o.fresh_binding)
            );
            println!(
                "  receipts (chain and signatures)     {}",
                if receipts_ok { "ok" } else { "FAILED" }
            );
            print_demo_files(out);
            let ok = o.streamed
                && o.withheld
                && o.range_report
                && o.stale_at_vehicle == 0
                && o.readmitted
                && o.fresh_binding
                && receipts_ok;
            demo_verdict(ok)
        }
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_ERROR
        }
    }
}

fn demo(catalog: Option<&Path>, out: &Path, quiet: bool) -> i32 {
    let cat = match catalog_or_embedded(catalog) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    let Some(rt) = tokio_runtime() else {
        return EXIT_ERROR;
    };
    match rt.block_on(crate::runtime::demo::run(cat, out, quiet)) {
        Ok(s) => {
            println!();
            println!("demo summary ({}):", out.display());
            println!("  route actions through the gate      {}", s.dispatched);
            println!(
                "  ... taken by the vehicle            {}/{}",
                s.reached_vehicle, s.dispatched
            );
            println!("  actions withheld before dispatch    {}", s.withheld);
            println!(
                "  ... taken by the vehicle anyway     {}/{}",
                s.stale_reached_vehicle, s.withheld
            );
            println!("  fresh readmissions                  {}", s.readmitted);
            println!("  non-actions emitted                 {}", s.emitted);
            println!(
                "  receipts (chain and signatures)     {} ({})",
                s.receipts,
                if s.receipts_ok { "ok" } else { "FAILED" }
            );
            println!("  landed and disarmed                 {}", s.landed);
            print_demo_files(out);
            demo_verdict(s.ok())
        }
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_ERROR
        }
    }
}

/// The named catalog, or the one compiled into the binary.
fn catalog_or_embedded(
    catalog: Option<&Path>,
) -> Result<crate::core::catalog::Catalog, crate::core::catalog::CatalogError> {
    match catalog {
        Some(p) => crate::io::load_catalog(p),
        None => crate::core::catalog::Catalog::parse(
            crate::service::EMBEDDED_CATALOG,
            "embedded uav-px4.toml",
        ),
    }
}

fn digest(catalog: Option<&Path>, response: &Path, json: bool) -> i32 {
    let cat = match catalog_or_embedded(catalog) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    let bytes = match read(response, RESPONSE_READ_CAP, "response") {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    let v = crate::core::envelope::parse_envelope(&bytes)
        .and_then(|raw| crate::core::graph::validate(&cat, &raw));
    match v {
        Ok(v) => {
            if json {
                let m: serde_json::Map<String, serde_json::Value> = v
                    .graph
                    .components()
                    .iter()
                    .map(|c| (c.id.to_string(), c.digest.to_hex().into()))
                    .collect();
                println!("{}", serde_json::Value::Object(m));
            } else {
                for c in v.graph.components() {
                    println!("{} {}", c.id, c.digest);
                }
            }
            EXIT_OK
        }
        Err(rej) => {
            println!("response rejected whole: {rej}");
            EXIT_REJECTED
        }
    }
}

fn print_report(
    cat: &str,
    now_ms: u64,
    r: &AdmissionReport,
    obligations: &[Obligation],
    gw: &Gateway,
) {
    println!(
        "response `{}` against catalog {cat} at t = {now_ms} ms",
        r.response
    );
    for c in &r.components {
        let what = match c.phase {
            Phase::Emitted => "emitted on its output path".to_string(),
            Phase::Retained if c.action => {
                "retained; ready for the final dispatch gate".to_string()
            }
            Phase::Retained => "retained".to_string(),
            Phase::Pending => {
                let waits: Vec<String> = gw
                    .graph(&r.response)
                    .and_then(|g| g.index_of(&c.id).map(|i| (g, i)))
                    .map(|(g, i)| {
                        g.parents(i)
                            .iter()
                            .filter_map(|&(p, q)| {
                                g.component(p)
                                    .map(|pc| format!("`{}` {}", pc.id, q.prerequisite_name()))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                format!("retained; waits for {}", waits.join(", "))
            }
            _ => match c.reason {
                Some(code) => format!("{code}: {}", code.description()),
                None => String::new(),
            },
        };
        println!(
            "  {:<8} {:<16} {:<18} {what}",
            c.id.as_str(),
            c.ty.as_str(),
            c.phase.name()
        );
        if let Some(b) = c.binding {
            println!(
                "  {:<8} {:<16} {:<18} binding {} seq {}",
                "",
                "",
                "",
                b.short(),
                c.seq.map(|s| s.to_string()).unwrap_or_default()
            );
        }
        if let Some(oid) = c.obligation {
            if let Some(o) = obligations.iter().find(|o| o.id == oid) {
                let req: Vec<&str> = o.required.iter().map(|s| s.as_str()).collect();
                let scope: Vec<&str> = o.scope.iter().map(|s| s.as_str()).collect();
                println!(
                    "  {:<8} {:<16} {:<18} {oid}: route `{}` to `{}`, refresh [{}], may replace [{}], expires in {} ms",
                    "",
                    "",
                    "",
                    o.route,
                    o.assignee,
                    req.join(", "),
                    scope.join(", "),
                    o.expiry
                        .saturating_sub(crate::core::Nanos::from_ms(now_ms))
                        .as_ms()
                );
            }
        }
    }
}
