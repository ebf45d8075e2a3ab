package main

// txn-implicit-add: a producer on transaction version 2 (KIP-890 part 2), with raw requests. It never sends
// AddPartitionsToTxn or AddOffsetsToTxn: its Produce v12 batches and TxnOffsetCommit v5 leave adding the partitions
// to the leaders and the group coordinator. Transaction 1 writes `committed-<p>` to every partition (and, with
// --offsets-group, commits an offset) and commits; EndTxn v5 answers with the epoch bumped. Transaction 2 writes
// `aborted-0` to partition 0 under the new epoch; a batch with the old epoch (a zombie of transaction 1) is then
// refused; transaction 2 aborts. Prints:
//
//	produce txn <1|2> partition <p> leader <id> epoch <e> error <code>
//	offsets group <id> coordinator <id> error <code>
//	end txn <1|2> commit <0|1> epoch <epoch answered> error <code>
//	stale partition 0 epoch <e> error <code>

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

func implicitAdd(args []string) error {
	fs := flag.NewFlagSet("txn-implicit-add", flag.ContinueOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap servers")
	topic := fs.String("topic", "", "topic")
	txnID := fs.String("transactional-id", "", "transactional id")
	group := fs.String("offsets-group", "", "also commit offsets for a group (prefix) in transaction 1")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// Produce v12 (v13 names topics by id) and TxnOffsetCommit v5: the transaction version 2 forms.
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(0, 12)
	versions.SetMaxKeyVersion(28, 5)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds(*bootstrap)...), kgo.MaxVersions(versions))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	coordinator, producerID, epoch, err := initTransactional(ctx, cl, *txnID)
	if err != nil {
		return err
	}
	partitions, err := partitionLeaders(ctx, cl, *topic)
	if err != nil {
		return err
	}
	// Retries what a producer retries (the previous transaction still completing, a coordinator moving).
	produce := func(txn int, p kmsg.MetadataResponseTopicPartition, epoch int16, sequence int32, value string) (int16, error) {
		for {
			code, err := produceOne(ctx, cl, p.Leader, *txnID, *topic, p.Partition,
				transactionalBatch(producerID, epoch, sequence, value))
			if err != nil {
				return 0, err
			}
			retriable := code == kerr.ConcurrentTransactions.Code || code == kerr.NotEnoughReplicas.Code ||
				code == kerr.NotLeaderForPartition.Code
			if !retriable || ctx.Err() != nil {
				if txn > 0 {
					fmt.Printf("produce txn %d partition %d leader %d epoch %d error %d\n", txn, p.Partition,
						p.Leader, epoch, code)
				}
				return code, nil
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	for _, p := range partitions {
		if _, err := produce(1, p, epoch, 0, fmt.Sprintf("committed-%d", p.Partition)); err != nil {
			return err
		}
	}
	if *group != "" {
		if err := unaddedOffsets(ctx, cl, *group, *txnID, producerID, epoch, coordinator, *topic); err != nil {
			return err
		}
	}
	_, bumped, code, err := endTxn(ctx, cl, *txnID, producerID, epoch, true)
	if err != nil {
		return err
	}
	fmt.Printf("end txn 1 commit 1 epoch %d error %d\n", bumped, code)

	var first kmsg.MetadataResponseTopicPartition
	for _, p := range partitions {
		if p.Partition == 0 {
			first = p
		}
	}
	// Transaction 2's batch is taken once transaction 1 is complete (its markers written): from then on, a batch
	// with the old epoch cannot join transaction 1 either.
	if _, err := produce(2, first, bumped, 0, "aborted-0"); err != nil {
		return err
	}
	stale, err := produce(0, first, epoch, 1, "stale-0")
	if err != nil {
		return err
	}
	fmt.Printf("stale partition 0 epoch %d error %d\n", epoch, stale)

	_, after, code, err := endTxn(ctx, cl, *txnID, producerID, bumped, false)
	if err != nil {
		return err
	}
	fmt.Printf("end txn 2 commit 0 epoch %d error %d\n", after, code)
	return nil
}
