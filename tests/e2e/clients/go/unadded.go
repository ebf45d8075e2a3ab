package main

// txn-unadded-produce: a transactional producer that skips AddPartitionsToTxn (KIP-890 part 1). It starts a
// transaction with one partition added (--added), then sends one transactional batch, with raw Produce v11
// requests to each leader, to every partition of the topic. A broker verifying with the transaction coordinator
// accepts the added partition and refuses the others; one that does not would leave a hanging transaction
// there. Prints one line per partition: `partition <index> leader <id> coordinator <id> added <0|1> error
// <code>`, then aborts the transaction.

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

func unaddedProduce(args []string) error {
	fs := flag.NewFlagSet("txn-unadded-produce", flag.ContinueOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap servers")
	topic := fs.String("topic", "", "topic")
	txnID := fs.String("transactional-id", "", "transactional id")
	added := fs.Int("added", 0, "the partition added to the transaction")
	group := fs.String("offsets-group", "", "also commit offsets for a group (prefix) without AddOffsetsToTxn")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// Produce v11 and the producers' AddPartitionsToTxn (v3): the transaction version 1 paths, where the
	// producer adds partitions and the leader only verifies (from v12 a leader adds them itself).
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(0, 11)
	versions.SetMaxKeyVersion(24, 3)
	versions.SetMaxKeyVersion(28, 4) // TxnOffsetCommit: from v5 the group coordinator adds its partition itself
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds(*bootstrap)...), kgo.MaxVersions(versions))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	coordinator, producerID, epoch, err := initTransactional(ctx, cl, *txnID)
	if err != nil {
		return err
	}

	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.TransactionalID = *txnID
	add.ProducerID, add.ProducerEpoch = producerID, epoch
	add.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: *topic, Partitions: []int32{int32(*added)}}}
	addResp, err := add.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, t := range addResp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("AddPartitionsToTxn: %w", err)
			}
		}
	}

	partitions, err := partitionLeaders(ctx, cl, *topic)
	if err != nil {
		return err
	}
	for _, p := range partitions {
		code, err := produceOne(ctx, cl, p.Leader, *txnID, *topic, p.Partition,
			transactionalBatch(producerID, epoch, 0, fmt.Sprintf("unadded-%d", p.Partition)))
		if err != nil {
			return err
		}
		isAdded := 0
		if p.Partition == int32(*added) {
			isAdded = 1
		}
		fmt.Printf("partition %d leader %d coordinator %d added %d error %d\n", p.Partition, p.Leader, coordinator,
			isAdded, code)
	}

	if *group != "" {
		if err := unaddedOffsets(ctx, cl, *group, *txnID, producerID, epoch, coordinator, *topic); err != nil {
			return err
		}
	}

	_, _, code, err := endTxn(ctx, cl, *txnID, producerID, epoch, false)
	if err != nil {
		return err
	}
	if err := kerr.ErrorForCode(code); err != nil {
		return fmt.Errorf("EndTxn: %w", err)
	}
	return nil
}

