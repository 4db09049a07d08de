//! The tokio shell: opens the transport, runs [`Offboard`], moves bytes.
//!
//! One task owns the state machine. A second task only receives frames (the `mavlink` crate's
//! `try_recv`, so parse errors surface and are counted) and hands them over a bounded channel.
//! The main loop is `biased` towards its timer, so a flood of input never stalls the heartbeat
//! or the setpoint stream. The gateway talks to it through a [`BridgeHandle`], whose
//! [`BridgeHandle::try_enqueue`] checks the last known link state and does a bounded
//! `try_send`: it returns at once, never blocks and never awaits.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use std::net::SocketAddr;

use mavlink::dialects::common::MavMessage;
use mavlink::{AsyncMavConnection, MAVLinkMessageRaw, MavHeader};
use tokio::net::UdpSocket;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

use crate::transport::{Received, UdpLock};

use crate::command::Command;
use crate::offboard::{Config, EnqueueError, Event, Offboard, StatusTextError};
use crate::setpoint::Setpoint;
use crate::telemetry::{Telemetry, TelemetryUpdate};
use crate::time::Mono;
use crate::url::TransportUrl;

/// Status texts waiting for the bridge's task at most; the gateway rate-limits well below.
pub const STATUS_TEXT_QUEUE: usize = 8;

/// Shell options.
#[derive(Clone, Debug)]
pub struct BridgeOptions {
    /// Transport URL (see [`crate::url`]).
    pub url: String,
    /// State-machine configuration.
    pub config: Config,
    /// Capacity of the command queue the gateway enqueues into.
    pub queue: usize,
    /// Capacity of the event queue towards the gateway; when full, events are dropped and
    /// counted, the bridge never waits.
    pub event_queue: usize,
    /// Append every enqueued setpoint here as a JSON line.
    pub setpoint_log: Option<PathBuf>,
    /// The clock origin shared with the gateway (both measure `Mono` from it).
    pub origin: Instant,
    /// MAVLink 2 signing: sign what is sent, refuse what is not validly signed (unless the key
    /// accepts unsigned frames). `None`: unsigned, as PX4 without a key.
    pub signing: Option<crate::signing::SigningKey>,
    /// Relay the vehicle's traffic to a ground station and the ground station's to the vehicle
    /// ([`crate::gcs`]). `None`: the gateway alone on the link.
    pub gcs: Option<crate::gcs::GcsEndpoint>,
}

impl BridgeOptions {
    /// Options for `url` with defaults, on the clock that counts from `origin`: the gateway's,
    /// so the bridge's instants are the core's without conversion. There is no default: a
    /// bridge on a clock of its own would make every stamp it reports wrong by the difference.
    pub fn new(url: &str, origin: Instant) -> BridgeOptions {
        BridgeOptions {
            url: url.to_string(),
            config: Config::default(),
            queue: 16,
            event_queue: 4096,
            setpoint_log: None,
            origin,
            signing: None,
            gcs: None,
        }
    }
}

/// Why the bridge could not start or stopped.
#[derive(Debug)]
pub enum BridgeError {
    /// The URL is invalid.
    Url(crate::url::UrlError),
    /// The transport could not be opened.
    Connect {
        /// The URL.
        url: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The setpoint log could not be opened.
    Log {
        /// The path.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The bridge's own thread or runtime could not start.
    Runtime(std::io::Error),
}

impl std::fmt::Display for BridgeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BridgeError::Url(e) => write!(f, "{e}"),
            BridgeError::Connect { url, source } => write!(f, "cannot open `{url}`: {source}"),
            BridgeError::Log { path, source } => {
                write!(f, "cannot open setpoint log `{}`: {source}", path.display())
            }
            BridgeError::Runtime(e) => write!(f, "cannot start the bridge's thread: {e}"),
        }
    }
}

impl std::error::Error for BridgeError {}

/// One input checked and given its slot in the bridge's bounded queue, not yet sent.
///
/// [`Reserved::release`] hands it to the bridge and cannot fail (the slot is held); dropping
/// it frees the slot and the bridge never sees it.
pub struct Reserved {
    permit: mpsc::OwnedPermit<Input>,
    input: Input,
}

impl Reserved {
    /// Sends the input to the bridge.
    pub fn release(self) {
        self.permit.send(self.input);
    }

    /// Whether this moves the vehicle to a new target (an enqueue), rather than holding or
    /// commanding it.
    pub fn is_target(&self) -> bool {
        matches!(self.input, Input::Enqueue { .. })
    }

    /// The binding of an enqueued target.
    pub fn binding(&self) -> Option<[u8; 32]> {
        match &self.input {
            Input::Enqueue { binding, .. } => Some(*binding),
            _ => None,
        }
    }
}

