use super::*;

use crate::TopicInfo;
use fjord_protocol::Uuid;
use proptest::prelude::*;

fn topics(list: &[(&str, u8, i32)]) -> Topics {
    Topics {
        by_name: list
            .iter()
            .map(|&(name, id, partitions)| {
                let mut bytes = [0u8; 16];
                bytes[15] = id;
                (
                    name.to_string(),
                    TopicInfo {
                        name: name.to_string(),
                        topic_id: Uuid(bytes),
                        partitions,
                    },
                )
            })
            .collect(),
    }
}

fn request(member: &str, epoch: i32, subscribed: Option<&[&str]>) -> ShareGroupHeartbeatRequest {
    ShareGroupHeartbeatRequest {
        group_id: "g".to_string(),
        member_id: member.to_string(),
        member_epoch: epoch,
        rack_id: None,
        subscribed_topic_names: subscribed.map(|s| s.iter().map(|t| t.to_string()).collect()),
    }
}

/// A heartbeat, after which the share coordinator initializes at once what it asked for.
fn beat(
    groups: &mut ShareGroups,
    log: &mut Vec<CoordinatorRecord>,
    now: i64,
    req: ShareGroupHeartbeatRequest,
    topics: &Topics,
) -> ShareGroupHeartbeatResponse {
    let (response, inits) = beat_only(groups, log, now, req, topics);
    for init in inits {
        log.extend(groups.initialized(&init.group_id, &init_topics(&init), true));
    }
    response
}

/// A heartbeat and the initializations it asks for.
fn beat_only(
    groups: &mut ShareGroups,
    log: &mut Vec<CoordinatorRecord>,
    now: i64,
    req: ShareGroupHeartbeatRequest,
    topics: &Topics,
) -> (ShareGroupHeartbeatResponse, Vec<ShareInit>) {
    let mut inits = Vec::new();
    let response = groups.heartbeat(
        now,
        &req,
        topics,
        &ClientInfo::default(),
        200,
        log,
        &mut inits,
    );
    (response, inits)
}

fn init_topics(init: &ShareInit) -> Vec<(TopicId, Vec<i32>)> {
    init.topics
        .iter()
        .map(|(t, p, _)| (*t, p.clone()))
        .collect()
}

fn partitions(response: &ShareGroupHeartbeatResponse) -> usize {
    response.assignment.as_ref().map_or(0, |a| {
        a.topic_partitions.iter().map(|t| t.partitions.len()).sum()
    })
}

fn rebuild(log: &[CoordinatorRecord]) -> ShareGroups {
    let mut groups = ShareGroups::default();
    for record in log {
        let (key, value) = records::decode(record).expect("decodes");
        groups.replay(&key, value.as_ref());
    }
    groups
}

#[test]
fn members_join_share_and_leave() {
    let t = topics(&[("t", 1, 2)]);
    let (mut groups, mut log) = (ShareGroups::default(), Vec::new());
    let a = beat(&mut groups, &mut log, 0, request("a", 0, Some(&["t"])), &t);
    assert_eq!(
        (a.error_code, a.member_epoch, partitions(&a)),
        (NONE, 1, 0),
        "nothing assigned before its state is initialized"
    );
    let a = beat(&mut groups, &mut log, 0, request("a", 1, None), &t);
    assert_eq!(
        (a.member_epoch, partitions(&a)),
        (2, 2),
        "initialized since"
    );
    let b = beat(&mut groups, &mut log, 0, request("b", 0, Some(&["t"])), &t);
    assert_eq!(
        (b.member_epoch, partitions(&b)),
        (3, 1),
        "two members, two partitions: one each"
    );
    let a = beat(&mut groups, &mut log, 0, request("a", 2, None), &t);
    assert_eq!(
        (a.member_epoch, partitions(&a)),
        (3, 1),
        "no revocation: the new target at once"
    );
    let c = beat(&mut groups, &mut log, 0, request("c", 0, Some(&["t"])), &t);
    assert_eq!(
        partitions(&c),
        1,
        "three members on two partitions: partitions shared"
    );
    let left = beat(&mut groups, &mut log, 0, request("c", -1, None), &t);
    assert_eq!((left.error_code, left.member_epoch), (NONE, -1));
    let described = groups.describe(&["g".to_string()], &t, |_| false);
    assert_eq!(described[0].group_state, "Stable");
    assert_eq!(described[0].members.len(), 2);
    assert_eq!(described[0].group_epoch, 5);
    let replayed = rebuild(&log);
    assert_eq!(
        replayed.describe(&["g".to_string()], &t, |_| false),
        described,
        "the log rebuilds the same groups"
    );
}

