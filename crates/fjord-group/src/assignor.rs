//! Server-side partition assignors for KIP-848 consumer groups: `uniform` (balanced and sticky)
//! and `range` (per topic, co-partitioned). Both are pure functions of the member subscriptions,
//! the topics' partition counts and the previous target assignment, so the same inputs always
//! give the same target assignment.

use std::collections::{BTreeMap, BTreeSet};

/// A topic's id as carried in KIP-848 records and responses.
pub use fjord_common::TopicId;

/// Partitions by topic id; the shape of target and current assignments.
pub type Assignment = BTreeMap<TopicId, BTreeSet<i32>>;

/// What an assignor knows about one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSpec {
    pub member_id: String,
    pub instance_id: Option<String>,
    /// Topic ids the member subscribes to that exist; unknown ids are ignored.
    pub subscribed_topics: BTreeSet<TopicId>,
    /// The member's previous target assignment, which `uniform` keeps where it can.
    pub previous: Assignment,
}

/// The assignors the coordinator ships; clients pick one by name (`group.remote.assignor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerAssignor {
    Uniform,
    Range,
}

impl ServerAssignor {
    pub fn name(self) -> &'static str {
        match self {
            ServerAssignor::Uniform => "uniform",
            ServerAssignor::Range => "range",
        }
    }

    pub fn from_name(name: &str) -> Option<ServerAssignor> {
        match name {
            "uniform" => Some(ServerAssignor::Uniform),
            "range" => Some(ServerAssignor::Range),
            _ => None,
        }
    }

    /// The target assignment of every member in `members`, keyed by member id. `partitions`
    /// gives each existing topic's partition count; every partition of a subscribed topic is
    /// assigned to exactly one subscribed member.
    pub fn assign(
        self,
        members: &[MemberSpec],
        partitions: &BTreeMap<TopicId, i32>,
    ) -> BTreeMap<String, Assignment> {
        match self {
            ServerAssignor::Uniform => uniform(members, partitions),
            ServerAssignor::Range => range(members, partitions),
        }
    }
}

