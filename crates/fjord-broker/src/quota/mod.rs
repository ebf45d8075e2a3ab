//! Client quotas, enforced as Kafka enforces them (KIP-13, KIP-55, KIP-219): the bytes a client
//! produces and fetches are measured per sensor — the user, the client id, or both, as the most
//! specific quota entity that sets the quota says (`fjord_metadata::quota`) — over
//! `quota.window.num` samples of `quota.window.size.seconds`. A client over its quota is not
//! refused: its response carries `throttle_time_ms`, the time the sensor needs to fall back to
//! the quota, and its connection reads nothing more until then. The quotas are read from the
//! metadata image on every request, so a change takes effect at once; the measured rates stay.
//!
//! [`rate`] is the sans-IO core; [`ClientQuotaManager`] shares the sensors between connections.

pub(crate) mod rate;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use fjord_common::lock;
use fjord_metadata::quota::{
    ClientQuotas, QuotaScope, CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE,
};

use rate::{Elapsed, Rate};

/// Sensors kept at most; past that, those idle for an hour go, then the least recently used.
const MAX_SENSORS: usize = 65_536;
/// A sensor unused this long is dropped (Kafka's inactive sensor expiry).
const SENSOR_IDLE_MS: i64 = 3_600_000;

/// Who a request counts against: the principal's name and the request's client id.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Client<'a> {
    pub user: &'a str,
    pub client_id: &'a str,
}

/// The sensors of one quota key (`producer_byte_rate`, `consumer_byte_rate`).
pub(crate) struct ClientQuotaManager {
    key: &'static str,
    samples: usize,
    window_ms: i64,
    sensors: Mutex<HashMap<QuotaScope, Rate>>,
    pub throttles: Throttles,
}

/// The throttles a quota asked for since start, for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct Throttles {
    count: AtomicU64,
    ms: AtomicU64,
}

impl Throttles {
    /// A response throttled for `throttle_ms` (nothing when 0).
    pub(crate) fn throttled(&self, throttle_ms: i64) {
        if throttle_ms > 0 {
            self.count.fetch_add(1, Ordering::Relaxed);
            self.ms.fetch_add(throttle_ms as u64, Ordering::Relaxed);
        }
    }

    /// Responses throttled, and their throttles' sum in ms.
    pub(crate) fn read(&self) -> (u64, u64) {
        (
            self.count.load(Ordering::Relaxed),
            self.ms.load(Ordering::Relaxed),
        )
    }
}

impl ClientQuotaManager {
    /// The quota key it enforces (`producer_byte_rate`, …).
    pub(crate) fn key(&self) -> &'static str {
        self.key
    }

    pub(crate) fn new(key: &'static str, (samples, window_ms): (usize, i64)) -> Self {
        ClientQuotaManager {
            key,
            samples,
            window_ms,
            sensors: Mutex::new(HashMap::new()),
            throttles: Throttles::default(),
        }
    }

    /// Records `value` against `client`'s quota; the throttle its quota asks for in ms, 0 when
    /// it has none or is within it.
    pub(crate) fn record(
        &self,
        quotas: &ClientQuotas,
        client: Client<'_>,
        value: f64,
        now_ms: i64,
    ) -> i32 {
        if !quotas.any_sets(self.key) {
            return 0;
        }
        let (bound, scope) = quotas.sensor_for(self.key, client.user, client.client_id);
        let mut sensors = lock(&self.sensors);
        let rate = sensor(&mut sensors, scope, (self.samples, self.window_ms), now_ms);
        rate.record(value, now_ms);
        let throttle = match bound {
            Some(bound) => throttle_ms(rate, bound, now_ms).min(i64::from(i32::MAX)),
            None => 0,
        };
        self.throttles.throttled(throttle);
        throttle as i32
    }

    /// Takes back a recorded `value` (a fetch answered without its records after all).
    pub(crate) fn unrecord(
        &self,
        quotas: &ClientQuotas,
        client: Client<'_>,
        value: f64,
        now_ms: i64,
    ) {
        let (_, scope) = quotas.sensor_for(self.key, client.user, client.client_id);
        if let Some(rate) = lock(&self.sensors).get_mut(&scope) {
            rate.record(-value, now_ms);
        }
    }

    /// The most one response may carry for `client`: its quota over all samples but one (a
    /// larger one could never be sent within the quota). None without a quota.
    pub(crate) fn max_in_window(&self, quotas: &ClientQuotas, client: Client<'_>) -> Option<f64> {
        let (bound, _) = quotas.quota_for(self.key, client.user, client.client_id)?;
        Some(
            bound * (self.samples.saturating_sub(1).max(1)) as f64 * self.window_ms as f64 / 1000.0,
        )
    }
}

