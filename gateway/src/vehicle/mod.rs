//! The vehicle behind the final gate: the PX4 bridge or the Crazyflie bridge, as the gate's
//! [`Adapter`], with the bookkeeping the service needs to attribute what the vehicle reports to
//! the response and component that were dispatched.
//!
//! # Safety behaviour
//!
//! The gate's adapter call does not send: it checks the bridge's last known state and
//! *reserves* a place in the bridge's bounded queue ([`VehicleAdapter::try_enqueue`]; it
//! succeeds or fails at once, no `.await`, no blocking). The reserved input is staged here. The
//! service writes the gate's receipt and only then calls [`VehicleAdapter::release_staged`],
//! which hands every staged input to the bridge in order and cannot fail (the places are held).
//! When the receipts cannot be written, [`VehicleAdapter::discard_staged_targets`] drops the
//! staged targets (the bridge never sees them) and sends the holds. So no setpoint leaves
//! before the receipt of the decision that sent it is appended. A hold asked for while inputs
//! are staged waits behind them (the bridge takes inputs in order, as before); with nothing
//! staged it goes out at once.

pub mod crazyflie;
pub mod px4;

use std::collections::VecDeque;

use crazyflie_bridge::shell::CfHandle;
use px4_bridge::shell::BridgeHandle;

use crate::core::gate::{Adapter, AdapterError, EnqueueRequest};
use crate::core::ids::Id;
use crate::core::payload::ActionCommand;

/// How many dispatched commands the adapter remembers for attributing the vehicle's echo of a
/// target. It echoes a target within a few stream periods, long before this many newer exist.
const RECENT: usize = 16;

/// An input reserved in a bridge's queue, not yet sent.
#[derive(Debug)]
enum Staged {
    Px4(px4_bridge::shell::Reserved),
    Crazyflie(crazyflie_bridge::shell::Reserved),
}

impl Staged {
    fn release(self) {
        match self {
            Staged::Px4(r) => r.release(),
            Staged::Crazyflie(r) => r.release(),
        }
    }

    fn binding(&self) -> Option<[u8; 32]> {
        match self {
            Staged::Px4(r) => r.binding(),
            Staged::Crazyflie(r) => r.binding(),
        }
    }
}

/// The bridge the gate dispatches through.
#[derive(Clone)]
pub enum VehicleLink {
    /// PX4 over MAVLink (offboard setpoints).
    Px4(BridgeHandle),
    /// A Crazyflie over a Crazyradio (position setpoints, high-level commander).
    Crazyflie(CfHandle),
}

/// The governed adapter: exact commands through the bridge's non-blocking queue.
pub struct VehicleAdapter {
    link: VehicleLink,
    /// The newest commands the bridge took (at most [`RECENT`], newest last), each with the
    /// response and component it belongs to.
    recent: VecDeque<([u8; 32], Id, Id)>,
    /// The newest position target handed to the bridge (a hold or a land ends it).
    pub last_target: Option<[u8; 32]>,
    /// The newest target's position, local NED m, until the vehicle was seen there (the
    /// Crazyflie's observation: its estimate converged on the target).
    pub pending_arrival: Option<([u8; 32], [f64; 3])>,
    /// Targets whose stream this adapter ended (a later target, a hold or a land replaced it),
    /// by binding: the gate's critical section only notes the binding; the ids are looked up
    /// when drained ([`VehicleAdapter::take_ended`]).
    ended: Vec<[u8; 32]>,
    /// Inputs reserved in the bridge's queue and not yet sent, oldest first (see the module
    /// docs). Bounded by the bridge's queue: each holds one of its places.
    staged: VecDeque<Staged>,
}

impl VehicleAdapter {
    /// Wraps a bridge.
    pub fn new(link: VehicleLink) -> VehicleAdapter {
        VehicleAdapter {
            link,
            recent: VecDeque::with_capacity(RECENT),
            last_target: None,
            pending_arrival: None,
            ended: Vec::new(),
            staged: VecDeque::new(),
        }
    }

    /// Sends every staged input to the bridge, in order. Cannot fail: each holds its place.
    pub fn release_staged(&mut self) {
        while let Some(s) = self.staged.pop_front() {
            s.release();
        }
    }

