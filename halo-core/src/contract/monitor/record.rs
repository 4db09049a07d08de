//! What a receipt records for each operation, and its canonical text.
//!
//! Sealing a contract receipt writes about a kilobyte of canonical JSON, most of it two parts
//! that were already written or that rarely change: the proposed goal (its text is what the edit
//! digest hashes, written while deciding) and the modeled state (unchanged by every operation
//! but a commit or an observation). A [`ContractRecord`] keeps both texts and writes itself
//! around them, byte for byte what the generic canonical writer gives for its `Serialize`; the
//! tests below hold the two to the same bytes.

use std::sync::{Arc, OnceLock};

use serde::Serialize;

use super::{RootState, Verdict, Versions};
use crate::canonical::{self, Error, write_str, write_u64};
use crate::contract::domain::{Domain, State};
use crate::contract::spec::{Op, Request, WitnessClaim};
use crate::digest::Digest;
use crate::reason::ReasonCode;
use crate::receipt::CanonicalRecord;

/// A modeled state with its domain, serialized as `{var: value}` text. Rendering happens when
/// the first receipt that records this state is sealed, off the decision path; records made
/// while the state stays the same share the view and its text.
#[derive(Clone, Debug)]
pub struct StateView(Arc<StateText>);

#[derive(Debug)]
struct StateText {
    domain: Arc<Domain>,
    state: State,
    text: OnceLock<Box<str>>,
}

impl StateView {
    pub(super) fn new(domain: Arc<Domain>, state: State) -> StateView {
        StateView(Arc::new(StateText {
            domain,
            state,
            text: OnceLock::new(),
        }))
    }

    /// The state.
    pub fn state(&self) -> &State {
        &self.0.state
    }

    /// True when this view shows `state` of `domain`.
    pub(super) fn shows(&self, domain: &Arc<Domain>, state: &State) -> bool {
        Arc::ptr_eq(&self.0.domain, domain) && self.0.state == *state
    }

    /// Appends the state's canonical text, written once per view.
    fn write_canonical(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        if let Some(t) = self.0.text.get() {
            out.extend_from_slice(t.as_bytes());
            return Ok(());
        }
        let start = out.len();
        canonical::write(out, self)?;
        if let Some(t) = out.get(start..).and_then(|b| std::str::from_utf8(b).ok()) {
            let _ = self.0.text.set(t.into());
        }
        Ok(())
    }
}

impl Serialize for StateView {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.domain.serialize_state(&self.0.state, s)
    }
}

/// What a receipt records.
#[derive(Clone, Debug, Serialize)]
pub struct ContractRecord {
    /// The operation and its typed inputs.
    pub request: Request,
    /// Versions before.
    pub before: Versions,
    /// Versions after.
    pub after: Versions,
    /// Verdict.
    pub verdict: Verdict,
    /// Reason.
    pub reason: Option<ReasonCode>,
    /// Digest of an accepted edit.
    pub edit: Option<Digest>,
    /// Reservation created or consumed.
    pub reservation: Option<u64>,
    /// Committed trace digest after the operation.
    pub trace: Digest,
    /// Modeled state after the operation, serialized as `{var: value}` text.
    pub state: StateView,
    /// Root lifecycle after.
    pub root: Option<RootState>,
    /// For an exact idempotent retry: the index of the original receipt.
    pub replay_of: Option<u64>,
    /// The canonical text of the request's goal spec (`proposeGoal`, `replaceGoal`), as the
    /// decision wrote it for the edit digest.
    #[serde(skip)]
    pub(super) goal_text: Option<Vec<u8>>,
}

impl CanonicalRecord for ContractRecord {
    fn write_canonical(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        // The fields in sorted order, as the generic writer orders them.
        out.extend_from_slice(b"{\"after\":");
        write_versions(out, &self.after);
        out.extend_from_slice(b",\"before\":");
        write_versions(out, &self.before);
        out.extend_from_slice(b",\"edit\":");
        canonical::write(out, &self.edit)?;
        out.extend_from_slice(b",\"reason\":");
        canonical::write(out, &self.reason)?;
        out.extend_from_slice(b",\"replay_of\":");
        canonical::write(out, &self.replay_of)?;
        out.extend_from_slice(b",\"request\":");
        self.write_request(out)?;
        out.extend_from_slice(b",\"reservation\":");
        canonical::write(out, &self.reservation)?;
        out.extend_from_slice(b",\"root\":");
        canonical::write(out, &self.root)?;
        out.extend_from_slice(b",\"state\":");
        self.state.write_canonical(out)?;
        out.extend_from_slice(b",\"trace\":");
        canonical::write(out, &self.trace)?;
        out.extend_from_slice(b",\"verdict\":");
        canonical::write(out, &self.verdict)?;
        out.push(b'}');
        Ok(())
    }
}

impl ContractRecord {
    /// `{"caller":…,"op":{…}}`, the goal spec from its kept text where there is one.
    fn write_request(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        let (goal, op, old, witness) = match (&self.request.op, &self.goal_text) {
            (Op::ProposeGoal { witness, .. }, Some(goal)) => (goal, "propose_goal", None, witness),
            (Op::ReplaceGoal { old, witness, .. }, Some(goal)) => {
                (goal, "replace_goal", Some(old), witness)
            }
            _ => return canonical::write(out, &self.request),
        };
        out.extend_from_slice(b"{\"caller\":");
        canonical::write(out, &self.request.caller)?;
        out.extend_from_slice(b",\"op\":{\"goal\":");
        out.extend_from_slice(goal);
        if let Some(old) = old {
            out.extend_from_slice(b",\"old\":");
            canonical::write(out, old)?;
        }
        out.extend_from_slice(b",\"op\":");
        canonical::write(out, op)?;
        out.extend_from_slice(b",\"witness\":");
        write_witness(out, witness);
        out.extend_from_slice(b"}}");
        Ok(())
    }
}

/// A version vector: its fields in sorted order, as the generic writer writes them (every
/// contract receipt has two).
fn write_versions(out: &mut Vec<u8>, v: &Versions) {
    out.extend_from_slice(b"{\"epoch\":");
    write_u64(out, v.epoch);
    out.extend_from_slice(b",\"graph\":");
    write_u64(out, v.graph);
    out.extend_from_slice(b",\"policy\":");
    write_u64(out, v.policy);
    out.extend_from_slice(b",\"state\":");
    write_u64(out, v.state);
    out.push(b'}');
}

/// A transition witness: its fields in sorted order, as the generic writer writes them.
fn write_witness(out: &mut Vec<u8>, w: &WitnessClaim) {
    out.extend_from_slice(b"{\"base_revision\":");
    write_u64(out, w.base_revision);
    out.extend_from_slice(b",\"edit\":");
    write_str(out, &w.edit);
    out.extend_from_slice(b",\"epoch\":");
    write_u64(out, w.epoch);
    out.extend_from_slice(b",\"new_revision\":");
    write_u64(out, w.new_revision);
    out.extend_from_slice(b",\"parent\":");
    write_str(out, &w.parent);
    out.extend_from_slice(b",\"parent_revision\":");
    write_u64(out, w.parent_revision);
    out.extend_from_slice(b",\"policy_version\":");
    write_u64(out, w.policy_version);
    out.extend_from_slice(b",\"root\":");
    write_str(out, &w.root);
    out.extend_from_slice(b",\"state_version\":");
    write_u64(out, w.state_version);
    out.push(b'}');
}