/// What a map of sensors needs to know of one to make room: when it was last used.
pub(crate) trait LastUsed {
    fn last_used_ms(&self) -> Option<i64>;
}

impl LastUsed for Rate {
    fn last_used_ms(&self) -> Option<i64> {
        self.last_sample_ms()
    }
}

impl LastUsed for rate::TokenBucket {
    fn last_used_ms(&self) -> Option<i64> {
        rate::TokenBucket::last_used_ms(self)
    }
}

/// Makes room in `sensors` for `key` when it is new and the map is full: the sensors idle for an
/// hour go, else the least recently used. Client ids come from the network: the map stays bounded.
pub(crate) fn make_room<K: Clone + Eq + std::hash::Hash, V: LastUsed>(
    sensors: &mut HashMap<K, V>,
    key: &K,
    now_ms: i64,
) {
    if sensors.contains_key(key) || sensors.len() < MAX_SENSORS {
        return;
    }
    sensors.retain(|_, s| {
        s.last_used_ms()
            .is_some_and(|at| now_ms - at < SENSOR_IDLE_MS)
    });
    if sensors.len() >= MAX_SENSORS {
        let oldest = sensors
            .iter()
            .min_by_key(|(_, s)| s.last_used_ms())
            .map(|(key, _)| key.clone());
        if let Some(oldest) = oldest {
            sensors.remove(&oldest);
        }
    }
}

/// The sensor of `key` in `sensors`, made (over `window_ms` × `samples`, Kafka's `Rate`) when
/// missing, room made for it first.
pub(crate) fn sensor<K: Clone + Eq + std::hash::Hash>(
    sensors: &mut HashMap<K, Rate>,
    key: K,
    (samples, window_ms): (usize, i64),
    now_ms: i64,
) -> &mut Rate {
    make_room(sensors, &key, now_ms);
    sensors
        .entry(key)
        .or_insert_with(|| Rate::new(window_ms, samples, Elapsed::WholeWindow))
}

/// The time a rate above `bound` needs to fall back to it (Kafka's `QuotaUtils.throttleTime`),
/// in ms; 0 at or under it.
pub(crate) fn throttle_ms(rate: &mut Rate, bound: f64, now_ms: i64) -> i64 {
    let observed = rate.per_second(now_ms);
    if observed <= bound {
        return 0;
    }
    let throttle = (observed - bound) / bound * rate.window_ms(now_ms) as f64;
    throttle.round().min(i64::MAX as f64) as i64
}

/// The byte-rate and request-time quotas a broker enforces.
pub(crate) struct ClientQuotaManagers {
    pub produce: ClientQuotaManager,
    pub fetch: ClientQuotaManager,
    /// Time spent on a client's requests, in hundredths of a second per second.
    pub request: ClientQuotaManager,
}