// initTransactional finds the transaction coordinator of txnID and has it give a producer id and epoch. The first
// FindCoordinator creates __transaction_state: retriable errors until its coordinators load.
func initTransactional(ctx context.Context, cl *kgo.Client, txnID string) (int32, int64, int16, error) {
	for {
		find := kmsg.NewPtrFindCoordinatorRequest()
		find.CoordinatorType = 1
		find.CoordinatorKeys = []string{txnID}
		findResp, err := find.RequestWith(ctx, cl)
		if err != nil {
			return 0, 0, 0, err
		}
		if len(findResp.Coordinators) != 1 {
			return 0, 0, 0, fmt.Errorf("FindCoordinator answered %d coordinators", len(findResp.Coordinators))
		}
		coordinator := findResp.Coordinators[0].NodeID
		err = kerr.ErrorForCode(findResp.Coordinators[0].ErrorCode)
		if err == nil {
			init := kmsg.NewPtrInitProducerIDRequest()
			init.TransactionalID = &txnID
			init.TransactionTimeoutMillis = 60000
			initResp, ierr := init.RequestWith(ctx, cl)
			if ierr != nil {
				return 0, 0, 0, ierr
			}
			err = kerr.ErrorForCode(initResp.ErrorCode)
			if err == nil {
				return coordinator, initResp.ProducerID, initResp.ProducerEpoch, nil
			}
		}
		if !kerr.IsRetriable(err) || ctx.Err() != nil {
			return 0, 0, 0, fmt.Errorf("no producer id: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// partitionLeaders is the topic's partitions with their leaders.
func partitionLeaders(ctx context.Context, cl *kgo.Client, topic string) ([]kmsg.MetadataResponseTopicPartition, error) {
	meta := kmsg.NewPtrMetadataRequest()
	meta.Topics = []kmsg.MetadataRequestTopic{{Topic: &topic}}
	metaResp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	if len(metaResp.Topics) != 1 || metaResp.Topics[0].ErrorCode != 0 {
		return nil, fmt.Errorf("no metadata for %s", topic)
	}
	return metaResp.Topics[0].Partitions, nil
}

// endTxn commits or aborts the producer's transaction; the producer id and epoch it answers with (EndTxn v5 bumps
// the epoch), and its error code. CONCURRENT_TRANSACTIONS is retried.
func endTxn(ctx context.Context, cl *kgo.Client, txnID string, producerID int64, epoch int16,
	commit bool) (int64, int16, int16, error) {
	for {
		end := kmsg.NewPtrEndTxnRequest()
		end.TransactionalID = txnID
		end.ProducerID, end.ProducerEpoch = producerID, epoch
		end.Commit = commit
		resp, err := end.RequestWith(ctx, cl)
		if err != nil {
			return 0, 0, 0, err
		}
		if resp.ErrorCode != kerr.ConcurrentTransactions.Code || ctx.Err() != nil {
			return resp.ProducerID, resp.ProducerEpoch, resp.ErrorCode, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// produceOne sends one transactional batch to one partition's leader (acks=all) and returns the partition's error code.
func produceOne(ctx context.Context, cl *kgo.Client, leader int32, txnID, topic string, partition int32,
	batch []byte) (int16, error) {
	produce := kmsg.NewPtrProduceRequest()
	produce.TransactionID = &txnID
	produce.Acks = -1
	produce.TimeoutMillis = 30000
	produce.Topics = []kmsg.ProduceRequestTopic{{
		Topic:      topic,
		Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: partition, Records: batch}},
	}}
	resp, err := produce.RequestWith(ctx, cl.Broker(int(leader)))
	if err != nil {
		return 0, fmt.Errorf("produce to partition %d: %w", partition, err)
	}
	code := int16(-1)
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			code = rp.ErrorCode
		}
	}
	return code, nil
}

// transactionalBatch is one uncompressed v2 record batch of one record, marked transactional.
func transactionalBatch(producerID int64, epoch int16, sequence int32, value string) []byte {
	var record []byte
	record = append(record, 0)               // attributes
	record = binary.AppendVarint(record, 0)  // timestamp delta
	record = binary.AppendVarint(record, 0)  // offset delta
	record = binary.AppendVarint(record, -1) // null key
	record = binary.AppendVarint(record, int64(len(value)))
	record = append(record, value...)
	record = binary.AppendVarint(record, 0) // no headers
	records := binary.AppendVarint(nil, int64(len(record)))
	records = append(records, record...)

	now := time.Now().UnixMilli()
	// From the attributes on: what the CRC covers.
	var body []byte
	body = binary.BigEndian.AppendUint16(body, 0x10) // transactional, no compression
	body = binary.BigEndian.AppendUint32(body, 0)    // last offset delta
	body = binary.BigEndian.AppendUint64(body, uint64(now))
	body = binary.BigEndian.AppendUint64(body, uint64(now))
	body = binary.BigEndian.AppendUint64(body, uint64(producerID))
	body = binary.BigEndian.AppendUint16(body, uint16(epoch))
	body = binary.BigEndian.AppendUint32(body, uint32(sequence))
	body = binary.BigEndian.AppendUint32(body, 1) // record count
	body = append(body, records...)

	var batch []byte
	batch = binary.BigEndian.AppendUint64(batch, 0)                       // base offset
	batch = binary.BigEndian.AppendUint32(batch, uint32(4+1+4+len(body))) // length after this field
	batch = binary.BigEndian.AppendUint32(batch, 0xffffffff)              // partition leader epoch
	batch = append(batch, 2)                                              // magic
	batch = binary.BigEndian.AppendUint32(batch, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	return append(batch, body...)
}

// unaddedOffsets commits an offset within the transaction for a group whose coordinator is, if any of 20
// candidates' is, not the transaction coordinator, without AddOffsetsToTxn first. Prints `offsets group <id>
// coordinator <id> error <code>`.
func unaddedOffsets(ctx context.Context, cl *kgo.Client, prefix, txnID string, producerID int64, epoch int16,
	txnCoordinator int32, topic string) error {
	var group string
	var groupCoordinator int32
	for i := 0; i < 20; i++ {
		group = fmt.Sprintf("%s-%d", prefix, i)
		for {
			find := kmsg.NewPtrFindCoordinatorRequest()
			find.CoordinatorKeys = []string{group}
			resp, err := find.RequestWith(ctx, cl)
			if err != nil {
				return err
			}
			if len(resp.Coordinators) != 1 {
				return fmt.Errorf("FindCoordinator answered %d coordinators", len(resp.Coordinators))
			}
			err = kerr.ErrorForCode(resp.Coordinators[0].ErrorCode)
			if err == nil {
				groupCoordinator = resp.Coordinators[0].NodeID
				break
			}
			if !kerr.IsRetriable(err) || ctx.Err() != nil {
				return fmt.Errorf("no group coordinator: %w", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if groupCoordinator != txnCoordinator {
			break
		}
	}
	commit := kmsg.NewPtrTxnOffsetCommitRequest()
	commit.TransactionalID = txnID
	commit.Group = group
	commit.ProducerID, commit.ProducerEpoch = producerID, epoch
	commit.Topics = []kmsg.TxnOffsetCommitRequestTopic{{
		Topic:      topic,
		Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1, LeaderEpoch: -1}},
	}}
	resp, err := commit.RequestWith(ctx, cl.Broker(int(groupCoordinator)))
	if err != nil {
		return err
	}
	code := int16(-1)
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			code = p.ErrorCode
		}
	}
	fmt.Printf("offsets group %s coordinator %d error %d\n", group, groupCoordinator, code)
	return nil
}
