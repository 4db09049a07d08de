//! The flight binary's command line: parses arguments and calls one subcommand's module.
//!
//! | subcommand | module |
//! | --- | --- |
//! | `run` | [`run`]: the service |
//! | `operator` | [`operator`]: commands, holds, status, signed heads against a running gateway |
//! | `check`, `digest`, `catalog` | [`check`]: a response's decisions, its digests, a catalog |
//! | `audit show`, `audit verify` | [`audit`]: the receipt log |
//! | `contract run`, `contract domain` | [`contract`]: mission-contract workflows and domains |
//!
//! The demos, the replay panel, the mechanism variants and the independent contract audit are
//! the evaluation binary's (`halo-eval`), which links the simulators and the judges this one
//! does not.
//!
//! Exit codes (stable, for scripts):
//! - 0: every component retained (or the command succeeded);
//! - 1: the response was admitted but some components were withheld or invalidated (an
//!   operator command was refused);
//! - 2: the response was rejected whole (a log did not verify);
//! - 3: usage, file, configuration or catalog error;
//! - 4: `run`: the receipt log failed during the run;
//! - 5: `run`: a listener cannot bind its address;
//! - 6: `run`: the vehicle link cannot open;
//! - 7: `run`: the state directory cannot be used;
//! - 8: `run`: a task of the running service failed.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

pub mod audit;
pub mod check;
pub mod contract;
pub mod operator;
pub mod plot;
pub mod run;
pub mod setup;

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
/// Exit code of `run`: a listener cannot bind its address (taken, or not allowed).
pub const EXIT_LISTEN: i32 = 5;
/// Exit code of `run`: the vehicle link cannot open (no such device or radio, an address that
/// cannot be bound, a Crazyflie that does not answer).
pub const EXIT_VEHICLE: i32 = 6;
/// Exit code of `run`: the state directory cannot be used (permissions, a full disk, a
/// credential or key file others can read, a receipt log that exists).
pub const EXIT_STATE: i32 = 7;
/// Exit code of `run`: a task of the running service failed.
pub const EXIT_TASK: i32 = 8;

