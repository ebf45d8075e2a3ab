//! Connection limits, applied where connections are accepted as Kafka's acceptors apply them:
//! - `max.connections` (all listeners but the broker's own links together) and a listener's
//!   `listener.name.<l>.max.connections`: at the limit, the listener takes no new connection
//!   until one closes (they wait in the socket's backlog);
//! - `max.connection.creation.rate`, broker-wide and per listener: the acceptor waits the time
//!   the rate asks before taking the next connection;
//! - `max.connections.per.ip` and its overrides: a connection over its address's limit is
//!   closed at once;
//! - an address's `connection_creation_rate` quota (`kafka-configs --entity-type ips`): a
//!   connection over it is held, unserved, for the time the rate asks (at most one quota window
//!   sample), then closed.
//!
//! The counts live in [`ConnectionLimits`], shared by every listener; a [`Slot`] is one
//! connection's place in them, given back when it is dropped. The limits change on a running
//! broker (Kafka's dynamic broker configs) with [`ConnectionLimits::reconfigure`]; connections
//! already held stay, as in Kafka.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fjord_common::lock;
use fjord_config::ConnectionLimitsConfig;
use tokio::sync::Notify;

use crate::quota::rate::Rate;
use crate::quota::{sensor, throttle_ms};

/// An address's `connection_creation_rate` quota, as the metadata image has it.
pub type IpRateQuota = Box<dyn Fn(IpAddr) -> Option<f64> + Send + Sync>;

/// The connections every listener of the broker holds, and the limits on them.
pub struct ConnectionLimits {
    /// Listeners outside the broker-wide limits: the broker's own links (inter-broker,
    /// controller), which must get through whatever the clients do.
    protected: BTreeSet<String>,
    ip_rate: IpRateQuota,
    counts: Mutex<Counts>,
    /// Told when a connection closes, for an acceptor waiting for a slot.
    freed: Notify,
}

#[derive(Default)]
struct Counts {
    config: ConnectionLimitsConfig,
    per_ip: HashMap<IpAddr, usize>,
    per_listener: HashMap<String, usize>,
    /// Connections of the listeners that are not protected.
    total: usize,
    broker_rate: Option<Rate>,
    listener_rates: HashMap<String, Rate>,
    ip_rates: HashMap<IpAddr, Rate>,
}

/// What becomes of a connection just accepted.
pub enum Admission {
    /// Served; its place in the counts.
    Admitted(Slot),
    /// Closed now: its address has `max` connections already.
    TooMany { max: usize },
    /// Held unserved for this long, then closed: its address opens connections faster than
    /// its quota.
    Throttled(Duration),
}

impl ConnectionLimits {
    pub fn new(
        config: ConnectionLimitsConfig,
        protected: impl IntoIterator<Item = String>,
        ip_rate: IpRateQuota,
    ) -> Arc<Self> {
        Arc::new(ConnectionLimits {
            protected: protected.into_iter().collect(),
            ip_rate,
            counts: Mutex::new(Counts {
                config,
                ..Counts::default()
            }),
            freed: Notify::new(),
        })
    }

    /// The limits are now `config`; acceptors waiting for a slot look again.
    pub fn reconfigure(&self, config: ConnectionLimitsConfig) {
        lock(&self.counts).config = config;
        self.freed.notify_waiters();
    }

    /// Counts a connection `listener` is about to take against the broker's and the listener's
    /// creation rates; how long its acceptor must wait first.
    pub fn accept_delay(&self, listener: &str, now_ms: i64) -> Duration {
        let mut counts = lock(&self.counts);
        let counts = &mut *counts;
        let window = counts.config.window;
        let mut delay = 0;
        if let (Some(bound), false) = (
            counts.config.max_creation_rate,
            self.protected.contains(listener),
        ) {
            let rate = counts.broker_rate.get_or_insert_with(|| {
                Rate::new(window.1, window.0, crate::quota::rate::Elapsed::WholeWindow)
            });
            rate.record(1.0, now_ms);
            delay = delay.max(throttle_ms(rate, bound, now_ms));
        }
        let own = counts
            .config
            .listeners
            .get(listener)
            .and_then(|l| l.max_creation_rate);
        if let Some(bound) = own {
            let rate = sensor(
                &mut counts.listener_rates,
                listener.to_string(),
                window,
                now_ms,
            );
            rate.record(1.0, now_ms);
            delay = delay.max(throttle_ms(rate, bound, now_ms));
        }
        // The longest a throttle lasts: one sample of the window, as Kafka bounds it.
        Duration::from_millis(delay.clamp(0, window.1) as u64)
    }

