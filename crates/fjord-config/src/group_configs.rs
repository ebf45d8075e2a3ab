//! Group configs: a group's own values of the share group settings, config resources of type
//! GROUP set with IncrementalAlterConfigs (`kafka-configs --entity-type groups`). A value is held
//! to the bounds the broker's `group.share.min.*` / `group.share.max.*` give when it is set, and
//! clamped to them when it is read (the bounds may have changed since). A group without its own
//! value takes the broker's `group.share.*` default.

use std::collections::BTreeMap;

use fjord_common::errors;

use crate::ConfigType;

/// The group config keys fjord has: name, type, and the broker key its default comes from
/// (empty: a fixed default, the third field).
pub const GROUP_CONFIGS: [(&str, ConfigType, &str, &str); 8] = [
    (
        "share.session.timeout.ms",
        ConfigType::Int,
        "group.share.session.timeout.ms",
        "",
    ),
    (
        "share.heartbeat.interval.ms",
        ConfigType::Int,
        "group.share.heartbeat.interval.ms",
        "",
    ),
    (
        "share.record.lock.duration.ms",
        ConfigType::Int,
        "group.share.record.lock.duration.ms",
        "",
    ),
    (
        "share.delivery.count.limit",
        ConfigType::Int,
        "group.share.delivery.count.limit",
        "",
    ),
    (
        "share.partition.max.record.locks",
        ConfigType::Int,
        "group.share.partition.max.record.locks",
        "",
    ),
    ("share.auto.offset.reset", ConfigType::String, "", "latest"),
    (
        "share.isolation.level",
        ConfigType::String,
        "",
        "read_uncommitted",
    ),
    (
        "share.renew.acknowledge.enable",
        ConfigType::Boolean,
        "",
        "true",
    ),
];

/// A broker default with the bounds a group's own value must keep to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounded {
    pub value: i32,
    pub min: i32,
    pub max: i32,
}

impl Bounded {
    fn clamp(&self, value: i32) -> i32 {
        value.max(self.min).min(self.max.max(self.min))
    }
}

/// The broker's share group settings (see `BrokerConfig::share_groups`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareGroupDefaults {
    pub session_timeout_ms: Bounded,
    pub heartbeat_interval_ms: Bounded,
    pub record_lock_duration_ms: Bounded,
    pub delivery_count_limit: Bounded,
    pub partition_max_record_locks: Bounded,
    /// `group.share.max.size`: members of one share group at most.
    pub max_size: i32,
    /// `group.share.max.share.sessions`: share sessions of one broker at most.
    pub max_share_sessions: i32,
}

impl ShareGroupDefaults {
    fn bounded(&self, key: &str) -> Option<&Bounded> {
        Some(match key {
            "share.session.timeout.ms" => &self.session_timeout_ms,
            "share.heartbeat.interval.ms" => &self.heartbeat_interval_ms,
            "share.record.lock.duration.ms" => &self.record_lock_duration_ms,
            "share.delivery.count.limit" => &self.delivery_count_limit,
            "share.partition.max.record.locks" => &self.partition_max_record_locks,
            _ => return None,
        })
    }
}

/// Where a share partition starts when its group first reads it (`share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoOffsetReset {
    Earliest,
    Latest,
    /// The first record at most this long before the group's first read.
    ByDuration {
        ms: i64,
    },
}

/// `share.isolation.level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationLevel {
    ReadUncommitted,
    ReadCommitted,
}

/// One share group's settings: its own values where it has them, else the broker's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareGroupSettings {
    pub session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    pub record_lock_duration_ms: i32,
    pub delivery_count_limit: i32,
    pub partition_max_record_locks: i32,
    pub auto_offset_reset: AutoOffsetReset,
    pub isolation_level: IsolationLevel,
    pub renew_acknowledge_enable: bool,
}

/// Why a group's configs are refused: Kafka's error code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfigRefused {
    pub code: i16,
    pub message: String,
}

fn refused(message: impl Into<String>) -> GroupConfigRefused {
    GroupConfigRefused {
        code: errors::INVALID_CONFIG,
        message: message.into(),
    }
}

