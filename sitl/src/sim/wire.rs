//! MAVLink 2 frames to and from bytes, with the `mavlink` crate's codec.

use mavlink::dialects::common::MavMessage;
use mavlink::{MavHeader, MavlinkReader};

/// Encodes one MAVLink 2 frame, stamping and advancing `seq`.
pub fn encode(header: MavHeader, msg: &MavMessage, seq: &mut u8) -> Vec<u8> {
    let h = MavHeader {
        sequence: *seq,
        ..header
    };
    *seq = seq.wrapping_add(1);
    let mut out = Vec::with_capacity(64);
    // Writing to a Vec cannot fail for a message of the compiled dialect.
    let _ = mavlink::write_v2_msg(&mut out, h, msg);
    out
}

/// Decodes every valid frame in a datagram. Bytes that do not form a valid frame (garbage, a bad
/// CRC) are skipped by the codec; a frame with an unknown id or a bad payload is counted in the
/// second value.
pub fn decode(bytes: &[u8]) -> (Vec<(MavHeader, MavMessage)>, u32) {
    let mut r = MavlinkReader::new(bytes);
    let mut out = Vec::new();
    let mut errors = 0u32;
    loop {
        match r.read_any_message::<MavMessage>() {
            Ok(m) => out.push(m),
            Err(mavlink::error::MessageReadError::Io(_)) => break,
            Err(_) => {
                errors += 1;
                if errors > 1024 {
                    break;
                }
            }
        }
    }
    (out, errors)
}

/// With a signing key (PX4 keyed per its message-signing guide): every frame sent is signed,
/// and a frame received is taken only when its signature verifies (unsigned frames are
/// refused, as PX4 refuses them). The verification is the `mavlink` crate's own signed reader.
pub struct Signing {
    data: mavlink::SigningData,
}

impl Signing {
    /// Signing with `key` (link id 0), refusing unsigned frames.
    pub fn new(key: [u8; 32]) -> Signing {
        Signing {
            data: mavlink::SigningData::from_config(mavlink::SigningConfig::new(
                key, 0, true, false,
            )),
        }
    }

    /// As [`encode`], signed.
    pub fn encode(&self, header: MavHeader, msg: &MavMessage, seq: &mut u8) -> Vec<u8> {
        let h = MavHeader {
            sequence: *seq,
            ..header
        };
        *seq = seq.wrapping_add(1);
        let mut out = Vec::with_capacity(80);
        let _ = mavlink::write_v2_msg_signed(&mut out, h, msg, Some(&self.data));
        out
    }

    /// As [`decode`], taking only validly signed frames; the third value counts the frames
    /// refused (every frame the unsigned reader finds that the signed one does not take).
    pub fn decode(&self, bytes: &[u8]) -> (Vec<(MavHeader, MavMessage)>, u32, u32) {
        let (all, errors) = decode(bytes);
        let mut r = MavlinkReader::new(bytes);
        let mut taken = Vec::new();
        loop {
            match r.read_any_message_signed::<MavMessage>(Some(&self.data)) {
                Ok(m) => taken.push(m),
                Err(mavlink::error::MessageReadError::Io(_)) => break,
                Err(_) => {}
            }
        }
        let refused = u32::try_from(all.len().saturating_sub(taken.len())).unwrap_or(u32::MAX);
        (taken, errors, refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mavlink::dialects::common::HEARTBEAT_DATA;

    #[test]
    fn round_trips_and_survives_garbage() {
        let mut seq = 0u8;
        let h = MavHeader {
            system_id: 1,
            component_id: 1,
            sequence: 0,
        };
        let hb = MavMessage::HEARTBEAT(HEARTBEAT_DATA::DEFAULT);
        // One datagram per frame, as MAVLink over UDP sends them.
        assert_eq!(decode(&encode(h, &hb, &mut seq)).0.len(), 1);
        assert!(decode(&[0xFD, 0x00, 0x13, 0x37, 0xFE, 0x01]).0.is_empty());
        assert!(decode(&[0xAA; 300]).0.is_empty());
        let mut bad = encode(h, &hb, &mut seq);
        if let Some(b) = bad.last_mut() {
            *b ^= 0xFF; // break the CRC
        }
        assert!(decode(&bad).0.is_empty());
        // Two frames back to back in one datagram both decode.
        let mut two = encode(h, &hb, &mut seq);
        two.extend(encode(h, &hb, &mut seq));
        let (msgs, _) = decode(&two);
        assert_eq!(
            msgs.iter().map(|m| m.0.sequence).collect::<Vec<_>>(),
            vec![2, 3]
        );
    }

    #[test]
    fn a_keyed_vehicle_takes_only_frames_signed_with_its_key() {
        let h = MavHeader {
            system_id: 1,
            component_id: 191,
            sequence: 0,
        };
        let hb = MavMessage::HEARTBEAT(HEARTBEAT_DATA::default());
        let (gateway, vehicle) = (Signing::new([3; 32]), Signing::new([3; 32]));
        let mut seq = 0;
        let (taken, _, refused) = vehicle.decode(&gateway.encode(h, &hb, &mut seq));
        assert_eq!((taken.len(), refused), (1, 0));
        let (taken, _, refused) = vehicle.decode(&encode(h, &hb, &mut seq));
        assert_eq!((taken.len(), refused), (0, 1), "unsigned");
        let other = Signing::new([4; 32]);
        let (taken, _, refused) = vehicle.decode(&other.encode(h, &hb, &mut seq));
        assert_eq!((taken.len(), refused), (0, 1), "another key");
    }
}