    /// Whether `listener` may take one more connection under `max.connections`.
    fn slot_free(&self, listener: &str) -> bool {
        let counts = lock(&self.counts);
        let own = counts
            .config
            .listeners
            .get(listener)
            .and_then(|l| l.max_connections);
        if own.is_some_and(|max| counts.per_listener.get(listener).copied().unwrap_or(0) >= max) {
            return false;
        }
        self.protected.contains(listener)
            || counts
                .config
                .max_connections
                .is_none_or(|max| counts.total < max)
    }

    /// Returns once `listener` may take one more connection.
    pub async fn wait_for_slot(&self, listener: &str) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before the check, so a close in between is not missed.
            freed.as_mut().enable();
            if self.slot_free(listener) {
                return;
            }
            freed.await;
        }
    }

    /// Decides on a connection `listener` accepted from `ip`: its address's creation-rate
    /// quota first, then its address's count.
    pub fn admit(self: &Arc<Self>, listener: &str, ip: IpAddr, now_ms: i64) -> Admission {
        let mut counts = lock(&self.counts);
        let counts = &mut *counts;
        let window = counts.config.window;
        if let Some(bound) = (self.ip_rate)(ip) {
            let rate = sensor(&mut counts.ip_rates, ip, window, now_ms);
            rate.record(1.0, now_ms);
            let throttle = throttle_ms(rate, bound, now_ms).min(window.1);
            if throttle > 0 {
                // Not taken: it does not count against any rate.
                rate.record(-1.0, now_ms);
                if !self.protected.contains(listener) {
                    if let Some(rate) = counts.broker_rate.as_mut() {
                        rate.record(-1.0, now_ms);
                    }
                }
                if let Some(rate) = counts.listener_rates.get_mut(listener) {
                    rate.record(-1.0, now_ms);
                }
                return Admission::Throttled(Duration::from_millis(throttle as u64));
            }
        }
        let max = counts
            .config
            .per_ip_overrides
            .get(&ip)
            .copied()
            .or(counts.config.max_per_ip);
        let held = counts.per_ip.get(&ip).copied().unwrap_or(0);
        if let Some(max) = max.filter(|max| held >= *max) {
            return Admission::TooMany { max };
        }
        *counts.per_ip.entry(ip).or_default() += 1;
        *counts.per_listener.entry(listener.to_string()).or_default() += 1;
        if !self.protected.contains(listener) {
            counts.total += 1;
        }
        Admission::Admitted(Slot {
            limits: self.clone(),
            listener: listener.to_string(),
            ip,
        })
    }

    fn release(&self, listener: &str, ip: IpAddr) {
        let mut counts = lock(&self.counts);
        if let Some(n) = counts.per_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                counts.per_ip.remove(&ip);
            }
        }
        if let Some(n) = counts.per_listener.get_mut(listener) {
            *n = n.saturating_sub(1);
        }
        if !self.protected.contains(listener) {
            counts.total = counts.total.saturating_sub(1);
        }
        drop(counts);
        self.freed.notify_waiters();
    }
}

