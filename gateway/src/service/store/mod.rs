//! What survives a restart: the hash-linked receipt log with its signed heads ([`receipts`]) and
//! the state directory's boot epoch and role credentials ([`statedir`]).

pub mod receipts;
pub mod statedir;
