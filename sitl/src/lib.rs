//! Simulated vehicles and independent oracles (see the crate description).
