//! Cross-domain transfer: the unchanged core attached to a second domain, a sandboxed bare Git
//! repository whose one effect is a merge (the HALO paper's supplementary portability check).
//!
//! `catalogs/repo-merge.toml` is the domain: a review notice, an evidence request, a merge action
//! and a completion notice that requires the merge; sources for the target head, the patch, CI,
//! approval and branch protection (and other branches, in no footprint). [`GitAdapter`] is the
//! adapter: it merges with the `git` command in a temporary bare repository (`merge-tree`,
//! `commit-tree`, and `update-ref` guarded by the head it read). Twelve cases run through six
//! variants; what happened is read back from Git's ancestry, not from the gateway.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use halo_core::payload::ActionCommand;
use halo_core::statefile::ProviderUpdate;
use halo_core::variant::Variant;
use halo_core::{
    Adapter, AdapterError, Catalog, Config, EnqueueRequest, Event, Gateway, Id, Nanos,
};

/// The repository-merge catalog, as shipped.
pub const CATALOG: &str = include_str!("../../catalogs/repo-merge.toml");

/// A bare Git repository in a temporary directory, removed on drop.
pub struct Repo {
    dir: PathBuf,
}

impl Repo {
    /// Creates an empty bare repository under `dir`.
    ///
    /// # Errors
    /// `git` is missing or fails.
    pub fn new(dir: &Path) -> Result<Repo, String> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let r = Repo {
            dir: dir.to_path_buf(),
        };
        r.git(
            &["init", "--quiet", "--bare", "--initial-branch=main"],
            None,
        )?;
        Ok(r)
    }

    /// Runs `git` in the repository with a fixed identity and no user or system configuration.
    fn git(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let mut c = Command::new("git");
        c.arg("-C")
            .arg(&self.dir)
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "halo")
            .env("GIT_AUTHOR_EMAIL", "halo@example.invalid")
            .env("GIT_AUTHOR_DATE", "2026-12-01T00:00:00Z")
            .env("GIT_COMMITTER_NAME", "halo")
            .env("GIT_COMMITTER_EMAIL", "halo@example.invalid")
            .env("GIT_COMMITTER_DATE", "2026-12-01T00:00:00Z")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c
            .spawn()
            .map_err(|e| format!("git: {e} (is git installed?)"))?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            use std::io::Write as _;
            pipe.write_all(text.as_bytes())
                .map_err(|e| format!("git {}: {e}", args.join(" ")))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("git {}: {e}", args.join(" ")))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(format!(
                "git {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Commits `files` (name, content) on top of `parent` and points `branch` at it.
    ///
    /// # Errors
    /// A `git` failure.
    pub fn commit(
        &self,
        branch: &str,
        parent: Option<&str>,
        files: &[(&str, &str)],
        message: &str,
    ) -> Result<String, String> {
        let mut tree = String::new();
        for (name, content) in files {
            let blob = self.git(&["hash-object", "-w", "--stdin"], Some(content))?;
            tree.push_str(&format!("100644 blob {blob}\t{name}\n"));
        }
        let tree = self.git(&["mktree"], Some(&tree))?;
        let mut args = vec!["commit-tree", tree.as_str(), "-m", message];
        if let Some(p) = parent {
            args.extend(["-p", p]);
        }
        let c = self.git(&args, None)?;
        self.git(&["update-ref", &format!("refs/heads/{branch}"), &c], None)?;
        Ok(c)
    }

    /// The head commit of `branch`.
    pub fn head(&self, branch: &str) -> Option<String> {
        self.git(
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/heads/{branch}"),
            ],
            None,
        )
        .ok()
    }

    /// Merges `source` into `target`: a merge commit of the two heads, `target` moved to it only
    /// if it still points where it pointed when the merge was computed.
    ///
    /// # Errors
    /// The merge conflicts, or the target moved meanwhile.
    pub fn merge(&self, source: &str, target: &str, note: &str) -> Result<String, String> {
        let (s, t) = (
            self.head(source).ok_or("no source branch")?,
            self.head(target).ok_or("no target branch")?,
        );
        let tree = self.git(&["merge-tree", "--write-tree", &t, &s], None)?;
        let tree = tree.lines().next().unwrap_or_default().to_string();
        let msg = format!("Merge {source} into {target} ({note})");
        let c = self.git(
            &["commit-tree", &tree, "-p", &t, "-p", &s, "-m", &msg],
            None,
        )?;
        self.git(
            &["update-ref", &format!("refs/heads/{target}"), &c, &t],
            None,
        )?;
        Ok(c)
    }

    /// Merge commits reachable from `branch`.
    pub fn merges(&self, branch: &str) -> usize {
        self.git(&["rev-list", "--merges", "--count", branch], None)
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// Whether commit `a` is an ancestor of (or equal to) commit `b`.
    pub fn is_ancestor(&self, a: &str, b: &str) -> bool {
        self.git(&["merge-base", "--is-ancestor", a, b], None)
            .is_ok()
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The merge adapter: the gate's one path to the repository.
pub struct GitAdapter<'a> {
    repo: &'a Repo,
    /// Merges made: (component, merge commit).
    pub merges: Vec<(String, String)>,
}

impl<'a> GitAdapter<'a> {
    /// An adapter over `repo`.
    pub fn new(repo: &'a Repo) -> GitAdapter<'a> {
        GitAdapter {
            repo,
            merges: Vec::new(),
        }
    }
}

impl Adapter for GitAdapter<'_> {
    fn try_enqueue(&mut self, req: &EnqueueRequest<'_>) -> Result<(), AdapterError> {
        let ActionCommand::Merge { source, target } = &req.command else {
            return Err(AdapterError::Unsupported);
        };
        let note = format!("halo binding {}", req.binding.to_hex());
        match self.repo.merge(source.as_str(), target.as_str(), &note) {
            Ok(c) => {
                self.merges.push((req.component.to_string(), c));
                Ok(())
            }
            Err(_) => Err(AdapterError::Refused),
        }
    }
}

// --- the cases ---------------------------------------------------------------------------------

/// One case of the repository panel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    /// Nothing changes.
    AllValid,
    /// Another branch gets a commit (a source in no footprint changes).
    UnrelatedBranch,
    /// An issue is updated (the same source, a new epoch only).
    UnrelatedIssue,
    /// The target branch moves after admission.
    TargetHeadMoved,
    /// The change under review gets a new commit after admission.
    PatchChanged,
    /// CI runs again (new evidence, still passing).
    CiChanged,
    /// CI fails.
    CiFailed,
    /// The approval is withdrawn.
    ApprovalRevoked,
    /// Branch protection gets a new rule version.
    ProtectionChanged,
    /// The change conflicts with the target (known before admission).
    MergeConflict,
    /// The target moves; the completion notice that requires the merge must not go out.
    NoticeAfterBlockedMerge,
    /// The target moves; a fresh candidate against the new head is admitted and merged.
    FreshRecovery,
}

impl Case {
    /// Every case, in panel order.
    pub const ALL: [Case; 12] = [
        Case::AllValid,
        Case::UnrelatedBranch,
        Case::UnrelatedIssue,
        Case::TargetHeadMoved,
        Case::PatchChanged,
        Case::CiChanged,
        Case::CiFailed,
        Case::ApprovalRevoked,
        Case::ProtectionChanged,
        Case::MergeConflict,
        Case::NoticeAfterBlockedMerge,
        Case::FreshRecovery,
    ];

    /// Display name.
    pub const fn name(self) -> &'static str {
        match self {
            Case::AllValid => "all-valid",
            Case::UnrelatedBranch => "unrelated-branch-update",
            Case::UnrelatedIssue => "unrelated-issue-update",
            Case::TargetHeadMoved => "changed-target-head",
            Case::PatchChanged => "changed-patch-digest",
            Case::CiChanged => "changed-ci",
            Case::CiFailed => "failed-ci",
            Case::ApprovalRevoked => "revoked-approval",
            Case::ProtectionChanged => "changed-branch-protection",
            Case::MergeConflict => "merge-conflict",
            Case::NoticeAfterBlockedMerge => "notice-after-blocked-merge",
            Case::FreshRecovery => "fresh-recovery",
        }
    }

    /// Ground truth, written per case: the admitted merge may still reach the repository.
    pub const fn admitted_merge_is_current(self) -> bool {
        matches!(
            self,
            Case::AllValid | Case::UnrelatedBranch | Case::UnrelatedIssue
        )
    }
}

