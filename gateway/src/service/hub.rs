//! The event hub behind `GET /v1/events` and the stdio event lines.
//!
//! Every event gets the next id. The hub keeps the newest [`BACKLOG`] events, so a client that
//! reconnects with `Last-Event-ID` receives everything it missed without loss as long as it was
//! away for less than the backlog; when more was missed it receives one `gap` event naming the
//! ids that are gone, never a silent hole.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

/// Events kept for resumption.
pub const BACKLOG: usize = 4096;

/// One published event.
#[derive(Clone, Debug, PartialEq)]
pub struct HubEvent {
    /// Sequential id, from 1.
    pub id: u64,
    /// Event name (`phase`, `emit`, `obligation_created`, `gate`, `vehicle_mode`, ...).
    pub name: &'static str,
    /// The JSON data.
    pub data: Arc<str>,
}

struct Inner {
    next: u64,
    backlog: VecDeque<HubEvent>,
}

/// The hub. Cheap to clone.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Mutex<Inner>>,
    tx: broadcast::Sender<HubEvent>,
}

impl Default for Hub {
    fn default() -> Hub {
        Hub::new()
    }
}

/// What a subscriber receives first.
pub struct Subscription {
    /// Missed ids that are no longer held: `(first, last)`.
    pub gap: Option<(u64, u64)>,
    /// Held events after the client's last id, oldest first.
    pub replay: Vec<HubEvent>,
    /// Live events; skip ids at or below the last replayed one.
    pub live: broadcast::Receiver<HubEvent>,
}

impl Hub {
    /// An empty hub.
    pub fn new() -> Hub {
        let (tx, _) = broadcast::channel(BACKLOG);
        Hub {
            inner: Arc::new(Mutex::new(Inner {
                next: 1,
                backlog: VecDeque::with_capacity(BACKLOG),
            })),
            tx,
        }
    }

    /// Publishes one event. Never blocks on subscribers.
    pub fn publish(&self, name: &'static str, data: String) -> u64 {
        let Ok(mut g) = self.inner.lock() else {
            return 0;
        };
        let ev = HubEvent {
            id: g.next,
            name,
            data: Arc::from(data),
        };
        g.next += 1;
        if g.backlog.len() == BACKLOG {
            g.backlog.pop_front();
        }
        g.backlog.push_back(ev.clone());
        // Sent under the lock so a subscriber sees the backlog and the live stream in order.
        let _ = self.tx.send(ev.clone());
        ev.id
    }

    /// Subscribes after `last_id` (0 for everything still held).
    pub fn subscribe(&self, last_id: u64) -> Subscription {
        let Ok(g) = self.inner.lock() else {
            return Subscription {
                gap: None,
                replay: Vec::new(),
                live: self.tx.subscribe(),
            };
        };
        let live = self.tx.subscribe();
        let oldest = g.backlog.front().map_or(g.next, |e| e.id);
        let gap = (last_id > 0 && last_id + 1 < oldest).then(|| (last_id + 1, oldest - 1));
        let replay = g
            .backlog
            .iter()
            .filter(|e| e.id > last_id)
            .cloned()
            .collect();
        Subscription { gap, replay, live }
    }

    /// The id the next event will get.
    pub fn next_id(&self) -> u64 {
        self.inner.lock().map_or(0, |g| g.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_replays_what_was_missed_and_reports_gaps() {
        let h = Hub::new();
        for i in 0..10 {
            h.publish("x", format!("{i}"));
        }
        let s = h.subscribe(7);
        assert_eq!(s.gap, None);
        assert_eq!(
            s.replay.iter().map(|e| e.id).collect::<Vec<_>>(),
            [8, 9, 10]
        );
        for i in 0..BACKLOG {
            h.publish("x", format!("{i}"));
        }
        let s = h.subscribe(3);
        assert_eq!(s.gap, Some((4, 10)));
        assert_eq!(s.replay.len(), BACKLOG);
        assert_eq!(s.replay[0].id, 11);
        let s = h.subscribe(0);
        assert_eq!(
            s.gap, None,
            "a fresh client asked for nothing in particular"
        );
    }

    #[tokio::test]
    async fn live_events_follow_the_replay() {
        let h = Hub::new();
        h.publish("x", "1".into());
        let mut s = h.subscribe(0);
        h.publish("y", "2".into());
        assert_eq!(s.replay.len(), 1);
        let e = s.live.recv().await.unwrap();
        assert_eq!((e.id, e.name), (2, "y"));
    }
}