impl ClientQuotaManagers {
    pub(crate) fn new(window: (usize, i64)) -> Self {
        ClientQuotaManagers {
            produce: ClientQuotaManager::new(PRODUCER_BYTE_RATE, window),
            fetch: ClientQuotaManager::new(CONSUMER_BYTE_RATE, window),
            request: ClientQuotaManager::new(REQUEST_PERCENTAGE, window),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_metadata::quota::{QuotaEntity, USER};

    fn quotas(user: &str, bytes_per_second: f64) -> ClientQuotas {
        let mut quotas = ClientQuotas::default();
        let entity = QuotaEntity([(USER.to_string(), Some(user.to_string()))].into());
        quotas.set(entity, PRODUCER_BYTE_RATE, Some(bytes_per_second));
        quotas
    }

    const ALICE: Client<'static> = Client {
        user: "alice",
        client_id: "app",
    };

    #[test]
    fn a_client_within_its_quota_is_not_throttled_and_one_over_it_is_for_the_excess() {
        let manager = ClientQuotaManager::new(PRODUCER_BYTE_RATE, (11, 1000));
        let quotas = quotas("alice", 1000.0);
        // No quota anywhere: nothing measured.
        let bob = Client {
            user: "bob",
            client_id: "app",
        };
        assert_eq!(manager.record(&ClientQuotas::default(), bob, 1e9, 0), 0);
        assert!(lock(&manager.sensors).is_empty());
        // 10 s of quota at once is within it (the window is 10 s long at first)...
        assert_eq!(manager.record(&quotas, ALICE, 10_000.0, 0), 0);
        // ...5 s more is not: 15,000 bytes over 10 s is 1,500/s, half again the quota, so
        // half the window (5 s) must pass.
        assert_eq!(manager.record(&quotas, ALICE, 5_000.0, 0), 5_000);
        // Taken back, the rate is within the quota again.
        manager.unrecord(&quotas, ALICE, 5_000.0, 0);
        assert_eq!(manager.record(&quotas, ALICE, 0.0, 0), 0);
        assert_eq!(manager.max_in_window(&quotas, ALICE), Some(10_000.0));
        assert_eq!(manager.max_in_window(&quotas, bob), None);
    }

    #[test]
    fn once_any_quota_is_set_every_client_is_measured_so_a_later_quota_sees_its_history() {
        let manager = ClientQuotaManager::new(PRODUCER_BYTE_RATE, (11, 1000));
        let bob = Client {
            user: "bob",
            client_id: "app",
        };
        // Bob has no quota, but alice has one: bob's bytes are counted.
        assert_eq!(
            manager.record(&quotas("alice", 1000.0), bob, 20_000.0, 0),
            0
        );
        // A quota for bob's client id measures him on the same sensor ("", app): it applies to
        // what was counted before it was set.
        let mut both = quotas("alice", 1000.0);
        both.set(
            QuotaEntity([("client-id".to_string(), Some("app".to_string()))].into()),
            PRODUCER_BYTE_RATE,
            Some(1000.0),
        );
        assert_eq!(manager.record(&both, bob, 0.0, 0), 10_000);
    }

    #[test]
    fn a_quota_changed_applies_to_the_rate_measured_so_far() {
        let manager = ClientQuotaManager::new(PRODUCER_BYTE_RATE, (11, 1000));
        assert_eq!(
            manager.record(&quotas("alice", 2000.0), ALICE, 20_000.0, 0),
            0
        );
        assert_eq!(
            manager.record(&quotas("alice", 1000.0), ALICE, 0.0, 0),
            10_000
        );
    }

    #[test]
    fn sensors_are_bounded() {
        let manager = ClientQuotaManager::new(CONSUMER_BYTE_RATE, (11, 1000));
        let mut quotas = ClientQuotas::default();
        quotas.set(
            QuotaEntity([("client-id".to_string(), None)].into()),
            CONSUMER_BYTE_RATE,
            Some(1.0),
        );
        for i in 0..MAX_SENSORS + 10 {
            let client_id = format!("c{i}");
            let client = Client {
                user: "u",
                client_id: &client_id,
            };
            manager.record(&quotas, client, 1.0, i as i64);
        }
        assert_eq!(lock(&manager.sensors).len(), MAX_SENSORS);
    }
}
