//! `halo-gateway check`, `digest` and `catalog`: a response's decisions against a catalog and a
//! state, its digests, and a catalog checked.

use std::path::Path;

use halo_core::engine::{AdmissionReport, Config, Gateway};
use halo_core::obligation::Obligation;
use halo_core::phase::Phase;
use halo_core::statefile::parse_state;

use super::{EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, EXIT_REJECTED, read};

/// The envelope's own size limit.
const RESPONSE_READ_CAP: u64 = halo_core::envelope::MAX_RESPONSE_BYTES as u64;

/// `halo-gateway check` (and `halo-eval check --variant`, which passes its variant in `core`):
/// the exit code.
pub fn check(
    catalog: Option<&Path>,
    state: &Path,
    response: &Path,
    json: bool,
    core: Config,
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
            eprintln!("error: {}: {}", state.display(), e.message());
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
    let mut gw = Gateway::new(cat, core);
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

/// The named catalog, or the one compiled into the binary (`uav-px4`).
///
/// # Errors
/// [`halo_core::catalog::CatalogError`] naming the file, the line and the field.
pub fn catalog_or_embedded(
    catalog: Option<&Path>,
) -> Result<halo_core::catalog::Catalog, halo_core::catalog::CatalogError> {
    crate::io::load_catalog(catalog, crate::io::EmbeddedCatalog::UavPx4)
}

/// `halo-gateway digest`: the exit code.
pub(crate) fn digest(catalog: Option<&Path>, response: &Path, json: bool) -> i32 {
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
    let v = halo_core::envelope::parse_envelope(&bytes)
        .and_then(|raw| halo_core::graph::validate(&cat, &raw));
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
    for c in r.components.iter() {
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
        if let Some(oid) = c.obligation
            && let Some(o) = obligations.iter().find(|o| o.id == oid)
        {
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
                    .saturating_sub(halo_core::Nanos::from_ms(now_ms))
                    .as_ms()
            );
        }
    }
}

/// `halo-gateway catalog FILE`: the catalog checked, and a line per type.
pub fn catalog(path: &Path) -> i32 {
    match crate::io::load_catalog(Some(path), crate::io::EmbeddedCatalog::UavPx4) {
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
                    if t.class == halo_core::Class::Action {
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
            if super::contract::toml_has_table(path, "domain", "catalog") {
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
    }
}