impl std::fmt::Debug for Reserved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match &self.input {
            Input::Enqueue { .. } => "target",
            Input::Hold => "hold",
            Input::Command(_) => "command",
            Input::Permit => "permit",
        };
        write!(f, "Reserved({what})")
    }
}

enum Input {
    Enqueue {
        sp: Setpoint,
        binding: [u8; 32],
        valid_until: Mono,
    },
    Hold,
    Command(Command),
    Permit,
}

struct Shared {
    link_up: AtomicBool,
    capable: AtomicBool,
    permitted: AtomicBool,
    dropped_events: AtomicU64,
    parse_errors: AtomicU64,
    setpoints_sent: AtomicU64,
    foreign_datagrams: AtomicU64,
    unsigned_refused: AtomicU64,
    gcs_to_vehicle: AtomicU64,
    vehicle_to_gcs: AtomicU64,
    gcs_forged: AtomicU64,
    gcs_dropped: AtomicU64,
    transport_errors: AtomicU64,
}

/// The gateway's handle on a running bridge. Cheap to clone.
#[derive(Clone)]
pub struct BridgeHandle {
    tx: mpsc::Sender<Input>,
    /// Status texts for the ground station: a queue of their own, so they never take a slot a
    /// hold or a target needs.
    texts: mpsc::Sender<(u8, String)>,
    shared: Arc<Shared>,
    origin: Instant,
}

