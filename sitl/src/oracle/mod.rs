//! The oracles: independent judges of the gateway, each written from its own reading of the
//! specification. None imports the gateway's decision code; each is shown to catch a planted
//! defect by the suite that uses it.

pub mod contract_audit;
pub mod contract_explorer;
pub mod replay;
