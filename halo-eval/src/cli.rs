//! The evaluation binary's command line: `halo-eval run` (the service on an embedded simulated
//! vehicle), `demo`, `replay`, `check --variant` and `contract audit`. Exit codes are the flight
//! binary's ([`halo_gateway::cli`]).

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};
use halo_gateway::cli::run::{RunArgs, run_configured, tokio_runtime};
use halo_gateway::cli::{EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, EXIT_REJECTED, read};

use halo_core::variant::Variant;

#[derive(Parser, Debug)]
#[command(
    name = "halo-eval",
    version,
    about = "halo-gateway on simulated vehicles: the demos, run, the replay panel, mechanism variants, the independent contract audit",
    after_help = "Every other command of the flight binary (audit, digest, catalog, operator, contract run, contract domain) runs here as it does in halo-gateway."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// `halo-gateway run` on an embedded simulated vehicle: the simulated PX4 on a loopback UDP
    /// port pair of its own (it never sends to a well-known port), or with
    /// `--vehicle-kind crazyflie` the simulated Crazyflie. Takes every option of
    /// `halo-gateway run`; `--vehicle` may name a real vehicle instead.
    Run {
        #[command(flatten)]
        run: RunArgs,
        /// The simulated vehicle's own log of the setpoints its controller took (JSON lines):
        /// the evidence of what reached the vehicle.
        #[arg(long)]
        sim_setpoint_log: Option<PathBuf>,
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
        vehicle: DemoVehicle,
        /// Where to write receipts and setpoint logs.
        #[arg(long, default_value = "target/halo-demo")]
        out: PathBuf,
        /// Print only the summary.
        #[arg(long)]
        quiet: bool,
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
    /// `halo-gateway check` under a mechanism variant: the decisions of every component of a
    /// response against a catalog and a state snapshot, as a reduced mechanism would make them.
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
    /// Mission-contract evaluation.
    Contract {
        #[command(subcommand)]
        cmd: ContractCmd,
    },
    /// The PX4 panels through the running service (`deny-hold`, `px4-latency`): per cold start
    /// a fresh simulated PX4 over UDP and a fresh service; an agent and providers drive it over
    /// HTTP; the simulated vehicle's own setpoint record is the evidence. Exit 0 when every
    /// action's hold reached the vehicle with nothing of the action after it, 2 when not.
    Px4Panels {
        /// Cold starts.
        #[arg(long, default_value_t = 10)]
        cold_starts: usize,
        /// Route actions per cold start, back to back in one flight.
        #[arg(long, default_value_t = 4)]
        per_start: usize,
        /// Where each cold start's receipts and setpoint logs go (`cold-N/`).
        #[arg(long, default_value = "target/halo-px4-panels")]
        out: PathBuf,
        /// Fly a running PX4 at this onboard-link URL instead of the simulator (PX4 SITL:
        /// `udpin:0.0.0.0:14540`); the evidence is then PX4's own POSITION_TARGET_LOCAL_NED on
        /// its ground-station link. Each cold start is a fresh service; PX4 is not restarted.
        #[arg(long)]
        px4: Option<String>,
        /// With `--px4`: the UDP port PX4 sends its ground-station stream to (PX4 SITL: 14550;
        /// close QGroundControl first).
        #[arg(long, default_value_t = 14550)]
        gcs_port: u16,
    },
    /// The UAV support-profile panel through the running service (`px4-profiles`): 11
    /// age-of-information and 30 Part 107-informed conditions (halo-eval/data/px4-profiles.json)
    /// back to back in one flight per cold start, each a route action whose decision, whose
    /// presence or absence among the setpoints the vehicle took, and whose recovery are checked
    /// against the data file. Exit 0 when every condition matched, 2 when not.
    Px4Profiles {
        /// Cold starts.
        #[arg(long, default_value_t = 10)]
        cold_starts: usize,
        /// Where each cold start's receipts and setpoint logs go (`cold-N/`).
        #[arg(long, default_value = "target/halo-px4-profiles")]
        out: PathBuf,
        /// Fly a running PX4 at this onboard-link URL instead of the simulator, as for
        /// `px4-panels` (the battery condition needs the simulator and is not run).
        #[arg(long)]
        px4: Option<String>,
        /// With `--px4`: the UDP port PX4 sends its ground-station stream to.
        #[arg(long, default_value_t = 14550)]
        gcs_port: u16,
    },
    /// The mechanism panel through the running service (`px4-mechanisms`, the HALO paper's
    /// Table 12): the 12 shared conditions of the `mechanisms` suite through `halo-gateway run`
    /// running as each mechanism variant (an evaluation-only setting), a fresh simulated PX4
    /// and service per variant and cold start. Exit 0 when under Full exactly the supported
    /// components proceeded in every run, 2 when not.
    Px4Mechanisms {
        /// Cold starts.
        #[arg(long, default_value_t = 10)]
        cold_starts: usize,
        /// Run every variant of the core (eight) rather than the paper's four (WholeResponse,
        /// IndependentFilter, AdmissionOnly, Full).
        #[arg(long)]
        all_variants: bool,
        /// Where each run's receipts and setpoint logs go (`cold-N-VARIANT/`).
        #[arg(long, default_value = "target/halo-px4-mechanisms")]
        out: PathBuf,
        /// Fly a running PX4 at this onboard-link URL instead of the simulator, as for
        /// `px4-panels`.
        #[arg(long)]
        px4: Option<String>,
        /// With `--px4`: the UDP port PX4 sends its ground-station stream to.
        #[arg(long, default_value_t = 14550)]
        gcs_port: u16,
    },
    /// The recovery-route panel through the running service (`recovery-routes`): 24 ways a
    /// component is withheld (halo-eval/data/recovery-routes.json), each alone and with a
    /// dependent status (48 routes), executable or terminal by the catalog's recovery lists,
    /// then six controls (five reuses of a prior authorization, one out-of-scope candidate).
    /// Exit 0 when every route matched and every control was refused, 2 when not.
    RecoveryRoutes {
        /// Cold starts.
        #[arg(long, default_value_t = 10)]
        cold_starts: usize,
        /// Where each cold start's receipts and setpoint logs go (`cold-N/`).
        #[arg(long, default_value = "target/halo-recovery-routes")]
        out: PathBuf,
        /// Fly a running PX4 at this onboard-link URL instead of the simulator, as for
        /// `px4-panels`.
        #[arg(long)]
        px4: Option<String>,
        /// With `--px4`: the UDP port PX4 sends its ground-station stream to.
        #[arg(long, default_value_t = 14550)]
        gcs_port: u16,
    },
}