impl BridgeHandle {
    /// Now, on the clock shared with the gateway.
    pub fn now(&self) -> Mono {
        Mono(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// Enqueues one exact setpoint with the gateway's binding, to be streamed until
    /// `valid_until`. Returns at once. The same as [`BridgeHandle::reserve_enqueue`] released
    /// at once.
    ///
    /// # Errors
    /// As [`BridgeHandle::reserve_enqueue`].
    pub fn try_enqueue(
        &self,
        sp: Setpoint,
        binding: [u8; 32],
        valid_until: Mono,
    ) -> Result<(), EnqueueError> {
        self.reserve_enqueue(sp, binding, valid_until)
            .map(Reserved::release)
    }

    /// Checks one exact setpoint against the last known state and reserves its slot in the
    /// bounded queue, without sending it: [`Reserved::release`] sends it (it cannot fail then),
    /// dropping the reservation frees the slot and nothing reaches the bridge. Returns at once.
    ///
    /// The gateway uses this to keep "the receipt is written before the setpoint leaves": the
    /// gate reserves, the receipt is appended, then the reservation is released.
    ///
    /// # Errors
    /// [`EnqueueError::LinkDown`] or [`EnqueueError::NotOffboardCapable`] from the last known
    /// state, [`EnqueueError::InvalidSetpoint`] or [`EnqueueError::Expired`] for a bad request,
    /// [`EnqueueError::QueueFull`] when the bounded queue is full. A request taken here may
    /// still be dropped when processed if the state changed meanwhile; that is reported as
    /// [`Event::EnqueueDropped`].
    pub fn reserve_enqueue(
        &self,
        sp: Setpoint,
        binding: [u8; 32],
        valid_until: Mono,
    ) -> Result<Reserved, EnqueueError> {
        if !sp.is_finite() {
            return Err(EnqueueError::InvalidSetpoint);
        }
        if valid_until <= self.now() {
            return Err(EnqueueError::Expired);
        }
        if !self.shared.link_up.load(Ordering::Acquire) {
            return Err(EnqueueError::LinkDown);
        }
        if !self.shared.permitted.load(Ordering::Acquire) {
            return Err(EnqueueError::NotPermitted);
        }
        if !self.shared.capable.load(Ordering::Acquire) {
            return Err(EnqueueError::NotOffboardCapable);
        }
        self.reserve(Input::Enqueue {
            sp,
            binding,
            valid_until,
        })
    }

    fn reserve(&self, input: Input) -> Result<Reserved, EnqueueError> {
        let permit = self
            .tx
            .clone()
            .try_reserve_owned()
            .map_err(|_| EnqueueError::QueueFull)?;
        Ok(Reserved { permit, input })
    }

    /// Asks the bridge to stop the current target and hold. Returns at once.
    ///
    /// # Errors
    /// [`EnqueueError::QueueFull`].
    pub fn hold(&self) -> Result<(), EnqueueError> {
        self.reserve_hold().map(Reserved::release)
    }

    /// Reserves a hold's slot in the queue (see [`BridgeHandle::reserve_enqueue`]).
    ///
    /// # Errors
    /// [`EnqueueError::QueueFull`].
    pub fn reserve_hold(&self) -> Result<Reserved, EnqueueError> {
        self.reserve(Input::Hold)
    }

    /// Sends a command; the outcome arrives as [`Event::Command`]. Returns at once.
    ///
    /// # Errors
    /// [`EnqueueError::QueueFull`].
    pub fn command(&self, c: Command) -> Result<(), EnqueueError> {
        self.reserve_command(c).map(Reserved::release)
    }

    /// Reserves a command's slot in the queue (see [`BridgeHandle::reserve_enqueue`]).
    ///
    /// # Errors
    /// [`EnqueueError::QueueFull`].
    pub fn reserve_command(&self, c: Command) -> Result<Reserved, EnqueueError> {
        self.reserve(Input::Command(c))
    }

    /// Sends a `STATUSTEXT` (`severity` as MAVLink's `MAV_SEVERITY`, 0 emergency … 7 debug)
    /// from the gateway's component to the autopilot, for the ground station. Returns at once;
    /// a full queue ([`STATUS_TEXT_QUEUE`]) refuses it.
    ///
    /// # Errors
    /// [`StatusTextError::Length`] for an empty text or one over 50 bytes (never cut),
    /// [`StatusTextError::LinkDown`] as last seen, [`StatusTextError::QueueFull`].
    pub fn status_text(&self, severity: u8, text: &str) -> Result<(), StatusTextError> {
        if text.is_empty() || text.len() > crate::offboard::STATUSTEXT_LEN {
            return Err(StatusTextError::Length(text.len()));
        }
        if !self.shared.link_up.load(Ordering::Acquire) {
            return Err(StatusTextError::LinkDown);
        }
        self.texts
            .try_send((severity, text.to_string()))
            .map_err(|_| StatusTextError::QueueFull)
    }

    /// The operator hands the vehicle to the bridge (again), after a takeoff or an override.
    /// Returns at once; [`Event::Permission`] confirms it.
    ///
    /// # Errors
    /// [`EnqueueError::QueueFull`].
    pub fn permit_offboard(&self) -> Result<(), EnqueueError> {
        self.tx
            .try_send(Input::Permit)
            .map_err(|_| EnqueueError::QueueFull)
    }

    /// Whether the operator's permission to fly holds, as last seen (an override withdraws it).
    pub fn offboard_permitted(&self) -> bool {
        self.shared.permitted.load(Ordering::Acquire)
    }

    /// Whether a dispatched setpoint would be taken now, as last seen: link up, the operator's
    /// permission, and the vehicle not owned by a pilot, a failsafe or an autopilot procedure.
    pub fn offboard_capable(&self) -> bool {
        self.shared.capable.load(Ordering::Acquire)
    }

    /// Whether the autopilot link is up, as last seen.
    pub fn link_up(&self) -> bool {
        self.shared.link_up.load(Ordering::Acquire)
    }

    /// Events dropped because the gateway did not drain them.
    pub fn dropped_events(&self) -> u64 {
        self.shared.dropped_events.load(Ordering::Relaxed)
    }

    /// Frames that did not parse.
    pub fn parse_errors(&self) -> u64 {
        self.shared.parse_errors.load(Ordering::Relaxed)
    }

    /// Setpoints sent so far.
    pub fn setpoints_sent(&self) -> u64 {
        self.shared.setpoints_sent.load(Ordering::Relaxed)
    }

    /// UDP datagrams dropped because they came from an address other than the vehicle's.
    pub fn foreign_datagrams(&self) -> u64 {
        self.shared.foreign_datagrams.load(Ordering::Relaxed)
    }

    /// Frames a signing key refused on a UDP link (unsigned, another key's, replayed).
    pub fn unsigned_refused(&self) -> u64 {
        self.shared.unsigned_refused.load(Ordering::Relaxed)
    }

    /// The ground-station relay's counts: (frames passed to the vehicle, datagrams or frames
    /// passed to the ground station, frames from the ground station that claimed the gateway's
    /// own id and were dropped, frames dropped because a send would have waited).
    pub fn gcs_relay(&self) -> (u64, u64, u64, u64) {
        (
            self.shared.gcs_to_vehicle.load(Ordering::Relaxed),
            self.shared.vehicle_to_gcs.load(Ordering::Relaxed),
            self.shared.gcs_forged.load(Ordering::Relaxed),
            self.shared.gcs_dropped.load(Ordering::Relaxed),
        )
    }

    /// Sends and receives the transport refused (counted, backed off, never a busy retry).
    pub fn transport_errors(&self) -> u64 {
        self.shared.transport_errors.load(Ordering::Relaxed)
    }
}

enum Rx {
    Msg(MavHeader, Box<MavMessage>),
    Datagram(SocketAddr, Vec<u8>),
    /// A datagram from the ground station's socket.
    Gcs(SocketAddr, Vec<u8>),
    ParseError,
    Closed,
}

/// The open transport: UDP locked to one autopilot ([`crate::transport`]), or a point-to-point
/// link (TCP, serial) through the `mavlink` crate.
enum Wire {
    Udp {
        socket: Arc<UdpSocket>,
        lock: UdpLock,
    },
    Mav(Arc<mavlink::AsyncDialectConnection<mavlink::static_dialect::StaticDialect<MavMessage>>>),
}

/// A back-off after `n` transport errors in a row: 10 ms doubling to 1 s.
fn backoff(n: u32) -> std::time::Duration {
    std::time::Duration::from_millis(10u64 << n.min(7)).min(std::time::Duration::from_secs(1))
}

/// Logs a persistent transport error at most every five seconds.
struct ErrorLog {
    last: Option<Instant>,
    held: u64,
}

impl ErrorLog {
    fn note(&mut self, what: &str, e: &std::io::Error) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < std::time::Duration::from_secs(5))
        {
            self.held += 1;
            return;
        }
        tracing::warn!(error = %e, held_back = self.held, "vehicle link: {what} failed");
        self.last = Some(now);
        self.held = 0;
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Opens the transport and starts the bridge. Returns the handle, the event stream and the task;
/// the task ends when `shutdown` fires (or is dropped).
///
/// # Errors
/// [`BridgeError`] when the URL is invalid or the transport or log cannot be opened.
pub async fn start(
    opts: BridgeOptions,
    shutdown: broadcast::Receiver<()>,
) -> Result<(BridgeHandle, mpsc::Receiver<Event>, JoinHandle<()>), BridgeError> {
    let url = TransportUrl::parse(&opts.url).map_err(BridgeError::Url)?;
    // Written by its own thread: the streaming task never waits on the disk.
    let log = match &opts.setpoint_log {
        Some(p) => Some(
            halo_linelog::LineLog::open(p).map_err(|source| BridgeError::Log {
                path: p.clone(),
                source,
            })?,
        ),
        None => None,
    };
    let wire = open_wire(&url, &opts).await?;
    let origin = opts.origin;
    let (tx, rx_cmd) = mpsc::channel::<Input>(opts.queue.max(1));
    let (texts, rx_text) = mpsc::channel::<(u8, String)>(STATUS_TEXT_QUEUE);
    let (tx_ev, rx_ev) = mpsc::channel::<Event>(opts.event_queue.max(1));
    let (tx_in, rx_in) = mpsc::channel::<Rx>(1024);
    let shared = Arc::new(Shared {
        link_up: AtomicBool::new(false),
        capable: AtomicBool::new(false),
        permitted: AtomicBool::new(opts.config.offboard_permitted_at_start),
        dropped_events: AtomicU64::new(0),
        parse_errors: AtomicU64::new(0),
        setpoints_sent: AtomicU64::new(0),
        foreign_datagrams: AtomicU64::new(0),
        unsigned_refused: AtomicU64::new(0),
        gcs_to_vehicle: AtomicU64::new(0),
        vehicle_to_gcs: AtomicU64::new(0),
        gcs_forged: AtomicU64::new(0),
        gcs_dropped: AtomicU64::new(0),
        transport_errors: AtomicU64::new(0),
    });
    let gcs = match &opts.gcs {
        Some(endpoint) => Some(open_gcs(endpoint).await?),
        None => None,
    };
    let gcs_task = gcs.as_ref().map(|g| {
        tokio::spawn(receive_udp(
            Arc::clone(&g.socket),
            tx_in.clone(),
            Arc::clone(&shared),
            Rx::Gcs,
        ))
    });
    let recv_task = match &wire {
        Wire::Udp { socket, .. } => tokio::spawn(receive_udp(
            Arc::clone(socket),
            tx_in,
            Arc::clone(&shared),
            Rx::Datagram,
        )),
        Wire::Mav(conn) => tokio::spawn(receive_mav(Arc::clone(conn), tx_in, Arc::clone(&shared))),
    };
    let sm = Offboard::new(opts.config, now_since(origin));
    let driver = Driver {
        header: sm.header(),
        sm,
        wire,
        log,
        last_track: None,
        sh: Arc::clone(&shared),
        tx_ev,
        origin,
        send_log: ErrorLog {
            last: None,
            held: 0,
        },
        gcs,
        to_vehicle: std::collections::VecDeque::new(),
    };
    let task = tokio::spawn(driver.drive(
        rx_cmd,
        rx_text,
        rx_in,
        shutdown,
        [Some(recv_task), gcs_task],
    ));
    Ok((
        BridgeHandle {
            tx,
            texts,
            shared,
            origin,
        },
        rx_ev,
        task,
    ))
}

/// As [`start`], on a thread of its own with a runtime of its own: the setpoint stream's timer
/// is then never queued behind the caller's work (a saturated agent link, an admission, a
/// checkpoint); the operating system wakes it on time. The handle and the event stream work
/// from any runtime; the returned task (on the caller's runtime) ends when the bridge stops.
///
/// # Errors
/// As [`start`], or [`BridgeError::Runtime`] when the thread cannot start.
pub async fn start_on_own_thread(
    opts: BridgeOptions,
    shutdown: broadcast::Receiver<()>,
) -> Result<(BridgeHandle, mpsc::Receiver<Event>, JoinHandle<()>), BridgeError> {
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("px4-bridge".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(BridgeError::Runtime(e)));
                    return;
                }
            };
            rt.block_on(async move {
                match start(opts, shutdown).await {
                    Ok((handle, events, task)) => {
                        let _ = ready_tx.send(Ok((handle, events)));
                        let _ = task.await;
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            });
        })
        .map_err(BridgeError::Runtime)?;
    let (handle, events) = ready_rx.await.map_err(|_| {
        BridgeError::Runtime(std::io::Error::other(
            "the bridge's thread ended before it started",
        ))
    })??;
    let task = tokio::task::spawn_blocking(move || {
        let _ = thread.join();
    });
    Ok((handle, events, task))
}

