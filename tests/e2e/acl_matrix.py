"""The ACL matrix of test_acls.py: for each API a client sends, a request (kafka-python's protocol classes, at the
newest version both sides speak unless noted), the ACLs Kafka requires for it, and the error Kafka answers a principal
without them. Each case has its own user, topic, group and transactional id, so the grants of one case do not reach
another.
"""

from dataclasses import dataclass
from typing import Callable, List, Tuple

from kafka.protocol.admin.acl import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest
from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest
from kafka.protocol.admin.cluster import AlterReplicaLogDirsRequest, DescribeLogDirsRequest, DescribeQuorumRequest
from kafka.protocol.admin.configs import AlterConfigsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest
from kafka.protocol.admin.groups import DeleteGroupsRequest, DescribeGroupsRequest
from kafka.protocol.admin.topics import (AlterPartitionReassignmentsRequest, CreatePartitionsRequest,
                                         CreateTopicsRequest, DeleteRecordsRequest, DeleteTopicsRequest,
                                         DescribeTopicPartitionsRequest, ElectLeadersRequest,
                                         ListPartitionReassignmentsRequest)
from kafka.protocol.admin.transactions import DescribeProducersRequest, DescribeTransactionsRequest
from kafka.protocol.admin.users import AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.group import (HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, OffsetCommitRequest,
                                           OffsetDeleteRequest, OffsetFetchRequest, SyncGroupRequest)
from kafka.protocol.consumer.offsets import ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import (AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest,
                                                 InitProducerIdRequest, TxnOffsetCommitRequest,
                                                 WriteTxnMarkersRequest)
from kafka.record.memory_records import MemoryRecordsBuilder

# Kafka's resource types and operations (wire codes), and its authorization errors.
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = (
    3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53
AUTHORIZATION_ERRORS = {TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED}


@dataclass
class Names:
    """One case's resources."""
    topic: str
    topic_id: object
    group: str
    txn: str


@dataclass
class Case:
    api: str
    build: Callable[[Names], object]
    # (resource type, which of the case's names — "topic", "group", "txn", "cluster" —, operation)
    grants: List[Tuple[int, str, int]]
    denied: int


def records() -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 16)
    builder.append(timestamp=None, key=None, value=b"v", headers=[])
    builder.close()
    return bytes(builder.buffer())


def _produce(n: Names):
    return ProduceRequest(acks=1, timeout_ms=5000, transactional_id=None, topic_data=[
        ProduceRequest.TopicProduceData(name=n.topic, topic_id=n.topic_id, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records())])])


def _fetch(n: Names):
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                            topic=n.topic, topic_id=n.topic_id, partitions=[FetchRequest.FetchTopic.FetchPartition(
                                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                log_start_offset=-1, partition_max_bytes=1 << 20)])],
                        forgotten_topics_data=[], rack_id="")


def _list_offsets(n: Names):
    return ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=n.topic, partitions=[ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=-1)])])


def _offset_for_leader_epoch(n: Names):
    return OffsetForLeaderEpochRequest(replica_id=-2, topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
        topic=n.topic, partitions=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
            partition=0, current_leader_epoch=-1, leader_epoch=0)])])


def _offset_commit(n: Names):
    return OffsetCommitRequest(group_id=n.group, generation_id_or_member_epoch=-1, member_id="", topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(name=n.topic, topic_id=n.topic_id, partitions=[
            OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata="")])])


def _offset_fetch(n: Names):
    return OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id=n.group, member_id=None, member_epoch=-1, topics=[
            OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
                name=n.topic, topic_id=n.topic_id, partition_indexes=[0])])], require_stable=False)


def _join(n: Names):
    return JoinGroupRequest(group_id=n.group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                            group_instance_id=None, protocol_type="consumer", protocols=[
                                JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")], reason=None)


def _txn_offset_commit(n: Names):
    return TxnOffsetCommitRequest(transactional_id=n.txn, group_id=n.group, producer_id=1, producer_epoch=0,
                                  member_id="", group_instance_id=None, topics=[
                                      TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=n.topic, partitions=[
                                          TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
                                          .TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=0,
                                                                           committed_leader_epoch=-1,
                                                                           committed_metadata="")])])


def _write_txn_markers(n: Names):
    return WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=1, producer_epoch=0, transaction_result=False, coordinator_epoch=0, topics=[
            WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(name=n.topic, partition_indexes=[0])])])