/// Checks the keys `configs` sets for a group, as they would be after a change.
pub fn check(
    configs: &BTreeMap<String, String>,
    defaults: &ShareGroupDefaults,
) -> Result<(), GroupConfigRefused> {
    for (key, value) in configs {
        let Some(&(_, kind, _, _)) = GROUP_CONFIGS.iter().find(|(k, ..)| k == key) else {
            return Err(refused(format!("Unknown group config name: {key}")));
        };
        match kind {
            ConfigType::Int => {
                let n: i32 = value.trim().parse().map_err(|_| {
                    refused(format!(
                        "Invalid value {value} for configuration {key}: Not a number of type INT"
                    ))
                })?;
                if let Some(b) = defaults.bounded(key) {
                    if n < b.min || n > b.max {
                        return Err(refused(format!(
                            "Invalid value {n} for configuration {key}: must be between {} and {}",
                            b.min, b.max
                        )));
                    }
                }
            }
            ConfigType::Boolean => {
                if !value.trim().eq_ignore_ascii_case("true")
                    && !value.trim().eq_ignore_ascii_case("false")
                {
                    return Err(refused(format!("Invalid value {value} for configuration {key}: Expected value to be either true or false")));
                }
            }
            _ if key == "share.auto.offset.reset" => {
                auto_offset_reset(value).ok_or_else(|| {
                    refused(format!(
                        "Invalid value {value} for configuration {key}: must be earliest, latest or by_duration:<ISO-8601 duration>"
                    ))
                })?;
            }
            _ => {
                if isolation_level(value).is_none() {
                    return Err(refused(format!(
                        "Invalid value {value} for configuration {key}: String must be one of: read_committed, read_uncommitted"
                    )));
                }
            }
        }
    }
    let get = |key: &str, default: i32| {
        configs
            .get(key)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(default)
    };
    let session = get(
        "share.session.timeout.ms",
        defaults.session_timeout_ms.value,
    );
    let heartbeat = get(
        "share.heartbeat.interval.ms",
        defaults.heartbeat_interval_ms.value,
    );
    if heartbeat >= session {
        return Err(refused(
            "share.heartbeat.interval.ms must be less than share.session.timeout.ms",
        ));
    }
    Ok(())
}

/// A group's settings from its own configs (none: it has none), each clamped to the broker's
/// bounds; a value that would not parse is the broker's default.
pub fn share_group_settings(
    configs: Option<&BTreeMap<String, String>>,
    defaults: &ShareGroupDefaults,
) -> ShareGroupSettings {
    let get = |key: &str| configs.and_then(|c| c.get(key)).map(|v| v.trim());
    let int = |key: &str, b: &Bounded| {
        get(key)
            .and_then(|v| v.parse().ok())
            .map_or(b.value, |v| b.clamp(v))
    };
    ShareGroupSettings {
        session_timeout_ms: int("share.session.timeout.ms", &defaults.session_timeout_ms),
        heartbeat_interval_ms: int(
            "share.heartbeat.interval.ms",
            &defaults.heartbeat_interval_ms,
        ),
        record_lock_duration_ms: int(
            "share.record.lock.duration.ms",
            &defaults.record_lock_duration_ms,
        ),
        delivery_count_limit: int("share.delivery.count.limit", &defaults.delivery_count_limit),
        partition_max_record_locks: int(
            "share.partition.max.record.locks",
            &defaults.partition_max_record_locks,
        ),
        auto_offset_reset: get("share.auto.offset.reset")
            .and_then(auto_offset_reset)
            .unwrap_or(AutoOffsetReset::Latest),
        isolation_level: get("share.isolation.level")
            .and_then(isolation_level)
            .unwrap_or(IsolationLevel::ReadUncommitted),
        renew_acknowledge_enable: get("share.renew.acknowledge.enable")
            .is_none_or(|v| !v.eq_ignore_ascii_case("false")),
    }
}

/// Every group config of a group with its value and whether it is the group's own, for
/// DescribeConfigs; a broker-supplied default is given as the broker has it.
pub fn entries(
    configs: Option<&BTreeMap<String, String>>,
    defaults: &ShareGroupDefaults,
) -> Vec<(&'static str, ConfigType, String, bool)> {
    GROUP_CONFIGS
        .iter()
        .map(
            |&(key, kind, _, fixed)| match configs.and_then(|c| c.get(key)) {
                Some(own) => (key, kind, own.clone(), true),
                None => {
                    let value = defaults
                        .bounded(key)
                        .map_or(fixed.to_string(), |b| b.value.to_string());
                    (key, kind, value, false)
                }
            },
        )
        .collect()
}

fn isolation_level(value: &str) -> Option<IsolationLevel> {
    match value {
        "read_uncommitted" => Some(IsolationLevel::ReadUncommitted),
        "read_committed" => Some(IsolationLevel::ReadCommitted),
        _ => None,
    }
}

fn auto_offset_reset(value: &str) -> Option<AutoOffsetReset> {
    match value.to_ascii_lowercase().as_str() {
        "earliest" => Some(AutoOffsetReset::Earliest),
        "latest" => Some(AutoOffsetReset::Latest),
        lower => {
            let duration = lower.strip_prefix("by_duration:")?;
            iso_duration_ms(duration.trim()).map(|ms| AutoOffsetReset::ByDuration { ms })
        }
    }
}

