//! The event hub behind `GET /v1/events` and the stdio event lines.
//!
//! Every event gets the next id of this start; on the wire an id is `BOOT.N` (`4.17`: the 17th
//! event of the start with boot epoch 4), so an id never means two events across restarts.
//! The hub keeps the newest events in one shared backlog (at most [`BACKLOG`] events and
//! [`BACKLOG_BYTES`] of data). A [`Reader`] is a cursor into it, not a copy: any number of
//! readers cost a few words each, however far behind they are. A client that reconnects with
//! `Last-Event-ID` receives everything it missed as long as it is still held; when more was
//! missed it receives one `gap` event naming the ids that are gone, and after a restart one
//! `reset` event, never a silent hole.
//!
//! # Safety behaviour
//!
//! One request can never disable the hub for everyone: no arithmetic under the lock can
//! overflow (everything saturates), a malformed or impossible `Last-Event-ID` is refused before
//! the lock is taken ([`Hub::resume`]), and a poisoned lock (a panic elsewhere while holding it)
//! is recovered rather than propagated: the hub's state is valid after every statement.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

/// Events kept for resumption.
pub const BACKLOG: usize = 4096;

/// Bytes of event data kept for resumption.
pub const BACKLOG_BYTES: usize = 16 * 1024 * 1024;

/// One published event.
#[derive(Clone, Debug, PartialEq)]
pub struct HubEvent {
    /// Sequential id within this start, from 1.
    pub(crate) id: u64,
    /// Event name (`phase`, `emit`, `obligation_created`, `gate`, `vehicle_mode`, ...).
    pub(crate) name: &'static str,
    /// The JSON data.
    pub(crate) data: Arc<str>,
    /// The one agent principal it is about (its response's sender), or everyone.
    pub(crate) audience: Option<Arc<str>>,
}

impl HubEvent {
    /// Its id within this start, from 1.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Its name (`phase`, `emit`, `gate`, ...).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Its JSON data.
    pub fn data(&self) -> &str {
        &self.data
    }

    /// Whether an agent principal named `agent` may see it (the operator sees everything).
    pub fn visible_to(&self, agent: &str) -> bool {
        self.audience.as_deref().is_none_or(|a| a == agent)
    }
}

struct State {
    next: u64,
    backlog: VecDeque<HubEvent>,
    bytes: usize,
}

struct Inner {
    boot: u64,
    state: Mutex<State>,
    /// The newest id published, for readers to wait on.
    wake: watch::Sender<u64>,
}

/// The hub. Cheap to clone.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

impl Default for Hub {
    fn default() -> Hub {
        Hub::new(0)
    }
}

/// Where a reader starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resume {
    /// Everything still held.
    Start,
    /// After this start's event with this id.
    After(u64),
    /// The client's last id is from an earlier start (this boot epoch): a `reset`, then
    /// everything still held of this start.
    EarlierStart(u64),
}

/// Why a `Last-Event-ID` was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdError(String);

impl std::fmt::Display for IdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a reader gets next.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// An event.
    Event(HubEvent),
    /// Events `from..=to` of this start are no longer held.
    Gap {
        /// First missed id.
        from: u64,
        /// Last missed id.
        to: u64,
    },
    /// The client's last id was from an earlier start; what follows is this start's.
    Reset {
        /// The boot epoch the client's id was from.
        previous_boot: u64,
    },
}

/// A cursor into the hub's backlog.
pub struct Reader {
    hub: Hub,
    last: u64,
    reset: Option<u64>,
    wake: watch::Receiver<u64>,
}

impl Reader {
    /// The next item, without waiting.
    pub fn try_next(&mut self) -> Option<Item> {
        if let Some(previous_boot) = self.reset.take() {
            return Some(Item::Reset { previous_boot });
        }
        let item = self.hub.after(self.last)?;
        self.last = match &item {
            Item::Event(e) => e.id,
            Item::Gap { to, .. } => *to,
            Item::Reset { .. } => self.last,
        };
        Some(item)
    }

    /// The next item, waiting for one to be published.
    pub async fn next(&mut self) -> Item {
        loop {
            // Mark what is published now as seen before reading, so a publish between the
            // read and the wait still wakes this reader.
            self.wake.borrow_and_update();
            if let Some(i) = self.try_next() {
                return i;
            }
            if self.wake.changed().await.is_err() {
                // The hub is gone with its last handle; this reader holds one, so it is not.
                std::future::pending::<()>().await;
            }
        }
    }

    /// The id of the last event (or gap end) this reader passed.
    pub fn last(&self) -> u64 {
        self.last
    }
}