/// What one execution left behind, read from Git and from the gateway's outputs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The admitted (first) merge reached the repository: a merge commit of the reviewed change.
    pub admitted_merged: bool,
    /// The completion notice went out.
    pub notice_emitted: bool,
    /// A fresh candidate was admitted and its merge reached the repository.
    pub fresh_merged: bool,
}

/// One variant's row of the panel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Row {
    /// Unaffected cases whose merge and notice both went out / unaffected executions.
    pub unaffected_kept: usize,
    /// Unaffected executions.
    pub unaffected: usize,
    /// Merges that reached the repository although their evidence had changed.
    pub stale_merges: usize,
    /// Executions where the evidence changed.
    pub stale_opp: usize,
    /// Completion notices emitted without their merge.
    pub notice_leaks: usize,
    /// Executions whose merge did not (or must not) happen.
    pub notice_opp: usize,
    /// Fresh readmissions completed / attempted.
    pub fresh_done: usize,
    /// Fresh readmissions attempted.
    pub fresh_opp: usize,
}

/// The panel's variants: the product and the paper's repository variants (HALO-Admission,
/// Local-Unbound, No-Dependency, GlobalSnapshot) and WholeResponse.
pub const VARIANTS: [Variant; 6] = [
    Variant::Full,
    Variant::WholeResponse,
    Variant::IndependentFilter,
    Variant::AdmissionOnly,
    Variant::GlobalSnapshot,
    Variant::LocalUnbound,
];