#[test]
fn heartbeats_are_checked() {
    let t = topics(&[("t", 1, 2)]);
    let (mut groups, mut log) = (ShareGroups::default(), Vec::new());
    let code = |r: ShareGroupHeartbeatResponse| r.error_code;
    assert_eq!(
        code(beat(
            &mut groups,
            &mut log,
            0,
            request("", 0, Some(&["t"])),
            &t
        )),
        INVALID_REQUEST
    );
    let long = "x".repeat(37);
    assert_eq!(
        code(beat(
            &mut groups,
            &mut log,
            0,
            request(&long, 0, Some(&["t"])),
            &t
        )),
        INVALID_REQUEST
    );
    assert_eq!(
        code(beat(&mut groups, &mut log, 0, request("a", 0, None), &t)),
        INVALID_REQUEST
    );
    assert_eq!(
        code(beat(&mut groups, &mut log, 0, request("a", 3, None), &t)),
        GROUP_ID_NOT_FOUND
    );
    beat(&mut groups, &mut log, 0, request("a", 0, Some(&["t"])), &t);
    assert_eq!(
        code(beat(&mut groups, &mut log, 0, request("b", 1, None), &t)),
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        code(beat(&mut groups, &mut log, 0, request("b", -1, None), &t)),
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        code(beat(&mut groups, &mut log, 0, request("a", 5, None), &t)),
        FENCED_MEMBER_EPOCH
    );
    assert_eq!(
        code(beat(&mut groups, &mut log, 0, request("a", 1, None), &t)),
        NONE
    );
    let full = groups.heartbeat(
        0,
        &request("z", 0, Some(&["t"])),
        &t,
        &ClientInfo::default(),
        1,
        &mut log,
        &mut Vec::new(),
    );
    assert_eq!(full.error_code, GROUP_MAX_SIZE_REACHED);
}

#[test]
fn an_expired_session_fences_the_member() {
    let t = topics(&[("t", 1, 1)]);
    let (mut groups, mut log) = (ShareGroups::default(), Vec::new());
    beat(&mut groups, &mut log, 0, request("a", 0, Some(&["t"])), &t);
    assert_eq!(groups.next_deadline(), Some(45_000));
    assert!(groups.tick(44_999).is_empty());
    assert!(!groups.tick(45_000).is_empty());
    assert_eq!(groups.summaries(), vec![("g".to_string(), "Empty", 0)]);
    assert_eq!(groups.delete_group("g").map(|r| r.len()), Ok(3));
    assert!(!groups.contains("g"));
}

#[test]
fn a_new_partition_moves_the_epoch_and_is_assigned() {
    let (mut groups, mut log) = (ShareGroups::default(), Vec::new());
    beat(
        &mut groups,
        &mut log,
        0,
        request("a", 0, Some(&["t"])),
        &topics(&[("t", 1, 1)]),
    );
    let a = beat(
        &mut groups,
        &mut log,
        1,
        request("a", 1, None),
        &topics(&[("t", 1, 1)]),
    );
    assert_eq!((a.member_epoch, partitions(&a)), (2, 1));
    let grown = topics(&[("t", 1, 3)]);
    let (a, inits) = beat_only(&mut groups, &mut log, 2, request("a", 2, None), &grown);
    assert_eq!(a.member_epoch, 3);
    assert!(
        a.assignment.is_none(),
        "new partitions wait for their state"
    );
    assert_eq!(inits.len(), 1);
    assert_eq!(inits[0].topics[0].1, vec![1, 2]);
    assert_eq!(
        inits[0].topics[0].2, 0,
        "partitions added to a topic with state start at 0"
    );
    log.extend(groups.initialized("g", &init_topics(&inits[0]), true));
    let a = beat(&mut groups, &mut log, 3, request("a", 3, None), &grown);
    assert_eq!((a.member_epoch, partitions(&a)), (4, 3));
}