impl Hub {
    /// An empty hub for the start with this boot epoch.
    pub fn new(boot: u64) -> Hub {
        let (wake, _) = watch::channel(0);
        Hub {
            inner: Arc::new(Inner {
                boot,
                state: Mutex::new(State {
                    next: 1,
                    backlog: VecDeque::with_capacity(256),
                    bytes: 0,
                }),
                wake,
            }),
        }
    }

    /// The lock, recovered if a panic elsewhere poisoned it (see the module docs).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// This start's boot epoch.
    pub fn boot(&self) -> u64 {
        self.inner.boot
    }

    /// The wire form of an id: `BOOT.N`.
    pub fn wire_id(&self, id: u64) -> String {
        format!("{}.{id}", self.inner.boot)
    }

    /// Publishes one event for everyone. Never blocks on readers.
    pub fn publish(&self, name: &'static str, data: String) -> u64 {
        self.publish_to(name, data, None)
    }

    /// Publishes one event that only `audience` (an agent principal) and the operator see,
    /// or everyone when `None`. Never blocks on readers.
    pub fn publish_to(&self, name: &'static str, data: String, audience: Option<Arc<str>>) -> u64 {
        let data: Arc<str> = Arc::from(data);
        let id = {
            let mut g = self.lock();
            let id = g.next;
            g.next = g.next.saturating_add(1);
            g.bytes = g.bytes.saturating_add(data.len());
            g.backlog.push_back(HubEvent {
                id,
                name,
                data,
                audience,
            });
            while g.backlog.len() > BACKLOG || (g.bytes > BACKLOG_BYTES && g.backlog.len() > 1) {
                if let Some(old) = g.backlog.pop_front() {
                    g.bytes = g.bytes.saturating_sub(old.data.len());
                }
            }
            id
        };
        self.inner.wake.send_replace(id);
        id
    }

    /// The item after `last`: the next held event, a gap when `last + 1` is no longer held, or
    /// `None` when nothing newer was published.
    fn after(&self, last: u64) -> Option<Item> {
        let g = self.lock();
        let oldest = g.backlog.front().map_or(g.next, |e| e.id);
        let want = last.saturating_add(1);
        if want < oldest {
            return Some(Item::Gap {
                from: want,
                to: oldest.saturating_sub(1),
            });
        }
        let ix = usize::try_from(want - oldest).ok()?;
        g.backlog.get(ix).cloned().map(Item::Event)
    }