#[derive(Subcommand, Debug)]
enum ContractCmd {
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

/// Which embedded simulated vehicle the demo flies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum DemoVehicle {
    /// The simulated PX4 (the running example).
    Px4,
    /// The simulated Crazyflie (the Crazyflie sequence).
    Crazyflie,
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
    if is_flight_command(word(1), word(2)) {
        return halo_gateway::cli::run_with(args);
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
        Cmd::Run {
            run,
            sim_setpoint_log,
        } => run_embedded(&run, sim_setpoint_log),
        Cmd::Demo {
            catalog,
            vehicle,
            out,
            quiet,
        } => match vehicle {
            DemoVehicle::Px4 => demo(catalog.as_deref(), &out, quiet),
            DemoVehicle::Crazyflie if catalog.is_some() => {
                eprintln!(
                    "error: --catalog is for the PX4 demo; the Crazyflie demo flies the embedded crazyflie catalog"
                );
                EXIT_ERROR
            }
            DemoVehicle::Crazyflie => demo_crazyflie(&out, quiet),
        },
        Cmd::Replay {
            cohort,
            catalog,
            state,
        } => replay(&cohort, catalog.as_deref(), state.as_deref()),
        Cmd::Check {
            catalog,
            state,
            response,
            json,
            variant,
        } => halo_gateway::cli::check::check(
            catalog.as_deref(),
            &state,
            &response,
            json,
            halo_core::engine::Config {
                variant,
                ..halo_core::engine::Config::default()
            },
        ),
        Cmd::Contract {
            cmd:
                ContractCmd::Audit {
                    domain,
                    receipts,
                    key,
                },
        } => contract_audit(domain.as_deref(), &receipts, key.as_deref()),
        Cmd::Px4Panels {
            cold_starts,
            per_start,
            out,
            px4,
            gcs_port,
        } => {
            let peer = match px4 {
                Some(url) => crate::px4_panels::Peer::Px4 { url, gcs_port },
                None => crate::px4_panels::Peer::Sim,
            };
            if per_start == 0 {
                eprintln!("error: --per-start must be at least 1");
                return EXIT_ERROR;
            }
            panel(
                "px4-panels",
                &format!("{per_start} route actions"),
                cold_starts,
                &out,
                &peer,
                |cat| crate::px4_panels::run(cat, &out, cold_starts, per_start, &peer),
            )
        }
        Cmd::Px4Profiles {
            cold_starts,
            out,
            px4,
            gcs_port,
        } => {
            let peer = match px4 {
                Some(url) => crate::px4_panels::Peer::Px4 { url, gcs_port },
                None => crate::px4_panels::Peer::Sim,
            };
            panel(
                "px4-profiles",
                "41 conditions",
                cold_starts,
                &out,
                &peer,
                |cat| crate::px4_profiles::run(cat, &out, cold_starts, &peer),
            )
        }
        Cmd::Px4Mechanisms {
            cold_starts,
            all_variants,
            out,
            px4,
            gcs_port,
        } => {
            let peer = match px4 {
                Some(url) => crate::px4_panels::Peer::Px4 { url, gcs_port },
                None => crate::px4_panels::Peer::Sim,
            };
            let variants: &[halo_core::Variant] = if all_variants {
                &halo_core::Variant::ALL
            } else {
                &crate::px4_mechanisms::TABLE_12
            };
            panel(
                "px4-mechanisms",
                &format!("12 conditions x {} variants", variants.len()),
                cold_starts,
                &out,
                &peer,
                |cat| crate::px4_mechanisms::run(cat, &out, cold_starts, variants, &peer),
            )
        }
        Cmd::RecoveryRoutes {
            cold_starts,
            out,
            px4,
            gcs_port,
        } => {
            let peer = match px4 {
                Some(url) => crate::px4_panels::Peer::Px4 { url, gcs_port },
                None => crate::px4_panels::Peer::Sim,
            };
            panel(
                "recovery-routes",
                "48 routes and 6 controls",
                cold_starts,
                &out,
                &peer,
                |_| {
                    crate::recovery_routes::run(
                        halo_gateway::io::EMBEDDED_CATALOG,
                        &out,
                        cold_starts,
                        &peer,
                    )
                },
            )
        }
    }
}

