//! The bridge on bitcraze's real `crazyflie-lib`, against the simulated Crazyflie through
//! `crazyflie-link`'s `ConnectionTrait`: connect, telemetry, streaming, the firmware's stop
//! order, link loss and reconnect, the TOC cache, a missing radio.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs,
    reason = "tests"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use crazyflie_bridge::shell::{
    BridgeEvent, BridgeOptions, CfHandle, ConnectError, LinkFuture, LinkOpener, UriOpener, connect,
    start,
};
use crazyflie_bridge::{Event, Mono, Setpoint, Telemetry};
use crazyflie_link::Connection;
use sitl::sim::crazyflie::{CfEvent, CfSimConfig, SetpointSource, SimCrazyflie};
use tokio::sync::mpsc;

struct SimOpener(SimCrazyflie);

impl LinkOpener for SimOpener {
    fn open(&self) -> LinkFuture {
        let v = self.0.clone();
        Box::pin(async move { Ok(Connection::new(Box::new(v.link().await))) })
    }
    fn describe(&self) -> String {
        "sim".into()
    }
}

fn options(v: &SimCrazyflie) -> BridgeOptions {
    let mut o = BridgeOptions::new(Arc::new(SimOpener(v.clone())), std::time::Instant::now());
    o.connect_timeout_ms = 3000;
    o.reconnect_min_ms = 200;
    o.reconnect_max_ms = 400;
    o
}

async fn wait_for(
    rx: &mut mpsc::Receiver<BridgeEvent>,
    ms: u64,
    mut f: impl FnMut(&BridgeEvent) -> bool,
) -> Vec<BridgeEvent> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(e)) => {
                let hit = f(&e);
                seen.push(e);
                if hit {
                    return seen;
                }
            }
            _ => panic!(
                "not seen within {ms} ms; last events: {:?}",
                &seen[seen.len().saturating_sub(5)..]
            ),
        }
    }
}