/// The ground station's socket: `udpout:` sends from an ephemeral port to the address named,
/// `udpin:` binds the address and answers the last sender.
async fn open_gcs(endpoint: &crate::gcs::GcsEndpoint) -> Result<GcsLink, BridgeError> {
    let (bind, peer): (SocketAddr, Option<SocketAddr>) = match endpoint {
        crate::gcs::GcsEndpoint::To(a) if a.is_ipv4() => (([0, 0, 0, 0], 0).into(), Some(*a)),
        crate::gcs::GcsEndpoint::To(a) => ((std::net::Ipv6Addr::UNSPECIFIED, 0).into(), Some(*a)),
        crate::gcs::GcsEndpoint::Listen(a) => (*a, None),
    };
    let socket = UdpSocket::bind(bind)
        .await
        .map_err(|source| BridgeError::Connect {
            url: format!("the ground station's relay ({bind})"),
            source,
        })?;
    Ok(GcsLink {
        socket: Arc::new(socket),
        peer,
        fixed: peer.is_some(),
    })
}

fn now_since(origin: Instant) -> Mono {
    Mono(u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

/// Opens the transport the URL names: UDP locked to one autopilot (`udpin` locks onto the first
/// heard, `udpout` onto its address), or the `mavlink` crate's point-to-point connections.
async fn open_wire(url: &TransportUrl, opts: &BridgeOptions) -> Result<Wire, BridgeError> {
    let connect_err = |source| BridgeError::Connect {
        url: opts.url.clone(),
        source,
    };
    Ok(match url {
        TransportUrl::UdpIn(a) => Wire::Udp {
            socket: Arc::new(UdpSocket::bind(a).await.map_err(connect_err)?),
            lock: UdpLock::new(None, opts.config.autopilot_system)
                .with_signing(opts.signing.as_ref()),
        },
        TransportUrl::UdpOut(a) => {
            let local: SocketAddr = if a.is_ipv4() {
                ([0, 0, 0, 0], 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            Wire::Udp {
                socket: Arc::new(UdpSocket::bind(local).await.map_err(connect_err)?),
                lock: UdpLock::new(Some(*a), opts.config.autopilot_system)
                    .with_signing(opts.signing.as_ref()),
            }
        }
        _ => {
            let mut conn = mavlink::connect_async::<MavMessage>(&url.to_mavlink())
                .await
                .map_err(connect_err)?;
            // The crate's connection signs and verifies with the same configuration; what it
            // refuses it drops without a count.
            if let Some(k) = &opts.signing {
                conn.setup_signing(Some(k.config()));
            }
            Wire::Mav(Arc::new(conn))
        }
    })
}

/// Receives datagrams for the driver; transport errors are counted and backed off.
async fn receive_udp(
    socket: Arc<UdpSocket>,
    tx_in: mpsc::Sender<Rx>,
    recv_shared: Arc<Shared>,
    wrap: fn(SocketAddr, Vec<u8>) -> Rx,
) {
    // Larger than any datagram of MAVLink frames (a frame is at most 280 bytes).
    let mut buf = vec![0u8; 8192];
    let mut in_a_row = 0u32;
    let mut log = ErrorLog {
        last: None,
        held: 0,
    };
    loop {
        match socket.recv_from(&mut buf).await {
            Ok((n, from)) => {
                in_a_row = 0;
                let bytes = buf.get(..n).unwrap_or_default().to_vec();
                if tx_in.send(wrap(from, bytes)).await.is_err() {
                    break;
                }
            }
            Err(e) => {
                // ICMP "port unreachable" from an earlier send, a full buffer:
                // counted and backed off, never a busy loop.
                recv_shared.transport_errors.fetch_add(1, Ordering::Relaxed);
                log.note("receive", &e);
                in_a_row = in_a_row.saturating_add(1);
                tokio::time::sleep(backoff(in_a_row)).await;
            }
        }
    }
}

/// Receives messages from a point-to-point connection for the driver; transport errors are
/// counted and backed off; the end of the stream closes it.
async fn receive_mav(
    recv_conn: Arc<
        mavlink::AsyncDialectConnection<mavlink::static_dialect::StaticDialect<MavMessage>>,
    >,
    tx_in: mpsc::Sender<Rx>,
    recv_shared: Arc<Shared>,
) {
    let mut in_a_row = 0u32;
    let mut log = ErrorLog {
        last: None,
        held: 0,
    };
    loop {
        let item = match recv_conn.try_recv().await {
            Ok((h, m)) => {
                in_a_row = 0;
                Rx::Msg(h, Box::new(m))
            }
            Err(mavlink::error::MessageReadError::Io(e))
                if e.kind() == std::io::ErrorKind::UnexpectedEof =>
            {
                Rx::Closed
            }
            Err(mavlink::error::MessageReadError::Io(e)) => {
                recv_shared.transport_errors.fetch_add(1, Ordering::Relaxed);
                log.note("receive", &e);
                in_a_row = in_a_row.saturating_add(1);
                tokio::time::sleep(backoff(in_a_row)).await;
                continue;
            }
            Err(_) => Rx::ParseError,
        };
        let closed = matches!(item, Rx::Closed);
        if tx_in.send(item).await.is_err() || closed {
            break;
        }
    }
}

/// The bridge's task: one loop that feeds the state machine and carries out what it says.
struct Driver {
    sm: Offboard,
    header: MavHeader,
    wire: Wire,
    log: Option<halo_linelog::LineLog>,
    /// When the setpoint log last took a position of the vehicle (its track, at most one line
    /// per [`TRACK_EVERY_NS`]).
    last_track: Option<Mono>,
    sh: Arc<Shared>,
    tx_ev: mpsc::Sender<Event>,
    origin: Instant,
    send_log: ErrorLog,
    gcs: Option<GcsLink>,
    /// Frames from the ground station waiting for the vehicle link (at most
    /// [`GCS_QUEUE`]; sent with the next transmit).
    to_vehicle: std::collections::VecDeque<MAVLinkMessageRaw>,
}

/// The vehicle's track in the setpoint log: one local position per 200 ms at most (5 Hz; PX4
/// sends 50), enough to draw where it flew beside what it was told.
const TRACK_EVERY_NS: u64 = 200_000_000;

/// Frames from the ground station held for the vehicle at most; more are dropped and counted.
const GCS_QUEUE: usize = 256;

/// The ground station's side of the relay.
struct GcsLink {
    socket: Arc<UdpSocket>,
    /// Where to send: fixed (`udpout:`), or the last sender (`udpin:`).
    peer: Option<SocketAddr>,
    fixed: bool,
}

impl GcsLink {
    /// Passes bytes to the ground station without waiting: a relay never holds the bridge up
    /// (a full socket buffer drops the datagram, counted).
    fn pass(&self, bytes: &[u8], sh: &Shared) {
        let Some(p) = self.peer else { return };
        match self.socket.try_send_to(bytes, p) {
            Ok(_) => sh.vehicle_to_gcs.fetch_add(1, Ordering::Relaxed),
            Err(_) => sh.gcs_dropped.fetch_add(1, Ordering::Relaxed),
        };
    }
}

impl Driver {
    fn now(&self) -> Mono {
        now_since(self.origin)
    }

    /// Until `shutdown`: the state machine's timer, the gateway's inputs, what the vehicle
    /// sent; after each, what the machine wants sent, then its state and events published.
    async fn drive(
        mut self,
        mut rx_cmd: mpsc::Receiver<Input>,
        mut rx_text: mpsc::Receiver<(u8, String)>,
        mut rx_in: mpsc::Receiver<Rx>,
        mut shutdown: broadcast::Receiver<()>,
        recv_tasks: [Option<JoinHandle<()>>; 2],
    ) {
        loop {
            let deadline = self.sm.poll_timeout();
            let wait =
                std::time::Duration::from_nanos(deadline.since(self.now()).min(1_000_000_000));
            tokio::select! {
                biased;
                _ = shutdown.recv() => break,
                () = tokio::time::sleep(wait) => self.sm.handle_timeout(self.now()),
                Some(inp) = rx_cmd.recv() => self.input(inp),
                Some((severity, text)) = rx_text.recv() => {
                    // Refused only when the link went down meanwhile: nobody to tell.
                    if let Err(e) = self.sm.status_text(severity, &text) {
                        tracing::debug!(error = %e, "status text not sent");
                    }
                }
                Some(item) = rx_in.recv() => {
                    if !self.receive(item) {
                        break;
                    }
                }
            }
            self.transmit().await;
            self.publish();
        }
        for t in recv_tasks.into_iter().flatten() {
            t.abort();
        }
    }

    /// One input from the gateway.
    fn input(&mut self, inp: Input) {
        let t = self.now();
        match inp {
            Input::Enqueue {
                sp,
                binding,
                valid_until,
            } => {
                if let Err(reason) = self.sm.try_enqueue(t, sp, binding, valid_until)
                    && self
                        .tx_ev
                        .try_send(Event::EnqueueDropped { binding, reason })
                        .is_err()
                {
                    self.sh.dropped_events.fetch_add(1, Ordering::Relaxed);
                }
            }
            Input::Hold => self.sm.hold(t),
            Input::Command(c) => {
                self.sm.command(t, c);
            }
            Input::Permit => self.sm.permit_offboard(),
        }
        self.sm.handle_timeout(t);
    }

    /// One item from the receiver; false when the transport closed.
    fn receive(&mut self, item: Rx) -> bool {
        match item {
            Rx::Msg(h, m) => {
                if let Some(g) = &self.gcs {
                    let mut out = Vec::with_capacity(64);
                    if mavlink::write_v2_msg(&mut out, h, m.as_ref()).is_ok() {
                        g.pass(&out, &self.sh);
                    }
                }
                self.sm.handle_message(self.now(), &h, &m);
            }
            Rx::Gcs(from, bytes) => self.relay_from_gcs(from, &bytes),
            Rx::Datagram(from, bytes) => {
                if let Wire::Udp { lock, .. } = &mut self.wire {
                    let before = lock.peer();
                    match lock.receive(from, &bytes) {
                        Received::Frames(frames, errors, refused) => {
                            if let Some(g) = &self.gcs
                                && lock.peer() == Some(from)
                            {
                                g.pass(&bytes, &self.sh);
                            }
                            if refused > 0 {
                                let before = self
                                    .sh
                                    .unsigned_refused
                                    .fetch_add(u64::from(refused), Ordering::Relaxed);
                                if before == 0 {
                                    tracing::warn!(%from, "refusing MAVLink frames that are not validly signed (unsigned, another key, or replayed): check vehicle.signing_key_file against the flight controller's key; counted, logged once");
                                }
                            }
                            if before.is_none()
                                && let Some(p) = lock.peer()
                            {
                                tracing::info!(vehicle = %p, "vehicle link locked onto the first autopilot heard; datagrams from any other address are ignored");
                            }
                            let t = self.now();
                            for (h, m) in &frames {
                                self.sm.handle_message(t, h, m);
                            }
                            for _ in 0..errors {
                                self.sm.note_parse_error();
                                self.sh.parse_errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Received::Foreign { from, first } => {
                            self.sh
                                .foreign_datagrams
                                .store(lock.foreign_datagrams(), Ordering::Relaxed);
                            if first {
                                tracing::warn!(%from, vehicle = ?lock.peer().map(|p| p.to_string()), "ignoring MAVLink from an address other than the vehicle's (another gateway or simulator on this host, or a spoofer); logged once per address");
                            }
                        }
                    }
                }
            }
            Rx::ParseError => {
                self.sm.note_parse_error();
                self.sh.parse_errors.fetch_add(1, Ordering::Relaxed);
            }
            Rx::Closed => {
                tracing::warn!("transport closed");
                return false;
            }
        }
        true
    }

    /// A datagram from the ground station: its frames queued for the vehicle, except those
    /// that claim the gateway's own id.
    fn relay_from_gcs(&mut self, from: SocketAddr, bytes: &[u8]) {
        let Some(g) = &mut self.gcs else { return };
        if !g.fixed {
            g.peer = Some(from);
        } else if g.peer != Some(from) {
            // `udpout:`: only the ground station named is relayed.
            self.sh.gcs_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let own = (
            u8::try_from(self.header.system_id).unwrap_or(0),
            self.header.component_id,
        );
        let (frames, forged) = crate::gcs::from_gcs(bytes, own);
        if forged > 0 {
            let before = self
                .sh
                .gcs_forged
                .fetch_add(u64::from(forged), Ordering::Relaxed);
            if before == 0 {
                tracing::warn!(%from, "dropping frames from the ground station that claim the gateway's own system and component id; counted, logged once");
            }
        }
        for f in frames {
            if self.to_vehicle.len() >= GCS_QUEUE {
                self.sh.gcs_dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.to_vehicle.push_back(f);
        }
    }

    /// Sends what the state machine has for the vehicle, telling it how each send went, then
    /// what the ground station sent for it.
    async fn transmit(&mut self) {
        while let Some(raw) = self.to_vehicle.pop_front() {
            let sent = match &self.wire {
                Wire::Udp { socket, lock } => match lock.peer() {
                    None => Ok(()),
                    Some(p) => socket
                        .send_to(crate::gcs::raw_bytes(&raw), p)
                        .await
                        .map(|_| ()),
                },
                Wire::Mav(conn) => conn.send_raw(&raw).await.map(|_| ()).map_err(|e| match e {
                    mavlink::error::MessageWriteError::Io(io) => io,
                    other => std::io::Error::other(other.to_string()),
                }),
            };
            match sent {
                Ok(()) => self.sh.gcs_to_vehicle.fetch_add(1, Ordering::Relaxed),
                Err(_) => self.sh.gcs_dropped.fetch_add(1, Ordering::Relaxed),
            };
        }
        let header = self.header;
        while let Some(m) = self.sm.poll_transmit() {
            let sent = match &mut self.wire {
                Wire::Udp { socket, lock } => match lock.peer() {
                    // Before the vehicle is heard (udpin) there is nobody to send to.
                    None => Ok(()),
                    Some(p) => {
                        let b = lock.encode(header, &m);
                        socket.send_to(&b, p).await.map(|_| ())
                    }
                },
                Wire::Mav(conn) => conn
                    .send(&header, &m)
                    .await
                    .map(|_| ())
                    .map_err(|e| match e {
                        mavlink::error::MessageWriteError::Io(io) => io,
                        other => std::io::Error::other(other.to_string()),
                    }),
            };
            // Persistent send failures bring the link down (the state machine counts them);
            // nothing is retried in a loop: the stream's next tick is the next attempt.
            self.sm.handle_send_result(self.now(), sent.is_ok());
            // The gateway's own words for the pilot go to the relayed ground station too (PX4
            // forwards them only to its own ground-station links).
            if let (Some(g), MavMessage::STATUSTEXT(_)) = (&self.gcs, &m) {
                let mut out = Vec::with_capacity(64);
                if mavlink::write_v2_msg(&mut out, header, &m).is_ok() {
                    g.pass(&out, &self.sh);
                }
            }
            if let Err(e) = sent {
                self.sh.transport_errors.fetch_add(1, Ordering::Relaxed);
                self.send_log.note("send", &e);
            }
        }
    }

    /// The state the handle reads, then the events that announce it, and the setpoint log.
    fn publish(&mut self) {
        // Publish the state before the events that announce it, so a gateway that reacts to
        // `Link { up: true }` already sees `link_up()`.
        self.sh.link_up.store(self.sm.link_up(), Ordering::Release);
        self.sh
            .capable
            .store(self.sm.offboard_capable(), Ordering::Release);
        self.sh
            .permitted
            .store(self.sm.permitted(), Ordering::Release);
        self.sh
            .setpoints_sent
            .store(self.sm.stats().setpoints_sent, Ordering::Relaxed);
        while let Some(ev) = self.sm.poll_event() {
            if let Event::TargetStarted {
                binding,
                fingerprint,
                valid_until,
            } = &ev
            {
                tracing::info!(binding = %hex(binding), %fingerprint, valid_until = %valid_until, "setpoint enqueued");
                if let (Some(w), Some((sp, _, _))) = (self.log.as_ref(), self.sm.active_target()) {
                    let line = serde_json::json!({
                        "t_ns": self.now().0, "binding": hex(binding), "fingerprint": fingerprint.to_string(),
                        "north_m": sp.north_m, "east_m": sp.east_m, "down_m": sp.down_m, "yaw_deg": sp.yaw_deg,
                        "valid_until_ns": valid_until.0,
                    });
                    w.write(line.to_string());
                }
            }
            if let Event::Telemetry(u) = &ev {
                self.log_track(u);
            }
            if self.tx_ev.try_send(ev).is_err() {
                self.sh.dropped_events.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A local position into the setpoint log as the vehicle's track (`{"t_ns", "position":
    /// {"north_m", "east_m", "down_m"}}`, on the log's clock), at most one per
    /// [`TRACK_EVERY_NS`]. A reader of targets tells the lines apart by `binding`.
    fn log_track(&mut self, u: &TelemetryUpdate) {
        let (
            Some(w),
            Telemetry::LocalPosition {
                north_m,
                east_m,
                down_m,
                ..
            },
        ) = (self.log.as_ref(), &u.data)
        else {
            return;
        };
        let at = u.received_at;
        if self
            .last_track
            .is_some_and(|t| at.since(t) < TRACK_EVERY_NS)
        {
            return;
        }
        self.last_track = Some(at);
        let line = serde_json::json!({
            "t_ns": at.0,
            "position": {"north_m": north_m, "east_m": east_m, "down_m": down_m},
        });
        w.write(line.to_string());
    }
}
