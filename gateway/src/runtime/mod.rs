//! Vehicle adapters for the service: the PX4 bridge behind the gate's `Adapter` trait, PX4
//! telemetry as provider updates; and the demo, a scripted client of the service.

pub mod demo;
pub mod px4;
