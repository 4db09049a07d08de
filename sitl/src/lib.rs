//! sitl: the simulated vehicles the gateway is tested and demonstrated on, and the independent
//! oracles that judge it. Neither is ever linked into the flight binary.
//!
//! [`sim`], the simulated world:
//! - [`sim::px4::Px4Sim`]: a PX4 multicopter, sans-IO, matched to measured PX4 v1.16 SITL
//!   behaviour, recording every setpoint its controller takes;
//! - [`sim::crazyflie::CfSim`]: a Crazyflie 2.1 speaking CRTP, sans-IO, with the firmware's
//!   watchdogs and priorities, and [`sim::crazyflie::SimLink`], a `crazyflie-link` connection
//!   to it so bitcraze's `crazyflie-lib` runs unchanged against it;
//! - [`sim::pair::Pair`]: two endpoints on a virtual-time datagram link with loss, delay and
//!   outages;
//! - [`sim::udp`]: the simulator on a real UDP socket, as PX4 SITL runs (`halo-sitl px4`);
//! - [`sim::world`]: the simulated world's provider updates the demos and tests publish.
//!
//! [`oracle`], the judges, each its own reading of the specification:
//! - [`oracle::contract_audit`]: an independent replay of mission-contract receipt streams;
//! - [`oracle::contract_explorer`]: a bounded explorer of the contract protocol over a small
//!   abstraction;
//! - [`oracle::replay`]: what the HALO replay panel should find, from its own reading of the
//!   catalog and its own LocalOK.
//!
//! [`peer`]: the tests' independent Python peers (pymavlink), started and read the same way.
//! [`client`]: the one HTTP client of the service's API for tests, demos and benchmarks.
//!
//! This crate judges the gateway from outside: it imports none of the gateway's decision code
//! and none of the bridge's; the two sides share only the MAVLink wire format, the documented
//! formats and the documented setpoint fingerprint rule, written here separately. Keep it off
//! the dispatch path.
//!
//! # Features
//!
//! This crate has no optional features.

#![warn(missing_docs, unreachable_pub)]

pub mod client;
pub mod oracle;
pub mod peer;
pub mod sim;

use mavlink::dialects::common::MavMessage;

/// [`sim::px4::Px4Sim`] as a [`sim::pair::Endpoint`].
pub struct SimEndpoint {
    /// The vehicle.
    pub sim: sim::px4::Px4Sim,
    seq: u8,
    /// Frames that did not decode.
    pub parse_errors: u32,
    /// Accepted-setpoint records, in order.
    pub setpoints: Vec<sim::px4::SetpointRecord>,
}

impl SimEndpoint {
    /// Wraps a vehicle.
    pub fn new(sim: sim::px4::Px4Sim) -> SimEndpoint {
        SimEndpoint {
            sim,
            seq: 0,
            parse_errors: 0,
            setpoints: Vec::new(),
        }
    }
}

impl sim::pair::Endpoint for SimEndpoint {
    fn handle_datagram(&mut self, now_ns: u64, bytes: &[u8]) {
        let (msgs, errors) = sim::wire::decode(bytes);
        self.parse_errors += errors;
        for (h, m) in msgs {
            self.sim.handle_message(now_ns, &h, &m);
        }
        while let Some(r) = self.sim.poll_setpoint() {
            self.setpoints.push(r);
        }
    }

    fn handle_timeout(&mut self, now_ns: u64) {
        self.sim.handle_timeout(now_ns);
    }

    fn poll_datagram(&mut self) -> Option<Vec<u8>> {
        let msg: MavMessage = self.sim.poll_transmit()?;
        Some(sim::wire::encode(self.sim.header(), &msg, &mut self.seq))
    }

    fn poll_timeout(&self) -> u64 {
        self.sim.poll_timeout()
    }
}
