//! `COMMAND_LONG` with `COMMAND_ACK` tracking: one command per `MAV_CMD` id in flight (an ACK
//! names only the command id), retries with an increasing `confirmation`, timeouts and typed
//! outcomes. A command that changes the mode (set mode, land, return, takeoff) is only reported
//! accepted once the autopilot's HEARTBEAT shows the mode: the ACK alone is not proof.

use std::collections::VecDeque;

use mavlink::dialects::common::{COMMAND_LONG_DATA, MavCmd, MavResult};
use serde::{Deserialize, Serialize};

use crate::mode::Px4Mode;
use crate::time::Mono;

/// A command the bridge can send.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Command {
    /// `MAV_CMD_COMPONENT_ARM_DISARM` with param1 = 1.
    Arm,
    /// `MAV_CMD_COMPONENT_ARM_DISARM` with param1 = 0.
    Disarm,
    /// `MAV_CMD_DO_SET_MODE` with the PX4 custom mode.
    SetMode {
        /// Target mode.
        mode: Px4Mode,
    },
    /// `MAV_CMD_NAV_TAKEOFF` (PX4 takes param7 as AMSL altitude; NaN uses the default).
    Takeoff {
        /// Altitude AMSL, m, or `None` for the autopilot's default.
        altitude_amsl_m: Option<f32>,
    },
    /// `MAV_CMD_NAV_LAND` at the current position.
    Land,
    /// `MAV_CMD_NAV_RETURN_TO_LAUNCH`.
    ReturnToLaunch,
    /// `MAV_CMD_SET_MESSAGE_INTERVAL`.
    SetMessageInterval {
        /// MAVLink message id.
        message_id: u32,
        /// Interval, µs (-1 disables).
        interval_us: i32,
    },
    /// `MAV_CMD_REQUEST_MESSAGE`: send the message once, now (PX4 sends `GPS_GLOBAL_ORIGIN`
    /// only when the origin moves or when asked this way).
    RequestMessage {
        /// MAVLink message id.
        message_id: u32,
    },
}

impl Command {
    /// The mode the autopilot's heartbeat must show before the command counts as accepted.
    pub fn expected_mode(&self) -> Option<Px4Mode> {
        match self {
            Command::SetMode { mode } => Some(*mode),
            Command::Land => Some(Px4Mode::LAND),
            Command::ReturnToLaunch => Some(Px4Mode::RTL),
            Command::Takeoff { .. } => Some(Px4Mode::TAKEOFF),
            _ => None,
        }
    }

