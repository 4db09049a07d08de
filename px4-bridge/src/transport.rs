//! MAVLink over UDP, locked to one autopilot.
//!
//! The `mavlink` crate's `udpin` connection answers whoever sent the last datagram, so any
//! process on the network that sends to the gateway's port (a second gateway's simulator, a
//! stray ground station, an attacker) redirects the gateway's setpoints and speaks for the
//! vehicle. This transport does not:
//!
//! - `udpin:` binds and stays silent until it hears a PX4 autopilot's HEARTBEAT (an autopilot,
//!   not a ground station or an onboard computer, with the configured system id if there is
//!   one); it then **locks** onto that datagram's address for the life of the process. From
//!   then on everything it sends goes there, and every datagram from any other address is
//!   dropped, counted and logged once per address.
//! - `udpout:` is locked from the start to the address it names.
//!
//! A vehicle that comes back from another address (a PX4 SITL restarted on a new port) is not
//! followed: the gateway says so and must be restarted. That is the price of never being led
//! elsewhere by a datagram.
//!
//! Framing is the `mavlink` crate's (one or more MAVLink 2 frames per datagram).

use std::collections::BTreeSet;
use std::net::SocketAddr;

use mavlink::MavHeader;
use mavlink::dialects::common::{MavAutopilot, MavMessage, MavType};

/// Distinct foreign addresses remembered for the log-once rule.
const FOREIGN_REMEMBERED: usize = 64;

/// What to do with one received datagram.
#[derive(Debug, PartialEq)]
pub enum Received {
    /// Frames from the vehicle (or, before the lock, from anyone: the state machine sorts
    /// them), how many did not decode, and how many a signing key refused (unsigned, a wrong
    /// signature, a replay).
    Frames(Vec<(MavHeader, MavMessage)>, u32, u32),
    /// From an address other than the locked one: dropped. `first` is true the first time
    /// this address is seen (log it then).
    Foreign {
        /// Where it came from.
        from: SocketAddr,
        /// First time from this address.
        first: bool,
    },
}

/// The address bookkeeping of a locked UDP link: pure, no socket.
#[derive(Debug)]
pub struct UdpLock {
    locked: Option<SocketAddr>,
    want_system: Option<u8>,
    foreign: BTreeSet<SocketAddr>,
    foreign_datagrams: u64,
    seq: u8,
    signer: Option<crate::signing::Signer>,
}

/// Whether a HEARTBEAT is an autopilot's the bridge would take (as [`crate::Offboard`] does).
pub fn is_autopilot(header: &MavHeader, msg: &MavMessage, want_system: Option<u8>) -> bool {
    let MavMessage::HEARTBEAT(hb) = msg else {
        return false;
    };
    let sys = u8::try_from(header.system_id).unwrap_or(0);
    hb.autopilot != MavAutopilot::MAV_AUTOPILOT_INVALID
        && !matches!(
            hb.mavtype,
            MavType::MAV_TYPE_GCS | MavType::MAV_TYPE_ONBOARD_CONTROLLER
        )
        && want_system.is_none_or(|s| s == sys)
}

impl UdpLock {
    /// `udpin:` (no peer yet) or `udpout:` (locked to `peer`).
    pub fn new(peer: Option<SocketAddr>, want_system: Option<u8>) -> UdpLock {
        UdpLock {
            locked: peer,
            want_system,
            foreign: BTreeSet::new(),
            foreign_datagrams: 0,
            seq: 0,
            signer: None,
        }
    }

    /// With MAVLink 2 signing: frames sent are signed, frames received verified (the lock is
    /// taken only on a verified autopilot heartbeat).
    pub fn with_signing(mut self, key: Option<&crate::signing::SigningKey>) -> UdpLock {
        self.signer = key.map(crate::signing::SigningKey::signer);
        self
    }

    /// The address everything is sent to, once known.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.locked
    }

    /// Datagrams dropped because they came from another address.
    pub fn foreign_datagrams(&self) -> u64 {
        self.foreign_datagrams
    }

    /// Sorts one datagram from `from`.
    pub fn receive(&mut self, from: SocketAddr, bytes: &[u8]) -> Received {
        if let Some(p) = self.locked
            && p != from
        {
            self.foreign_datagrams = self.foreign_datagrams.saturating_add(1);
            let first = self.foreign.len() < FOREIGN_REMEMBERED && self.foreign.insert(from);
            return Received::Foreign { from, first };
        }
        let crate::signing::Decoded {
            frames,
            errors,
            refused,
        } = crate::signing::decode(bytes, self.signer.as_ref());
        if self.locked.is_none()
            && frames
                .iter()
                .any(|(h, m)| is_autopilot(h, m, self.want_system))
        {
            self.locked = Some(from);
        }
        Received::Frames(frames, errors, refused)
    }

    /// One message as a datagram, with the next sequence number.
    pub fn encode(&mut self, header: MavHeader, msg: &MavMessage) -> Vec<u8> {
        let h = MavHeader {
            sequence: self.seq,
            ..header
        };
        self.seq = self.seq.wrapping_add(1);
        if let Some(s) = &self.signer {
            return s.encode(h, msg);
        }
        let mut out = Vec::with_capacity(64);
        // Writing to a Vec cannot fail for a message of the compiled dialect.
        let _ = mavlink::write_v2_msg(&mut out, h, msg);
        out
    }
}