def _describe_configs(kind: int, name: Callable[[Names], str]):
    return lambda n: DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=kind, resource_name=name(n), configuration_keys=None)], include_synonyms=False,
        include_documentation=False)


def _incremental_alter_configs(kind: int, name: Callable[[Names], str], key: str, value: str):
    return lambda n: IncrementalAlterConfigsRequest(resources=[
        IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=kind, resource_name=name(n), configs=[
            IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig(
                name=key, config_operation=0, value=value)])], validate_only=True)


def _acl_filter(cls):
    return dict(resource_type_filter=TOPIC, resource_name_filter="none-such", pattern_type_filter=3,
                principal_filter=None, host_filter=None, operation=1, permission_type=1)


CASES = [
    Case("Produce", _produce, [(TOPIC, "topic", WRITE)], TOPIC_DENIED),
    Case("Fetch", _fetch, [(TOPIC, "topic", READ)], TOPIC_DENIED),
    Case("ListOffsets", _list_offsets, [(TOPIC, "topic", DESCRIBE)], TOPIC_DENIED),
    Case("Metadata", lambda n: MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n.topic)],
                                               allow_auto_topic_creation=False),
         [(TOPIC, "topic", DESCRIBE)], TOPIC_DENIED),
    Case("OffsetForLeaderEpoch", _offset_for_leader_epoch, [(TOPIC, "topic", DESCRIBE)], TOPIC_DENIED),
    Case("OffsetCommit", _offset_commit, [(GROUP, "group", READ), (TOPIC, "topic", READ)], GROUP_DENIED),
    Case("OffsetFetch", _offset_fetch, [(GROUP, "group", DESCRIBE), (TOPIC, "topic", DESCRIBE)], GROUP_DENIED),
    Case("FindCoordinator-group", lambda n: FindCoordinatorRequest(key_type=0, coordinator_keys=[n.group]),
         [(GROUP, "group", DESCRIBE)], GROUP_DENIED),
    Case("FindCoordinator-txn", lambda n: FindCoordinatorRequest(key_type=1, coordinator_keys=[n.txn]),
         [(TXN, "txn", DESCRIBE)], TXN_DENIED),
    Case("JoinGroup", _join, [(GROUP, "group", READ)], GROUP_DENIED),
    Case("SyncGroup", lambda n: SyncGroupRequest(group_id=n.group, generation_id=1, member_id="m",
                                                 group_instance_id=None, protocol_type="consumer",
                                                 protocol_name="range", assignments=[]),
         [(GROUP, "group", READ)], GROUP_DENIED),
    Case("Heartbeat", lambda n: HeartbeatRequest(group_id=n.group, generation_id=1, member_id="m",
                                                 group_instance_id=None),
         [(GROUP, "group", READ)], GROUP_DENIED),
    Case("LeaveGroup", lambda n: LeaveGroupRequest(group_id=n.group, members=[
        LeaveGroupRequest.MemberIdentity(member_id="m", group_instance_id=None, reason=None)]),
         [(GROUP, "group", READ)], GROUP_DENIED),
    Case("DescribeGroups", lambda n: DescribeGroupsRequest(groups=[n.group], include_authorized_operations=False),
         [(GROUP, "group", DESCRIBE)], GROUP_DENIED),
    Case("DeleteGroups", lambda n: DeleteGroupsRequest(groups_names=[n.group]), [(GROUP, "group", DELETE)],
         GROUP_DENIED),
    Case("OffsetDelete", lambda n: OffsetDeleteRequest(group_id=n.group, topics=[
        OffsetDeleteRequest.OffsetDeleteRequestTopic(name=n.topic, partitions=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=0)])]),
         [(GROUP, "group", DELETE), (TOPIC, "topic", READ)], GROUP_DENIED),
    Case("CreateTopics", lambda n: CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=n.topic + "-new", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=10000, validate_only=False), [(TOPIC, "topic-new", CREATE)], TOPIC_DENIED),
    Case("DeleteTopics", lambda n: DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(
        name=n.topic, topic_id=None)], topic_names=[n.topic], timeout_ms=10000),
         [(TOPIC, "topic", DELETE), (TOPIC, "topic", DESCRIBE)], TOPIC_DENIED),
    Case("DeleteRecords", lambda n: DeleteRecordsRequest(topics=[DeleteRecordsRequest.DeleteRecordsTopic(
        name=n.topic, partitions=[DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(
            partition_index=0, offset=0)])], timeout_ms=10000), [(TOPIC, "topic", DELETE)], TOPIC_DENIED),
    Case("CreatePartitions", lambda n: CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
        name=n.topic, count=2, assignments=None)], timeout_ms=10000, validate_only=True),
         [(TOPIC, "topic", ALTER)], TOPIC_DENIED),
    Case("InitProducerId-txn", lambda n: InitProducerIdRequest(transactional_id=n.txn, transaction_timeout_ms=60000,
                                                               producer_id=-1, producer_epoch=-1),
         [(TXN, "txn", WRITE)], TXN_DENIED),
    Case("InitProducerId-idempotent", lambda n: InitProducerIdRequest(transactional_id=None,
                                                                      transaction_timeout_ms=60000, producer_id=-1,
                                                                      producer_epoch=-1),
         [(TOPIC, "topic", WRITE)], CLUSTER_DENIED),
    # v3: the producer's own form (v4 and later are the brokers', needing CLUSTER_ACTION).
    Case("AddPartitionsToTxn", lambda n: AddPartitionsToTxnRequest[3](
        v3_and_below_transactional_id=n.txn, v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=n.topic, partitions=[0])]),
         [(TXN, "txn", WRITE), (TOPIC, "topic", WRITE)], TXN_DENIED),
    Case("AddOffsetsToTxn", lambda n: AddOffsetsToTxnRequest(transactional_id=n.txn, producer_id=1,
                                                             producer_epoch=0, group_id=n.group),
         [(TXN, "txn", WRITE), (GROUP, "group", READ)], TXN_DENIED),
    Case("EndTxn", lambda n: EndTxnRequest(transactional_id=n.txn, producer_id=1, producer_epoch=0, committed=False),
         [(TXN, "txn", WRITE)], TXN_DENIED),
    Case("TxnOffsetCommit", _txn_offset_commit, [(TXN, "txn", WRITE), (GROUP, "group", READ), (TOPIC, "topic", READ)],
         TXN_DENIED),
    Case("WriteTxnMarkers", _write_txn_markers, [(CLUSTER, "cluster", CLUSTER_ACTION)], CLUSTER_DENIED),
    Case("DescribeConfigs-topic", _describe_configs(2, lambda n: n.topic), [(TOPIC, "topic", DESCRIBE_CONFIGS)],
         TOPIC_DENIED),
    Case("DescribeConfigs-broker", _describe_configs(4, lambda n: "1"), [(CLUSTER, "cluster", DESCRIBE_CONFIGS)],
         CLUSTER_DENIED),
    Case("AlterConfigs-topic", lambda n: AlterConfigsRequest(resources=[AlterConfigsRequest.AlterConfigsResource(
        resource_type=2, resource_name=n.topic, configs=[AlterConfigsRequest.AlterConfigsResource.AlterableConfig(
            name="retention.ms", value="100000")])], validate_only=True), [(TOPIC, "topic", ALTER_CONFIGS)],
         TOPIC_DENIED),
    Case("IncrementalAlterConfigs-topic", _incremental_alter_configs(2, lambda n: n.topic, "retention.ms", "100000"),
         [(TOPIC, "topic", ALTER_CONFIGS)], TOPIC_DENIED),
    Case("IncrementalAlterConfigs-broker", _incremental_alter_configs(4, lambda n: "1", "log.cleaner.threads", "1"),
         [(CLUSTER, "cluster", ALTER_CONFIGS)], CLUSTER_DENIED),
    Case("DescribeLogDirs", lambda n: DescribeLogDirsRequest(topics=None), [(CLUSTER, "cluster", DESCRIBE)],
         CLUSTER_DENIED),
    Case("AlterReplicaLogDirs", lambda n: AlterReplicaLogDirsRequest(dirs=[
        AlterReplicaLogDirsRequest.AlterReplicaLogDir(path="/none-such", topics=[
            AlterReplicaLogDirsRequest.AlterReplicaLogDir.AlterReplicaLogDirTopic(name=n.topic, partitions=[0])])]),
         [(CLUSTER, "cluster", ALTER)], CLUSTER_DENIED),
    Case("ElectLeaders", lambda n: ElectLeadersRequest(election_type=0, topic_partitions=[
        ElectLeadersRequest.TopicPartitions(topic=n.topic, partitions=[0])], timeout_ms=10000),
         [(CLUSTER, "cluster", ALTER)], CLUSTER_DENIED),
    Case("AlterPartitionReassignments", lambda n: AlterPartitionReassignmentsRequest(timeout_ms=10000, topics=[
        AlterPartitionReassignmentsRequest.ReassignableTopic(name=n.topic, partitions=[
            AlterPartitionReassignmentsRequest.ReassignableTopic.ReassignablePartition(
                partition_index=0, replicas=None)])]), [(CLUSTER, "cluster", ALTER)], CLUSTER_DENIED),
    Case("ListPartitionReassignments", lambda n: ListPartitionReassignmentsRequest(timeout_ms=10000, topics=None),
         [(CLUSTER, "cluster", DESCRIBE)], CLUSTER_DENIED),
    Case("DescribeAcls", lambda n: DescribeAclsRequest(**_acl_filter(DescribeAclsRequest)),
         [(CLUSTER, "cluster", DESCRIBE)], CLUSTER_DENIED),
    Case("CreateAcls", lambda n: CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
        resource_type=TOPIC, resource_name="none-such", resource_pattern_type=3, principal="User:nobody", host="*",
        operation=READ, permission_type=3)]), [(CLUSTER, "cluster", ALTER)], CLUSTER_DENIED),
    Case("DeleteAcls", lambda n: DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
        **_acl_filter(DeleteAclsRequest))]), [(CLUSTER, "cluster", ALTER)], CLUSTER_DENIED),
    Case("DescribeUserScramCredentials", lambda n: DescribeUserScramCredentialsRequest(users=[
        DescribeUserScramCredentialsRequest.UserName(name="none-such")]),
         [(CLUSTER, "cluster", DESCRIBE)], CLUSTER_DENIED),
    Case("AlterUserScramCredentials", lambda n: AlterUserScramCredentialsRequest(deletions=[
        AlterUserScramCredentialsRequest.ScramCredentialDeletion(name="none-such", mechanism=1)], upsertions=[]),
         [(CLUSTER, "cluster", ALTER)], CLUSTER_DENIED),
    Case("DescribeClientQuotas", lambda n: DescribeClientQuotasRequest(components=[
        DescribeClientQuotasRequest.ComponentData(entity_type="user", match_type=0, match="none-such")], strict=False),
         [(CLUSTER, "cluster", DESCRIBE_CONFIGS)], CLUSTER_DENIED),
    Case("AlterClientQuotas", lambda n: AlterClientQuotasRequest(entries=[AlterClientQuotasRequest.EntryData(
        entity=[AlterClientQuotasRequest.EntryData.EntityData(entity_type="user", entity_name="none-such")],
        ops=[AlterClientQuotasRequest.EntryData.OpData(key="producer_byte_rate", value=1024.0, remove=False)])],
        validate_only=True), [(CLUSTER, "cluster", ALTER_CONFIGS)], CLUSTER_DENIED),
    Case("DescribeProducers", lambda n: DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
        name=n.topic, partition_indexes=[0])]), [(TOPIC, "topic", READ)], TOPIC_DENIED),
    Case("DescribeTransactions", lambda n: DescribeTransactionsRequest(transactional_ids=[n.txn]),
         [(TXN, "txn", DESCRIBE)], TXN_DENIED),
    Case("DescribeTopicPartitions", lambda n: DescribeTopicPartitionsRequest(topics=[
        DescribeTopicPartitionsRequest.TopicRequest(name=n.topic)], response_partition_limit=100, cursor=None),
         [(TOPIC, "topic", DESCRIBE)], TOPIC_DENIED),
    Case("DescribeQuorum", lambda n: DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)])]),
         [(CLUSTER, "cluster", DESCRIBE)], CLUSTER_DENIED),
]


def error_codes(response) -> List[int]:
    """Every error code anywhere in a response."""
    found = []

    def walk(value):
        if isinstance(value, dict):
            for k, v in value.items():
                if k.endswith("error_code") and isinstance(v, int):
                    found.append(v)
                else:
                    walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
    walk(response.to_dict())
    return found