/// Connects, arms, takes off to 0.5 m and waits until the supervisor says flying.
async fn airborne(v: &SimCrazyflie) -> (CfHandle, mpsc::Receiver<BridgeEvent>) {
    let (h, mut rx) = start(options(v)).await.expect("connect");
    wait_for(&mut rx, 2000, |e| {
        matches!(e, BridgeEvent::Telemetry(u) if matches!(u.data, Telemetry::Supervisor { .. }))
    })
    .await;
    h.arm(true).unwrap();
    wait_for(&mut rx, 2000, |e| {
        matches!(e, BridgeEvent::Pacer(Event::Armed { armed: true }))
    })
    .await;
    h.takeoff(0.5).unwrap();
    wait_for(&mut rx, 4000, |e| {
        matches!(e, BridgeEvent::Pacer(Event::Flying { flying: true }))
    })
    .await;
    (h, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_the_slot_until_the_margin_then_stops_in_the_firmware_order() {
    let v = SimCrazyflie::start(CfSimConfig::default(), None).unwrap();
    let (h, mut rx) = airborne(&v).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let sp = Setpoint {
        x_m: 0.6,
        y_m: -0.2,
        z_m: 0.7,
        yaw_deg: 30.0,
    };
    let binding = [9u8; 32];
    let valid_until = h.now().add_ms(1000);
    let t0 = Instant::now();
    h.try_enqueue(sp, binding, valid_until).unwrap();
    wait_for(&mut rx, 3000, |e| {
        matches!(e, BridgeEvent::Pacer(Event::Holding { .. }))
    })
    .await;
    let held_after = t0.elapsed();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let fp = sp.fingerprint().to_string();
    let (positions, after, events) = v.with(|s| {
        let pos: Vec<_> = s
            .setpoints
            .iter()
            .filter(|r| r.source == SetpointSource::Position)
            .cloned()
            .collect();
        let last_pos_t = pos.last().map(|r| r.t_ms).unwrap();
        let after: Vec<_> = s
            .setpoints
            .iter()
            .filter(|r| r.t_ms >= last_pos_t && r.source != SetpointSource::Position)
            .cloned()
            .collect();
        (pos, after, s.events.clone())
    });
    // Every streamed packet is the exact setpoint, at about 20 Hz, for about 900 ms.
    assert!(
        positions.iter().all(|r| r.fingerprint == fp),
        "{positions:?}"
    );
    assert!(
        (16..=20).contains(&positions.len()),
        "{} packets",
        positions.len()
    );
    let span = positions.last().unwrap().t_ms - positions[0].t_ms;
    assert!((780..=900).contains(&span), "streamed for {span} ms");
    assert!(held_after < Duration::from_millis(1000), "{held_after:?}");
    // Then the planner took a go_to (the hold), which it could only do after notify-stop.
    assert!(
        after.iter().any(|r| r.source == SetpointSource::HlGoTo),
        "{after:?}"
    );
    assert!(
        !events.iter().any(|e| matches!(
            e,
            CfEvent::HlIgnored { .. } | CfEvent::Levelled { .. } | CfEvent::Locked { .. }
        )),
        "{events:?}"
    );
    // The estop watchdog kept the vehicle alive through all of it.
    assert!(!v.with(|s| s.sim.locked()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_loss_drops_the_slot_and_a_reconnect_never_resumes_it() {
    let v = SimCrazyflie::start(CfSimConfig::default(), None).unwrap();
    let (h, mut rx) = airborne(&v).await;
    let binding = [3u8; 32];
    let sp = Setpoint {
        x_m: 0.3,
        y_m: 0.0,
        z_m: 0.6,
        yaw_deg: 0.0,
    };
    h.try_enqueue(sp, binding, h.now().add_ms(20_000)).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    v.with(|s| s.outage = true);
    let t_out = Instant::now();
    let seen = wait_for(&mut rx, 3000, |e| {
        matches!(e, BridgeEvent::Pacer(Event::Link { up: false, .. }))
    })
    .await;
    let down_after = t_out.elapsed();
    assert!(
        seen.iter().any(|e| matches!(
            e,
            BridgeEvent::Pacer(Event::TargetDropped { binding: b, .. }) if *b == binding
        )),
        "{seen:?}"
    );
    assert!(down_after < Duration::from_millis(900), "{down_after:?}");
    assert_eq!(
        h.try_enqueue(sp, binding, h.now().add_ms(5000))
            .unwrap_err()
            .to_string(),
        "the radio link is down"
    );
    // The firmware's watchdog locks the vehicle meanwhile, as on a real Crazyflie.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(v.with(|s| s.sim.locked()));
    v.reboot();
    v.with(|s| s.outage = false);
    let seen = wait_for(
        &mut rx,
        6000,
        |e| matches!(e, BridgeEvent::Connected { attempt, .. } if *attempt > 1),
    )
    .await;
    assert!(
        seen.iter()
            .any(|e| matches!(e, BridgeEvent::ConnectFailed { .. })),
        "reconnects while the outage lasted fail and back off"
    );
    let n_before = v.with(|s| s.setpoints.len());
    tokio::time::sleep(Duration::from_millis(800)).await;
    let resumed = v.with(|s| {
        s.setpoints[n_before..]
            .iter()
            .filter(|r| r.source == SetpointSource::Position)
            .count()
    });
    assert_eq!(resumed, 0, "the old setpoint never resumes");
    assert!(h.link_up());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_toc_cache_skips_the_table_fetch_on_the_second_connect() {
    let dir = std::env::temp_dir().join(format!("cf-toc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let v = SimCrazyflie::start(CfSimConfig::default(), None).unwrap();
    v.with(|s| s.sim.record_received = true);
    let opener: Arc<dyn LinkOpener> = Arc::new(SimOpener(v.clone()));
    let toc_items = |v: &SimCrazyflie| {
        v.with(|s| {
            s.sim
                .received
                .iter()
                .filter(|p| {
                    (p[0] >> 4 == 5 || p[0] >> 4 == 2) && p[0] & 3 == 0 && p.get(1) == Some(&2)
                })
                .count()
        })
    };
    let cf = connect(&opener, Some(&dir), 3000).await.unwrap();
    cf.disconnect().await;
    let first = toc_items(&v);
    assert!(first >= 12, "the first connect fetched {first} items");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        2,
        "log and param tables cached"
    );
    let cf = connect(&opener, Some(&dir), 3000).await.unwrap();
    assert!(cf.log.names().contains(&"range.zrange".to_owned()));
    cf.disconnect().await;
    assert_eq!(
        toc_items(&v),
        first,
        "no table item fetched the second time"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_vehicle_times_out_and_a_missing_radio_is_an_error_not_a_crash() {
    let v = SimCrazyflie::start(CfSimConfig::default(), None).unwrap();
    v.with(|s| s.outage = true);
    let opener: Arc<dyn LinkOpener> = Arc::new(SimOpener(v.clone()));
    let t0 = Instant::now();
    let e = connect(&opener, None, 700).await.err().unwrap();
    assert_eq!(e, ConnectError::Timeout { after_ms: 700 });
    assert!(t0.elapsed() < Duration::from_millis(1500));

    // This machine has no Crazyradio: the real library is asked and the answer is a typed
    // error (a panic inside it would be contained the same way).
    let opener: Arc<dyn LinkOpener> =
        Arc::new(UriOpener::new("radio://0/80/2M/E7E7E7E7E7").unwrap());
    let e = connect(&opener, None, 5000).await.err().unwrap();
    // (With a dongle but no Crazyflie in range it is a timeout instead: still an error.)
    assert!(matches!(e.code(), "no_radio" | "link" | "timeout"), "{e:?}");
    eprintln!("no radio here: {e}");
    let text = e.to_string();
    assert!(text.contains("radio") || text.contains("Crazyflie"), "{e}");
    let e = UriOpener::new("radio://0/200/2M").err().unwrap();
    assert_eq!(e.code(), "bad_uri");
}

#[test]
fn instants_are_on_the_shared_clock() {
    assert_eq!(Mono::from_ms(5).add_ms(5), Mono::from_ms(10));
}