/// Runs one PX4 panel: checks the count, loads the embedded catalog, says what runs where,
/// prints the result and draws its picture under `out`. Exit 0 when every run matched, 2 when
/// not, 3 when the panel could not run.
fn panel<R, F>(
    name: &str,
    what: &str,
    cold_starts: usize,
    out: &Path,
    peer: &crate::px4_panels::Peer,
    run: impl FnOnce(halo_core::Catalog) -> F,
) -> i32
where
    R: crate::px4_panels::PanelReport,
    F: std::future::Future<Output = Result<R, crate::demo::DemoError>>,
{
    if cold_starts == 0 {
        eprintln!("error: --cold-starts must be at least 1");
        return EXIT_ERROR;
    }
    let cat = match catalog_or_embedded(None) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    let Some(rt) = tokio_runtime() else {
        return EXIT_ERROR;
    };
    println!(
        "{name}: {} of {what} through the running service on {} ({})",
        crate::px4_panels::cold_starts_text(cold_starts),
        peer_text(peer),
        out.display()
    );
    match rt.block_on(run(cat)) {
        Ok(r) => {
            r.print();
            let svg = out.join(format!("{name}.svg"));
            match r.plot(&svg) {
                Ok(()) => println!("picture: {}", svg.display()),
                Err(e) => eprintln!("warning: no picture: {e}"),
            }
            if r.passed() { EXIT_OK } else { 2 }
        }
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_ERROR
        }
    }
}

fn peer_text(peer: &crate::px4_panels::Peer) -> String {
    match peer {
        crate::px4_panels::Peer::Sim => "the simulated PX4".to_string(),
        crate::px4_panels::Peer::Px4 { url, gcs_port } => {
            format!("the PX4 at {url} (its ground-station stream on UDP {gcs_port})")
        }
    }
}

/// Whether a command line is one of the flight binary's commands this binary runs as they are
/// (`audit`, `digest`, `catalog`, `operator`, `contract run`, `contract domain`): the same
/// code as `halo-gateway`'s, for scripts and tests that have only this binary.
fn is_flight_command(cmd: &str, sub: &str) -> bool {
    matches!(cmd, "audit" | "digest" | "catalog" | "operator")
        || (cmd == "contract" && matches!(sub, "run" | "domain"))
}

/// `halo-eval run`: the service on the embedded simulator its vehicle kind calls for, unless
/// `--vehicle` (or the configuration) names a vehicle other than `sim`.
fn run_embedded(a: &RunArgs, sim_setpoint_log: Option<PathBuf>) -> i32 {
    let cfg = match a.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    if a.check {
        return halo_gateway::cli::setup::check_run(&cfg, a.config.as_deref(), true);
    }
    let simulated = matches!(
        cfg.vehicle.url.as_deref(),
        None | Some(crate::service::config::SIM_URL)
    );
    run_configured(a, cfg, move |cfg| async move {
        if !simulated {
            return Ok((cfg, crate::service::Embedded::default()));
        }
        let (cfg, embedded, vehicle) = crate::embedded::start(cfg, sim_setpoint_log.as_deref())
            .await
            .map_err(|e| {
                halo_gateway::error::Error::new(halo_gateway::error::ErrorKind::System, e)
            })?;
        Ok((cfg, embedded.keeping(vehicle)))
    })
}

/// The contract domain's text and a name for it (the file, or the one compiled in).
fn domain_text(domain: Option<&Path>) -> Result<(String, String), String> {
    Ok(halo_gateway::cli::contract::domain_text(domain)?)
}

/// The catalog at `path`, or the embedded `uav-px4` catalog.
fn catalog_or_embedded(path: Option<&Path>) -> Result<halo_core::Catalog, String> {
    halo_gateway::cli::check::catalog_or_embedded(path).map_err(|e| e.to_string())
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
        sitl::oracle::contract_audit::AuditDomain::from_toml(&t).map_err(|e| format!("{name}: {e}"))
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
    match sitl::oracle::contract_audit::audit_lines(&d, &refs, key.as_ref()) {
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
            crate::io::EMBEDDED_CATALOG.to_string(),
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

fn print_demo_files(out: &Path) {
    println!("files (this run's, overwritten each run):");
    for (f, what) in crate::demo::FILES {
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
    match rt.block_on(crate::cf_sequence::demo(out, quiet)) {
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
    match rt.block_on(crate::demo::run(cat, out, quiet)) {
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
