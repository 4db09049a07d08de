//! Crazyflie link URIs, checked before the library sees them so a typo is a clear error.
//!
//! - `radio://N/CHANNEL/RATE[/ADDRESS]`: Crazyradio number N (0 for the first dongle), channel
//!   0–125, rate `250K`, `1M` or `2M`, address 10 hex digits (default `E7E7E7E7E7`);
//! - `usb://N`: a Crazyflie on USB.

/// A bad URI, with a message for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UriError(pub String);

impl std::fmt::Display for UriError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UriError {}

/// Checks `uri`.
///
/// # Errors
/// [`UriError`] naming the part that is wrong.
pub fn check(uri: &str) -> Result<(), UriError> {
    let err = |m: String| Err(UriError(format!("{m} in `{uri}`")));
    if let Some(rest) = uri.strip_prefix("radio://") {
        let parts: Vec<&str> = rest.split('/').collect();
        let (dongle, channel, rate, address) = match parts.as_slice() {
            [d, c, r] => (*d, *c, *r, None),
            [d, c, r, a] => (*d, *c, *r, Some(*a)),
            _ => {
                return err(
                    "expected radio://DONGLE/CHANNEL/RATE[/ADDRESS], e.g. radio://0/80/2M/E7E7E7E7E7"
                        .into(),
                );
            }
        };
        if dongle.parse::<u8>().is_err() {
            return err(format!("dongle `{dongle}` is not a number"));
        }
        match channel.parse::<u8>() {
            Ok(c) if c <= 125 => {}
            _ => return err(format!("channel `{channel}` is not 0–125")),
        }
        if !matches!(rate, "250K" | "1M" | "2M") {
            return err(format!("rate `{rate}` is not 250K, 1M or 2M"));
        }
        if let Some(a) = address
            && (a.len() != 10 || !a.chars().all(|c| c.is_ascii_hexdigit()))
        {
            return err(format!("address `{a}` is not 10 hex digits"));
        }
        return Ok(());
    }
    if let Some(rest) = uri.strip_prefix("usb://") {
        if rest.parse::<u8>().is_err() {
            return err(format!("`{rest}` is not a USB device number"));
        }
        return Ok(());
    }
    err("expected radio://… or usb://…".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_forms_and_names_what_is_wrong() {
        for ok in ["radio://0/80/2M/E7E7E7E7E7", "radio://1/0/250K", "usb://0"] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            ("radio://0/126/2M", "channel"),
            ("radio://0/80/3M", "rate"),
            ("radio://0/80/2M/E7E7", "address"),
            ("radio://x/80/2M", "dongle"),
            ("udp://1.2.3.4", "expected"),
            ("usb://a", "USB"),
        ] {
            let e = check(bad).unwrap_err().0;
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
