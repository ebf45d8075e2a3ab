//! `controller_mutation_rate` quotas (KIP-599): the partitions a client creates (CreateTopics,
//! CreatePartitions) and deletes (DeleteTopics) count against a token bucket per sensor — the
//! user, the client id or both, as for the byte rates — of `controller.quota.window.num` ×
//! `controller.quota.window.size.seconds` seconds of the quota, refilled at the quota.
//!
//! From CreateTopics v6, CreatePartitions v3 and DeleteTopics v5 the quota is strict: a topic
//! met while the bucket is below zero is refused THROTTLING_QUOTA_EXCEEDED (the one that takes
//! it below zero still passes); older versions are served and only throttled. The response
//! carries the time until the bucket is back at zero, and the connection is muted that long.
//!
//! Kafka's active controller keeps these buckets; fjord's brokers forward topic changes to the
//! controller without the client's principal and client id, so the broker the client sends to
//! keeps them. The permits of a topic the controller then refuses are given back.

use std::collections::HashMap;
use std::sync::Mutex;

use fjord_common::{errors, lock};
use fjord_controller::ControllerApi;
use fjord_metadata::quota::{QuotaScope, CONTROLLER_MUTATION_RATE};
use fjord_protocol::messages::create_partitions_request::CreatePartitionsRequest;
use fjord_protocol::messages::create_topics_request::CreateTopicsRequest;
use fjord_protocol::messages::delete_topics_request::DeleteTopicsRequest;
use fjord_protocol::ResponseBody;

use crate::api::authz::Access;
use crate::quota::make_room;
use crate::quota::rate::TokenBucket;

/// Kafka's message for THROTTLING_QUOTA_EXCEEDED.
const THROTTLED: &str = "The throttling quota has been exceeded.";

/// The first versions at which the quota refuses instead of only throttling.
fn strict(api: &ControllerApi, version: i16) -> bool {
    match api {
        ControllerApi::CreateTopics(_) => version >= 6,
        ControllerApi::CreatePartitions(_) => version >= 3,
        ControllerApi::DeleteTopics(_) => version >= 5,
        _ => false,
    }
}

/// The token buckets of every sensor.
pub(crate) struct MutationQuotas {
    window: (usize, i64),
    buckets: Mutex<HashMap<QuotaScope, TokenBucket>>,
    pub throttles: crate::quota::Throttles,
}

/// What the quota made of one request: the topics refused, and the permits taken per topic, to
/// give back for those the controller does not change.
pub(crate) struct Mutations {
    scope: QuotaScope,
    rate: f64,
    refused: Option<ControllerApi>,
    taken: Vec<(String, f64)>,
}

impl MutationQuotas {
    pub(crate) fn new(window: (usize, i64)) -> Self {
        MutationQuotas {
            window,
            buckets: Mutex::new(HashMap::new()),
            throttles: Default::default(),
        }
    }

    fn burst(&self, rate: f64) -> f64 {
        self.window.0 as f64 * self.window.1 as f64 / 1000.0 * rate
    }

    /// Takes the permits of `request`'s topics, in order, out of its client's bucket; in strict
    /// mode, takes the topics met below zero out of the request. None when the client has no
    /// quota (or the request changes nothing, or only validates).
    pub(crate) fn take(
        &self,
        access: &Access,
        request: &mut ControllerApi,
        version: i16,
        default_partitions: i32,
        now_ms: i64,
    ) -> Option<Mutations> {
        let client = access.quota_client();
        let quotas = access.image().client_quotas();
        let (rate, scope) =
            quotas.quota_for(CONTROLLER_MUTATION_RATE, client.user, client.client_id)?;
        let strict = strict(request, version);
        let burst = self.burst(rate);
        let mut buckets = lock(&self.buckets);
        make_room(&mut buckets, &scope, now_ms);
        let bucket = buckets.entry(scope.clone()).or_default();
        let mut taken = Vec::new();
        // Whether a topic of `permits` passes, taking them.
        let mut admit = |name: &str, permits: f64| {
            if strict && bucket.tokens(rate, burst, now_ms) < 0.0 {
                return false;
            }
            bucket.record(permits, rate, burst, now_ms);
            taken.push((name.to_string(), permits));
            true
        };
        let image = access.image();
        let refused = match request {
            ControllerApi::CreateTopics(r) if !r.validate_only => {
                let topics = keep(&mut r.topics, |t| {
                    let permits = if !t.assignments.is_empty() {
                        t.assignments.len() as i32
                    } else if t.num_partitions > 0 {
                        t.num_partitions
                    } else {
                        default_partitions
                    };
                    admit(&t.name, f64::from(permits))
                });
                (!topics.is_empty()).then(|| {
                    ControllerApi::CreateTopics(CreateTopicsRequest {
                        topics,
                        ..Default::default()
                    })
                })
            }
            ControllerApi::CreatePartitions(r) if !r.validate_only => {
                let topics = keep(&mut r.topics, |t| {
                    let current = image
                        .topic(&t.name)
                        .map_or(0, |topic| topic.partitions.len());
                    let added = (i64::from(t.count) - current as i64).max(0);
                    admit(&t.name, added as f64)
                });
                (!topics.is_empty()).then(|| {
                    ControllerApi::CreatePartitions(CreatePartitionsRequest {
                        topics,
                        ..Default::default()
                    })
                })
            }
            ControllerApi::DeleteTopics(r) => {
                let partitions_of =
                    |name: &str| image.topic(name).map_or(0, |t| t.partitions.len());
                let topics = keep(&mut r.topics, |t| {
                    let topic = match &t.name {
                        Some(name) => image.topic(name),
                        None => image.topic_by_id(&t.topic_id),
                    };
                    let name = topic.map(|t| t.name.clone()).unwrap_or_default();
                    admit(&name, partitions_of(&name) as f64)
                });
                let topic_names = keep(&mut r.topic_names, |n| admit(n, partitions_of(n) as f64));
                (!topics.is_empty() || !topic_names.is_empty()).then(|| {
                    ControllerApi::DeleteTopics(DeleteTopicsRequest {
                        topics,
                        topic_names,
                        ..Default::default()
                    })
                })
            }
            _ => return None,
        };
        Some(Mutations {
            scope,
            rate,
            refused,
            taken,
        })
    }

