//! The tokio shell: connects through `crazyflie-lib`, runs the [`Pacer`], and moves commands,
//! telemetry and events. It decides nothing the pacer does not.
//!
//! # Connecting
//!
//! The whole connect (opening the link, the protocol-version check, fetching the log and
//! parameter tables) runs in its own task under `connect_timeout_ms`: the library can wait
//! forever on a table that never arrives, and on a machine without USB it panics rather than
//! returning an error. A timeout is [`ConnectError::Timeout`]; a panic is
//! [`ConnectError::NoRadio`]. The first connect's failure is returned by [`start`]; after a link
//! loss the shell reconnects with back-off (`reconnect_min_ms` doubling to `reconnect_max_ms`)
//! and never resumes an old setpoint.
//!
//! # Telemetry
//!
//! Two log blocks (each within the firmware's 26 bytes): `stateEstimate.x/y/z/vx/vy/vz` every
//! `log_period_ms`, and `stateEstimate.yaw`, `range.zrange`, `pm.vbat`, `pm.state`,
//! `supervisor.info` every `status_period_ms`. Each sample is stamped on arrival on the shared
//! monotonic clock; its uncertainty is the newest ping round trip plus the block's period. A
//! ping every `ping_interval_ms` measures the link (latency, not the ACK ratio).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crazyflie_lib::subsystems::log::{LogPeriod, LogStream};
use crazyflie_lib::{Crazyflie, NoTocCache, Value};
use crazyflie_link::Connection;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::pacer::{Config, EnqueueError, Event, HoldReason, Out, Pacer};
use crate::setpoint::Setpoint;
use crate::telemetry::{PowerState, Telemetry, TelemetryUpdate, z_range_m};
use crate::time::Mono;
use crate::toc_cache::DirTocCache;

/// A link being opened.
pub type LinkFuture = Pin<Box<dyn Future<Output = Result<Connection, ConnectError>> + Send>>;

/// Opens links to the Crazyflie: the radio by URI, or a simulated vehicle in tests and the demo.
pub trait LinkOpener: Send + Sync + 'static {
    /// Opens a new link.
    fn open(&self) -> LinkFuture;
    /// What it connects to, for people (`radio://0/80/2M/E7E7E7E7E7`).
    fn describe(&self) -> String;
}

/// A Crazyradio or USB link by URI, through `crazyflie-link`'s `LinkContext`.
pub struct UriOpener {
    uri: String,
    context: Arc<crazyflie_link::LinkContext>,
}

impl UriOpener {
    /// For `uri` (checked first; see [`crate::uri`]).
    ///
    /// # Errors
    /// [`ConnectError::BadUri`].
    pub fn new(uri: &str) -> Result<UriOpener, ConnectError> {
        crate::uri::check(uri).map_err(|e| ConnectError::BadUri(e.0))?;
        Ok(UriOpener {
            uri: uri.to_owned(),
            context: Arc::new(crazyflie_link::LinkContext::new()),
        })
    }
}

impl LinkOpener for UriOpener {
    fn open(&self) -> LinkFuture {
        let uri = self.uri.clone();
        let context = self.context.clone();
        Box::pin(async move {
            context.open_link(&uri).await.map_err(|e| match e {
                crazyflie_link::Error::CrazyradioError(_) | crazyflie_link::Error::USBSubsystemError(_) => {
                    ConnectError::NoRadio(format!(
                        "no Crazyradio (or USB Crazyflie) could be opened for {uri}: {e}; is the dongle plugged in and are the udev rules for 1915:7777 installed?"
                    ))
                }
                other => ConnectError::Link(format!("{uri}: {other}")),
            })
        })
    }

    fn describe(&self) -> String {
        self.uri.clone()
    }
}

/// Why a connect failed. [`ConnectError::code`] is stable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "code", content = "message", rename_all = "snake_case")]
pub enum ConnectError {
    /// The URI is malformed.
    BadUri(String),
    /// No radio dongle (or no USB at all: the library panicked, and the panic was contained).
    NoRadio(String),
    /// The link opened but the Crazyflie did not answer, or answered wrongly.
    Link(String),
    /// The connect did not finish in time.
    Timeout {
        /// ms.
        after_ms: u64,
    },
}

