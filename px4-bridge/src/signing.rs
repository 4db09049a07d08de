//! MAVLink 2 message signing (<https://mavlink.io/en/guide/message_signing.html>).
//!
//! With a key, every frame the bridge sends carries the 13-byte signature (link id, 48-bit
//! timestamp in 10 µs units since 2015, truncated SHA-256 over key, frame and timestamp), and
//! every frame it receives must carry a valid one from a stream whose timestamps only go
//! forward; an unsigned frame is refused unless `accept_unsigned` (for a flight controller not
//! yet keyed). The signature arithmetic and the replay bookkeeping are the `mavlink` crate's
//! ([`mavlink::SigningData`]); this module decides what is refused and counts it, so a key that
//! does not match the autopilot's shows as refused frames rather than as silence.
//!
//! On a UDP link the bridge reads and writes frames itself ([`crate::transport`]) and counts
//! each refusal; on serial and TCP links the `mavlink` crate's connection verifies with the same
//! configuration and drops refused frames without a count.

use mavlink::dialects::common::MavMessage;
use mavlink::{MAVLinkMessageRaw, MavHeader, MavlinkReader, MavlinkVersion, Message};

/// A signing key and how to use it.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey {
    key: [u8; 32],
    /// The link id written into each signature (one per physical link of a system).
    pub link_id: u8,
    /// Whether unsigned incoming frames are taken (a flight controller not keyed yet).
    pub accept_unsigned: bool,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        f.debug_struct("SigningKey")
            .field("link_id", &self.link_id)
            .field("accept_unsigned", &self.accept_unsigned)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// A key from its 32 secret bytes.
    pub fn new(key: [u8; 32], link_id: u8, accept_unsigned: bool) -> SigningKey {
        SigningKey {
            key,
            link_id,
            accept_unsigned,
        }
    }

    /// The secret from a key file's contents: 32 raw bytes, or 64 hexadecimal digits with an
    /// optional trailing newline (`openssl rand -hex 32`).
    ///
    /// # Errors
    /// [`KeyFileError`]: what is wrong, for people (never the bytes).
    pub fn parse_secret(bytes: &[u8]) -> Result<[u8; 32], KeyFileError> {
        if let Ok(raw) = <[u8; 32]>::try_from(bytes) {
            if raw == [0u8; 32] {
                return Err(KeyFileError::AllZeros);
            }
            return Ok(raw);
        }
        let shape = KeyFileError::Shape { len: bytes.len() };
        let text = std::str::from_utf8(bytes)
            .map_err(|_| shape)?
            .trim_end_matches(['\n', '\r']);
        if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(shape);
        }
        let mut key = [0u8; 32];
        for (k, pair) in key.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
            let s = std::str::from_utf8(pair).unwrap_or("00");
            *k = u8::from_str_radix(s, 16).unwrap_or(0);
        }
        if key == [0u8; 32] {
            return Err(KeyFileError::AllZeros);
        }
        Ok(key)
    }

    /// The `mavlink` crate's configuration: sign everything sent, verify everything received.
    pub fn config(&self) -> mavlink::SigningConfig {
        mavlink::SigningConfig::new(self.key, self.link_id, true, self.accept_unsigned)
    }

    /// A signer with its own replay state.
    pub fn signer(&self) -> Signer {
        Signer {
            data: mavlink::SigningData::from_config(self.config()),
            accept_unsigned: self.accept_unsigned,
        }
    }
}

/// Signs outgoing frames and verifies incoming ones for one link (it keeps the link's
/// timestamps).
pub struct Signer {
    data: mavlink::SigningData,
    accept_unsigned: bool,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("accept_unsigned", &self.accept_unsigned)
            .finish_non_exhaustive()
    }
}

/// What one datagram held.
#[derive(Debug, Default, PartialEq)]
pub struct Decoded {
    /// Frames taken (signed validly, or unsigned where that is accepted).
    pub frames: Vec<(MavHeader, MavMessage)>,
    /// Bytes that were not a frame of the compiled dialect.
    pub errors: u32,
    /// Frames refused: unsigned, a wrong signature, or a replayed timestamp.
    pub refused: u32,
}

impl Signer {
    /// Whether this raw frame is taken.
    pub fn verify(&self, raw: &MAVLinkMessageRaw) -> bool {
        match raw {
            MAVLinkMessageRaw::V1(_) => self.accept_unsigned,
            MAVLinkMessageRaw::V2(m) => self.data.verify_signature(m),
        }
    }

    /// One message as a signed MAVLink 2 frame.
    pub fn encode(&self, header: MavHeader, msg: &MavMessage) -> Vec<u8> {
        let mut out = Vec::with_capacity(80);
        // Writing to a Vec cannot fail for a message of the compiled dialect.
        let _ = mavlink::write_v2_msg_signed(&mut out, header, msg, Some(&self.data));
        out
    }
}

