//! Transport URLs.
//!
//! - `udpin:HOST:PORT`: bind and answer whoever sends (PX4 SITL sends to 14540);
//! - `udpout:HOST:PORT`: send to that address;
//! - `tcpout:HOST:PORT`: connect as a TCP client;
//! - `serial:DEVICE:BAUD`: a serial port (a Pixhawk's TELEM2 at 921600 baud).
//!
//! The default is `udpin:0.0.0.0:14540`, PX4 SITL's offboard port.

use std::net::SocketAddr;

/// The default transport: PX4 SITL's offboard/API link.
pub const DEFAULT_URL: &str = "udpin:0.0.0.0:14540";

/// A parsed, checked transport URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportUrl {
    /// Bind UDP.
    UdpIn(SocketAddr),
    /// Send UDP.
    UdpOut(SocketAddr),
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
    reason: &'static str,
}

impl std::fmt::Display for UrlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invalid transport `{}`: {} (expected udpin:HOST:PORT, udpout:HOST:PORT, tcpout:HOST:PORT or serial:DEVICE:BAUD)",
            self.url, self.reason
        )
    }
}

impl std::error::Error for UrlError {}

impl TransportUrl {
    /// Parses and checks a URL.
    ///
    /// # Errors
    /// [`UrlError`] naming the URL and what is wrong with it.
    pub fn parse(url: &str) -> Result<TransportUrl, UrlError> {
        let err = |reason| UrlError {
            url: url.to_string(),
            reason,
        };
        let (scheme, rest) = url.split_once(':').ok_or_else(|| err("missing scheme"))?;
        let addr = || -> Result<SocketAddr, UrlError> {
            rest.parse::<SocketAddr>()
                .map_err(|_| err("HOST:PORT must be an IP address and a port"))
        };
        match scheme {
            "udpin" => Ok(TransportUrl::UdpIn(addr()?)),
            "udpout" => Ok(TransportUrl::UdpOut(addr()?)),
            "tcpout" => Ok(TransportUrl::TcpOut(addr()?)),
            "serial" => {
                let (device, baud) = rest
                    .rsplit_once(':')
                    .ok_or_else(|| err("serial needs DEVICE:BAUD"))?;
                if device.is_empty() {
                    return Err(err("empty serial device"));
                }
                let baud: u32 = baud
                    .parse()
                    .map_err(|_| err("baud rate must be a number"))?;
                if baud == 0 {
                    return Err(err("baud rate must be positive"));
                }
                Ok(TransportUrl::Serial {
                    device: device.to_string(),
                    baud,
                })
            }
            _ => Err(err("unknown scheme")),
        }
    }

    /// The URL in the form `mavlink::connect_async` takes.
    pub fn to_mavlink(&self) -> String {
        match self {
            TransportUrl::UdpIn(a) => format!("udpin:{a}"),
            TransportUrl::UdpOut(a) => format!("udpout:{a}"),
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
        ] {
            assert!(TransportUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