impl ConnectError {
    /// A stable code: `bad_uri`, `no_radio`, `link`, `timeout`.
    pub fn code(&self) -> &'static str {
        match self {
            ConnectError::BadUri(_) => "bad_uri",
            ConnectError::NoRadio(_) => "no_radio",
            ConnectError::Link(_) => "link",
            ConnectError::Timeout { .. } => "timeout",
        }
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::BadUri(m) => write!(f, "bad Crazyflie URI: {m}"),
            ConnectError::NoRadio(m) => write!(f, "no radio: {m}"),
            ConnectError::Link(m) => write!(f, "the Crazyflie did not connect: {m}"),
            ConnectError::Timeout { after_ms } => write!(
                f,
                "the Crazyflie did not connect within {after_ms} ms (is it on, on this channel and address?)"
            ),
        }
    }
}

impl std::error::Error for ConnectError {}

/// Shell options.
pub struct BridgeOptions {
    /// How to reach the vehicle.
    pub link: Arc<dyn LinkOpener>,
    /// The pacer's parameters.
    pub config: Config,
    /// Limit on one whole connect, ms.
    pub connect_timeout_ms: u64,
    /// Persistent TOC cache directory (`None`: fetch the tables at every connect).
    pub toc_cache_dir: Option<PathBuf>,
    /// Position/velocity block period, ms (10–2550).
    pub log_period_ms: u64,
    /// Status block period, ms (10–2550).
    pub status_period_ms: u64,
    /// Ping interval, ms.
    pub ping_interval_ms: u64,
    /// A ping unanswered this long counts as no answer, ms.
    pub ping_timeout_ms: u64,
    /// First reconnect delay, ms.
    pub reconnect_min_ms: u64,
    /// Longest reconnect delay, ms.
    pub reconnect_max_ms: u64,
    /// Append every setpoint the bridge takes to this JSON-lines file.
    pub setpoint_log: Option<PathBuf>,
    /// The shared clock's origin (the gateway's), so instants carry over unchanged.
    pub origin: Instant,
}

impl BridgeOptions {
    /// Defaults around `link`, on the clock that counts from `origin` (the gateway's: no
    /// default, as a clock of the bridge's own would shift every stamp it reports).
    pub fn new(link: Arc<dyn LinkOpener>, origin: Instant) -> BridgeOptions {
        BridgeOptions {
            link,
            config: Config::default(),
            connect_timeout_ms: 15_000,
            toc_cache_dir: None,
            log_period_ms: 50,
            status_period_ms: 100,
            ping_interval_ms: 500,
            ping_timeout_ms: 300,
            reconnect_min_ms: 500,
            reconnect_max_ms: 8_000,
            setpoint_log: None,
            origin,
        }
    }
}

/// What the shell reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BridgeEvent {
    /// A pacer event.
    Pacer(Event),
    /// A telemetry sample.
    Telemetry(TelemetryUpdate),
    /// Connected (again).
    Connected {
        /// Attempt number (1 for the first).
        attempt: u32,
        /// How long the connect took, ms.
        took_ms: u64,
    },
    /// A reconnect attempt failed; the next one follows after `retry_in_ms`.
    ConnectFailed {
        /// Attempt number.
        attempt: u32,
        /// Why.
        error: ConnectError,
        /// ms.
        retry_in_ms: u64,
    },
    /// The library closed the link.
    Disconnected {
        /// The library's reason.
        reason: String,
    },
    /// A command the handle accepted was refused by the pacer (the state changed meanwhile).
    Refused {
        /// What.
        what: &'static str,
        /// Why.
        reason: EnqueueError,
    },
}

/// One input checked and given its place in the bridge's bounded queue, not yet sent.
///
/// [`Reserved::release`] hands it to the bridge and cannot fail; dropping it frees the place
/// and the bridge never sees it.
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
    /// landing it.
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
        write!(f, "Reserved(target: {})", self.is_target())
    }
}

#[derive(Debug)]
enum Input {
    Enqueue {
        sp: Setpoint,
        binding: [u8; 32],
        valid_until: Mono,
    },
    Hold,
    Land,
    Takeoff {
        height_m: f32,
    },
    Arm {
        arm: bool,
    },
}

#[derive(Debug, Default)]
struct Shared {
    link_up: AtomicBool,
    armed: AtomicBool,
    locked: AtomicBool,
    flying: AtomicBool,
    dropped_events: AtomicU64,
    setpoints_sent: AtomicU64,
}

