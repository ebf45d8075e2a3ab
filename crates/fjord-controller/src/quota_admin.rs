//! AlterClientQuotas (`kafka-configs --entity-type users|clients|ips --alter`): the controller
//! checks each entity and its quota keys as Kafka's does and commits a quota record per changed
//! key; an entity refused has none of its keys applied. A validate-only request commits nothing.

use std::collections::BTreeMap;
use std::net::IpAddr;

use fjord_common::errors;
use fjord_metadata::quota::{
    QuotaEntity, QuotaValue, CLIENT_ID, CONNECTION_CREATION_RATE, CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE, IP, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, USER,
};
use fjord_metadata::{ClientQuotaRecord, MetadataImage, MetadataRecord};
use fjord_protocol::messages::alter_client_quotas_request::{AlterClientQuotasRequest, EntryData};
use fjord_protocol::messages::alter_client_quotas_response::{
    AlterClientQuotasResponse, EntityData, EntryData as ResultData,
};
use fjord_protocol::messages::ResponseBody;

use crate::decision::Decision;

/// Why an entity's alterations are refused (all of Kafka's are INVALID_REQUEST).
type Refusal = String;

/// The value type Kafka gives a quota key, which bounds its values.
#[derive(Clone, Copy)]
enum KeyType {
    Long,
    Int,
    Double,
}

/// The records for `request` and one result per entity, in request order.
pub(crate) fn alter_client_quotas(
    image: &MetadataImage,
    request: &AlterClientQuotasRequest,
) -> Decision {
    let mut records = Vec::new();
    let mut results: Vec<(QuotaEntity, Result<(), Refusal>)> = Vec::new();
    for entry in &request.entries {
        let entity = entity_of(entry);
        // An entity altered twice in one request: Kafka answers it refused, although the first
        // alteration's records are committed, and both results are one (the entity's).
        if let Some((_, result)) = results.iter_mut().find(|(seen, _)| *seen == entity) {
            *result = Err(format!("Ignoring duplicate entity {}", display(&entity)));
            continue;
        }
        let outcome = alterations(entry, &entity).and_then(|alterations| {
            records.extend(alter_entity(image, &entity, &alterations)?);
            Ok(())
        });
        results.push((entity, outcome));
    }
    if request.validate_only {
        records.clear();
    }
    let entries = results
        .into_iter()
        .map(|(entity, outcome)| {
            let (error_code, error_message) = match outcome {
                Ok(()) => (errors::NONE, None),
                Err(message) => (errors::INVALID_REQUEST, Some(message)),
            };
            ResultData {
                error_code,
                error_message,
                entity: entity_data(&entity),
            }
        })
        .collect();
    Decision {
        records,
        response: ResponseBody::AlterClientQuotas(AlterClientQuotasResponse {
            entries,
            ..Default::default()
        }),
    }
}

/// The whole request refused with `error_code`.
pub(crate) fn alter_client_quotas_refused(
    request: &AlterClientQuotasRequest,
    error_code: i16,
    message: Option<String>,
) -> ResponseBody {
    ResponseBody::AlterClientQuotas(AlterClientQuotasResponse {
        entries: request
            .entries
            .iter()
            .map(|entry| ResultData {
                error_code,
                error_message: message.clone(),
                entity: entity_data(&entity_of(entry)),
            })
            .collect(),
        ..Default::default()
    })
}

/// The entity an entry names; a type named twice keeps its last name, as Kafka reads it.
fn entity_of(entry: &EntryData) -> QuotaEntity {
    QuotaEntity(
        entry
            .entity
            .iter()
            .map(|e| (e.entity_type.clone(), e.entity_name.clone()))
            .collect(),
    )
}

fn entity_data(entity: &QuotaEntity) -> Vec<EntityData> {
    entity
        .0
        .iter()
        .map(|(entity_type, entity_name)| EntityData {
            entity_type: entity_type.clone(),
            entity_name: entity_name.clone(),
        })
        .collect()
}