/// The exit code of a service that could not start (or stop cleanly).
pub fn start_exit_code(e: &crate::service::StartError) -> i32 {
    use crate::service::StartError as E;
    match e {
        E::Config(_) => EXIT_ERROR,
        E::Listen(_) => EXIT_LISTEN,
        E::Vehicle(_) => EXIT_VEHICLE,
        E::State(_) => EXIT_STATE,
        E::Task(_) => EXIT_TASK,
    }
}

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
    /// vehicle its configuration names over MAVLink (or a Crazyflie's radio). Stops cleanly on
    /// Ctrl-C or SIGTERM (holds the vehicle, flushes receipts). The flight binary has no
    /// simulator: `halo-eval run` (scripts/run_sim.sh) runs this service on one.
    Run(run::RunArgs),
    /// Operator commands against a running gateway: arm, disarm, takeoff, land, rtl, hold,
    /// release, status, heads (the signed receipt heads, kept off the machine with
    /// `--follow DIR`).
    Operator {
        /// What to do.
        #[arg(value_enum)]
        action: operator::OperatorAction,
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
        /// Print the gateway's answer as JSON (`status`: the raw `GET /v1/status`) instead of
        /// the summary in words.
        #[arg(long)]
        json: bool,
        /// With an `https://` URL: the CA certificate (PEM) that signed the gateway's
        /// certificate; only it is trusted.
        #[arg(long)]
        cacert: Option<PathBuf>,
        /// With mTLS: the operator principal's client certificate (PEM, with its chain); it is
        /// the credential, so no token file is read.
        #[arg(long, requires = "key", conflicts_with = "token_file")]
        cert: Option<PathBuf>,
        /// The private key (PEM) of `--cert`.
        #[arg(long, requires = "cert")]
        key: Option<PathBuf>,
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
    /// Receipt-log tools.
    Audit {
        #[command(subcommand)]
        cmd: audit::AuditCmd,
    },
    /// Draw one flight as an SVG: the target streamed to the vehicle (from the bridge's
    /// setpoint log) and each component's phases (from the receipts), with dispatches,
    /// deny-holds, expiry holds and pilot overrides marked.
    Plot {
        /// The receipt log (JSON lines).
        receipts: PathBuf,
        /// The bridge's setpoint log (`vehicle.setpoint_log`), for the upper panel.
        setpoints: Option<PathBuf>,
        /// Where to write the picture.
        #[arg(short = 'o', long, default_value = "flight.svg")]
        out: PathBuf,
    },
    /// Mission contracts: run a workflow through the monitor, or check a domain.
    Contract {
        #[command(subcommand)]
        cmd: contract::ContractCmd,
    },
    /// Validate a catalog file and print a summary, or print a catalog compiled into the binary.
    Catalog {
        /// Catalog file (TOML).
        #[arg(required_unless_present = "embedded", conflicts_with = "embedded")]
        path: Option<PathBuf>,
        /// Print this built-in catalog (or contract domain) as it is compiled in: a starting
        /// point for your own (`catalog.path`, `contract.domain`).
        #[arg(long, value_enum, value_name = "NAME")]
        embedded: Option<setup::EmbeddedName>,
    },
    /// Configuration files: print an annotated example to start from.
    Config {
        #[command(subcommand)]
        cmd: setup::ConfigCmd,
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
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let word = |i: usize| args.get(i).and_then(|a| a.to_str()).unwrap_or("");
    if let Some(moved) = moved_to_eval(word(1), word(2)) {
        eprintln!("error: {moved}");
        return EXIT_ERROR;
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_ERROR } else { EXIT_OK };
            let _ = e.print();
            return code;
        }
    };
    match cli.cmd {
        Cmd::Run(a) => run::run_service(&a),
        Cmd::Operator {
            action,
            altitude,
            url,
            follow,
            token_file,
            state_dir,
            json,
            cacert,
            cert,
            key,
        } => operator::operator(
            action,
            altitude,
            operator::Connection {
                url: &url,
                token_file,
                state_dir,
                cacert: cacert.as_deref(),
                identity: cert.as_deref().zip(key.as_deref()),
            },
            follow.as_deref(),
            json,
        ),
        Cmd::Check {
            catalog,
            state,
            response,
            json,
        } => check::check(
            catalog.as_deref(),
            &state,
            &response,
            json,
            halo_core::engine::Config::default(),
        ),
        Cmd::Digest {
            catalog,
            response,
            json,
        } => check::digest(catalog.as_deref(), &response, json),
        Cmd::Audit {
            cmd: audit::AuditCmd::Verify { paths, key, head },
        } => audit::audit_verify(&paths, key.as_deref(), head.as_deref()),
        Cmd::Audit {
            cmd: audit::AuditCmd::Show { paths, decisions },
        } => audit::audit_show(&paths, decisions),
        Cmd::Plot {
            receipts,
            setpoints,
            out,
        } => plot::plot(&receipts, setpoints.as_deref(), &out),
        Cmd::Contract {
            cmd:
                contract::ContractCmd::Run {
                    domain,
                    workflow,
                    receipts,
                    keep_going,
                    signing_key,
                },
        } => contract::contract_run(
            domain.as_deref(),
            &workflow,
            &receipts,
            keep_going,
            signing_key.as_deref(),
        ),
        Cmd::Contract {
            cmd: contract::ContractCmd::Domain { path },
        } => contract::contract_domain(&path),
        Cmd::Catalog {
            path: Some(path), ..
        } => check::catalog(&path),
        Cmd::Catalog {
            path: None,
            embedded,
        } => setup::print_embedded(embedded),
        Cmd::Config {
            cmd: setup::ConfigCmd::Example { name },
        } => setup::print_example(name),
    }
}

/// Where a command this binary no longer has went: the demos, the replay panel and the
/// mechanism variants are the evaluation binary's, which links the simulators and the judges
/// the flight binary does not.
fn moved_to_eval(cmd: &str, sub: &str) -> Option<String> {
    let (cmd, how) = match (cmd, sub) {
        ("demo", _) => ("demo", "`cargo run --release -p halo-eval -- demo`"),
        ("replay", _) => (
            "replay",
            "`cargo run --release -p halo-eval -- replay COHORT`",
        ),
        ("contract", "audit") => (
            "contract audit",
            "`cargo run --release -p halo-eval -- contract audit RECEIPTS`",
        ),
        _ => return None,
    };
    Some(format!(
        "`{cmd}` is the evaluation binary's (`halo-eval {cmd}`; the flight binary links no simulator and no judge): {how}"
    ))
}

/// Reads a file (or standard input for `-`) through a size cap.
///
/// # Errors
/// A one-line message naming the file.
pub fn read(path: &Path, cap: u64, what: &str) -> Result<Vec<u8>, crate::error::Error> {
    Ok(crate::io::read_capped(path, cap, what)?)
}