    /// The `MAV_CMD` and parameters.
    #[allow(
        clippy::cast_precision_loss,
        reason = "MAVLink carries these parameters as f32"
    )]
    pub fn encode(&self) -> (MavCmd, [f32; 7]) {
        let nan = f32::NAN;
        match *self {
            Command::Arm => (
                MavCmd::MAV_CMD_COMPONENT_ARM_DISARM,
                [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            ),
            Command::Disarm => (MavCmd::MAV_CMD_COMPONENT_ARM_DISARM, [0.0; 7]),
            Command::SetMode { mode } => (
                MavCmd::MAV_CMD_DO_SET_MODE,
                // param1: MAV_MODE_FLAG_CUSTOM_MODE_ENABLED; param2: main mode; param3: sub mode.
                [
                    1.0,
                    f32::from(mode.main),
                    f32::from(mode.sub),
                    0.0,
                    0.0,
                    0.0,
                    0.0,
                ],
            ),
            Command::Takeoff { altitude_amsl_m } => (
                MavCmd::MAV_CMD_NAV_TAKEOFF,
                [nan, 0.0, 0.0, nan, nan, nan, altitude_amsl_m.unwrap_or(nan)],
            ),
            Command::Land => (
                MavCmd::MAV_CMD_NAV_LAND,
                [0.0, 0.0, 0.0, nan, nan, nan, nan],
            ),
            Command::ReturnToLaunch => (MavCmd::MAV_CMD_NAV_RETURN_TO_LAUNCH, [0.0; 7]),
            Command::SetMessageInterval {
                message_id,
                interval_us,
            } => (
                MavCmd::MAV_CMD_SET_MESSAGE_INTERVAL,
                [
                    message_id as f32,
                    interval_us as f32,
                    0.0,
                    0.0,
                    0.0,
                    0.0,
                    0.0,
                ],
            ),
            Command::RequestMessage { message_id } => (
                MavCmd::MAV_CMD_REQUEST_MESSAGE,
                [message_id as f32, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            ),
        }
    }
}

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandOutcome {
    /// `MAV_RESULT_ACCEPTED` (for a mode change: and the HEARTBEAT shows the mode).
    Accepted,
    /// `MAV_RESULT_DENIED`.
    Denied,
    /// `MAV_RESULT_TEMPORARILY_REJECTED`.
    TemporarilyRejected,
    /// `MAV_RESULT_UNSUPPORTED` (or another "not here" result).
    Unsupported,
    /// `MAV_RESULT_FAILED`.
    Failed,
    /// `MAV_RESULT_CANCELLED`.
    Cancelled,
    /// No ACK after every retry.
    TimedOut,
    /// ACKed, but the HEARTBEAT never showed the requested mode.
    NotConfirmed,
    /// The link went down before an answer.
    LinkLost,
}

/// A handle to a sent command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CommandId(pub u64);

#[derive(Clone, Debug)]
struct Pending {
    id: CommandId,
    command: Command,
    cmd: MavCmd,
    sent_at: Mono,
    confirmation: u8,
    in_progress: bool,
}

#[derive(Clone, Debug)]
struct AwaitMode {
    id: CommandId,
    command: Command,
    mode: Px4Mode,
    deadline: Mono,
}

/// Tracks commands until they end.
#[derive(Debug)]
pub struct CommandTracker {
    next_id: u64,
    timeout_ns: u64,
    retries: u8,
    mode_confirm_ns: u64,
    in_flight: Vec<Pending>,
    queued: VecDeque<(CommandId, Command)>,
    awaiting_mode: Vec<AwaitMode>,
    outbox: VecDeque<COMMAND_LONG_DATA>,
    done: VecDeque<(CommandId, Command, CommandOutcome)>,
}

impl CommandTracker {
    /// A tracker with the given ACK timeout, retry count and mode-confirmation window.
    pub fn new(timeout_ns: u64, retries: u8, mode_confirm_ns: u64) -> CommandTracker {
        CommandTracker {
            next_id: 1,
            timeout_ns,
            retries,
            mode_confirm_ns,
            in_flight: Vec::new(),
            queued: VecDeque::new(),
            awaiting_mode: Vec::new(),
            outbox: VecDeque::new(),
            done: VecDeque::new(),
        }
    }

    /// Submits a command; it is sent at once unless one with the same `MAV_CMD` is in flight.
    pub fn submit(&mut self, now: Mono, command: Command, target: (u8, u8)) -> CommandId {
        let id = self.reserve();
        self.submit_as(now, id, command, target);
        id
    }

    /// An id for a command that will be submitted later ([`CommandTracker::submit_as`]), or
    /// that ends without being sent.
    pub fn reserve(&mut self) -> CommandId {
        let id = CommandId(self.next_id);
        self.next_id += 1;
        id
    }

    /// Whether a command with this `MAV_CMD` is in flight or queued behind one.
    pub fn pending(&self, cmd: MavCmd) -> bool {
        self.in_flight.iter().any(|p| p.cmd == cmd)
            || self.queued.iter().any(|(_, c)| c.encode().0 == cmd)
    }

    /// Submits a command under an id from [`CommandTracker::reserve`].
    pub fn submit_as(&mut self, now: Mono, id: CommandId, command: Command, target: (u8, u8)) {
        let (cmd, _) = command.encode();
        if self.in_flight.iter().any(|p| p.cmd == cmd) {
            self.queued.push_back((id, command));
        } else {
            self.send(now, id, command, 0, target);
        }
    }

    fn send(
        &mut self,
        now: Mono,
        id: CommandId,
        command: Command,
        confirmation: u8,
        target: (u8, u8),
    ) {
        let (cmd, p) = command.encode();
        self.outbox.push_back(COMMAND_LONG_DATA {
            param1: p[0],
            param2: p[1],
            param3: p[2],
            param4: p[3],
            param5: p[4],
            param6: p[5],
            param7: p[6],
            command: cmd,
            target_system: target.0,
            target_component: target.1,
            confirmation,
        });
        if let Some(pending) = self.in_flight.iter_mut().find(|p| p.id == id) {
            pending.sent_at = now;
            pending.confirmation = confirmation;
        } else {
            self.in_flight.push(Pending {
                id,
                command,
                cmd,
                sent_at: now,
                confirmation,
                in_progress: false,
            });
        }
    }

    /// Feeds a `COMMAND_ACK` from the autopilot.
    pub fn handle_ack(&mut self, now: Mono, cmd: MavCmd, result: MavResult, target: (u8, u8)) {
        let Some(pos) = self.in_flight.iter().position(|p| p.cmd == cmd) else {
            return;
        };
        if result == MavResult::MAV_RESULT_IN_PROGRESS {
            if let Some(p) = self.in_flight.get_mut(pos) {
                p.in_progress = true;
                p.sent_at = now;
            }
            return;
        }
        let p = self.in_flight.remove(pos);
        let outcome = match result {
            MavResult::MAV_RESULT_ACCEPTED => CommandOutcome::Accepted,
            MavResult::MAV_RESULT_TEMPORARILY_REJECTED => CommandOutcome::TemporarilyRejected,
            MavResult::MAV_RESULT_DENIED => CommandOutcome::Denied,
            MavResult::MAV_RESULT_FAILED => CommandOutcome::Failed,
            MavResult::MAV_RESULT_CANCELLED => CommandOutcome::Cancelled,
            _ => CommandOutcome::Unsupported,
        };
        match (outcome, p.command.expected_mode()) {
            (CommandOutcome::Accepted, Some(mode)) => self.awaiting_mode.push(AwaitMode {
                id: p.id,
                command: p.command,
                mode,
                deadline: now.add_ns(self.mode_confirm_ns),
            }),
            _ => self.done.push_back((p.id, p.command, outcome)),
        }
        self.start_queued(now, cmd, target);
    }

    fn start_queued(&mut self, now: Mono, cmd: MavCmd, target: (u8, u8)) {
        if let Some(k) = self.queued.iter().position(|(_, c)| c.encode().0 == cmd)
            && let Some((id, c)) = self.queued.remove(k)
        {
            self.send(now, id, c, 0, target);
        }
    }

    /// The autopilot's HEARTBEAT shows `mode`: confirms mode changes waiting for it.
    pub fn handle_mode(&mut self, mode: Px4Mode) {
        let mut keep = Vec::new();
        for a in self.awaiting_mode.drain(..) {
            if a.mode == mode {
                self.done
                    .push_back((a.id, a.command, CommandOutcome::Accepted));
            } else {
                keep.push(a);
            }
        }
        self.awaiting_mode = keep;
    }

    /// Retries, timeouts and unconfirmed mode changes due at `now`.
    pub fn handle_timeout(&mut self, now: Mono, target: (u8, u8)) {
        let due: Vec<Pending> = self
            .in_flight
            .iter()
            .filter(|p| {
                now.since(p.sent_at) >= self.timeout_ns * if p.in_progress { 10 } else { 1 }
            })
            .cloned()
            .collect();
        for p in due {
            if p.confirmation < self.retries && !p.in_progress {
                self.send(
                    now,
                    p.id,
                    p.command,
                    p.confirmation.saturating_add(1),
                    target,
                );
            } else {
                self.in_flight.retain(|x| x.id != p.id);
                self.done
                    .push_back((p.id, p.command, CommandOutcome::TimedOut));
                self.start_queued(now, p.cmd, target);
            }
        }
        let mut keep = Vec::new();
        for a in self.awaiting_mode.drain(..) {
            if now >= a.deadline {
                self.done
                    .push_back((a.id, a.command, CommandOutcome::NotConfirmed));
            } else {
                keep.push(a);
            }
        }
        self.awaiting_mode = keep;
    }

    /// Ends every mode change in flight, queued or awaiting confirmation (`Cancelled`) and
    /// stops retrying them: an operator took the vehicle.
    pub fn cancel_mode_changes(&mut self, _now: Mono) {
        let mut keep = Vec::new();
        for p in self.in_flight.drain(..) {
            if p.command.expected_mode().is_some() {
                self.done
                    .push_back((p.id, p.command, CommandOutcome::Cancelled));
            } else {
                keep.push(p);
            }
        }
        self.in_flight = keep;
        let mut keep = VecDeque::new();
        for (id, c) in self.queued.drain(..) {
            if c.expected_mode().is_some() {
                self.done.push_back((id, c, CommandOutcome::Cancelled));
            } else {
                keep.push_back((id, c));
            }
        }
        self.queued = keep;
        for a in self.awaiting_mode.drain(..) {
            self.done
                .push_back((a.id, a.command, CommandOutcome::Cancelled));
        }
    }

    /// Ends everything in flight because the link went down.
    pub fn handle_link_lost(&mut self) {
        for p in self.in_flight.drain(..) {
            self.done
                .push_back((p.id, p.command, CommandOutcome::LinkLost));
        }
        for (id, c) in self.queued.drain(..) {
            self.done.push_back((id, c, CommandOutcome::LinkLost));
        }
        for a in self.awaiting_mode.drain(..) {
            self.done
                .push_back((a.id, a.command, CommandOutcome::LinkLost));
        }
    }

    /// The next `COMMAND_LONG` to send.
    pub fn poll_transmit(&mut self) -> Option<COMMAND_LONG_DATA> {
        self.outbox.pop_front()
    }

    /// The next finished command.
    pub fn poll_done(&mut self) -> Option<(CommandId, Command, CommandOutcome)> {
        self.done.pop_front()
    }

    /// The next instant something is due.
    pub fn poll_timeout(&self) -> Option<Mono> {
        let a = self
            .in_flight
            .iter()
            .map(|p| {
                p.sent_at
                    .add_ns(self.timeout_ns * if p.in_progress { 10 } else { 1 })
            })
            .min();
        let b = self.awaiting_mode.iter().map(|a| a.deadline).min();
        match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        }
    }

    /// True when a mode change is in flight or awaiting confirmation.
    pub fn mode_change_pending(&self) -> bool {
        self.in_flight
            .iter()
            .any(|p| p.command.expected_mode().is_some())
            || !self.awaiting_mode.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: (u8, u8) = (1, 1);

    #[test]
    fn retries_increase_confirmation_then_time_out() {
        let mut c = CommandTracker::new(100, 2, 1_000);
        let id = c.submit(Mono(0), Command::Arm, T);
        assert_eq!(c.poll_transmit().map(|m| m.confirmation), Some(0));
        c.handle_timeout(Mono(100), T);
        assert_eq!(c.poll_transmit().map(|m| m.confirmation), Some(1));
        c.handle_timeout(Mono(200), T);
        assert_eq!(c.poll_transmit().map(|m| m.confirmation), Some(2));
        c.handle_timeout(Mono(300), T);
        assert_eq!(c.poll_transmit(), None);
        assert_eq!(
            c.poll_done(),
            Some((id, Command::Arm, CommandOutcome::TimedOut))
        );
    }

    #[test]
    fn mode_change_needs_the_heartbeat() {
        let mut c = CommandTracker::new(100, 2, 1_000);
        let id = c.submit(
            Mono(0),
            Command::SetMode {
                mode: Px4Mode::OFFBOARD,
            },
            T,
        );
        c.handle_ack(
            Mono(10),
            MavCmd::MAV_CMD_DO_SET_MODE,
            MavResult::MAV_RESULT_ACCEPTED,
            T,
        );
        assert_eq!(c.poll_done(), None, "the ACK alone is not proof");
        c.handle_mode(Px4Mode::OFFBOARD);
        assert_eq!(c.poll_done().map(|d| d.2), Some(CommandOutcome::Accepted));
        let id2 = c.submit(
            Mono(20),
            Command::SetMode {
                mode: Px4Mode::HOLD,
            },
            T,
        );
        c.handle_ack(
            Mono(30),
            MavCmd::MAV_CMD_DO_SET_MODE,
            MavResult::MAV_RESULT_ACCEPTED,
            T,
        );
        c.handle_timeout(Mono(1_030), T);
        assert_eq!(
            c.poll_done(),
            Some((
                id2,
                Command::SetMode {
                    mode: Px4Mode::HOLD
                },
                CommandOutcome::NotConfirmed
            ))
        );
        assert_ne!(id, id2);
    }

    #[test]
    fn same_command_queues_behind_the_one_in_flight() {
        let mut c = CommandTracker::new(100, 0, 1_000);
        c.submit(Mono(0), Command::Arm, T);
        c.submit(Mono(1), Command::Disarm, T);
        assert!(c.poll_transmit().is_some());
        assert!(c.poll_transmit().is_none());
        c.handle_ack(
            Mono(5),
            MavCmd::MAV_CMD_COMPONENT_ARM_DISARM,
            MavResult::MAV_RESULT_TEMPORARILY_REJECTED,
            T,
        );
        assert_eq!(
            c.poll_done().map(|d| d.2),
            Some(CommandOutcome::TemporarilyRejected)
        );
        assert_eq!(c.poll_transmit().map(|m| m.param1), Some(0.0));
    }
}