    /// Drops every staged target (the bridge never sees it) and sends the staged holds and
    /// commands; returns the dropped targets' bindings. For a batch of receipts that could not
    /// be written.
    pub fn discard_staged_targets(&mut self) -> Vec<[u8; 32]> {
        let mut dropped = Vec::new();
        while let Some(s) = self.staged.pop_front() {
            match s.binding() {
                Some(b) => {
                    dropped.push(b);
                    if self.last_target == Some(b) {
                        self.target_ended();
                    }
                }
                None => s.release(),
            }
        }
        dropped
    }

    /// Inputs staged and not yet sent.
    pub fn staged(&self) -> usize {
        self.staged.len()
    }

    /// The bridge.
    pub fn link(&self) -> &VehicleLink {
        &self.link
    }

    /// The PX4 bridge, when that is the vehicle.
    pub fn px4(&self) -> Option<&BridgeHandle> {
        match &self.link {
            VehicleLink::Px4(h) => Some(h),
            VehicleLink::Crazyflie(_) => None,
        }
    }

    /// The Crazyflie bridge, when that is the vehicle.
    pub fn crazyflie(&self) -> Option<&CfHandle> {
        match &self.link {
            VehicleLink::Crazyflie(h) => Some(h),
            VehicleLink::Px4(_) => None,
        }
    }

    /// The provenance the vehicle's own sources carry (`px4`, `crazyflie`).
    pub fn provenance(&self) -> &'static str {
        match &self.link {
            VehicleLink::Px4(_) => "px4",
            VehicleLink::Crazyflie(_) => "crazyflie",
        }
    }

    /// The response and component a recently dispatched binding belongs to.
    pub fn attribute(&self, binding: &[u8; 32]) -> Option<(&Id, &Id)> {
        self.recent
            .iter()
            .rev()
            .find(|(b, _, _)| b == binding)
            .map(|(_, r, c)| (r, c))
    }

    /// The current target no longer streams (the bridge holds, lands or lost the link).
    pub fn target_ended(&mut self) {
        if let Some(b) = self.last_target.take() {
            self.ended.push(b);
        }
        self.pending_arrival = None;
    }

    /// The bridge stopped streaming this target by itself (it expired or was dropped); a newer
    /// target that replaced it meanwhile is unaffected.
    pub fn target_ended_if(&mut self, binding: &[u8; 32]) {
        if self.last_target == Some(*binding) {
            self.target_ended();
        }
    }

    /// The streams ended since the last call, as (response, component).
    pub fn take_ended(&mut self) -> Vec<(Id, Id)> {
        let ended = std::mem::take(&mut self.ended);
        ended
            .iter()
            .filter_map(|b| self.attribute(b).map(|(r, c)| (r.clone(), c.clone())))
            .collect()
    }

    /// Stop streaming and hold where the vehicle is: at once, or behind the staged inputs
    /// (released with them, sent even when they are discarded).
    ///
    /// # Errors
    /// The bridge's refusal, for people.
    pub fn hold(&mut self) -> Result<(), String> {
        let r = match &self.link {
            VehicleLink::Px4(h) => h.reserve_hold().map(Staged::Px4).map_err(|e| e.to_string()),
            VehicleLink::Crazyflie(h) => h
                .reserve_hold()
                .map(Staged::Crazyflie)
                .map_err(|e| e.to_string()),
        }?;
        if self.staged.is_empty() {
            r.release();
        } else {
            self.staged.push_back(r);
        }
        Ok(())
    }

    /// Whether a setpoint would be taken now: PX4 offboard-capable (no pilot, failsafe or
    /// autopilot procedure owns the vehicle); a Crazyflie linked and armed.
    pub fn takes_setpoints(&self) -> bool {
        match &self.link {
            VehicleLink::Px4(h) => h.offboard_capable(),
            VehicleLink::Crazyflie(h) => h.link_up() && h.armed(),
        }
    }

    /// Position setpoints the bridge sent since start.
    pub fn setpoints_sent(&self) -> u64 {
        match &self.link {
            VehicleLink::Px4(h) => h.setpoints_sent(),
            VehicleLink::Crazyflie(h) => h.setpoints_sent(),
        }
    }

    /// Bridge events dropped because the service's queue was full.
    pub fn dropped_events(&self) -> u64 {
        match &self.link {
            VehicleLink::Px4(h) => h.dropped_events(),
            VehicleLink::Crazyflie(h) => h.dropped_events(),
        }
    }
}