/// The gateway's side: every call returns at once.
#[derive(Clone, Debug)]
pub struct CfHandle {
    tx: mpsc::Sender<Input>,
    shared: Arc<Shared>,
    origin: Instant,
}

impl CfHandle {
    /// Now on the shared monotonic clock.
    pub fn now(&self) -> Mono {
        Mono(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn check(&self) -> Result<(), EnqueueError> {
        if !self.shared.link_up.load(Ordering::Acquire) {
            return Err(EnqueueError::LinkDown);
        }
        if self.shared.locked.load(Ordering::Acquire) {
            return Err(EnqueueError::Locked);
        }
        Ok(())
    }

    fn send(&self, i: Input) -> Result<(), EnqueueError> {
        self.tx.try_send(i).map_err(|_| EnqueueError::QueueFull)
    }

    fn reserve(&self, input: Input) -> Result<Reserved, EnqueueError> {
        let permit = self
            .tx
            .clone()
            .try_reserve_owned()
            .map_err(|_| EnqueueError::QueueFull)?;
        Ok(Reserved { permit, input })
    }

    /// Puts one exact setpoint in the slot, streamed until shortly before `valid_until`. The
    /// same as [`CfHandle::reserve_enqueue`] released at once.
    ///
    /// # Errors
    /// As [`CfHandle::reserve_enqueue`].
    pub fn try_enqueue(
        &self,
        sp: Setpoint,
        binding: [u8; 32],
        valid_until: Mono,
    ) -> Result<(), EnqueueError> {
        self.reserve_enqueue(sp, binding, valid_until)
            .map(Reserved::release)
    }

    /// Checks one exact setpoint and reserves its place in the bounded queue without sending
    /// it: [`Reserved::release`] sends it (it cannot fail then); dropping the reservation frees
    /// the place and the bridge never sees it. Returns at once.
    ///
    /// # Errors
    /// [`EnqueueError`] when the link is down, the vehicle not armed or locked, the setpoint out
    /// of range, or the queue full. Nothing is queued then.
    pub fn reserve_enqueue(
        &self,
        sp: Setpoint,
        binding: [u8; 32],
        valid_until: Mono,
    ) -> Result<Reserved, EnqueueError> {
        self.check()?;
        if !self.shared.armed.load(Ordering::Acquire) {
            return Err(EnqueueError::NotArmed);
        }
        if !sp.is_valid() {
            return Err(EnqueueError::InvalidSetpoint);
        }
        if valid_until <= self.now() {
            return Err(EnqueueError::Expired);
        }
        self.reserve(Input::Enqueue {
            sp,
            binding,
            valid_until,
        })
    }

    /// Stop streaming and hold position.
    ///
    /// # Errors
    /// Link down, locked, queue full.
    pub fn hold(&self) -> Result<(), EnqueueError> {
        self.reserve_hold().map(Reserved::release)
    }

    /// Reserves a hold (see [`CfHandle::reserve_enqueue`]).
    ///
    /// # Errors
    /// Link down, locked, queue full.
    pub fn reserve_hold(&self) -> Result<Reserved, EnqueueError> {
        self.check()?;
        self.reserve(Input::Hold)
    }

    /// Stop streaming and land.
    ///
    /// # Errors
    /// Link down, locked, queue full.
    pub fn land(&self) -> Result<(), EnqueueError> {
        self.reserve_land().map(Reserved::release)
    }

    /// Reserves a landing (see [`CfHandle::reserve_enqueue`]).
    ///
    /// # Errors
    /// Link down, locked, queue full.
    pub fn reserve_land(&self) -> Result<Reserved, EnqueueError> {
        self.check()?;
        self.reserve(Input::Land)
    }

    /// High-level takeoff.
    ///
    /// # Errors
    /// Link down, locked, not armed, queue full.
    pub fn takeoff(&self, height_m: f32) -> Result<(), EnqueueError> {
        self.check()?;
        if !self.shared.armed.load(Ordering::Acquire) {
            return Err(EnqueueError::NotArmed);
        }
        self.send(Input::Takeoff { height_m })
    }

    /// Arm or disarm.
    ///
    /// # Errors
    /// Link down, locked (arming), queue full.
    pub fn arm(&self, arm: bool) -> Result<(), EnqueueError> {
        if !self.shared.link_up.load(Ordering::Acquire) {
            return Err(EnqueueError::LinkDown);
        }
        if arm && self.shared.locked.load(Ordering::Acquire) {
            return Err(EnqueueError::Locked);
        }
        self.send(Input::Arm { arm })
    }

    /// The link is up.
    pub fn link_up(&self) -> bool {
        self.shared.link_up.load(Ordering::Acquire)
    }

    /// The supervisor reports the vehicle armed.
    pub fn armed(&self) -> bool {
        self.shared.armed.load(Ordering::Acquire)
    }

    /// The supervisor reports the vehicle flying.
    pub fn flying(&self) -> bool {
        self.shared.flying.load(Ordering::Acquire)
    }

    /// Position setpoints sent so far.
    pub fn setpoints_sent(&self) -> u64 {
        self.shared.setpoints_sent.load(Ordering::Acquire)
    }

    /// Events dropped because the gateway's queue was full.
    pub fn dropped_events(&self) -> u64 {
        self.shared.dropped_events.load(Ordering::Acquire)
    }
}

fn now_on(origin: Instant) -> Mono {
    Mono(u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

/// The first panic message from inside bitcraze's radio stack (rusb, crazyradio, crazyflie-link,
/// crazyflie-lib) since the last connect attempt.
static LIBRARY_PANIC: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Installs (once) a panic hook that keeps panics raised inside the radio libraries off stderr
/// (they become the typed connect error, logged at debug level) and passes every other panic
/// to the previous hook unchanged.
fn contain_library_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let from_library = info.location().is_some_and(|l| {
                let f = l.file();
                ["/rusb-", "/crazyradio-", "/crazyflie-link-", "/crazyflie-lib-"]
                    .iter()
                    .any(|c| f.contains(c))
            });
            if !from_library {
                previous(info);
                return;
            }
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| info.payload().downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "a panic".into());
            tracing::debug!(location = %info.location().map(ToString::to_string).unwrap_or_default(), "radio library panicked: {msg}");
            if let Ok(mut g) = LIBRARY_PANIC.lock() {
                g.get_or_insert(msg);
            }
        }));
    });
}

