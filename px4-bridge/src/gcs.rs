//! Keeping the ground station in the loop: a relay between the flight controller and a ground
//! station over UDP, as MAVROS's `gcs_url` or mavlink-router do, so a companion that owns the
//! flight controller's serial port does not take the vehicle away from the pilot's screen.
//!
//! - Flight controller → ground station: every frame heard from the vehicle is passed on as it
//!   came (a UDP link's datagrams byte for byte, signatures included; a serial or TCP link's
//!   frames re-encoded from what the `mavlink` crate decoded, unsigned).
//! - The gateway's own `STATUSTEXT` lines (its decisions in words) go to the ground station
//!   too, since PX4 forwards them only to its own ground-station links.
//! - Ground station → flight controller: every frame is passed on byte for byte (a ground
//!   station's signature stays valid), except one that claims to come from the gateway's own
//!   system and component id: the relay never forges the gateway's traffic. What the ground
//!   station commands reaches PX4 as the pilot's: a mode change the gateway did not command is an
//!   override, as from a radio.
//!
//! The pure part is here ([`from_gcs`]); the sockets are the shell's.

use mavlink::dialects::common::MavMessage;
use mavlink::{MAVLinkMessageRaw, MavlinkReader};

/// Where the ground station is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GcsEndpoint {
    /// Send to this address (`udpout:HOST:PORT`, QGroundControl listening on 14550).
    To(std::net::SocketAddr),
    /// Bind here and answer whoever sent last (`udpin:ADDR:PORT`, a ground station that
    /// connects to the companion).
    Listen(std::net::SocketAddr),
}

impl GcsEndpoint {
    /// `udpout:` or `udpin:` (and their aliases, [`crate::url`]).
    ///
    /// # Errors
    /// [`GcsError`]: not a transport URL, or one that is not UDP.
    pub fn parse(url: &str) -> Result<GcsEndpoint, GcsError> {
        match crate::url::TransportUrl::parse(url).map_err(GcsError::Url)? {
            crate::url::TransportUrl::UdpOut(a) => Ok(GcsEndpoint::To(a)),
            crate::url::TransportUrl::UdpIn(a) => Ok(GcsEndpoint::Listen(a)),
            other => Err(GcsError::NotUdp(other.to_string())),
        }
    }
}

/// Why a ground-station endpoint was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GcsError {
    /// Not a transport URL at all.
    Url(crate::url::UrlError),
    /// A transport that is not UDP (its canonical spelling).
    NotUdp(String),
}

impl std::fmt::Display for GcsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GcsError::Url(e) => e.fmt(f),
            GcsError::NotUdp(url) => write!(
                f,
                "`{url}`: the ground station is relayed over UDP: udpout:HOST:PORT (e.g. udpout:192.168.1.10:14550) or udpin:ADDR:PORT"
            ),
        }
    }
}

impl std::error::Error for GcsError {}

/// The frames of one datagram from the ground station: those to pass to the vehicle (raw, as
/// they came), and how many claimed the gateway's own `(system, component)` and were dropped.
pub fn from_gcs(bytes: &[u8], own: (u8, u8)) -> (Vec<MAVLinkMessageRaw>, u32) {
    let mut r = MavlinkReader::new(bytes);
    let mut pass = Vec::new();
    let mut forged = 0u32;
    loop {
        match r.read_any_raw_message::<MavMessage>() {
            Ok(raw) => {
                if raw.system_id() == u32::from(own.0) && raw.component_id() == own.1 {
                    forged = forged.saturating_add(1);
                } else {
                    pass.push(raw);
                }
            }
            Err(mavlink::error::MessageReadError::Io(_)) => break,
            // Garbage is skipped; nothing that does not decode as a frame is passed on.
            Err(_) => {}
        }
    }
    (pass, forged)
}

/// A raw frame's bytes.
pub fn raw_bytes(raw: &MAVLinkMessageRaw) -> &[u8] {
    match raw {
        MAVLinkMessageRaw::V1(m) => m.raw_bytes(),
        MAVLinkMessageRaw::V2(m) => m.raw_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mavlink::MavHeader;
    use mavlink::dialects::common::{COMMAND_LONG_DATA, HEARTBEAT_DATA, MavCmd};

    fn frame(sys: u8, comp: u8, msg: &MavMessage) -> Vec<u8> {
        let mut out = Vec::new();
        mavlink::write_v2_msg(
            &mut out,
            MavHeader {
                system_id: sys.into(),
                component_id: comp,
                sequence: 7,
            },
            msg,
        )
        .unwrap();
        out
    }

    #[test]
    fn the_gateways_own_id_is_never_relayed_and_the_rest_passes_byte_for_byte() {
        let hb = MavMessage::HEARTBEAT(HEARTBEAT_DATA::default());
        let cmd = MavMessage::COMMAND_LONG(COMMAND_LONG_DATA {
            command: MavCmd::MAV_CMD_DO_SET_MODE,
            target_system: 1,
            target_component: 1,
            ..COMMAND_LONG_DATA::default()
        });
        let gcs_hb = frame(255, 190, &hb);
        let forged = frame(1, 191, &cmd);
        let gcs_cmd = frame(255, 190, &cmd);
        let mut datagram = gcs_hb.clone();
        datagram.extend_from_slice(&forged);
        datagram.extend_from_slice(&[0xAA; 5]);
        datagram.extend_from_slice(&gcs_cmd);
        let (pass, dropped) = from_gcs(&datagram, (1, 191));
        assert_eq!(dropped, 1);
        let passed: Vec<&[u8]> = pass.iter().map(raw_bytes).collect();
        assert_eq!(passed, [gcs_hb.as_slice(), gcs_cmd.as_slice()]);
        // Another companion (192) on the same vehicle is passed on.
        assert_eq!(from_gcs(&frame(1, 192, &cmd), (1, 191)).0.len(), 1);
    }

    #[test]
    fn only_udp_endpoints_are_taken() {
        assert_eq!(
            GcsEndpoint::parse("udpout:127.0.0.1:14550"),
            Ok(GcsEndpoint::To("127.0.0.1:14550".parse().unwrap()))
        );
        assert_eq!(
            GcsEndpoint::parse("udp://:14550"),
            Ok(GcsEndpoint::Listen("0.0.0.0:14550".parse().unwrap()))
        );
        let e = GcsEndpoint::parse("serial:/dev/ttyUSB0:57600")
            .unwrap_err()
            .to_string();
        assert!(e.contains("udpout:HOST:PORT"), "{e}");
    }
}