fn update(gw: &mut Gateway, at: u64, source: &str, value: Value, epoch: u64, prov: &str) {
    let u = ProviderUpdate {
        source: source.to_string(),
        value,
        epoch,
        provenance: match prov.parse() {
            Ok(p) => p,
            Err(_) => return,
        },
        generated_at_ms: at,
    };
    if let Ok(t) = u.typed(gw.catalog()) {
        let _ = gw.handle_source_update(Nanos::from_ms(at), t);
    }
}

fn merge_component(target_head_epoch: u64) -> Value {
    json!({"id": "m1", "type": "merge", "payload": {"source": "feature", "target": "main"},
           "support": {"target_head": {"epoch": target_head_epoch}, "patch": {"epoch": 1},
                       "ci": {"epoch": 1}, "protection": {"epoch": 1}}})
}

fn run_gate(
    gw: &mut Gateway,
    at: u64,
    ad: &mut GitAdapter<'_>,
    rid: &Id,
    emitted: &mut Vec<String>,
) {
    let t = Nanos::from_ms(at);
    loop {
        let tokens: Vec<_> = std::iter::from_fn(|| gw.poll_dispatch()).collect();
        let before = ad.merges.len();
        for tok in tokens {
            let cid = tok.component().clone();
            let n = ad.merges.len();
            let _ = gw.final_gate(t, tok, ad);
            if ad.merges.len() > n {
                let _ = gw.handle_observation(t, rid, &cid, true);
            }
        }
        while let Some(e) = gw.poll_event() {
            if let Event::Emit { component, .. } = e {
                emitted.push(component.id().to_string());
            }
        }
        if ad.merges.len() == before {
            break;
        }
    }
}