/// Range: for each topic, its subscribers (static members first by instance id, then the rest
/// by member id) take consecutive ranges, earlier members one extra partition when the count
/// does not divide. Members with equal subscriptions to equally partitioned topics therefore get
/// the same partition numbers of each topic (co-partitioning).
fn range(
    members: &[MemberSpec],
    partitions: &BTreeMap<TopicId, i32>,
) -> BTreeMap<String, Assignment> {
    let mut order: Vec<&MemberSpec> = members.iter().collect();
    order.sort_by(|a, b| match (&a.instance_id, &b.instance_id) {
        (Some(x), Some(y)) => x.cmp(y).then_with(|| a.member_id.cmp(&b.member_id)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.member_id.cmp(&b.member_id),
    });
    let mut result: BTreeMap<String, Assignment> = members
        .iter()
        .map(|m| (m.member_id.clone(), Assignment::new()))
        .collect();
    for (topic_id, &count) in partitions {
        let subscribers: Vec<&MemberSpec> = order
            .iter()
            .copied()
            .filter(|m| m.subscribed_topics.contains(topic_id))
            .collect();
        let n = subscribers.len() as i32;
        if n == 0 || count <= 0 {
            continue;
        }
        let quota = count / n;
        let mut extra = count % n;
        let mut start = 0;
        for member in subscribers {
            let mut take = quota;
            if extra > 0 {
                take += 1;
                extra -= 1;
            }
            let end = (start + take).min(count);
            if start < end {
                if let Some(a) = result.get_mut(&member.member_id) {
                    a.insert(*topic_id, (start..end).collect());
                }
            }
            start = end;
        }
    }
    result
}

/// Uniform: every member ends up with as many partitions as its subscriptions allow while no
/// subscribed member could take a partition from one holding two more. Members keep their
/// previous partitions unless balance requires moving them, so membership changes move few
/// partitions.
fn uniform(
    members: &[MemberSpec],
    partitions: &BTreeMap<TopicId, i32>,
) -> BTreeMap<String, Assignment> {
    let mut order: Vec<&MemberSpec> = members.iter().collect();
    order.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    let subscribers = subscribers_by_topic(&order, partitions);
    let mut owned = sticky_partitions(&order, partitions, &subscribers);
    assign_unowned_partitions(&mut owned, partitions, &subscribers);
    while let Some((from, to, partition)) = balancing_move(&owned, &subscribers) {
        owned[from].remove(&partition);
        owned[to].insert(partition);
    }
    order
        .iter()
        .zip(owned)
        .map(|(m, partitions)| {
            let mut a = Assignment::new();
            for (t, p) in partitions {
                a.entry(t).or_default().insert(p);
            }
            (m.member_id.clone(), a)
        })
        .collect()
}

/// The subscribers of each topic that has partitions, as indexes into `order`: the members
/// `uniform` may give that topic's partitions to.
fn subscribers_by_topic(
    order: &[&MemberSpec],
    partitions: &BTreeMap<TopicId, i32>,
) -> BTreeMap<TopicId, Vec<usize>> {
    let mut subscribers: BTreeMap<TopicId, Vec<usize>> = BTreeMap::new();
    for (i, m) in order.iter().enumerate() {
        for t in &m.subscribed_topics {
            if partitions.get(t).is_some_and(|&c| c > 0) {
                subscribers.entry(*t).or_default().push(i);
            }
        }
    }
    subscribers
}

/// The stickiness of `uniform`: each member (by index into `order`) keeps the partitions of its
/// previous target that still exist and that it still subscribes to, each partition to one
/// member. With a homogeneous subscription nobody keeps more than the balanced ceiling, which
/// bounds the moves the balancing step needs.
fn sticky_partitions(
    order: &[&MemberSpec],
    partitions: &BTreeMap<TopicId, i32>,
    subscribers: &BTreeMap<TopicId, Vec<usize>>,
) -> Vec<BTreeSet<(TopicId, i32)>> {
    let n = order.len();
    let total: usize = subscribers
        .keys()
        .filter_map(|t| partitions.get(t))
        .map(|&c| c.max(0) as usize)
        .sum();
    let homogeneous = subscribers.values().all(|s| s.len() == n);
    let ceiling = if homogeneous && n > 0 {
        total.div_ceil(n)
    } else {
        usize::MAX
    };
    let mut owned: Vec<BTreeSet<(TopicId, i32)>> = vec![BTreeSet::new(); n];
    let mut taken: BTreeSet<(TopicId, i32)> = BTreeSet::new();
    for (i, m) in order.iter().enumerate() {
        for (t, ps) in &m.previous {
            let Some(&count) = partitions.get(t) else {
                continue;
            };
            if !m.subscribed_topics.contains(t) {
                continue;
            }
            for &p in ps {
                if owned[i].len() >= ceiling {
                    break;
                }
                if (0..count).contains(&p) && taken.insert((*t, p)) {
                    owned[i].insert((*t, p));
                }
            }
        }
    }
    owned
}

/// Hands out the partitions nobody kept, each to its least loaded subscriber. Topics with fewer
/// subscribers go first so that their partitions do not crowd out members with narrow
/// subscriptions.
fn assign_unowned_partitions(
    owned: &mut [BTreeSet<(TopicId, i32)>],
    partitions: &BTreeMap<TopicId, i32>,
    subscribers: &BTreeMap<TopicId, Vec<usize>>,
) {
    let mut taken: BTreeSet<(TopicId, i32)> = owned.iter().flatten().copied().collect();
    let mut topics: Vec<(&TopicId, &Vec<usize>)> = subscribers.iter().collect();
    topics.sort_by_key(|(t, s)| (s.len(), **t));
    for (t, subs) in &topics {
        let count = partitions.get(*t).copied().unwrap_or(0);
        for p in 0..count {
            if taken.contains(&(**t, p)) {
                continue;
            }
            if let Some(&i) = subs.iter().min_by_key(|&&i| (owned[i].len(), i)) {
                owned[i].insert((**t, p));
                taken.insert((**t, p));
            }
        }
    }
}

/// The next move of `uniform`'s balancing step: from the most loaded member that has one, the
/// partition (highest first) that a subscriber holding at least two fewer can take, going to
/// the least loaded such subscriber. `None` once the assignment is balanced. Every move lowers
/// the sum of squared loads, so repeating it ends.
fn balancing_move(
    owned: &[BTreeSet<(TopicId, i32)>],
    subscribers: &BTreeMap<TopicId, Vec<usize>>,
) -> Option<(usize, usize, (TopicId, i32))> {
    let mut by_load: Vec<usize> = (0..owned.len()).collect();
    by_load.sort_by_key(|&i| (std::cmp::Reverse(owned[i].len()), i));
    for from in by_load {
        for &(t, p) in owned[from].iter().rev() {
            let Some(subs) = subscribers.get(&t) else {
                continue;
            };
            let target = subs
                .iter()
                .copied()
                .filter(|&j| owned[j].len() + 1 < owned[from].len())
                .min_by_key(|&j| (owned[j].len(), j));
            if let Some(to) = target {
                return Some((from, to, (t, p)));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tid(n: u8) -> TopicId {
        fjord_common::Uuid([n; 16])
    }

    fn member(id: &str, topics: &[u8], previous: Assignment) -> MemberSpec {
        MemberSpec {
            member_id: id.to_string(),
            instance_id: None,
            subscribed_topics: topics.iter().map(|&t| tid(t)).collect(),
            previous,
        }
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    /// Every partition of a subscribed topic is assigned exactly once, only to subscribers.
    fn check_complete(
        members: &[MemberSpec],
        partitions: &BTreeMap<TopicId, i32>,
        result: &BTreeMap<String, Assignment>,
    ) {
        let mut seen = BTreeSet::new();
        for m in members {
            let a = &result[&m.member_id];
            for (t, ps) in a {
                assert!(m.subscribed_topics.contains(t));
                for &p in ps {
                    assert!(p >= 0 && p < partitions[t]);
                    assert!(seen.insert((*t, p)), "partition assigned twice");
                }
            }
        }
        for (t, &c) in partitions {
            if members.iter().any(|m| m.subscribed_topics.contains(t)) {
                for p in 0..c {
                    assert!(seen.contains(&(*t, p)), "partition left unassigned");
                }
            }
        }
    }

    fn moved(before: &BTreeMap<String, Assignment>, after: &BTreeMap<String, Assignment>) -> usize {
        let mut n = 0;
        for (m, a) in after {
            for (t, ps) in a {
                for p in ps {
                    if !before
                        .get(m)
                        .and_then(|b| b.get(t))
                        .is_some_and(|b| b.contains(p))
                    {
                        n += 1;
                    }
                }
            }
        }
        n
    }

    #[test]
    fn uniform_balances_homogeneous_group() {
        let partitions = BTreeMap::from([(tid(1), 7), (tid(2), 5)]);
        let members: Vec<_> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|m| member(m, &[1, 2], Assignment::new()))
            .collect();
        let result = ServerAssignor::Uniform.assign(&members, &partitions);
        check_complete(&members, &partitions, &result);
        let loads: Vec<_> = result.values().map(count).collect();
        assert!(loads.iter().all(|&l| l == 2 || l == 3), "{loads:?}");
    }

    #[test]
    fn uniform_is_sticky_when_members_join_and_leave() {
        let partitions = BTreeMap::from([(tid(1), 12)]);
        let mut members: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|m| member(m, &[1], Assignment::new()))
            .collect();
        let first = ServerAssignor::Uniform.assign(&members, &partitions);
        for m in &mut members {
            m.previous = first[&m.member_id].clone();
        }
        members.push(member("d", &[1], Assignment::new()));
        let second = ServerAssignor::Uniform.assign(&members, &partitions);
        check_complete(&members, &partitions, &second);
        assert!(second.values().all(|a| count(a) == 3));
        // Only the three partitions the new member takes change owner.
        assert_eq!(moved(&first, &second), 3);

        // "b" leaves: its three partitions are spread, nothing else moves.
        members.retain(|m| m.member_id != "b");
        for m in &mut members {
            m.previous = second[&m.member_id].clone();
        }
        let third = ServerAssignor::Uniform.assign(&members, &partitions);
        check_complete(&members, &partitions, &third);
        assert!(third.values().all(|a| count(a) == 4));
        assert_eq!(moved(&second, &third), 3);
    }

    #[test]
    fn uniform_heterogeneous_respects_subscriptions_and_balances() {
        let partitions = BTreeMap::from([(tid(1), 6), (tid(2), 6), (tid(3), 2)]);
        let members = vec![
            member("a", &[1], Assignment::new()),
            member("b", &[1, 2], Assignment::new()),
            member("c", &[2, 3], Assignment::new()),
            member("d", &[1, 2, 3], Assignment::new()),
        ];
        let result = ServerAssignor::Uniform.assign(&members, &partitions);
        check_complete(&members, &partitions, &result);
        let loads: Vec<_> = result.values().map(count).collect();
        let (min, max) = (loads.iter().min(), loads.iter().max());
        assert!(max.zip(min).is_some_and(|(x, y)| x - y <= 1), "{loads:?}");
    }

    #[test]
    fn uniform_ignores_stale_previous_partitions() {
        let partitions = BTreeMap::from([(tid(1), 2)]);
        // "a" claims partitions beyond the topic's count and of a topic it no longer follows;
        // "b" claims one "a" also claims.
        let members = vec![
            member(
                "a",
                &[1],
                Assignment::from([
                    (tid(1), BTreeSet::from([0, 5])),
                    (tid(9), BTreeSet::from([0])),
                ]),
            ),
            member("b", &[1], Assignment::from([(tid(1), BTreeSet::from([0]))])),
        ];
        let result = ServerAssignor::Uniform.assign(&members, &partitions);
        check_complete(&members, &partitions, &result);
        assert_eq!(result["a"][&tid(1)], BTreeSet::from([0]));
        assert_eq!(result["b"][&tid(1)], BTreeSet::from([1]));
    }

    #[test]
    fn range_co_partitions_topics() {
        let partitions = BTreeMap::from([(tid(1), 5), (tid(2), 5), (tid(3), 3)]);
        let members = vec![
            member("c", &[1, 2], Assignment::new()),
            member("a", &[1, 2, 3], Assignment::new()),
            member("b", &[1, 2, 3], Assignment::new()),
        ];
        let result = ServerAssignor::Range.assign(&members, &partitions);
        check_complete(&members, &partitions, &result);
        for m in ["a", "b", "c"] {
            assert_eq!(result[m].get(&tid(1)), result[m].get(&tid(2)));
        }
        assert_eq!(result["a"][&tid(1)], BTreeSet::from([0, 1]));
        assert_eq!(result["b"][&tid(1)], BTreeSet::from([2, 3]));
        assert_eq!(result["c"][&tid(1)], BTreeSet::from([4]));
        assert_eq!(result["a"][&tid(3)], BTreeSet::from([0, 1]));
        assert_eq!(result["b"][&tid(3)], BTreeSet::from([2]));
        assert!(!result["c"].contains_key(&tid(3)));
    }

    #[test]
    fn range_puts_static_members_first() {
        let partitions = BTreeMap::from([(tid(1), 2)]);
        let mut late = member("a", &[1], Assignment::new());
        let mut early = member("z", &[1], Assignment::new());
        late.instance_id = Some("i2".into());
        early.instance_id = Some("i1".into());
        let members = vec![member("0", &[1], Assignment::new()), late, early];
        let result = ServerAssignor::Range.assign(&members, &partitions);
        assert_eq!(result["z"][&tid(1)], BTreeSet::from([0]));
        assert_eq!(result["a"][&tid(1)], BTreeSet::from([1]));
        assert!(result["0"].is_empty());
    }

    #[test]
    fn assignors_are_deterministic() {
        let partitions = BTreeMap::from([(tid(1), 9), (tid(2), 4)]);
        let members = vec![
            member("x", &[1, 2], Assignment::new()),
            member("y", &[1], Assignment::new()),
            member("w", &[2], Assignment::new()),
        ];
        let mut reversed = members.clone();
        reversed.reverse();
        for assignor in [ServerAssignor::Uniform, ServerAssignor::Range] {
            let a = assignor.assign(&members, &partitions);
            assert_eq!(a, assignor.assign(&reversed, &partitions));
            assert_eq!(a, assignor.assign(&members, &partitions));
        }
    }

    #[test]
    fn names_round_trip() {
        for a in [ServerAssignor::Uniform, ServerAssignor::Range] {
            assert_eq!(ServerAssignor::from_name(a.name()), Some(a));
        }
        assert_eq!(ServerAssignor::from_name("sticky"), None);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn uniform_is_complete_balanced_and_stable(
                counts in proptest::collection::vec(0i32..12, 1..4),
                subs in proptest::collection::vec(proptest::collection::btree_set(0u8..4, 0..4), 1..7),
            ) {
                let partitions: BTreeMap<TopicId, i32> =
                    counts.iter().enumerate().map(|(i, &c)| (tid(i as u8), c)).collect();
                let members: Vec<MemberSpec> = subs
                    .iter()
                    .enumerate()
                    .map(|(i, s)| MemberSpec {
                        member_id: format!("m{i}"),
                        instance_id: None,
                        subscribed_topics: s.iter().map(|&t| tid(t)).collect(),
                        previous: Assignment::new(),
                    })
                    .collect();
                let first = ServerAssignor::Uniform.assign(&members, &partitions);
                check_complete(&members, &partitions, &first);
                // Nobody could take a partition from a subscriber holding two more.
                for m in &members {
                    for (t, ps) in &first[&m.member_id] {
                        if ps.is_empty() { continue; }
                        for o in &members {
                            if o.subscribed_topics.contains(t) {
                                prop_assert!(count(&first[&o.member_id]) + 1 >= count(&first[&m.member_id]));
                            }
                        }
                    }
                }
                // Feeding the result back changes nothing.
                let again: Vec<MemberSpec> = members
                    .iter()
                    .map(|m| MemberSpec { previous: first[&m.member_id].clone(), ..m.clone() })
                    .collect();
                prop_assert_eq!(ServerAssignor::Uniform.assign(&again, &partitions), first.clone());
                let ranged = ServerAssignor::Range.assign(&members, &partitions);
                check_complete(&members, &partitions, &ranged);
            }
        }
    }
}
