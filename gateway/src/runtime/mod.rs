//! Vehicle adapters for the service: the PX4 bridge or the Crazyflie bridge behind the gate's
//! `Adapter` trait ([`vehicle`]), their telemetry as provider updates ([`px4`], [`crazyflie`]);
//! and the demos, scripted clients of the service.

pub mod cf_sequence;
pub mod crazyflie;
pub mod demo;
pub mod px4;
pub mod vehicle;