/// Runs one case through one variant in a fresh repository under `dir`.
///
/// # Errors
/// Git or the catalog failed (not an outcome).
pub fn execute(
    catalog: &Catalog,
    case: Case,
    variant: Variant,
    dir: &Path,
) -> Result<Outcome, String> {
    let repo = Repo::new(dir)?;
    let base = repo.commit("main", None, &[("README", "base\n")], "base")?;
    // The change under review: a new file, or (for the conflict case) an edit of the README
    // that the target edits differently.
    let files: Vec<(&str, &str)> = if case == Case::MergeConflict {
        vec![("README", "the feature's edit\n")]
    } else {
        vec![("README", "base\n"), ("feature.txt", "the feature\n")]
    };
    let feature = repo.commit("feature", Some(&base), &files, "the change under review")?;
    repo.commit(
        "docs",
        Some(&base),
        &[("README", "base\n"), ("docs.md", "docs\n")],
        "docs",
    )?;
    let mut head_epoch = 1;
    let mut head = base.clone();
    if case == Case::MergeConflict {
        // The target took a conflicting edit before the agent answered; the agent saw it.
        head = repo.commit(
            "main",
            Some(&base),
            &[("README", "main's edit\n")],
            "main's edit",
        )?;
        head_epoch = 2;
    }
    let mut gw = Gateway::new(
        catalog.clone(),
        Config {
            variant,
            ..Config::default()
        },
    );
    let t0 = 1_000;
    update(
        &mut gw,
        t0,
        "target_head",
        json!(head),
        head_epoch,
        "git-host",
    );
    update(&mut gw, t0, "patch", json!(feature), 1, "git-host");
    update(&mut gw, t0, "ci", json!(true), 1, "ci");
    update(&mut gw, t0, "approval", json!(true), 1, "maintainer");
    update(&mut gw, t0, "protection", json!(true), 1, "git-host");
    update(&mut gw, t0, "branches", Value::Null, 1, "git-host");

    let rid = Id::new("merge-1").map_err(|e| e.to_string())?;
    let response = json!({"response_id": "merge-1", "agent_id": "reviewer-1", "generation": 1,
        "catalog": {"id": "repo-merge", "version": 1}, "components": [
            {"id": "n1", "type": "review_notice", "payload": {"text": "Reviewed: feature into main"}},
            merge_component(head_epoch),
            {"id": "s1", "type": "merged_notice", "payload": {"text": "feature merged into main"},
             "requires": [{"id": "m1", "phase": "dispatched"}, {"id": "n1", "phase": "emitted"}]}]});
    gw.handle_response(Nanos::from_ms(1_100), response.to_string().as_bytes())
        .map_err(|e| format!("{}: the response was refused: {e}", case.name()))?;
    let mut emitted = Vec::new();
    while let Some(e) = gw.poll_event() {
        if let Event::Emit { component, .. } = e {
            emitted.push(component.id().to_string());
        }
    }

    // The world moves between the agent's answer and the merge.
    let t1 = 1_150;
    match case {
        Case::UnrelatedBranch => {
            let docs = repo.head("docs").unwrap_or_default();
            repo.commit(
                "docs",
                Some(&docs),
                &[("README", "base\n"), ("docs.md", "more docs\n")],
                "docs",
            )?;
            update(&mut gw, t1, "branches", Value::Null, 2, "git-host");
        }
        Case::UnrelatedIssue => update(&mut gw, t1, "branches", Value::Null, 3, "tracker"),
        Case::TargetHeadMoved | Case::NoticeAfterBlockedMerge | Case::FreshRecovery => {
            head = repo.commit(
                "main",
                Some(&head),
                &[("README", "base\n"), ("other.txt", "another change\n")],
                "another change",
            )?;
            head_epoch += 1;
            update(
                &mut gw,
                t1,
                "target_head",
                json!(head),
                head_epoch,
                "git-host",
            );
        }
        Case::PatchChanged => {
            let mut more = files.clone();
            more.push(("more.txt", "more\n"));
            let f = repo.commit("feature", Some(&feature), &more, "a later commit")?;
            update(&mut gw, t1, "patch", json!(f), 2, "git-host");
        }
        Case::CiChanged => update(&mut gw, t1, "ci", json!(true), 2, "ci"),
        Case::CiFailed => update(&mut gw, t1, "ci", json!(false), 2, "ci"),
        Case::ApprovalRevoked => update(&mut gw, t1, "approval", json!(false), 2, "maintainer"),
        Case::ProtectionChanged => update(&mut gw, t1, "protection", json!(true), 2, "git-host"),
        Case::AllValid | Case::MergeConflict => {}
    }
    let mut ad = GitAdapter::new(&repo);
    run_gate(&mut gw, 1_200, &mut ad, &rid, &mut emitted);
    let admitted_merged = !ad.merges.is_empty();

    let mut fresh_merged = false;
    if case == Case::FreshRecovery {
        // The agent replans against the new head: a fresh candidate inside the obligation.
        let obligation = gw
            .obligations()
            .find(|o| o.component.id().as_str() == "m1" && o.state.is_live())
            .map(|o| o.id.0);
        if let Some(o) = obligation {
            let cand = json!({"obligation": o, "response_id": "merge-1", "agent_id": "reviewer-1",
                "generation": 2, "catalog": {"id": "repo-merge", "version": 1},
                "components": [merge_component(head_epoch)]});
            if gw
                .handle_candidate(Nanos::from_ms(1_300), cand.to_string().as_bytes())
                .is_ok()
            {
                let n = ad.merges.len();
                run_gate(&mut gw, 1_310, &mut ad, &rid, &mut emitted);
                fresh_merged = ad.merges.len() > n;
            }
        }
    }
    // Git's own account: a merge commit on main whose second parent is the reviewed change.
    let main = repo.head("main").unwrap_or_default();
    let reviewed_in_main = repo.is_ancestor(&feature, &main) && repo.merges("main") > 0;
    Ok(Outcome {
        admitted_merged: admitted_merged && reviewed_in_main,
        notice_emitted: emitted.iter().any(|c| c == "s1"),
        fresh_merged: fresh_merged && reviewed_in_main,
    })
}

