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

use halo_core::gate::{Adapter, AdapterError, EnqueueRequest};
use halo_core::ids::Id;
use halo_core::payload::ActionCommand;
use halo_supervisor::{Enqueued, VehicleCommand, VehicleControl, VehicleError};

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

/// The governed adapter: exact commands through the bridge's non-blocking queue, while the
/// supervisor keeps it open.
pub struct VehicleAdapter {
    link: VehicleLink,
    /// Whether the gate's enqueues are taken: the supervisor closes it while the operator
    /// holds and for good once the receipt log refused ([`halo_supervisor::Supervisor::dispatch_open`]).
    open: bool,
    /// The newest commands the bridge took (at most [`RECENT`], newest last), each with the
    /// response and component it belongs to.
    recent: VecDeque<([u8; 32], Id, Id)>,
    /// What the gate enqueued since the last [`VehicleAdapter::take_enqueued`]: the gate's
    /// critical section only notes it; the supervisor learns it right after.
    enqueued: Vec<([u8; 32], Enqueued)>,
    /// Inputs reserved in the bridge's queue and not yet sent, oldest first (see the module
    /// docs). Bounded by the bridge's queue: each holds one of its places.
    staged: VecDeque<Staged>,
}

impl VehicleAdapter {
    /// Wraps a bridge; open.
    pub fn new(link: VehicleLink) -> VehicleAdapter {
        VehicleAdapter {
            link,
            open: true,
            recent: VecDeque::with_capacity(RECENT),
            enqueued: Vec::new(),
            staged: VecDeque::new(),
        }
    }

    /// Opens or closes the adapter to the gate (a closed one refuses with `NotReady`).
    pub fn set_open(&mut self, open: bool) {
        self.open = open;
    }

    /// What the gate enqueued since the last call, in order.
    pub fn take_enqueued(&mut self) -> Vec<([u8; 32], Enqueued)> {
        std::mem::take(&mut self.enqueued)
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
                Some(b) => dropped.push(b),
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

    /// Stop streaming and hold where the vehicle is: at once, or behind the staged inputs
    /// (released with them, sent even when they are discarded).
    ///
    /// # Errors
    /// The bridge's refusal.
    pub fn hold(&mut self) -> Result<(), VehicleError> {
        let r = match &self.link {
            VehicleLink::Px4(h) => h.reserve_hold().map(Staged::Px4).map_err(refused),
            VehicleLink::Crazyflie(h) => h.reserve_hold().map(Staged::Crazyflie).map_err(refused),
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
        // Closed by the supervisor (an operator hold, a receipt log that refused).
        if !self.open {
            return Err(AdapterError::NotReady);
        }
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
                    req.valid_until,
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
                    req.valid_until,
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
        self.enqueued.push((
            binding,
            match &req.command {
                ActionCommand::Route(t) => Enqueued::Route([t.north_m, t.east_m, t.down_m]),
                ActionCommand::Land => Enqueued::Land,
                _ => Enqueued::Hold,
            },
        ));
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent
            .push_back((binding, req.response.clone(), req.component.clone()));
        Ok(())
    }
}

impl VehicleControl for VehicleAdapter {
    fn hold(&mut self) -> Result<(), VehicleError> {
        VehicleAdapter::hold(self)
    }

    fn attribute(&self, binding: &[u8; 32]) -> Option<(Id, Id)> {
        VehicleAdapter::attribute(self, binding).map(|(r, c)| (r.clone(), c.clone()))
    }

    fn command(&mut self, command: &VehicleCommand) -> Result<(), VehicleError> {
        match &self.link {
            VehicleLink::Px4(h) => {
                let c = match *command {
                    VehicleCommand::Arm => px4_bridge::Command::Arm,
                    VehicleCommand::Disarm => px4_bridge::Command::Disarm,
                    VehicleCommand::Takeoff { amsl_m, .. } => px4_bridge::Command::Takeoff {
                        altitude_amsl_m: amsl_m,
                    },
                    VehicleCommand::Land => px4_bridge::Command::Land,
                    VehicleCommand::ReturnToLaunch => px4_bridge::Command::ReturnToLaunch,
                    VehicleCommand::HoldMode => px4_bridge::Command::SetMode {
                        mode: px4_bridge::Px4Mode::HOLD,
                    },
                };
                h.command(c).map_err(refused)
            }
            VehicleLink::Crazyflie(h) => match *command {
                VehicleCommand::Arm => h.arm(true),
                VehicleCommand::Disarm => h.arm(false),
                VehicleCommand::Takeoff { height_m, .. } => h.takeoff(height_m),
                VehicleCommand::Land => h.land(),
                VehicleCommand::ReturnToLaunch | VehicleCommand::HoldMode => {
                    return Err(VehicleError::Unsupported);
                }
            }
            .map_err(refused),
        }
    }

    fn permit_offboard(&mut self) -> Result<(), VehicleError> {
        match &self.link {
            VehicleLink::Px4(h) => h.permit_offboard().map_err(refused),
            VehicleLink::Crazyflie(_) => Ok(()),
        }
    }

    fn link_up(&self) -> bool {
        match &self.link {
            VehicleLink::Px4(h) => h.link_up(),
            VehicleLink::Crazyflie(h) => h.link_up(),
        }
    }

    fn takes_setpoints(&self) -> bool {
        VehicleAdapter::takes_setpoints(self)
    }

    fn flying(&self) -> bool {
        match &self.link {
            VehicleLink::Px4(_) => false,
            VehicleLink::Crazyflie(h) => h.flying(),
        }
    }

    fn armed(&self) -> bool {
        match &self.link {
            VehicleLink::Px4(_) => false,
            VehicleLink::Crazyflie(h) => h.armed(),
        }
    }
}

/// The supervisor's command as PX4's bridge reports it ended, when it is one the supervisor
/// sends.
pub fn px4_command(c: &px4_bridge::Command) -> Option<VehicleCommand> {
    Some(match c {
        px4_bridge::Command::Arm => VehicleCommand::Arm,
        px4_bridge::Command::Disarm => VehicleCommand::Disarm,
        px4_bridge::Command::Takeoff { altitude_amsl_m } => VehicleCommand::Takeoff {
            amsl_m: *altitude_amsl_m,
            height_m: 0.0,
        },
        px4_bridge::Command::Land => VehicleCommand::Land,
        px4_bridge::Command::ReturnToLaunch => VehicleCommand::ReturnToLaunch,
        px4_bridge::Command::SetMode { mode } if *mode == px4_bridge::Px4Mode::HOLD => {
            VehicleCommand::HoldMode
        }
        _ => return None,
    })
}

/// A bridge's refusal as the supervisor reports it: the bridge's own words.
fn refused(e: impl std::fmt::Display) -> VehicleError {
    VehicleError::Refused(e.to_string())
}