#[test]
fn share_partition_state_is_initialized_before_assignment_and_asked_again_after_a_failure() {
    let t = topics(&[("t", 1, 2)]);
    let (mut groups, mut log) = (ShareGroups::default(), Vec::new());
    let (a, inits) = beat_only(&mut groups, &mut log, 0, request("a", 0, Some(&["t"])), &t);
    assert_eq!(partitions(&a), 0);
    let want = ShareInit {
        group_id: "g".into(),
        state_epoch: 1,
        topics: vec![(t.get("t").unwrap().topic_id, vec![0, 1], -1)],
    };
    assert_eq!(
        inits,
        vec![want.clone()],
        "a new topic's state starts where the leader says"
    );
    // Asked for already: not again within the retry interval, again after it.
    let (_, again) = beat_only(&mut groups, &mut log, 1_000, request("a", 1, None), &t);
    assert!(again.is_empty());
    let (_, again) = beat_only(
        &mut groups,
        &mut log,
        INITIALIZE_RETRY_MS,
        request("a", 1, None),
        &t,
    );
    assert_eq!(again.len(), 1);
    // Failed: asked again by the next heartbeat, nothing assigned meanwhile.
    log.extend(groups.initialized("g", &init_topics(&want), false));
    let later = INITIALIZE_RETRY_MS + 1;
    let (a, again) = beat_only(&mut groups, &mut log, later, request("a", 1, None), &t);
    assert_eq!((again.len(), a.assignment.is_none()), (1, true));
    log.extend(groups.initialized("g", &init_topics(&again[0]), true));
    // The record of it is in the log: a coordinator loading the group assigns at once.
    let mut replayed = rebuild(&log);
    let (a, inits) = beat_only(
        &mut replayed,
        &mut log,
        later + 1,
        request("a", 1, None),
        &t,
    );
    assert!(
        inits.is_empty(),
        "initialized partitions are not asked for again"
    );
    assert_eq!(partitions(&a), 2);
}

proptest! {
    /// The simple assignor's balance: each partition has between one and S = ceil(N/P)
    /// members, members' loads differ by at most one, and nobody holds a partition twice.
    #[test]
    fn simple_assignor_balances(members in 1usize..12, partitions in 1i32..9, seed in any::<u64>()) {
        let t = topics(&[("t", 1, partitions)]);
        let subscriptions: BTreeMap<String, Vec<String>> =
            (0..members).map(|m| (format!("m{m}"), vec!["t".to_string()])).collect();
        // A previous assignment to keep what balance allows of.
        let mut previous = BTreeMap::new();
        for m in 0..members {
            let p = ((seed >> (m % 60)) as i32).rem_euclid(partitions);
            previous.insert(format!("m{m}"), Assignment::from([(Uuid([0; 16]), BTreeSet::from([p]))]));
        }
        let all = BTreeMap::from([(t.get("t").unwrap().topic_id, (0..partitions).collect())]);
        let result = simple_assign(&subscriptions, &t, &previous, &all);
        let sharing = members.div_ceil(partitions as usize);
        let mut holders = vec![0usize; partitions as usize];
        let loads: Vec<usize> = result
            .values()
            .map(|a| a.values().map(|ps| { for p in ps { holders[*p as usize] += 1; } ps.len() }).sum())
            .collect();
        prop_assert!(holders.iter().all(|&h| h >= 1 && h <= sharing), "{holders:?}");
        let (lo, hi) = (loads.iter().min().copied().unwrap_or(0), loads.iter().max().copied().unwrap_or(0));
        prop_assert!(hi - lo <= 1, "{loads:?}");
    }
}