/// Connects once, under the timeout, in its own task (a panic in the library becomes
/// [`ConnectError::NoRadio`]).
///
/// # Errors
/// [`ConnectError`].
pub async fn connect(
    link: &Arc<dyn LinkOpener>,
    toc_cache_dir: Option<&PathBuf>,
    timeout_ms: u64,
) -> Result<Crazyflie, ConnectError> {
    contain_library_panics();
    if let Ok(mut g) = LIBRARY_PANIC.lock() {
        *g = None;
    }
    let opener = link.clone();
    let cache = toc_cache_dir.cloned().map(DirTocCache::new);
    let task = tokio::spawn(async move {
        let conn = opener.open().await?;
        let cf = match cache {
            Some(c) => Crazyflie::connect_from_link(conn, c).await,
            None => Crazyflie::connect_from_link(conn, NoTocCache).await,
        };
        cf.map_err(|e| ConnectError::Link(e.to_string()))
    });
    let abort = task.abort_handle();
    match tokio::time::timeout(Duration::from_millis(timeout_ms), task).await {
        Err(_) => {
            abort.abort();
            Err(ConnectError::Timeout {
                after_ms: timeout_ms,
            })
        }
        Ok(Err(join)) if join.is_panic() => {
            let payload = join.into_panic();
            // The first panic is the cause (rusb cannot open USB); later ones are its echoes.
            let msg = LIBRARY_PANIC
                .lock()
                .ok()
                .and_then(|mut g| g.take())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "the radio library panicked".into());
            Err(ConnectError::NoRadio(format!(
                "the radio library failed while opening {}: {msg} (is there a USB bus and a Crazyradio?)",
                link.describe()
            )))
        }
        Ok(Err(_)) => Err(ConnectError::Link("the connect task was cancelled".into())),
        Ok(Ok(r)) => r,
    }
}