    /// Reads a `Last-Event-ID` header (absent: [`Resume::Start`]). Checked before the hub's
    /// lock is taken, with no arithmetic that can overflow.
    ///
    /// # Errors
    /// [`IdError`] for anything but `BOOT.N` of this or an earlier start, or an id this start
    /// has not reached.
    pub fn resume(&self, header: Option<&str>) -> Result<Resume, IdError> {
        let Some(raw) = header.map(str::trim) else {
            return Ok(Resume::Start);
        };
        let bad = || {
            IdError(format!(
                "`Last-Event-ID: {}` is not an event id of this gateway (they look like `{}.17`: \
                 boot epoch, then the event's number)",
                raw.chars().take(64).collect::<String>(),
                self.inner.boot
            ))
        };
        let (b, n) = raw.split_once('.').ok_or_else(bad)?;
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|c| c.is_ascii_digit());
        if !digits(b) || !digits(n) {
            return Err(bad());
        }
        let boot: u64 = b.parse().map_err(|_| bad())?;
        let id: u64 = n.parse().map_err(|_| bad())?;
        let me = self.inner.boot;
        if boot < me {
            return Ok(Resume::EarlierStart(boot));
        }
        if boot > me {
            return Err(IdError(format!(
                "`Last-Event-ID: {raw}` is from boot epoch {boot}, but this gateway is at {me}"
            )));
        }
        let newest = self.next_id().saturating_sub(1);
        if id > newest {
            return Err(IdError(format!(
                "`Last-Event-ID: {raw}` is ahead of this gateway's newest event ({me}.{newest})"
            )));
        }
        Ok(if id == 0 {
            Resume::Start
        } else {
            Resume::After(id)
        })
    }

    /// A reader starting at `from`. One that asked for nothing in particular starts at the
    /// oldest event held, without a gap.
    pub fn reader(&self, from: Resume) -> Reader {
        let before_oldest = || {
            let g = self.lock();
            g.backlog.front().map_or(g.next, |e| e.id).saturating_sub(1)
        };
        let (last, reset) = match from {
            Resume::Start => (before_oldest(), None),
            Resume::After(n) => (n, None),
            Resume::EarlierStart(b) => (before_oldest(), Some(b)),
        };
        Reader {
            hub: self.clone(),
            last,
            reset,
            wake: self.inner.wake.subscribe(),
        }
    }

    /// The id the next event will get.
    pub fn next_id(&self) -> u64 {
        self.lock().next
    }

    /// Events and bytes held now.
    pub fn held(&self) -> (usize, usize) {
        let g = self.lock();
        (g.backlog.len(), g.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(r: &mut Reader) -> Vec<Item> {
        std::iter::from_fn(|| r.try_next()).collect()
    }

    fn ids(items: &[Item]) -> Vec<u64> {
        items
            .iter()
            .filter_map(|i| match i {
                Item::Event(e) => Some(e.id),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn resume_replays_what_was_missed_and_reports_gaps() {
        let h = Hub::new(4);
        for i in 0..10 {
            h.publish("x", format!("{i}"));
        }
        let mut r = h.reader(h.resume(Some("4.7")).unwrap());
        assert_eq!(ids(&drain(&mut r)), [8, 9, 10]);
        for i in 0..BACKLOG {
            h.publish("x", format!("{i}"));
        }
        let mut r = h.reader(h.resume(Some("4.3")).unwrap());
        let items = drain(&mut r);
        assert_eq!(items[0], Item::Gap { from: 4, to: 10 });
        assert_eq!(items.len(), BACKLOG + 1);
        assert_eq!(ids(&items)[0], 11);
        let mut r = h.reader(h.resume(None).unwrap());
        assert!(
            matches!(r.try_next(), Some(Item::Event(_))),
            "a fresh client asked for nothing in particular: no gap"
        );
    }

    #[test]
    fn ids_are_scoped_by_boot_and_bad_ones_are_refused_without_harm() {
        let h = Hub::new(4);
        for i in 0..5 {
            h.publish("x", format!("{i}"));
        }
        assert_eq!(h.wire_id(3), "4.3");
        // An id of an earlier start: a reset, then everything held of this one.
        let mut r = h.reader(h.resume(Some("3.900")).unwrap());
        let items = drain(&mut r);
        assert_eq!(items[0], Item::Reset { previous_boot: 3 });
        assert_eq!(ids(&items), [1, 2, 3, 4, 5]);
        for bad in [
            "18446744073709551615",
            "4.18446744073709551615",
            "18446744073709551615.1",
            "99999999999999999999999.1",
            "4.6",
            "5.1",
            "4.",
            ".4",
            "4.-1",
            "four",
            "",
            "4.1.1",
        ] {
            assert!(h.resume(Some(bad)).is_err(), "{bad}");
        }
        // The hub is unharmed: publishing and reading still work.
        let id = h.publish("y", "6".into());
        assert_eq!(id, 6);
        let mut r = h.reader(h.resume(Some("4.5")).unwrap());
        assert_eq!(ids(&drain(&mut r)), [6]);
    }

    #[test]
    fn a_poisoned_lock_is_recovered() {
        let h = Hub::new(1);
        h.publish("x", "1".into());
        let h2 = h.clone();
        let t = std::thread::spawn(move || {
            let _g = h2.inner.state.lock().unwrap();
            panic!("a panic while holding the hub's lock");
        });
        assert!(t.join().is_err());
        assert!(h.inner.state.is_poisoned());
        assert_eq!(h.publish("x", "2".into()), 2);
        let mut r = h.reader(Resume::Start);
        assert_eq!(ids(&drain(&mut r)), [1, 2]);
    }

    #[test]
    fn the_backlog_is_bounded_by_bytes_too() {
        let h = Hub::new(1);
        let big = "x".repeat(BACKLOG_BYTES / 4 + 1);
        for _ in 0..8 {
            h.publish("x", big.clone());
        }
        let (n, bytes) = h.held();
        assert!(bytes <= BACKLOG_BYTES, "{bytes}");
        assert_eq!(n, 3);
    }

    #[tokio::test]
    async fn readers_wait_for_the_next_event() {
        let h = Hub::new(2);
        h.publish("x", "1".into());
        let mut r = h.reader(Resume::Start);
        assert!(matches!(r.next().await, Item::Event(e) if e.id == 1));
        let h2 = h.clone();
        let t = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            h2.publish("y", "2".into());
        });
        assert!(matches!(r.next().await, Item::Event(e) if e.id == 2 && e.name == "y"));
        t.await.unwrap();
    }
}