/// Every valid frame in a datagram, and how many did not decode (garbage is skipped).
pub fn decode(bytes: &[u8]) -> (Vec<(MavHeader, MavMessage)>, u32) {
    let d = crate::signing::decode(bytes, None);
    (d.frames, d.errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mavlink::dialects::common::{HEARTBEAT_DATA, MavModeFlag, MavState};

    fn hb(sys: u32, autopilot: MavAutopilot, ty: MavType) -> Vec<u8> {
        let mut l = UdpLock::new(None, None);
        l.encode(
            MavHeader {
                system_id: sys,
                component_id: 1,
                sequence: 0,
            },
            &MavMessage::HEARTBEAT(HEARTBEAT_DATA {
                custom_mode: 0,
                mavtype: ty,
                autopilot,
                base_mode: MavModeFlag::empty(),
                system_status: MavState::MAV_STATE_ACTIVE,
                mavlink_version: 3,
            }),
        )
    }

    #[test]
    fn locks_onto_the_first_autopilot_and_drops_everyone_else() {
        let px4: SocketAddr = "127.0.0.1:14580".parse().unwrap();
        let other: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let gcs: SocketAddr = "127.0.0.1:14550".parse().unwrap();
        let mut l = UdpLock::new(None, None);
        let quad = MavType::MAV_TYPE_QUADROTOR;
        let px = MavAutopilot::MAV_AUTOPILOT_PX4;
        // A ground station's or another onboard computer's heartbeat does not lock.
        assert!(matches!(
            l.receive(gcs, &hb(255, MavAutopilot::MAV_AUTOPILOT_INVALID, MavType::MAV_TYPE_GCS)),
            Received::Frames(f, 0, 0) if f.len() == 1
        ));
        assert!(matches!(
            l.receive(
                other,
                &hb(
                    1,
                    MavAutopilot::MAV_AUTOPILOT_INVALID,
                    MavType::MAV_TYPE_ONBOARD_CONTROLLER
                )
            ),
            Received::Frames(..)
        ));
        assert_eq!(l.peer(), None);
        // PX4's does.
        assert!(matches!(
            l.receive(px4, &hb(1, px, quad)),
            Received::Frames(..)
        ));
        assert_eq!(l.peer(), Some(px4));
        // A second "PX4" from another port: dropped, logged once.
        assert_eq!(
            l.receive(other, &hb(1, px, quad)),
            Received::Foreign {
                from: other,
                first: true
            }
        );
        assert_eq!(
            l.receive(other, &hb(1, px, quad)),
            Received::Foreign {
                from: other,
                first: false
            }
        );
        assert_eq!(l.foreign_datagrams(), 2);
        assert!(
            matches!(l.receive(px4, &hb(1, px, quad)), Received::Frames(f, 0, 0) if f.len() == 1)
        );
    }

    #[test]
    fn a_wanted_system_id_is_honoured_and_udpout_is_locked_from_the_start() {
        let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2000".parse().unwrap();
        let mut l = UdpLock::new(None, Some(2));
        let _ = l.receive(
            a,
            &hb(
                1,
                MavAutopilot::MAV_AUTOPILOT_PX4,
                MavType::MAV_TYPE_QUADROTOR,
            ),
        );
        assert_eq!(l.peer(), None);
        let _ = l.receive(
            b,
            &hb(
                2,
                MavAutopilot::MAV_AUTOPILOT_PX4,
                MavType::MAV_TYPE_QUADROTOR,
            ),
        );
        assert_eq!(l.peer(), Some(b));
        let mut out = UdpLock::new(Some(a), None);
        assert!(matches!(
            out.receive(
                b,
                &hb(
                    1,
                    MavAutopilot::MAV_AUTOPILOT_PX4,
                    MavType::MAV_TYPE_QUADROTOR
                )
            ),
            Received::Foreign { .. }
        ));
    }

    #[test]
    fn sequence_numbers_advance_and_garbage_is_counted_not_fatal() {
        let mut l = UdpLock::new(None, None);
        let h = MavHeader {
            system_id: 1,
            component_id: 191,
            sequence: 0,
        };
        let m = MavMessage::HEARTBEAT(HEARTBEAT_DATA::DEFAULT);
        let one = l.encode(h, &m);
        let two = l.encode(h, &m);
        let (f1, _) = decode(&one);
        let (f2, _) = decode(&two);
        assert_eq!((f1[0].0.sequence, f2[0].0.sequence), (0, 1));
        assert!(decode(&[0xAA; 300]).0.is_empty());
    }
}