/// Starts the bridge: the first connect (its failure is returned), then the run task.
///
/// # Errors
/// [`ConnectError`] from the first connect, or a bad option.
pub async fn start(
    opts: BridgeOptions,
) -> Result<(CfHandle, mpsc::Receiver<BridgeEvent>), ConnectError> {
    opts.config
        .validate()
        .map_err(|e| ConnectError::Link(e.0))?;
    for (name, v) in [
        ("log_period_ms", opts.log_period_ms),
        ("status_period_ms", opts.status_period_ms),
    ] {
        if !(10..=2550).contains(&v) {
            return Err(ConnectError::Link(format!(
                "{name} must be 10–2550 ms (a log block's period); got {v}"
            )));
        }
    }
    let t0 = Instant::now();
    let cf = connect(
        &opts.link,
        opts.toc_cache_dir.as_ref(),
        opts.connect_timeout_ms,
    )
    .await?;
    let took_ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
    tracing::info!(link = %opts.link.describe(), took_ms, "Crazyflie connected");
    let (tx, rx) = mpsc::channel(64);
    let (etx, erx) = mpsc::channel(1024);
    let shared = Arc::new(Shared::default());
    let handle = CfHandle {
        tx,
        shared: shared.clone(),
        origin: opts.origin,
    };
    let _ = etx.try_send(BridgeEvent::Connected {
        attempt: 1,
        took_ms,
    });
    tokio::spawn(run(opts, cf, rx, etx, shared));
    Ok((handle, erx))
}

struct Runner {
    opts: BridgeOptions,
    pacer: Pacer,
    events: mpsc::Sender<BridgeEvent>,
    shared: Arc<Shared>,
    /// Written by its own thread: the streaming task never waits on the disk.
    setpoint_log: Option<halo_linelog::LineLog>,
    /// When the setpoint log last took the estimate's position (the vehicle's track, at most
    /// one line per [`TRACK_EVERY_NS`]).
    last_track: Option<Mono>,
    last_rtt_ns: u64,
}

/// The vehicle's track in the setpoint log: one estimated position per 200 ms at most (5 Hz),
/// enough to draw where it flew beside what it was told.
const TRACK_EVERY_NS: u64 = 200_000_000;

impl Runner {
    fn now(&self) -> Mono {
        now_on(self.opts.origin)
    }

