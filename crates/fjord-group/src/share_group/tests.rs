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

fn beat(
    groups: &mut ShareGroups,
    log: &mut Vec<CoordinatorRecord>,
    now: i64,
    req: ShareGroupHeartbeatRequest,
    topics: &Topics,
) -> ShareGroupHeartbeatResponse {
    groups.heartbeat(now, &req, topics, &ClientInfo::default(), 200, log)
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
    assert_eq!((a.error_code, a.member_epoch, partitions(&a)), (NONE, 1, 2));
    let b = beat(&mut groups, &mut log, 0, request("b", 0, Some(&["t"])), &t);
    assert_eq!(
        (b.member_epoch, partitions(&b)),
        (2, 1),
        "two members, two partitions: one each"
    );
    let a = beat(&mut groups, &mut log, 0, request("a", 1, None), &t);
    assert_eq!(
        (a.member_epoch, partitions(&a)),
        (2, 1),
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
    assert_eq!(described[0].group_epoch, 4);
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
    assert_eq!(groups.delete_group("g").map(|r| r.len()), Ok(2));
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
    let grown = topics(&[("t", 1, 3)]);
    let a = beat(&mut groups, &mut log, 1, request("a", 1, None), &grown);
    assert_eq!((a.member_epoch, partitions(&a)), (2, 3));
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
        let result = simple_assign(&subscriptions, &t, &previous);
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