fn px4_error(e: px4_bridge::EnqueueError) -> AdapterError {
    use px4_bridge::EnqueueError as E;
    match e {
        E::LinkDown => AdapterError::LinkDown,
        E::QueueFull => AdapterError::QueueFull,
        E::NotOffboardCapable | E::NotPermitted | E::InvalidSetpoint | E::Expired => {
            AdapterError::NotReady
        }
    }
}

fn cf_error(e: crazyflie_bridge::EnqueueError) -> AdapterError {
    use crazyflie_bridge::EnqueueError as E;
    match e {
        E::LinkDown => AdapterError::LinkDown,
        E::QueueFull => AdapterError::QueueFull,
        E::NotArmed | E::Locked | E::Expired | E::InvalidSetpoint | E::Busy => {
            AdapterError::NotReady
        }
    }
}

impl Adapter for VehicleAdapter {
    /// Checks the bridge's last known state and reserves the command's place in its queue,
    /// staged until [`VehicleAdapter::release_staged`] (see the module docs).
    fn try_enqueue(&mut self, req: &EnqueueRequest<'_>) -> Result<(), AdapterError> {
        let binding: [u8; 32] = req.binding.0;
        // The gateway and the bridges share one clock origin, so instants carry over as is.
        #[allow(clippy::cast_possible_truncation, reason = "both bridges carry f32")]
        let r = match (&self.link, &req.command) {
            (VehicleLink::Px4(h), ActionCommand::Route(t)) => h
                .reserve_enqueue(
                    px4_bridge::Setpoint {
                        north_m: t.north_m as f32,
                        east_m: t.east_m as f32,
                        down_m: t.down_m as f32,
                        yaw_deg: t.yaw_deg as f32,
                    },
                    binding,
                    px4_bridge::Mono(req.valid_until.0),
                )
                .map(Staged::Px4)
                .map_err(px4_error),
            (VehicleLink::Px4(h), ActionCommand::Hold { .. }) => {
                h.reserve_hold().map(Staged::Px4).map_err(px4_error)
            }
            (VehicleLink::Px4(h), ActionCommand::Land) => h
                .reserve_command(px4_bridge::Command::Land)
                .map(Staged::Px4)
                .map_err(px4_error),
            (VehicleLink::Crazyflie(h), ActionCommand::Route(t)) => h
                .reserve_enqueue(
                    crazyflie_bridge::Setpoint::from_ned(
                        t.north_m as f32,
                        t.east_m as f32,
                        t.down_m as f32,
                        t.yaw_deg as f32,
                    ),
                    binding,
                    crazyflie_bridge::Mono(req.valid_until.0),
                )
                .map(Staged::Crazyflie)
                .map_err(cf_error),
            (VehicleLink::Crazyflie(h), ActionCommand::Hold { .. }) => {
                h.reserve_hold().map(Staged::Crazyflie).map_err(cf_error)
            }
            (VehicleLink::Crazyflie(h), ActionCommand::Land) => {
                h.reserve_land().map(Staged::Crazyflie).map_err(cf_error)
            }
            // Not a vehicle command: the repository-merge domain has its own adapter.
            (_, ActionCommand::Merge { .. }) => Err(AdapterError::Unsupported),
        };
        self.staged.push_back(r?);
        if self.last_target != Some(binding) {
            self.target_ended();
        }
        match &req.command {
            ActionCommand::Route(t) => {
                self.last_target = Some(binding);
                self.pending_arrival = Some((binding, [t.north_m, t.east_m, t.down_m]));
            }
            _ => self.last_target = None,
        }
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent
            .push_back((binding, req.response.clone(), req.component.clone()));
        Ok(())
    }
}