/// The entity as Kafka's messages show it: `ClientQuotaEntity(entries={user=alice})`.
fn display(entity: &QuotaEntity) -> String {
    let entries: Vec<String> = entity
        .0
        .iter()
        .map(|(t, n)| format!("{t}={}", n.as_deref().unwrap_or("null")))
        .collect();
    format!("ClientQuotaEntity(entries={{{}}})", entries.join(", "))
}

/// An entry's operations: each key's new value, or None to remove it.
fn alterations(
    entry: &EntryData,
    entity: &QuotaEntity,
) -> Result<BTreeMap<String, Option<f64>>, Refusal> {
    let mut alterations = BTreeMap::new();
    for op in &entry.ops {
        let value = (!op.remove).then_some(op.value);
        if alterations.insert(op.key.clone(), value).is_some() {
            return Err(format!(
                "Duplicate quota key {} not updating quota for this entity {}",
                op.key,
                display(entity)
            ));
        }
    }
    Ok(alterations)
}

/// The records that give `entity` its new quotas: a key set to a new value or removed while set;
/// nothing for a key left as it is.
fn alter_entity(
    image: &MetadataImage,
    entity: &QuotaEntity,
    alterations: &BTreeMap<String, Option<f64>>,
) -> Result<Vec<MetadataRecord>, Refusal> {
    let keys = keys_of(entity)?;
    let current = image.client_quotas().get(entity);
    let current = |key: &str| current.and_then(|quotas| quotas.get(key)).map(|v| v.0);
    let mut records = Vec::new();
    for (key, value) in alterations {
        let record = |value: f64, remove: bool| {
            MetadataRecord::ClientQuota(ClientQuotaRecord {
                entity: entity.clone(),
                key: key.clone(),
                value: QuotaValue(value),
                remove,
            })
        };
        match value {
            None if current(key).is_some() => records.push(record(0.0, true)),
            None => {}
            Some(value) => {
                check_value(keys, key, *value)?;
                if current(key).map(f64::to_bits) != Some(value.to_bits()) {
                    records.push(record(*value, false));
                }
            }
        }
    }
    Ok(records)
}

/// The quota keys `entity` may have, once its types and names are checked: users and client
/// ids have the rate and percentage quotas, an IP address (alone) its connection rate.
fn keys_of(entity: &QuotaEntity) -> Result<&'static [(&'static str, KeyType)], Refusal> {
    if entity.0.is_empty() {
        return Err("Invalid empty client quota entity".into());
    }
    for (entity_type, name) in &entity.0 {
        if ![USER, CLIENT_ID, IP].contains(&entity_type.as_str()) {
            return Err(format!("Unhandled client quota entity type: {entity_type}"));
        }
        if name.as_deref() == Some("") {
            return Err(format!("Empty {entity_type} not supported"));
        }
    }
    const USER_AND_CLIENT_KEYS: &[(&str, KeyType)] = &[
        (PRODUCER_BYTE_RATE, KeyType::Long),
        (CONSUMER_BYTE_RATE, KeyType::Long),
        (REQUEST_PERCENTAGE, KeyType::Double),
        (CONTROLLER_MUTATION_RATE, KeyType::Double),
    ];
    const IP_KEYS: &[(&str, KeyType)] = &[(CONNECTION_CREATION_RATE, KeyType::Int)];
    match entity.0.get(IP) {
        Some(_) if entity.0.len() > 1 => Err("Invalid quota entity combination, IP entity \
             shouldnot be combined with User or ClientId"
            .into()),
        // A name that is not an address: Kafka would also take a host name it can resolve;
        // fjord resolves no names in its controller.
        Some(Some(ip)) if ip.parse::<IpAddr>().is_err() => {
            Err(format!("{ip} is not a valid IP or resolvable host."))
        }
        Some(_) => Ok(IP_KEYS),
        None => Ok(USER_AND_CLIENT_KEYS),
    }
}

