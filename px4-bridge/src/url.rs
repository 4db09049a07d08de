//! Transport URLs.
//!
//! - `udpin:HOST:PORT`: bind and answer the autopilot heard first (PX4 SITL sends to 14540);
//! - `udpout:HOST:PORT`: send to that address;
//! - `tcpin:HOST:PORT`: listen and take the one flight controller that connects (the service
//!   waits for it before it starts);
//! - `tcpout:HOST:PORT`: connect as a TCP client;
//! - `serial:DEVICE:BAUD`: a serial port (a Pixhawk's TELEM2 at 921600 baud).
//!
//! The spellings people already type elsewhere are taken as aliases of these: MAVSDK v2's
//! `udpin://`, `udpout://`, `tcpin://`, `tcpout://` and `serial://`; MAVSDK v1's and MAVROS's
//! `udp://[HOST]:PORT` (listen) and MAVSDK v1's `tcp://HOST:PORT` (connect). An empty host
//! means every interface, and a host name (`localhost`) is resolved when the URL is read.
//! MAVROS's `udp://BIND@REMOTE` pairs a fixed local port with a remote one, which this bridge
//! does not do; it is refused with the form to write instead.
//!
//! The default is `udpin:0.0.0.0:14540`, PX4 SITL's offboard port.

use std::net::{SocketAddr, ToSocketAddrs};

/// The default transport: PX4 SITL's offboard/API link.
pub const DEFAULT_URL: &str = "udpin:0.0.0.0:14540";

/// A parsed, checked transport URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportUrl {
    /// Bind UDP.
    UdpIn(SocketAddr),
    /// Send UDP.
    UdpOut(SocketAddr),
    /// TCP server for one client.
    TcpIn(SocketAddr),
    /// TCP client.
    TcpOut(SocketAddr),
    /// Serial port.
    Serial {
        /// Device path.
        device: String,
        /// Baud rate.
        baud: u32,
    },
}

/// Why a URL was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlError {
    url: String,
    reason: String,
}

impl std::fmt::Display for UrlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invalid transport `{}`: {} (expected udpin:HOST:PORT, udpout:HOST:PORT, tcpin:HOST:PORT, \
             tcpout:HOST:PORT or serial:DEVICE:BAUD, e.g. udpin:0.0.0.0:14540 for PX4 SITL or \
             serial:/dev/ttyAMA0:921600 for a Pixhawk's TELEM2)",
            self.url, self.reason
        )
    }
}

impl std::error::Error for UrlError {}

impl std::fmt::Display for TransportUrl {
    /// The canonical spelling ([`TransportUrl::to_mavlink`]).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_mavlink())
    }
}

/// `HOST:PORT` with an empty host meaning every interface and a host name resolved (the first
/// IPv4 address when there is one: PX4 and the ground stations speak IPv4).
fn socket_addr(rest: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = rest.parse::<SocketAddr>() {
        return Ok(a);
    }
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| "HOST:PORT needs a port".to_string())?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("`{port}` is not a port number (1-65535)"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    if host.contains(['/', '@', ' ']) {
        return Err(format!("`{host}` is not a host name or address"));
    }
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("host `{host}` does not resolve ({e})"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| format!("host `{host}` has no address"))
}

impl TransportUrl {
    /// Parses and checks a URL, in any of the spellings the module lists.
    ///
    /// # Errors
    /// [`UrlError`] naming the URL, what is wrong with it and the forms that are taken.
    pub fn parse(url: &str) -> Result<TransportUrl, UrlError> {
        let err = |reason: String| UrlError {
            url: url.to_string(),
            reason,
        };
        let (scheme, rest) = url
            .split_once(':')
            .ok_or_else(|| err("missing scheme".into()))?;
        // MAVSDK's and MAVROS's `scheme://rest`.
        let (rest, slashes) = match rest.strip_prefix("//") {
            Some(r) => (r, true),
            None => (rest, false),
        };
        let addr = || socket_addr(rest).map_err(err);
        match (scheme, slashes) {
            ("udpin", _) => Ok(TransportUrl::UdpIn(addr()?)),
            ("udpout", _) => Ok(TransportUrl::UdpOut(addr()?)),
            ("tcpin", _) => Ok(TransportUrl::TcpIn(addr()?)),
            ("tcpout", _) | ("tcp", true) => Ok(TransportUrl::TcpOut(addr()?)),
            ("udp", true) => match rest.split_once('@') {
                None | Some((_, "")) => {
                    let bind = rest.split_once('@').map_or(rest, |(b, _)| b);
                    Ok(TransportUrl::UdpIn(socket_addr(bind).map_err(err)?))
                }
                Some((_, remote)) => Err(err(format!(
                    "MAVROS's `udp://BIND@REMOTE` is not taken: write `udpin:HOST:PORT` to wait \
                     for the autopilot on a local port, or `udpout:{remote}` to send to it"
                ))),
            },
            ("udp" | "tcp", false) => Err(err(format!(
                "`{scheme}:` does not say which side starts: write `{scheme}in:` to listen or \
                 `{scheme}out:` to send/connect"
            ))),
            ("serial", _) => {
                let (device, baud) = rest
                    .rsplit_once(':')
                    .ok_or_else(|| err("serial needs DEVICE:BAUD".into()))?;
                if device.is_empty() {
                    return Err(err("empty serial device".into()));
                }
                let baud: u32 = baud
                    .parse()
                    .map_err(|_| err("baud rate must be a number".into()))?;
                if baud == 0 {
                    return Err(err("baud rate must be positive".into()));
                }
                Ok(TransportUrl::Serial {
                    device: device.to_string(),
                    baud,
                })
            }
            _ => Err(err(format!("unknown scheme `{scheme}`"))),
        }
    }

