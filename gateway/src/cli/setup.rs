//! Setting up a machine: `config example NAME` and `catalog --embedded NAME` print what is
//! compiled into the binary, so an installed binary needs no checkout beside it; `run --check`
//! ([`check_run`]) validates a configuration without touching the state directory.

use super::{EXIT_ERROR, EXIT_OK};

/// `config`'s subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ConfigCmd {
    /// Print an annotated configuration to start from (`> /etc/halo-gateway/config.toml`).
    Example {
        /// Which: `sim` (the evaluation binary's simulated PX4), `px4-sitl` (PX4 SITL on this
        /// host), `pixhawk-telem2` (a companion wired to a Pixhawk's TELEM2), `crazyflie` (a
        /// Crazyflie over a Crazyradio).
        #[arg(value_enum)]
        name: ExampleName,
    },
}

/// The annotated example configurations (`configs/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExampleName {
    /// The evaluation binary's embedded simulated PX4 (`halo-eval run`).
    Sim,
    /// PX4 SITL on this host (udpin:0.0.0.0:14540).
    Px4Sitl,
    /// A Raspberry Pi companion on a Pixhawk's TELEM2 (serial:/dev/ttyAMA0:921600).
    #[value(name = "pixhawk-telem2")]
    Pixhawk2,
    /// A Crazyflie 2.x over a Crazyradio.
    Crazyflie,
}

/// The built-in catalogs and contract domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EmbeddedName {
    /// The PX4 catalog (`vehicle.kind = "px4"`).
    UavPx4,
    /// The Crazyflie catalog (`vehicle.kind = "crazyflie"`).
    Crazyflie,
    /// The mission-contract domain (`contract.domain`).
    ContractUav,
}

impl ExampleName {
    /// The file's text, as in `configs/`.
    pub fn text(self) -> &'static str {
        match self {
            ExampleName::Sim => include_str!("../../../configs/sim.toml"),
            ExampleName::Px4Sitl => include_str!("../../../configs/px4-sitl.toml"),
            ExampleName::Pixhawk2 => include_str!("../../../configs/pixhawk-telem2.toml"),
            ExampleName::Crazyflie => include_str!("../../../configs/crazyflie.toml"),
        }
    }
}

impl EmbeddedName {
    /// The text compiled into the binary.
    pub fn text(self) -> &'static str {
        match self {
            EmbeddedName::UavPx4 => crate::io::EMBEDDED_CATALOG,
            EmbeddedName::Crazyflie => crate::io::EMBEDDED_CRAZYFLIE_CATALOG,
            EmbeddedName::ContractUav => crate::io::EMBEDDED_CONTRACT_DOMAIN,
        }
    }
}

/// `config example NAME`.
pub fn print_example(name: ExampleName) -> i32 {
    print!("{}", name.text());
    EXIT_OK
}

/// `catalog --embedded NAME`.
pub fn print_embedded(name: Option<EmbeddedName>) -> i32 {
    match name {
        Some(n) => {
            print!("{}", n.text());
            EXIT_OK
        }
        // clap requires one of the two; kept total all the same.
        None => {
            eprintln!("error: name a catalog file, or --embedded uav-px4|crazyflie|contract-uav");
            EXIT_ERROR
        }
    }
}

