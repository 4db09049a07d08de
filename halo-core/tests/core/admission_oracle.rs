//! `admission-oracle`: predefined admission cases (response, catalog, state) with the expected
//! retained, withheld and rejected ids and reason codes, written by hand in
//! `scripts/gen_admission_cases.py` and frozen under `tests/data/admission/`.
use std::collections::BTreeMap;

use crate::common::*;
use halo_core::{Config, Gateway};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    catalog: String,
    state: serde_json::Value,
    #[serde(default)]
    response: Option<serde_json::Value>,
    #[serde(default)]
    response_text: Option<String>,
    expect: Expect,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    #[serde(default)]
    rejected: Option<ExpectRejected>,
    #[serde(default)]
    components: Option<BTreeMap<String, ExpectComponent>>,
    #[serde(default)]
    default: Option<ExpectComponent>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectRejected {
    code: String,
    #[serde(default)]
    ids: Option<Vec<String>>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct ExpectComponent {
    phase: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    obligation: Option<bool>,
    /// The recovery route the obligation names (Table 6's route per profile).
    #[serde(default)]
    route: Option<String>,
}

fn run_case(c: &Case) -> Result<(), String> {
    run_case_with(c, Config::default())
}

fn run_case_with(c: &Case, cfg: Config) -> Result<(), String> {
    let text = match (&c.response, &c.response_text) {
        (Some(v), None) => serde_json::to_string(v).unwrap(),
        (None, Some(t)) => t.clone(),
        _ => return Err("a case has exactly one of `response` and `response_text`".into()),
    };
    let mut gw = Gateway::new(catalog_named(&c.catalog), cfg);
    let resolvable = halo_core::envelope::parse_envelope(text.as_bytes())
        .and_then(|raw| halo_core::graph::validate(gw.catalog(), &raw))
        .is_ok();
    let mut state = c.state.clone();
    if !resolvable {
        // Certificates cannot name digests of a response that does not validate.
        state["certificates"] = serde_json::json!([]);
    }
    let now = apply_state(&mut gw, &state, &text);
    let result = gw.handle_response(now, text.as_bytes());
    match (&c.expect.rejected, result) {
        (Some(exp), Err(rej)) => {
            if rej.code().name() != exp.code {
                return Err(format!(
                    "rejected with {} ({}), expected {}",
                    rej.code(),
                    rej.message(),
                    exp.code
                ));
            }
            if let Some(ids) = &exp.ids {
                let mut got = rej.ids().to_vec();
                let mut want = ids.clone();
                got.sort();
                want.sort();
                if got != want {
                    return Err(format!("offending ids {got:?}, expected {want:?}"));
                }
            }
            // A rejected response leaves nothing behind.
            if gw.response_ids().count() != 0
                || gw.obligations().count() != 0
                || gw.poll_dispatch().is_some()
            {
                return Err("a rejected response left state behind".into());
            }
            Ok(())
        }
        (Some(exp), Ok(_)) => Err(format!("admitted, expected rejection {}", exp.code)),
        (None, Err(rej)) => Err(format!("rejected: {rej}")),
        (None, Ok(report)) => {
            let listed = c.expect.components.clone().unwrap_or_default();
            for comp in report.components.iter() {
                let exp = listed
                    .get(comp.id.as_str())
                    .or(c.expect.default.as_ref())
                    .ok_or_else(|| format!("no expectation for `{}`", comp.id))?;
                if comp.phase.name() != exp.phase {
                    return Err(format!(
                        "`{}` is {} ({:?}), expected {}",
                        comp.id,
                        comp.phase,
                        comp.reason.map(|r| r.name()),
                        exp.phase
                    ));
                }
                let needs_reason =
                    matches!(exp.phase.as_str(), "WITHHELD" | "INVALIDATED" | "PENDING");
                if needs_reason && exp.reason.is_none() {
                    return Err(format!(
                        "expectation for `{}` ({}) must name a reason",
                        comp.id, exp.phase
                    ));
                }
                if let Some(reason) = &exp.reason {
                    let got = comp.reason.map(|r| r.name()).unwrap_or("none");
                    if got != reason {
                        return Err(format!("`{}` reason {got}, expected {reason}", comp.id));
                    }
                }
                if let Some(o) = exp.obligation
                    && comp.obligation.is_some() != o
                {
                    return Err(format!(
                        "`{}` obligation {:?}, expected {o}",
                        comp.id, comp.obligation
                    ));
                }
                if let Some(route) = &exp.route {
                    let got = comp
                        .obligation
                        .and_then(|o| gw.obligation(o))
                        .map_or("none", |o| o.route.as_str());
                    if got != route {
                        return Err(format!("`{}` route {got}, expected {route}", comp.id));
                    }
                }
                let retained_phase =
                    matches!(exp.phase.as_str(), "EMITTED" | "RETAINED" | "PENDING");
                if comp.retained != retained_phase {
                    return Err(format!(
                        "`{}` retained = {}, expected {retained_phase}",
                        comp.id, comp.retained
                    ));
                }
            }
            for id in listed.keys() {
                if report.component(id).is_none() {
                    return Err(format!("expected component `{id}` is not in the report"));
                }
            }
            Ok(())
        }
    }
}

/// Every case of the corpus, in file order.
fn corpus() -> Vec<Case> {
    let dir = data_dir().join("admission");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
    {
        let cf: CaseFile = serde_json::from_slice(&std::fs::read(f).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        out.extend(cf.cases);
    }
    out
}

/// The corpus against a core with seeded defect `origin-not-claimed` (`--features
/// __seeded-defects`, `scripts/seeded_defects.sh`): the global-target cases that expect
/// `CLAIM_MISSING` flag it, and nothing else moves.
#[cfg(feature = "__seeded-defects")]
#[test]
fn admission_oracle_catches_an_unclaimed_origin() {
    let cfg = Config {
        defects: vec![halo_core::defect::Defect::OriginNotClaimed],
        ..Config::default()
    };
    let cases = corpus();
    let flagged: Vec<&str> = cases
        .iter()
        .filter(|c| run_case_with(c, cfg.clone()).is_err())
        .map(|c| c.name.as_str())
        .collect();
    println!(
        "admission-oracle-planted-defect: {}/{} matched (origin-not-claimed flagged by {})",
        cases.len() - flagged.len(),
        cases.len(),
        flagged.join(", ")
    );
    assert_eq!(
        flagged,
        [
            "local/global-target-without-origin-claim-terminal",
            "local/global-target-origin-claim-without-epoch-terminal"
        ]
    );
}

#[test]
fn admission_oracle() {
    let mut total = 0usize;
    let mut matched = 0usize;
    let mut failures = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for c in &corpus() {
        assert!(
            names.insert(c.name.clone()),
            "duplicate case name {}",
            c.name
        );
        total += 1;
        match run_case(c) {
            Ok(()) => matched += 1,
            Err(e) => failures.push(format!("{}: {e}", c.name)),
        }
    }
    println!("admission-oracle: {matched}/{total} matched");
    for f in &failures {
        println!("  MISMATCH {f}");
    }
    assert_eq!(total, 119, "the corpus: every case, pinned");
    assert!(failures.is_empty(), "{} mismatches", failures.len());
}