    /// The URL in the form `mavlink::connect_async` takes.
    pub fn to_mavlink(&self) -> String {
        match self {
            TransportUrl::UdpIn(a) => format!("udpin:{a}"),
            TransportUrl::UdpOut(a) => format!("udpout:{a}"),
            TransportUrl::TcpIn(a) => format!("tcpin:{a}"),
            TransportUrl::TcpOut(a) => format!("tcpout:{a}"),
            TransportUrl::Serial { device, baud } => format!("serial:{device}:{baud}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_scheme_and_refuses_bad_ones() {
        assert_eq!(
            TransportUrl::parse(DEFAULT_URL).unwrap().to_mavlink(),
            "udpin:0.0.0.0:14540"
        );
        assert!(matches!(
            TransportUrl::parse("udpout:127.0.0.1:14580"),
            Ok(TransportUrl::UdpOut(_))
        ));
        assert!(matches!(
            TransportUrl::parse("tcpout:127.0.0.1:5760"),
            Ok(TransportUrl::TcpOut(_))
        ));
        assert_eq!(
            TransportUrl::parse("serial:/dev/ttyAMA0:921600"),
            Ok(TransportUrl::Serial {
                device: "/dev/ttyAMA0".into(),
                baud: 921_600
            })
        );
        for bad in [
            "",
            "udp:1.2.3.4:5",
            "udpin:localhost",
            "serial:/dev/x",
            "serial::9600",
            "serial:/dev/x:0",
            "tcpout:1.2.3.4:99999",
            "udpin:no such host:14540",
            "udp://:14540@127.0.0.1:14557",
            "tcp:127.0.0.1:5760",
            "mavlink://1.2.3.4:5",
        ] {
            assert!(TransportUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_spellings_of_mavsdk_and_mavros_are_aliases() {
        let canon = |u: &str| TransportUrl::parse(u).map(|t| t.to_string());
        for (alias, canonical) in [
            ("udpin://0.0.0.0:14540", "udpin:0.0.0.0:14540"),
            ("udpin://:14540", "udpin:0.0.0.0:14540"),
            ("udpin::14540", "udpin:0.0.0.0:14540"),
            ("udp://:14540", "udpin:0.0.0.0:14540"),
            ("udp://0.0.0.0:14540", "udpin:0.0.0.0:14540"),
            ("udp://:14540@", "udpin:0.0.0.0:14540"),
            ("udpin:localhost:14540", "udpin:127.0.0.1:14540"),
            ("udpout://127.0.0.1:14580", "udpout:127.0.0.1:14580"),
            ("udpout:localhost:14580", "udpout:127.0.0.1:14580"),
            ("tcpin://0.0.0.0:5760", "tcpin:0.0.0.0:5760"),
            ("tcpin:localhost:5760", "tcpin:127.0.0.1:5760"),
            ("tcpout://127.0.0.1:5760", "tcpout:127.0.0.1:5760"),
            ("tcp://127.0.0.1:5760", "tcpout:127.0.0.1:5760"),
            ("serial:///dev/ttyAMA0:921600", "serial:/dev/ttyAMA0:921600"),
            ("serial:/dev/serial0:57600", "serial:/dev/serial0:57600"),
            ("udpin:[::1]:14540", "udpin:[::1]:14540"),
        ] {
            assert_eq!(canon(alias).as_deref(), Ok(canonical), "{alias}");
        }
    }

    #[test]
    fn a_refusal_says_which_form_to_use() {
        let e = TransportUrl::parse("udp://:14540@127.0.0.1:14557")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`udpout:127.0.0.1:14557`"), "{e}");
        let e = TransportUrl::parse("udp:1.2.3.4:5")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`udpin:` to listen"), "{e}");
        let e = TransportUrl::parse("udpin:0.0.0.0:port")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`port` is not a port number"), "{e}");
        assert!(e.contains("serial:/dev/ttyAMA0:921600"), "{e}");
    }
}