/// One connection's place in the counts, given back when dropped.
pub struct Slot {
    limits: Arc<ConnectionLimits>,
    listener: String,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.limits.release(&self.listener, self.ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_config::ListenerLimits;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn limits(config: ConnectionLimitsConfig, ip_rate: IpRateQuota) -> Arc<ConnectionLimits> {
        let config = ConnectionLimitsConfig {
            window: (11, 1000),
            ..config
        };
        ConnectionLimits::new(config, ["BROKER".to_string()], ip_rate)
    }

    fn admitted(admission: Admission) -> Slot {
        match admission {
            Admission::Admitted(slot) => slot,
            _ => panic!("refused"),
        }
    }

    #[test]
    fn an_address_over_its_count_is_refused_until_one_of_its_connections_closes() {
        let config = ConnectionLimitsConfig {
            max_per_ip: Some(2),
            per_ip_overrides: [(ip("127.0.0.3"), 0)].into(),
            ..Default::default()
        };
        let limits = limits(config, Box::new(|_| None));
        let a = ip("127.0.0.2");
        let first = admitted(limits.admit("CLIENTS", a, 0));
        let _second = admitted(limits.admit("BROKER", a, 0));
        assert!(matches!(
            limits.admit("CLIENTS", a, 0),
            Admission::TooMany { max: 2 }
        ));
        assert!(matches!(
            limits.admit("CLIENTS", ip("127.0.0.3"), 0),
            Admission::TooMany { max: 0 }
        ));
        drop(first);
        let _third = admitted(limits.admit("CLIENTS", a, 0));
    }

    #[tokio::test]
    async fn limits_changed_on_a_running_broker_hold_new_connections_and_free_waiting_ones() {
        let limits = limits(
            ConnectionLimitsConfig {
                max_connections: Some(1),
                ..Default::default()
            },
            Box::new(|_| None),
        );
        let a = ip("127.0.0.2");
        let _held = admitted(limits.admit("CLIENTS", a, 0));
        let waiting = {
            let limits = limits.clone();
            tokio::spawn(async move { limits.wait_for_slot("CLIENTS").await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        // Raised: the waiting acceptor goes on. An override of 1 for the address: its next
        // connection is refused, though the one it holds stays.
        limits.reconfigure(ConnectionLimitsConfig {
            max_connections: Some(10),
            per_ip_overrides: [(a, 1)].into(),
            window: (11, 1000),
            ..Default::default()
        });
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(
            limits.admit("CLIENTS", a, 0),
            Admission::TooMany { max: 1 }
        ));
        let _other = admitted(limits.admit("CLIENTS", ip("127.0.0.3"), 0));
    }

    #[tokio::test]
    async fn a_listener_at_max_connections_waits_for_a_slot_and_the_broker_links_do_not() {
        let config = ConnectionLimitsConfig {
            max_connections: Some(1),
            listeners: [(
                "OTHER".to_string(),
                ListenerLimits {
                    max_connections: Some(5),
                    max_creation_rate: None,
                },
            )]
            .into(),
            ..Default::default()
        };
        let limits = limits(config, Box::new(|_| None));
        let held = admitted(limits.admit("CLIENTS", ip("127.0.0.2"), 0));
        assert!(!limits.slot_free("CLIENTS") && !limits.slot_free("OTHER"));
        assert!(limits.slot_free("BROKER"));
        let waiting = {
            let limits = limits.clone();
            tokio::spawn(async move { limits.wait_for_slot("CLIENTS").await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
    }

    #[test]
    fn an_address_over_its_creation_rate_is_throttled_at_most_one_sample_long() {
        let limits = limits(
            ConnectionLimitsConfig::default(),
            Box::new(|ip| (ip == "127.0.0.2".parse::<IpAddr>().unwrap()).then_some(1.0)),
        );
        let a = ip("127.0.0.2");
        // The first window's worth (10 s at one a second) at once, then throttled.
        let slots: Vec<Slot> = (0..10)
            .map(|_| admitted(limits.admit("CLIENTS", a, 0)))
            .collect();
        match limits.admit("CLIENTS", a, 0) {
            Admission::Throttled(delay) => assert_eq!(delay, Duration::from_millis(1000)),
            _ => panic!("not throttled"),
        }
        // Until the first sample expires, 11 s later (the refused one was not counted).
        assert!(matches!(
            limits.admit("CLIENTS", a, 5000),
            Admission::Throttled(_)
        ));
        let _next = admitted(limits.admit("CLIENTS", a, 11_000));
        // Another address has no quota.
        let _other = admitted(limits.admit("CLIENTS", ip("127.0.0.4"), 0));
        drop(slots);
    }

    #[test]
    fn the_acceptor_waits_out_the_broker_creation_rate_except_on_the_broker_links() {
        let config = ConnectionLimitsConfig {
            max_creation_rate: Some(1.0),
            ..Default::default()
        };
        let limits = limits(config, Box::new(|_| None));
        for _ in 0..10 {
            assert_eq!(limits.accept_delay("CLIENTS", 0), Duration::ZERO);
        }
        // 11 over the first 10 s is 10 % over: a tenth of the window (10 s), at most a sample.
        assert_eq!(
            limits.accept_delay("CLIENTS", 0),
            Duration::from_millis(1000)
        );
        assert_eq!(limits.accept_delay("BROKER", 0), Duration::ZERO);
    }
}