/// Kafka's checks of a value: a known key, positive, within its type and whole unless a double.
fn check_value(keys: &[(&str, KeyType)], key: &str, value: f64) -> Result<(), Refusal> {
    let Some((_, key_type)) = keys.iter().find(|(k, _)| *k == key) else {
        return Err(format!("Invalid configuration key {key}"));
    };
    if value <= 0.0 || value.is_nan() {
        return Err(format!("Quota {key} must be greater than 0"));
    }
    let (max, type_name) = match key_type {
        KeyType::Double => return Ok(()),
        KeyType::Long => (i64::MAX as f64, "a LONG"),
        KeyType::Int => (f64::from(i32::MAX), "an INT"),
    };
    if value > max {
        return Err(format!(
            "Proposed value for {key} is too large for {type_name}."
        ));
    }
    if (value % 1.0).abs() > 1e-6 {
        return Err(format!("{key} cannot be a fractional value."));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_metadata::MetadataDelta;
    use fjord_protocol::messages::alter_client_quotas_request::{EntityData, OpData};

    fn entry(entity: &[(&str, Option<&str>)], ops: &[(&str, f64, bool)]) -> EntryData {
        EntryData {
            entity: entity
                .iter()
                .map(|(t, n)| EntityData {
                    entity_type: t.to_string(),
                    entity_name: n.map(str::to_string),
                })
                .collect(),
            ops: ops
                .iter()
                .map(|(key, value, remove)| OpData {
                    key: key.to_string(),
                    value: *value,
                    remove: *remove,
                })
                .collect(),
        }
    }

    fn decide(image: &MetadataImage, entries: Vec<EntryData>, validate_only: bool) -> Decision {
        let request = AlterClientQuotasRequest {
            entries,
            validate_only,
        };
        alter_client_quotas(image, &request)
    }

    fn results(decision: &Decision) -> Vec<(i16, Option<String>)> {
        let ResponseBody::AlterClientQuotas(response) = &decision.response else {
            panic!("not an AlterClientQuotas answer")
        };
        response
            .entries
            .iter()
            .map(|e| (e.error_code, e.error_message.clone()))
            .collect()
    }

    fn apply(image: &MetadataImage, decision: &Decision) -> MetadataImage {
        let mut delta = MetadataDelta::new(image);
        for record in &decision.records {
            delta.apply(record).unwrap();
        }
        delta.finish(image.offset() + 1)
    }

    #[test]
    fn a_quota_is_set_changed_left_alone_and_removed() {
        let image = MetadataImage::empty();
        let alice = [(USER, Some("alice"))];
        let set = decide(
            &image,
            vec![entry(&alice, &[(PRODUCER_BYTE_RATE, 1024.0, false)])],
            false,
        );
        assert_eq!(results(&set), vec![(errors::NONE, None)]);
        let image = apply(&image, &set);
        let quota = image
            .client_quotas()
            .quota_for(PRODUCER_BYTE_RATE, "alice", "c");
        assert_eq!(quota.map(|q| q.0), Some(1024.0));
        // The same value again writes nothing; a removal of an unset key neither.
        let same = decide(
            &image,
            vec![entry(
                &alice,
                &[
                    (PRODUCER_BYTE_RATE, 1024.0, false),
                    (CONSUMER_BYTE_RATE, 0.0, true),
                ],
            )],
            false,
        );
        assert!(same.records.is_empty());
        let removed = decide(
            &image,
            vec![entry(&alice, &[(PRODUCER_BYTE_RATE, 0.0, true)])],
            false,
        );
        assert!(apply(&image, &removed).client_quotas().is_empty());
        // Validate-only answers the same and commits nothing.
        let checked = decide(
            &MetadataImage::empty(),
            vec![entry(&alice, &[(PRODUCER_BYTE_RATE, 1024.0, false)])],
            true,
        );
        assert_eq!(results(&checked), vec![(errors::NONE, None)]);
        assert!(checked.records.is_empty());
    }

    #[test]
    fn bad_entities_keys_and_values_are_refused_as_kafka_refuses_them() {
        let image = MetadataImage::empty();
        let refused = |entity: &[(&str, Option<&str>)], op: (&str, f64, bool)| {
            let decision = decide(&image, vec![entry(entity, &[op])], false);
            assert!(decision.records.is_empty());
            let (code, message) = results(&decision).remove(0);
            assert_eq!(code, errors::INVALID_REQUEST);
            message.unwrap()
        };
        let rate = (PRODUCER_BYTE_RATE, 10.0, false);
        assert_eq!(refused(&[], rate), "Invalid empty client quota entity");
        assert_eq!(
            refused(&[("group", Some("g"))], rate),
            "Unhandled client quota entity type: group"
        );
        assert_eq!(
            refused(&[(USER, Some(""))], rate),
            "Empty user not supported"
        );
        assert!(refused(&[(IP, Some("1.2.3.4")), (USER, None)], rate)
            .starts_with("Invalid quota entity combination"));
        assert_eq!(
            refused(
                &[(IP, Some("not an ip"))],
                (CONNECTION_CREATION_RATE, 1.0, false)
            ),
            "not an ip is not a valid IP or resolvable host."
        );
        assert_eq!(
            refused(&[(IP, None)], rate),
            "Invalid configuration key producer_byte_rate"
        );
        assert_eq!(
            refused(&[(USER, None)], (PRODUCER_BYTE_RATE, 0.0, false)),
            "Quota producer_byte_rate must be greater than 0"
        );
        assert_eq!(
            refused(&[(USER, None)], (PRODUCER_BYTE_RATE, 1.5, false)),
            "producer_byte_rate cannot be a fractional value."
        );
        assert_eq!(
            refused(&[(IP, None)], (CONNECTION_CREATION_RATE, 3e9, false)),
            "Proposed value for connection_creation_rate is too large for an INT."
        );
        // A double may be fractional.
        let fine = decide(
            &image,
            vec![entry(
                &[(CLIENT_ID, None)],
                &[(REQUEST_PERCENTAGE, 12.5, false)],
            )],
            false,
        );
        assert_eq!(results(&fine), vec![(errors::NONE, None)]);
    }

    #[test]
    fn a_refused_key_refuses_its_entity_only() {
        let image = MetadataImage::empty();
        let decision = decide(
            &image,
            vec![
                entry(
                    &[(USER, Some("alice"))],
                    &[(PRODUCER_BYTE_RATE, 10.0, false), ("bogus", 1.0, false)],
                ),
                entry(&[(USER, Some("bob"))], &[(PRODUCER_BYTE_RATE, 10.0, false)]),
            ],
            false,
        );
        let codes: Vec<i16> = results(&decision).into_iter().map(|r| r.0).collect();
        assert_eq!(codes, vec![errors::INVALID_REQUEST, errors::NONE]);
        let image = apply(&image, &decision);
        assert_eq!(image.client_quotas().iter().count(), 1);
    }

    #[test]
    fn an_entity_twice_is_answered_once_refused() {
        let bob = [(USER, Some("bob"))];
        let decision = decide(
            &MetadataImage::empty(),
            vec![
                entry(&bob, &[(PRODUCER_BYTE_RATE, 10.0, false)]),
                entry(&bob, &[(CONSUMER_BYTE_RATE, 10.0, false)]),
            ],
            false,
        );
        let results = results(&decision);
        assert_eq!(results.len(), 1);
        assert_eq!(
            results[0].1.as_deref(),
            Some("Ignoring duplicate entity ClientQuotaEntity(entries={user=bob})")
        );
        assert_eq!(decision.records.len(), 1);
    }
}
