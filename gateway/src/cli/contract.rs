//! `halo-gateway contract run` and `contract domain`: a mission-contract workflow through the
//! monitor, and a domain file checked.

use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::{EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, read};
use halo_core::contract::workflow::WorkflowFile;

/// `halo-gateway contract ...`.
#[derive(Subcommand, Debug)]
pub(crate) enum ContractCmd {
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
}

/// The contract domain's text and a name for it: the file, or the one compiled in.
///
/// # Errors
/// The file cannot be read, for people.
pub fn domain_text(domain: Option<&Path>) -> Result<(String, String), crate::error::Error> {
    Ok(crate::io::domain_text(domain)?)
}

/// A value's snake_case wire name (`allow`, `closed`), for people.
pub fn snake(v: &impl serde::Serialize) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|x| x.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Whether a TOML file has the top-level table `has` and not `lacks`: how a catalog
/// (`[catalog]`) and a contract domain (`[domain]`) given to the other's command are told apart.
pub fn toml_has_table(path: &Path, has: &str, lacks: &str) -> bool {
    crate::io::read_text_capped(path, crate::io::MAX_CONFIG_BYTES, "TOML file")
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .is_some_and(|t| t.contains_key(has) && !t.contains_key(lacks))
}

/// `halo-gateway contract domain`: the exit code.
pub(crate) fn contract_domain(path: &Path) -> i32 {
    let d = match domain_text(Some(path))
        .map_err(String::from)
        .and_then(|(t, name)| halo_core::contract::Domain::parse(&t, &name).map_err(|e| e.0))
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

/// `halo-gateway contract run`: the exit code.
pub(crate) fn contract_run(
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
            if created && let Some(k) = signing_key {
                println!(
                    "created the audit key {} (public key in {})",
                    k.display(),
                    crate::audit::public_path(k).display()
                );
            }
            s
        }),
        Err(e) => {
            eprintln!("error: --signing-key {e}");
            return EXIT_ERROR;
        }
    };
    use halo_core::contract::workflow::{Runner, Step};
    let loaded = domain_text(domain)
        .map_err(String::from)
        .and_then(|(t, name)| halo_core::contract::Domain::parse(&t, &name).map_err(|e| e.0))
        .and_then(|d| {
            let wf: WorkflowFile = read(workflow, crate::io::MAX_WORKFLOW_BYTES, "workflow")
                .map_err(String::from)
                .and_then(|b| {
                    serde_json::from_slice(&b).map_err(|e| {
                        format!(
                            "{}: {}",
                            workflow.display(),
                            halo_core::strict::explain(&b, &e)
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
    let mut runner = Runner::new(halo_core::contract::Monitor::new(d), "cli");
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
        let cp = s.seal_after(
            last.as_ref(),
            at,
            crate::service::infra::clock::wall_now_ms(),
        );
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