    /// The controller's `response` with the refused topics added back; gives back the permits
    /// of the topics it did not change. The throttle to answer with, in ms.
    pub(crate) fn settle(
        &self,
        mutations: Mutations,
        response: &mut ResponseBody,
        now_ms: i64,
    ) -> i32 {
        let Mutations {
            scope,
            rate,
            refused,
            taken,
        } = mutations;
        let failed: Vec<&str> = match &*response {
            ResponseBody::CreateTopics(r) => {
                failed(r.topics.iter().map(|t| (&t.name, t.error_code)))
            }
            ResponseBody::CreatePartitions(r) => {
                failed(r.results.iter().map(|t| (&t.name, t.error_code)))
            }
            ResponseBody::DeleteTopics(r) => failed(
                r.responses
                    .iter()
                    .filter_map(|t| Some((t.name.as_ref()?, t.error_code))),
            ),
            _ => Vec::new(),
        };
        let burst = self.burst(rate);
        let mut buckets = lock(&self.buckets);
        let bucket = buckets.entry(scope).or_default();
        for (name, permits) in &taken {
            if failed.contains(&name.as_str()) {
                bucket.record(-permits, rate, burst, now_ms);
            }
        }
        let tokens = bucket.tokens(rate, burst, now_ms);
        drop(buckets);
        if let Some(refused) = refused {
            let answer = fjord_controller::error_response(
                &refused,
                errors::THROTTLING_QUOTA_EXCEEDED,
                THROTTLED,
            );
            crate::api::authz::merge(response, answer);
        }
        // The time the bucket needs to be back at zero (Kafka's throttle for a token bucket).
        let throttle_ms = if tokens < 0.0 {
            (-tokens / rate * 1000.0).round().min(f64::from(i32::MAX)) as i32
        } else {
            0
        };
        self.throttles.throttled(i64::from(throttle_ms));
        match response {
            ResponseBody::CreateTopics(r) => {
                r.throttle_time_ms = r.throttle_time_ms.max(throttle_ms)
            }
            ResponseBody::CreatePartitions(r) => {
                r.throttle_time_ms = r.throttle_time_ms.max(throttle_ms)
            }
            ResponseBody::DeleteTopics(r) => {
                r.throttle_time_ms = r.throttle_time_ms.max(throttle_ms)
            }
            _ => {}
        }
        throttle_ms
    }
}

/// The names of the entries answered with an error.
fn failed<'a>(entries: impl Iterator<Item = (&'a String, i16)>) -> Vec<&'a str> {
    entries
        .filter(|(_, code)| *code != errors::NONE)
        .map(|(name, _)| name.as_str())
        .collect()
}

/// Keeps the items `admit` passes, in order; the others are returned.
fn keep<T>(items: &mut Vec<T>, mut admit: impl FnMut(&T) -> bool) -> Vec<T> {
    let mut refused = Vec::new();
    let mut kept = Vec::new();
    for item in std::mem::take(items) {
        if admit(&item) {
            kept.push(item);
        } else {
            refused.push(item);
        }
    }
    *items = kept;
    refused
}