/// Runs the panel: every case through every variant, `reps` times, in fresh repositories under
/// `dir`.
///
/// # Errors
/// Git or the catalog failed.
pub fn panel(reps: usize, dir: &Path) -> Result<Vec<(Variant, Row)>, String> {
    let catalog = Catalog::parse(CATALOG, "repo-merge.toml").map_err(|e| e.to_string())?;
    let mut rows: Vec<(Variant, Row)> = VARIANTS.iter().map(|v| (*v, Row::default())).collect();
    for rep in 0..reps {
        for case in Case::ALL {
            for (k, (v, row)) in rows.iter_mut().enumerate() {
                let o = execute(
                    &catalog,
                    case,
                    *v,
                    &dir.join(format!("r{rep}-{}-{k}", case.name())),
                )?;
                if case.admitted_merge_is_current() {
                    row.unaffected += 1;
                    row.unaffected_kept += usize::from(o.admitted_merged && o.notice_emitted);
                } else if case != Case::MergeConflict {
                    row.stale_opp += 1;
                    row.stale_merges += usize::from(o.admitted_merged);
                }
                if !case.admitted_merge_is_current() {
                    row.notice_opp += 1;
                    // The notice requires the merge: out without any merge is a leak.
                    row.notice_leaks +=
                        usize::from(o.notice_emitted && !o.admitted_merged && !o.fresh_merged);
                }
                if case == Case::FreshRecovery {
                    row.fresh_opp += 1;
                    row.fresh_done += usize::from(o.fresh_merged);
                }
            }
        }
    }
    Ok(rows)
}

/// What each variant must show (Full: every unaffected output kept, no stale merge, no leak,
/// every fresh readmission completed).
pub fn claims(rows: &[(Variant, Row)]) -> Vec<(Variant, bool, &'static str)> {
    rows.iter()
        .map(|(v, r)| {
            let (ok, what) = match v {
                Variant::Full => (
                    r.unaffected_kept == r.unaffected
                        && r.stale_merges == 0
                        && r.notice_leaks == 0
                        && r.fresh_done == r.fresh_opp,
                    "keeps every unaffected merge, no stale merge, no leak, every fresh readmission completed",
                ),
                Variant::AdmissionOnly => (r.stale_merges > 0, "merges on stale evidence"),
                Variant::LocalUnbound => (
                    r.stale_merges > 0 && r.stale_merges < r.stale_opp,
                    "merges past a moved head, patch, CI run or protection (claims not bound)",
                ),
                Variant::IndependentFilter => (
                    r.notice_leaks > 0 && r.stale_merges == 0,
                    "leaks completion notices of blocked merges",
                ),
                Variant::GlobalSnapshot => (
                    r.unaffected_kept < r.unaffected && r.stale_merges == 0,
                    "denies merges an unrelated branch or issue update does not affect",
                ),
                _ => (
                    r.stale_merges == 0 && r.notice_leaks == 0,
                    "no stale merge and no leak (nothing is unsupported at admission here)",
                ),
            };
            (*v, ok, what)
        })
        .collect()
}

/// The panel as text.
pub fn render(rows: &[(Variant, Row)], reps: usize) -> String {
    let mut s = format!(
        "{} cases × {} variants × {reps} repetitions = {} executions\n",
        Case::ALL.len(),
        rows.len(),
        Case::ALL.len() * rows.len() * reps
    );
    s.push_str(&format!(
        "  {:<18} {:>18} {:>14} {:>22} {:>18}\n",
        "variant",
        "unaffected-kept↑",
        "stale-merge↓",
        "dependent-notice-leak↓",
        "fresh-readmitted↑"
    ));
    for (v, r) in rows {
        s.push_str(&format!(
            "  {:<18} {:>18} {:>14} {:>22} {:>18}\n",
            v.name(),
            format!("{}/{}", r.unaffected_kept, r.unaffected),
            format!("{}/{}", r.stale_merges, r.stale_opp),
            format!("{}/{}", r.notice_leaks, r.notice_opp),
            format!("{}/{}", r.fresh_done, r.fresh_opp),
        ));
    }
    s
}