/// `run --check`: the configuration with the command line's overrides, the catalog, the
/// contract domain and the vehicle URL, each validated as `run` would; prints what would run and
/// exits. Touches nothing: no state directory is created, no credential or key is read or
/// written, no socket is opened (a host name in the vehicle URL is resolved).
///
/// `embedded_sim`: the caller is the evaluation binary, which flies `sim` (or no URL) on its
/// embedded simulator; the flight binary passes false and refuses them as `run` does.
pub fn check_run(
    cfg: &crate::service::Config,
    config_file: Option<&std::path::Path>,
    embedded_sim: bool,
) -> i32 {
    let mut problems = Vec::new();
    let simulated = embedded_sim
        && matches!(
            cfg.vehicle.url.as_deref(),
            None | Some(crate::service::config::SIM_URL)
        );
    let vehicle = match cfg.vehicle.url_or_refuse() {
        _ if simulated => "the embedded simulated vehicle".to_string(),
        Ok(u) => match cfg.vehicle.effective_kind() {
            crate::service::config::VehicleKind::Px4 => {
                match px4_bridge::url::TransportUrl::parse(&u) {
                    Ok(t) => format!(
                        "PX4 on {t} as system {} component {}, {}",
                        cfg.vehicle.system_id,
                        cfg.vehicle.component_id,
                        match cfg.vehicle.signing_key() {
                            Ok(Some(k)) if k.accept_unsigned =>
                                "MAVLink signed (unsigned frames accepted)".to_string(),
                            Ok(Some(_)) => "MAVLink signed".to_string(),
                            Ok(None) => "unsigned".to_string(),
                            Err(e) => {
                                problems.push(e.to_string());
                                String::new()
                            }
                        }
                    ),
                    Err(e) => {
                        problems.push(format!("vehicle.url: {e}"));
                        String::new()
                    }
                }
            }
            crate::service::config::VehicleKind::Crazyflie => format!("a Crazyflie on {u}"),
        },
        Err(e) => {
            problems.push(e.to_string());
            String::new()
        }
    };
    let catalog = match cfg.catalog() {
        Ok(c) if cfg.check_principals_against(&c).is_err() => {
            if let Err(e) = cfg.check_principals_against(&c) {
                problems.push(e.to_string());
            }
            String::new()
        }
        Ok(c) => format!(
            "`{}` v{} ({}), {} sources, {} component types",
            c.id(),
            c.version(),
            cfg.catalog
                .path
                .as_ref()
                .map_or_else(|| "compiled in".to_string(), |p| p.display().to_string()),
            c.sources().len(),
            c.types().len()
        ),
        Err(e) => {
            problems.push(e.to_string());
            String::new()
        }
    };
    let domain = match cfg.domain() {
        Ok(d) => format!(
            "`{}` v{} ({})",
            d.id,
            d.version,
            cfg.contract
                .domain
                .as_ref()
                .map_or_else(|| "compiled in".to_string(), |p| p.display().to_string())
        ),
        Err(e) => {
            problems.push(e.to_string());
            String::new()
        }
    };
    let listen = match &cfg.listen.tls {
        Some(t) => match crate::service::infra::tls::Tls::load(t.files(), Default::default()) {
            Ok(_) => format!(
                "https://{} and https://{} (TLS 1.2 and 1.3 with {}{})",
                cfg.listen.http,
                cfg.listen.operator_addr(),
                t.cert_file.display(),
                t.client_ca_file
                    .as_ref()
                    .map_or_else(String::new, |ca| format!(
                        "; client certificates of {}",
                        ca.display()
                    ))
            ),
            Err(e) => {
                problems.push(format!("listen.tls: {e}"));
                String::new()
            }
        },
        None if cfg.listen.insecure_plaintext => format!(
            "http://{} and http://{} (plaintext on a network: listen.insecure_plaintext)",
            cfg.listen.http,
            cfg.listen.operator_addr()
        ),
        None => format!(
            "http://{} and http://{} (loopback only, plaintext)",
            cfg.listen.http,
            cfg.listen.operator_addr()
        ),
    };
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("error: {p}");
        }
        return EXIT_ERROR;
    }
    let state = cfg.state.dir.as_ref().map_or_else(
        || "the default ($HALO_STATE_DIR, $XDG_STATE_HOME/halo-gateway or ~/.local/state/halo-gateway)".to_string(),
        |d| d.display().to_string(),
    );
    println!(
        "{}: ok (nothing started, nothing written)",
        config_file.map_or_else(|| "the defaults".to_string(), |p| p.display().to_string())
    );
    println!("  vehicle:   {vehicle}");
    println!("  catalog:   {catalog}");
    println!("  contract:  {domain}");
    if let Some(f) = &cfg.gcs.forward {
        println!("  relay:     the ground station on {f}");
    }
    println!("  listen:    {listen}");
    if !cfg.principals.is_empty() {
        let names: Vec<String> = cfg
            .principals
            .iter()
            .map(|p| format!("{} ({})", p.name, p.role.role().name()))
            .collect();
        println!("  principals: {}", names.join(", "));
    }
    println!("  state:     {state}");
    if let Some(p) = cfg.realtime.priority {
        println!(
            "  scheduler: SCHED_FIFO priority {p} (applied at start; refused with a warning where the process lacks CAP_SYS_NICE or LimitRTPRIO={p})"
        );
    }
    EXIT_OK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_example_parses_as_a_configuration_and_every_embedded_text_loads() {
        for name in [
            ExampleName::Sim,
            ExampleName::Px4Sitl,
            ExampleName::Pixhawk2,
            ExampleName::Crazyflie,
        ] {
            let c = crate::service::Config::parse(name.text(), "example");
            assert!(c.is_ok(), "{name:?}: {c:?}");
        }
        for (name, catalog) in [
            (EmbeddedName::UavPx4, "uav-px4"),
            (EmbeddedName::Crazyflie, "crazyflie"),
        ] {
            let c = halo_core::catalog::Catalog::parse(name.text(), "embedded");
            assert_eq!(c.map(|c| c.id().to_string()).ok().as_deref(), Some(catalog));
        }
        assert!(
            halo_core::contract::Domain::parse(EmbeddedName::ContractUav.text(), "embedded")
                .is_ok()
        );
    }
}