/// Every frame of a datagram, verified by `signer` when there is one.
pub fn decode(bytes: &[u8], signer: Option<&Signer>) -> Decoded {
    let mut r = MavlinkReader::new(bytes);
    let mut out = Decoded::default();
    loop {
        match r.read_any_raw_message::<MavMessage>() {
            Ok(raw) => {
                if signer.is_some_and(|s| !s.verify(&raw)) {
                    out.refused = out.refused.saturating_add(1);
                    continue;
                }
                let version = match raw {
                    MAVLinkMessageRaw::V1(_) => MavlinkVersion::V1,
                    MAVLinkMessageRaw::V2(_) => MavlinkVersion::V2,
                };
                match MavMessage::parse(version, raw.message_id(), raw.payload()) {
                    Ok(m) => out.frames.push((
                        MavHeader {
                            system_id: raw.system_id(),
                            component_id: raw.component_id(),
                            sequence: raw.sequence(),
                        },
                        m,
                    )),
                    Err(_) => out.errors = out.errors.saturating_add(1),
                }
            }
            Err(mavlink::error::MessageReadError::Io(_)) => break,
            Err(_) => {
                out.errors = out.errors.saturating_add(1);
                if out.errors > 1024 {
                    break;
                }
            }
        }
    }
    out
}

/// Why a MAVLink signing key file was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFileError {
    /// Neither 32 raw bytes nor 64 hexadecimal digits (the file's length).
    Shape {
        /// The file's length in bytes.
        len: usize,
    },
    /// All zeros, which MAVLink reads as "signing off".
    AllZeros,
}

impl std::fmt::Display for KeyFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyFileError::Shape { len } => write!(
                f,
                "{len} bytes: a key is 32 raw bytes or 64 hex digits (`openssl rand -hex 32`)"
            ),
            KeyFileError::AllZeros => {
                f.write_str("the key is all zeros, which MAVLink reads as \"signing off\"")
            }
        }
    }
}

impl std::error::Error for KeyFileError {}

#[cfg(test)]
mod tests {
    use super::*;
    use mavlink::dialects::common::{HEARTBEAT_DATA, MavAutopilot, MavModeFlag, MavState, MavType};

    fn hb() -> MavMessage {
        MavMessage::HEARTBEAT(HEARTBEAT_DATA {
            custom_mode: 0,
            mavtype: MavType::MAV_TYPE_QUADROTOR,
            autopilot: MavAutopilot::MAV_AUTOPILOT_PX4,
            base_mode: MavModeFlag::empty(),
            system_status: MavState::MAV_STATE_ACTIVE,
            mavlink_version: 3,
        })
    }

    fn header() -> MavHeader {
        MavHeader {
            system_id: 1,
            component_id: 1,
            sequence: 0,
        }
    }

    #[test]
    fn signed_frames_pass_and_unsigned_forged_or_replayed_ones_are_refused() {
        let key = SigningKey::new([7u8; 32], 0, false);
        let (tx, rx) = (key.signer(), key.signer());
        let a = tx.encode(header(), &hb());
        let b = tx.encode(header(), &hb());
        assert_eq!(
            a.len(),
            12 + 9 + 13,
            "a signed heartbeat carries 13 bytes more"
        );
        let d = decode(&a, Some(&rx));
        assert_eq!((d.frames.len(), d.refused, d.errors), (1, 0, 0));
        // The same frame again: a replay.
        assert_eq!(decode(&a, Some(&rx)).refused, 1);
        assert_eq!(decode(&b, Some(&rx)).frames.len(), 1);
        // Unsigned.
        let mut plain = Vec::new();
        mavlink::write_v2_msg(&mut plain, header(), &hb()).unwrap();
        assert_eq!(decode(&plain, Some(&rx)).refused, 1);
        assert_eq!(decode(&plain, None).frames.len(), 1);
        // Another key's signature.
        let other = SigningKey::new([8u8; 32], 0, false).signer();
        assert_eq!(decode(&other.encode(header(), &hb()), Some(&rx)).refused, 1);
        // A flipped signature byte.
        let mut c = tx.encode(header(), &hb());
        let n = c.len();
        c[n - 1] ^= 1;
        assert_eq!(decode(&c, Some(&rx)).refused, 1);
        // Unsigned accepted when asked to.
        let lax = SigningKey::new([7u8; 32], 0, true).signer();
        assert_eq!(decode(&plain, Some(&lax)).frames.len(), 1);
    }

    #[test]
    fn key_files_are_raw_or_hex_and_never_zero() {
        let hex = "0102030405060708091011121314151617181920212223242526272829303132\n";
        let k = SigningKey::parse_secret(hex.as_bytes()).unwrap();
        assert_eq!((k[0], k[31]), (0x01, 0x32));
        assert_eq!(SigningKey::parse_secret(&[9u8; 32]).unwrap(), [9u8; 32]);
        for bad in [&b""[..], &[0u8; 32], &[1u8; 31], b"zz", &[b'0'; 64]] {
            assert!(SigningKey::parse_secret(bad).is_err());
        }
        let e = SigningKey::parse_secret(&[1u8; 33]).unwrap_err();
        assert_eq!(e, KeyFileError::Shape { len: 33 });
        assert!(e.to_string().contains("33 bytes"), "{e}");
        assert_eq!(
            SigningKey::parse_secret(&[b'0'; 64]),
            Err(KeyFileError::AllZeros)
        );
        assert!(!format!("{:?}", SigningKey::new([5u8; 32], 1, false)).contains('5'));
    }
}