    fn emit(&self, e: BridgeEvent) {
        if self.events.try_send(e).is_err() {
            self.shared.dropped_events.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn sync_shared(&self) {
        let p = &self.pacer;
        self.shared.link_up.store(p.link_up(), Ordering::Release);
        self.shared.armed.store(p.armed(), Ordering::Release);
        self.shared.locked.store(p.locked(), Ordering::Release);
        self.shared.flying.store(p.flying(), Ordering::Release);
        self.shared
            .setpoints_sent
            .store(p.stats().setpoints_sent, Ordering::Release);
    }

    fn log_setpoint(&mut self, now: Mono, sp: &Setpoint, binding: &[u8; 32], valid_until: Mono) {
        let Some(f) = self.setpoint_log.as_ref() else {
            return;
        };
        let mut b = String::with_capacity(64);
        for x in binding {
            b.push_str(&format!("{x:02x}"));
        }
        let line = serde_json::json!({
            "t_ns": now.0, "binding": b, "x_m": sp.x_m, "y_m": sp.y_m, "z_m": sp.z_m,
            "yaw_deg": sp.yaw_deg, "fingerprint": sp.fingerprint().to_string(),
            "valid_until_ns": valid_until.0,
        });
        f.write(line.to_string());
    }

    fn apply(&mut self, i: Input) {
        let now = self.now();
        let (what, r) = match i {
            Input::Enqueue {
                sp,
                binding,
                valid_until,
            } => {
                let r = self.pacer.try_enqueue(now, sp, binding, valid_until);
                if r.is_ok() {
                    self.log_setpoint(now, &sp, &binding, valid_until);
                } else if let Err(reason) = r {
                    self.emit(BridgeEvent::Pacer(Event::TargetDropped { binding, reason }));
                }
                ("setpoint", r)
            }
            Input::Hold => ("hold", self.pacer.hold(now, HoldReason::Requested)),
            Input::Land => ("land", self.pacer.land(now)),
            Input::Takeoff { height_m } => ("takeoff", self.pacer.takeoff(now, height_m)),
            Input::Arm { arm } => ("arm", self.pacer.arm(now, arm)),
        };
        if let Err(reason) = r {
            tracing::warn!(what, reason = %reason, "refused by the bridge");
            self.emit(BridgeEvent::Refused { what, reason });
        }
    }

    /// Sends the pacer's commands in order. They go into the library's uplink queue, which the
    /// pacer never lets grow: at most one position setpoint per stream period.
    async fn flush(&mut self, cf: &Crazyflie) -> Result<(), crazyflie_lib::Error> {
        while let Some(o) = self.pacer.poll_transmit() {
            send(cf, o).await?;
        }
        // The handle's view first, so whoever reads an event sees the state it announces.
        self.sync_shared();
        while let Some(e) = self.pacer.poll_event() {
            self.emit(BridgeEvent::Pacer(e));
        }
        Ok(())
    }

    /// The estimate's position into the setpoint log as the vehicle's track (`{"t_ns",
    /// "position": {"x_m", "y_m", "z_m"}}`, on the log's clock), at most one per
    /// [`TRACK_EVERY_NS`]. A reader of targets tells the lines apart by `binding`.
    fn log_track(&mut self, at: Mono, t: &Telemetry) {
        let (Some(f), Telemetry::State { position_m, .. }) = (self.setpoint_log.as_ref(), t) else {
            return;
        };
        if self
            .last_track
            .is_some_and(|last| at.since(last) < TRACK_EVERY_NS)
        {
            return;
        }
        self.last_track = Some(at);
        let [x, y, z] = *position_m;
        let line = serde_json::json!({
            "t_ns": at.0, "position": {"x_m": x, "y_m": y, "z_m": z},
        });
        f.write(line.to_string());
    }

    fn on_sample(&mut self, at: Mono, period_ms: u64, t: Telemetry) {
        self.pacer.on_telemetry(at, &t);
        self.log_track(at, &t);
        self.emit(BridgeEvent::Telemetry(TelemetryUpdate {
            generated_at: at,
            uncertainty_ns: self.last_rtt_ns + period_ms * 1_000_000,
            data: t,
        }));
    }
}

/// Sends one pacer command through `crazyflie-lib`: position setpoints and notify-stop on the
/// generic commander, takeoff/land/go_to on the high-level commander (absolute, smooth, all
/// groups; land and takeoff keep the current yaw), arming and the emergency-stop watchdog on
/// the supervisor.
///
/// # Errors
/// The library's (the link closed).
pub async fn send(cf: &Crazyflie, o: Out) -> Result<(), crazyflie_lib::Error> {
    match o {
        Out::Position(s) => {
            cf.commander
                .setpoint_position(s.x_m, s.y_m, s.z_m, s.yaw_deg)
                .await
        }
        Out::NotifyStop { remain_valid_ms } => {
            cf.commander.notify_setpoint_stop(remain_valid_ms).await
        }
        Out::GoTo {
            x_m,
            y_m,
            z_m,
            yaw_rad,
            duration_s,
        } => {
            cf.high_level_commander
                .go_to(x_m, y_m, z_m, yaw_rad, duration_s, false, false, None)
                .await
        }
        Out::Land {
            height_m,
            duration_s,
        } => {
            cf.high_level_commander
                .land(height_m, None, duration_s, None)
                .await
        }
        Out::Takeoff {
            height_m,
            duration_s,
        } => {
            cf.high_level_commander
                .take_off(height_m, None, duration_s, None)
                .await
        }
        Out::Arm { arm } => cf.supervisor.send_arming_request(arm).await,
        Out::EstopWatchdog => cf.supervisor.send_emergency_stop_watchdog().await,
    }
}

fn f32_of(v: Option<&Value>) -> Option<f32> {
    match v? {
        Value::F32(x) => Some(*x),
        _ => None,
    }
}

#[derive(Debug)]
enum Sample {
    State(Mono, [f32; 3], [f32; 3]),
    Status(
        Mono,
        Option<f32>,
        Option<u16>,
        Option<f32>,
        Option<i8>,
        Option<u16>,
    ),
    Ping(Mono, Option<f64>),
    Stats(Mono, Option<f32>, Option<f32>, Option<f32>),
}

async fn start_block(
    cf: &Crazyflie,
    vars: &[&str],
    period_ms: u64,
) -> Result<LogStream, crazyflie_lib::Error> {
    let mut b = cf.log.create_block().await?;
    for v in vars {
        b.add_variable(v).await?;
    }
    b.start(LogPeriod::from_millis(period_ms)?).await
}

async fn read_state(stream: LogStream, origin: Instant, tx: mpsc::Sender<Sample>) {
    while let Ok(d) = stream.next().await {
        let at = now_on(origin);
        let g = |k: &str| f32_of(d.data.get(k)).unwrap_or(f32::NAN);
        let s = Sample::State(
            at,
            [
                g("stateEstimate.x"),
                g("stateEstimate.y"),
                g("stateEstimate.z"),
            ],
            [
                g("stateEstimate.vx"),
                g("stateEstimate.vy"),
                g("stateEstimate.vz"),
            ],
        );
        if tx.send(s).await.is_err() {
            return;
        }
    }
}

async fn read_status(stream: LogStream, origin: Instant, tx: mpsc::Sender<Sample>) {
    while let Ok(d) = stream.next().await {
        let at = now_on(origin);
        let u16_of = |k: &str| match d.data.get(k) {
            Some(Value::U16(x)) => Some(*x),
            _ => None,
        };
        let pm_state = match d.data.get("pm.state") {
            Some(Value::I8(x)) => Some(*x),
            _ => None,
        };
        let s = Sample::Status(
            at,
            f32_of(d.data.get("stateEstimate.yaw")),
            u16_of("range.zrange"),
            f32_of(d.data.get("pm.vbat")),
            pm_state,
            u16_of("supervisor.info"),
        );
        if tx.send(s).await.is_err() {
            return;
        }
    }
}

async fn ping_loop(cf: Arc<Crazyflie>, opts: (Instant, u64, u64), tx: mpsc::Sender<Sample>) {
    let (origin, interval_ms, timeout_ms) = opts;
    let mut tick = tokio::time::interval(Duration::from_millis(interval_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let r =
            tokio::time::timeout(Duration::from_millis(timeout_ms), cf.link_service.ping()).await;
        let latency = match r {
            Ok(Ok(ms)) => Some(ms),
            _ => None,
        };
        if tx
            .send(Sample::Ping(now_on(origin), latency))
            .await
            .is_err()
        {
            return;
        }
        let s = cf.link_service.get_statistics().await;
        let stats = Sample::Stats(now_on(origin), s.avg_retries, s.rssi, s.uplink_rate);
        if tx.send(stats).await.is_err() {
            return;
        }
    }
}

const STATE_VARS: [&str; 6] = [
    "stateEstimate.x",
    "stateEstimate.y",
    "stateEstimate.z",
    "stateEstimate.vx",
    "stateEstimate.vy",
    "stateEstimate.vz",
];
const STATUS_VARS: [&str; 5] = [
    "stateEstimate.yaw",
    "range.zrange",
    "pm.vbat",
    "pm.state",
    "supervisor.info",
];

/// One connection's life: returns the reason it ended.
async fn serve(
    r: &mut Runner,
    cf: Arc<Crazyflie>,
    inputs: &mut mpsc::Receiver<Input>,
) -> Result<String, String> {
    let state = start_block(&cf, &STATE_VARS, r.opts.log_period_ms)
        .await
        .map_err(|e| format!("log block (position): {e}"))?;
    let status = start_block(&cf, &STATUS_VARS, r.opts.status_period_ms)
        .await
        .map_err(|e| format!("log block (status): {e}"))?;
    let (stx, mut srx) = mpsc::channel(256);
    let origin = r.opts.origin;
    let readers = [
        tokio::spawn(read_state(state, origin, stx.clone())),
        tokio::spawn(read_status(status, origin, stx.clone())),
        tokio::spawn(ping_loop(
            cf.clone(),
            (origin, r.opts.ping_interval_ms, r.opts.ping_timeout_ms),
            stx,
        )),
    ];
    let now = r.now();
    r.pacer.link_opened(now);
    let result = loop {
        if let Err(e) = r.flush(&cf).await {
            break Err(format!("sending: {e}"));
        }
        if !r.pacer.link_up() {
            break Ok("no telemetry within the link timeout".to_owned());
        }
        let deadline = r.pacer.poll_timeout();
        let sleep_for = Duration::from_nanos(deadline.0.saturating_sub(r.now().0));
        tokio::select! {
            i = inputs.recv() => match i {
                Some(i) => r.apply(i),
                None => break Ok("the gateway closed the bridge".to_owned()),
            },
            s = srx.recv() => match s {
                Some(Sample::State(at, p, v)) => r.on_sample(at, r.opts.log_period_ms, Telemetry::State { position_m: p, velocity_mps: v }),
                Some(Sample::Status(at, yaw, zr, vbat, pm, bits)) => {
                    let period = r.opts.status_period_ms;
                    if let Some(y) = yaw { r.on_sample(at, period, Telemetry::Yaw { yaw_deg: y }); }
                    if let Some(mm) = zr { r.on_sample(at, period, Telemetry::Range { z_range_m: z_range_m(mm) }); }
                    if let (Some(v), Some(s)) = (vbat, pm) {
                        r.on_sample(at, period, Telemetry::Power { vbat_v: v, state: PowerState::from_raw(s) });
                    }
                    if let Some(b) = bits { r.on_sample(at, period, Telemetry::Supervisor { bits: b }); }
                }
                Some(Sample::Ping(at, Some(ms))) => {
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "a round trip in ms")]
                    { r.last_rtt_ns = (ms * 1e6) as u64; }
                    r.on_sample(at, 0, Telemetry::Ping { latency_ms: ms });
                }
                Some(Sample::Ping(_, None)) => tracing::debug!("ping unanswered"),
                Some(Sample::Stats(at, avg_retries, rssi_dbm, uplink_rate)) => {
                    // Statistics come from the dongle, not the vehicle: they do not count as
                    // hearing from it.
                    r.emit(BridgeEvent::Telemetry(TelemetryUpdate {
                        generated_at: at,
                        uncertainty_ns: 0,
                        data: Telemetry::LinkStats { avg_retries, rssi_dbm, uplink_rate },
                    }));
                }
                None => break Ok("telemetry readers ended".to_owned()),
            },
            reason = cf.wait_disconnect() => break Ok(reason),
            () = tokio::time::sleep(sleep_for) => {
                let now = r.now();
                r.pacer.handle_timeout(now);
            }
        }
    };
    for t in readers {
        t.abort();
    }
    let now = r.now();
    r.pacer.link_closed(now);
    r.sync_shared();
    while let Some(e) = r.pacer.poll_event() {
        r.emit(BridgeEvent::Pacer(e));
    }
    result
}

async fn run(
    opts: BridgeOptions,
    first: Crazyflie,
    mut inputs: mpsc::Receiver<Input>,
    events: mpsc::Sender<BridgeEvent>,
    shared: Arc<Shared>,
) {
    let setpoint_log = opts.setpoint_log.as_ref().and_then(|p| {
        halo_linelog::LineLog::open(p)
            .map_err(|e| tracing::warn!(path = %p.display(), "setpoint log: {e}"))
            .ok()
    });
    let mut r = Runner {
        pacer: Pacer::new(opts.config.clone()),
        opts,
        events,
        shared,
        setpoint_log,
        last_track: None,
        last_rtt_ns: 0,
    };
    let mut cf = Some(Arc::new(first));
    let mut attempt: u32 = 1;
    loop {
        if let Some(c) = cf.take() {
            let end = serve(&mut r, c.clone(), &mut inputs).await;
            c.disconnect().await;
            let reason = match end {
                Ok(r) | Err(r) => r,
            };
            if reason == "the gateway closed the bridge" {
                return;
            }
            tracing::warn!(reason = %reason, "Crazyflie link lost; reconnecting");
            r.emit(BridgeEvent::Disconnected { reason });
        }
        // Reconnect with back-off; commands meanwhile are refused (link down).
        let mut delay = r.opts.reconnect_min_ms;
        loop {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(delay)) => {}
                i = inputs.recv() => match i {
                    Some(_) => {
                        r.emit(BridgeEvent::Refused { what: "command", reason: EnqueueError::LinkDown });
                        continue;
                    }
                    None => return,
                },
            }
            attempt += 1;
            let t0 = Instant::now();
            match connect(
                &r.opts.link,
                r.opts.toc_cache_dir.as_ref(),
                r.opts.connect_timeout_ms,
            )
            .await
            {
                Ok(c) => {
                    let took_ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
                    tracing::info!(attempt, took_ms, "Crazyflie reconnected");
                    r.emit(BridgeEvent::Connected { attempt, took_ms });
                    cf = Some(Arc::new(c));
                    break;
                }
                Err(error) => {
                    delay = (delay * 2).min(r.opts.reconnect_max_ms);
                    tracing::warn!(attempt, error = %error, retry_in_ms = delay, "Crazyflie reconnect failed");
                    r.emit(BridgeEvent::ConnectFailed {
                        attempt,
                        error,
                        retry_in_ms: delay,
                    });
                }
            }
        }
    }
}