/// An ISO-8601 duration of days, hours, minutes and seconds (`PnDTnHnMn.nS`, as Java's
/// `Duration.parse` reads it) in milliseconds; negative durations are refused.
fn iso_duration_ms(text: &str) -> Option<i64> {
    let rest = text.strip_prefix('P').or_else(|| text.strip_prefix('p'))?;
    let (days, time) = match rest.find(['T', 't']) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let mut total: f64 = 0.0;
    let mut seen = false;
    if !days.is_empty() {
        let n = days.strip_suffix(['D', 'd'])?;
        total += n.parse::<u32>().ok()? as f64 * 86_400_000.0;
        seen = true;
    }
    if let Some(mut time) = time {
        if time.is_empty() {
            return None;
        }
        for (unit, ms) in [
            (['H', 'h'], 3_600_000.0),
            (['M', 'm'], 60_000.0),
            (['S', 's'], 1_000.0),
        ] {
            if let Some(i) = time.find(unit) {
                let n: f64 = time[..i].parse().ok()?;
                if n < 0.0 || !n.is_finite() {
                    return None;
                }
                total += n * ms;
                time = &time[i + 1..];
                seen = true;
            }
        }
        if !time.is_empty() {
            return None;
        }
    }
    (seen && total <= i64::MAX as f64).then_some(total as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> ShareGroupDefaults {
        let b = |value, min, max| Bounded { value, min, max };
        ShareGroupDefaults {
            session_timeout_ms: b(45_000, 45_000, 60_000),
            heartbeat_interval_ms: b(5_000, 5_000, 15_000),
            record_lock_duration_ms: b(30_000, 15_000, 60_000),
            delivery_count_limit: b(5, 2, 10),
            partition_max_record_locks: b(2_000, 100, 4_000),
            max_size: 200,
            max_share_sessions: 2_000,
        }
    }

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn values_are_checked_against_the_broker_bounds() {
        let d = defaults();
        assert!(check(&configs(&[("share.record.lock.duration.ms", "15000")]), &d).is_ok());
        assert!(check(&configs(&[("share.record.lock.duration.ms", "14999")]), &d).is_err());
        assert!(check(&configs(&[("share.auto.offset.reset", "earliest")]), &d).is_ok());
        assert!(check(
            &configs(&[("share.auto.offset.reset", "by_duration:PT1H")]),
            &d
        )
        .is_ok());
        assert!(check(&configs(&[("share.auto.offset.reset", "sometime")]), &d).is_err());
        assert!(check(&configs(&[("share.isolation.level", "read_committed")]), &d).is_ok());
        assert!(check(&configs(&[("share.isolation.level", "dirty")]), &d).is_err());
        assert!(check(&configs(&[("share.renew.acknowledge.enable", "maybe")]), &d).is_err());
        assert_eq!(
            check(&configs(&[("no.such.key", "1")]), &d).map_err(|e| e.code),
            Err(errors::INVALID_CONFIG)
        );
        assert!(check(
            &configs(&[
                ("share.heartbeat.interval.ms", "15000"),
                ("share.session.timeout.ms", "45000")
            ]),
            &d
        )
        .is_ok());
    }

    #[test]
    fn settings_fall_back_to_the_broker_and_are_clamped() {
        let d = defaults();
        let s = share_group_settings(None, &d);
        assert_eq!(
            (s.record_lock_duration_ms, s.auto_offset_reset),
            (30_000, AutoOffsetReset::Latest)
        );
        let own = configs(&[
            ("share.record.lock.duration.ms", "90000"),
            ("share.auto.offset.reset", "by_duration:P1DT2H"),
            ("share.isolation.level", "read_committed"),
            ("share.renew.acknowledge.enable", "false"),
        ]);
        let s = share_group_settings(Some(&own), &d);
        assert_eq!(
            s.record_lock_duration_ms, 60_000,
            "clamped to the bound in force"
        );
        assert_eq!(
            s.auto_offset_reset,
            AutoOffsetReset::ByDuration { ms: 93_600_000 }
        );
        assert_eq!(s.isolation_level, IsolationLevel::ReadCommitted);
        assert!(!s.renew_acknowledge_enable);
    }

    #[test]
    fn iso_durations() {
        assert_eq!(iso_duration_ms("PT0.5S"), Some(500));
        assert_eq!(iso_duration_ms("PT1H30M"), Some(5_400_000));
        assert_eq!(iso_duration_ms("P2D"), Some(172_800_000));
        assert_eq!(iso_duration_ms("P"), None);
        assert_eq!(iso_duration_ms("PT"), None);
        assert_eq!(iso_duration_ms("PT-1S"), None);
        assert_eq!(iso_duration_ms("1H"), None);
    }
}
