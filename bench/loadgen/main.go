// Command loadgen is the benchmark's second load generator, built on franz-go so that no conclusion
// rests on the Java client alone. Each subcommand prints one JSON object on stdout:
//
//	create-topics --bootstrap B --prefix P --topics N --partitions P
//	produce       --bootstrap B --topic T --records N --size S --acks all|1 --codec C [--rate R]
//	consume       --bootstrap B --topic T --partitions P --records N
//	e2e           --bootstrap B --topic T --records N --size S --rate R [--transaction-records K]
//	acls          --bootstrap B --count N --allow-prefix P
//	share         --bootstrap B --topic T --group G --consumers C --records N [--size S --rate R]
//
// produce reports throughput and send-to-acknowledgement latency; consume reads every partition from
// the start without a consumer group; e2e sends timestamped records to a one-partition topic and
// measures send-to-receipt latency in the same process (one clock), and the acknowledgements' latency
// as ack_* (a slow high watermark shows in both, a slow consumer wake-up only in the first); with --transaction-records it
// sends them in transactions of K records and reads as read_committed, so a record arrives once
// its transaction commits. acls creates N ACLs of other principals (literal and prefixed topic ACLs,
// group ACLs) and, first, the ACLs that let this client (User:ANONYMOUS) administer the cluster and use
// every topic named with prefix P: an authorizer then has N ACLs to look through for each request.
// share reads with C share-group consumers (KIP-932, each its own client, records accepted as they
// are polled) in group G, set to start at the earliest offset: without --rate, N records already in
// the topic, reporting throughput; with --rate it also sends N timestamped records of --size bytes at
// that rate and reports their send-to-receipt latency.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: loadgen create-topics|produce|consume|e2e|acls|share [flags]"))
	}
	if os.Getenv("GOGC") == "" {
		// The load generator's own garbage collection shows in what it measures: with Go's default
		// (100) its pauses added about 1 ms to the end-to-end p99 at 34,000 records/s, and 10-20 % to
		// its CPU per GB consumed. Collecting less often keeps the figures the broker's.
		debug.SetGCPercent(400)
	}
	var err error
	switch os.Args[1] {
	case "create-topics":
		err = createTopics(os.Args[2:])
	case "produce":
		err = produce(os.Args[2:])
	case "consume":
		err = consume(os.Args[2:])
	case "e2e":
		err = endToEnd(os.Args[2:])
	case "acls":
		err = createACLs(os.Args[2:])
	case "share":
		err = shareConsume(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "loadgen:", err)
	os.Exit(1)
}

func emit(v map[string]any) error {
	return json.NewEncoder(os.Stdout).Encode(v)
}

func codecOf(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none":
		return kgo.NoCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	}
	return kgo.NoCompression(), fmt.Errorf("unknown codec %q", name)
}

// payloads returns a pool of distinct random-letter values, so compressed rows compress like text
// rather than like one repeated buffer.
func payloads(size int) [][]byte {
	rng := rand.New(rand.NewSource(42))
	pool := make([][]byte, 64)
	for i := range pool {
		p := make([]byte, size)
		for j := range p {
			p[j] = byte('A' + rng.Intn(26))
		}
		pool[i] = p
	}
	return pool
}

// pacer spaces sends evenly at rate records per second; rate 0 means as fast as the client accepts.
type pacer struct {
	start time.Time
	rate  float64
}

func (p pacer) wait(i int) {
	if p.rate <= 0 {
		return
	}
	due := p.start.Add(time.Duration(float64(i) / p.rate * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		time.Sleep(d)
	}
}

// percentiles of latencies in microseconds, reported in milliseconds.
func percentiles(us []int64) map[string]any {
	if len(us) == 0 {
		return map[string]any{}
	}
	sort.Slice(us, func(a, b int) bool { return us[a] < us[b] })
	at := func(q float64) float64 {
		i := int(q * float64(len(us)-1))
		return float64(us[i]) / 1000
	}
	var sum int64
	for _, v := range us {
		sum += v
	}
	return map[string]any{
		"avg_ms":  float64(sum) / float64(len(us)) / 1000,
		"p50_ms":  at(0.50),
		"p99_ms":  at(0.99),
		"p999_ms": at(0.999),
		"max_ms":  float64(us[len(us)-1]) / 1000,
	}
}

func createTopics(args []string) error {
	fs := flag.NewFlagSet("create-topics", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap servers, comma-separated")
	prefix := fs.String("prefix", "t", "topic name prefix")
	topics := fs.Int("topics", 1, "number of topics")
	partitions := fs.Int("partitions", 1, "partitions per topic")
	replicationFactor := fs.Int("replication-factor", 1, "replicas per partition")
	configList := fs.String("configs", "", "topic configs, k=v[,k=v...]")
	_ = fs.Parse(args)
	var configs map[string]*string
	if *configList != "" {
		configs = map[string]*string{}
		for _, kv := range strings.Split(*configList, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("config %q is not k=v", kv)
			}
			configs[k] = &v
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*bootstrap, ",")...), kgo.RequestTimeoutOverhead(120*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	adm.SetTimeoutMillis(120_000)
	start := time.Now()
	// Batches of topics per CreateTopics request keep each request bounded.
	const perRequest = 50
	for first := 0; first < *topics; first += perRequest {
		var names []string
		for i := first; i < first+perRequest && i < *topics; i++ {
			names = append(names, fmt.Sprintf("%s-%d", *prefix, i))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second)
		resp, err := adm.CreateTopics(ctx, int32(*partitions), int16(*replicationFactor), configs, names...)
		cancel()
		if err != nil {
			return err
		}
		if err := resp.Error(); err != nil {
			return err
		}
	}
	created := time.Since(start).Seconds()
	// Measurements start only once every partition has a leader in the broker's metadata, so no tool
	// pays for metadata retries and backoff on a topic that is still being set up.
	var names []string
	for i := 0; i < *topics; i++ {
		names = append(names, fmt.Sprintf("%s-%d", *prefix, i))
	}
	deadline := time.Now().Add(120 * time.Second)
	for !allLeaders(adm, names, *partitions) {
		if time.Now().After(deadline) {
			return errors.New("partitions still without a leader after 120 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return emit(map[string]any{"topics": *topics, "partitions": *topics * *partitions, "seconds": created})
}

func allLeaders(adm *kadm.Client, names []string, partitions int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return false
	}
	for _, name := range names {
		t, ok := details[name]
		if !ok || t.Err != nil || len(t.Partitions) != partitions {
			return false
		}
		for _, p := range t.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false
			}
		}
	}
	return true
}

func produce(args []string) error {
	fs := flag.NewFlagSet("produce", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap servers, comma-separated")
	topic := fs.String("topic", "", "topic")
	records := fs.Int("records", 100000, "records to send")
	size := fs.Int("size", 100, "value size in bytes")
	acks := fs.String("acks", "1", "all or 1")
	codecName := fs.String("codec", "none", "none, lz4, zstd, gzip, snappy")
	rate := fs.Float64("rate", 0, "records per second; 0 for unlimited")
	batchBytes := fs.Int("batch-bytes", 0, "largest batch in bytes; 0 for franz-go's default")
	linger := fs.Duration("linger", 5*time.Millisecond, "how long a batch waits to fill")
	warmup := fs.Int("warmup", 0, "records sent first and left out of the latency percentiles")
	keys := fs.Int("keys", 0, "key record i with key-<i mod keys> (a compaction workload); 0 for no keys")
	_ = fs.Parse(args)
	codec, err := codecOf(*codecName)
	if err != nil {
		return err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...),
		kgo.DefaultProduceTopic(*topic),
		kgo.ProducerBatchCompression(codec),
		// Default: the Java producer's linger, so batching is comparable.
		kgo.ProducerLinger(*linger),
	}
	if *batchBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(int32(*batchBytes)))
	}
	switch *acks {
	case "all", "-1":
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	default:
		return fmt.Errorf("acks must be all or 1, not %q", *acks)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	pool := payloads(*size)
	lat := make([]int64, *records)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	wg.Add(*records)
	p := pacer{start: time.Now(), rate: *rate}
	start := p.start
	for i := 0; i < *records; i++ {
		p.wait(i)
		sent := time.Now()
		idx := i
		record := &kgo.Record{Value: pool[i%len(pool)]}
		if *keys > 0 {
			record.Key = []byte(fmt.Sprintf("key-%08d", i%*keys))
		}
		cl.Produce(context.Background(), record, func(_ *kgo.Record, err error) {
			lat[idx] = time.Since(sent).Microseconds()
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if firstErr != nil {
		return firstErr
	}
	if *warmup >= len(lat) {
		return fmt.Errorf("--warmup %d leaves no records to measure", *warmup)
	}
	out := percentiles(lat[*warmup:])
	out["records"] = *records
	out["seconds"] = elapsed
	out["records_per_s"] = float64(*records) / elapsed
	out["mb_per_s"] = float64(*records) * float64(*size) / elapsed / 1e6
	return emit(out)
}

func consume(args []string) error {
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap servers, comma-separated")
	topic := fs.String("topic", "", "topic")
	partitions := fs.Int("partitions", 1, "partitions to read")
	records := fs.Int("records", 0, "records to read before stopping")
	timeout := fs.Duration("timeout", 120*time.Second, "give up after this long")
	passes := fs.Int("passes", 1, "read the records this many times (from the start each time), timed as one")
	_ = fs.Parse(args)
	offsets := map[int32]kgo.Offset{}
	for p := 0; p < *partitions; p++ {
		offsets[int32(p)] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{*topic: offsets}),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var n, bytes int
	start := time.Now()
	for pass := 0; pass < *passes; pass++ {
		if pass > 0 {
			// Back to the start: a longer read than one pass gives, from the same records.
			rewind := map[int32]kgo.EpochOffset{}
			for p := 0; p < *partitions; p++ {
				rewind[int32(p)] = kgo.EpochOffset{Epoch: -1, Offset: 0}
			}
			cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{*topic: rewind})
		}
		want := (pass + 1) * *records
		for n < want {
			fetches := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return fmt.Errorf("read %d of %d records before the timeout", n, want)
			}
			if errs := fetches.Errors(); len(errs) > 0 {
				return errs[0].Err
			}
			fetches.EachRecord(func(r *kgo.Record) {
				n++
				bytes += len(r.Value) + len(r.Key)
			})
		}
	}
	elapsed := time.Since(start).Seconds()
	return emit(map[string]any{
		"records":       n,
		"seconds":       elapsed,
		"records_per_s": float64(n) / elapsed,
		"mb_per_s":      float64(bytes) / elapsed / 1e6,
		// The consumer's own CPU time (whole process): on a small machine the client, not the
		// broker, can be what limits consume throughput.
		"client_cpu_s": processCPUSeconds(),
	})
}

func processCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func endToEnd(args []string) error {
	fs := flag.NewFlagSet("e2e", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap servers, comma-separated")
	topic := fs.String("topic", "", "topic with one partition, empty")
	records := fs.Int("records", 10000, "records to send")
	size := fs.Int("size", 100, "value size in bytes (at least 8)")
	rate := fs.Float64("rate", 1000, "records per second")
	timeout := fs.Duration("timeout", 120*time.Second, "give up after this long")
	txnRecords := fs.Int("transaction-records", 0, "send in transactions of this many records, read read_committed")
	_ = fs.Parse(args)
	if *size < 8 {
		return errors.New("size must be at least 8 to hold the send timestamp")
	}
	consumerOpts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{*topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(500 * time.Millisecond),
	}
	producerOpts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...),
		kgo.DefaultProduceTopic(*topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// One record per batch at these rates: latency, not batching, is measured.
		kgo.ProducerLinger(0),
	}
	if *txnRecords > 0 {
		consumerOpts = append(consumerOpts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		producerOpts = append(producerOpts, kgo.TransactionalID(fmt.Sprintf("loadgen-e2e-%d", rand.Int63())))
	}
	consumer, err := kgo.NewClient(consumerOpts...)
	if err != nil {
		return err
	}
	defer consumer.Close()
	producer, err := kgo.NewClient(producerOpts...)
	if err != nil {
		return err
	}
	defer producer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	lat := make([]int64, 0, *records)
	done := make(chan error, 1)
	go func() {
		for len(lat) < *records {
			fetches := consumer.PollFetches(ctx)
			if ctx.Err() != nil {
				done <- fmt.Errorf("received %d of %d records before the timeout", len(lat), *records)
				return
			}
			if errs := fetches.Errors(); len(errs) > 0 {
				done <- errs[0].Err
				return
			}
			now := time.Now().UnixNano()
			fetches.EachRecord(func(r *kgo.Record) {
				// Only this run's records: a topic may start with smaller warm-up records.
				if len(r.Value) == *size {
					lat = append(lat, (now-int64(binary.BigEndian.Uint64(r.Value)))/1000)
				}
			})
		}
		done <- nil
	}()
	pad := payloads(*size)[0]
	p := pacer{start: time.Now(), rate: *rate}
	var sendErr error
	var mu sync.Mutex
	acks := make([]int64, 0, *records)
	for i := 0; i < *records; i++ {
		p.wait(i)
		if *txnRecords > 0 && i%*txnRecords == 0 {
			if err := producer.BeginTransaction(); err != nil {
				return err
			}
		}
		v := make([]byte, *size)
		copy(v, pad)
		binary.BigEndian.PutUint64(v, uint64(time.Now().UnixNano()))
		sent := time.Now()
		producer.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				sendErr = err
				return
			}
			acks = append(acks, time.Since(sent).Microseconds())
		})
		if *txnRecords > 0 && (i%*txnRecords == *txnRecords-1 || i == *records-1) {
			if err := producer.Flush(ctx); err != nil {
				return err
			}
			if err := producer.EndTransaction(ctx, kgo.TryCommit); err != nil {
				return err
			}
		}
	}
	if err := <-done; err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	if sendErr != nil {
		return sendErr
	}
	// The first records include connection set-up and metadata lookups.
	skip := len(lat) / 100
	if skip < 10 && len(lat) > 20 {
		skip = 10
	}
	out := percentiles(lat[skip:])
	out["records"] = len(lat)
	// The acknowledgements' own latencies, to tell a slow high watermark from a slow consumer wake-up.
	if len(acks) > skip {
		for q, v := range percentiles(acks[skip:]) {
			out["ack_"+q] = v
		}
	}
	return emit(out)
}

// acl is one ACL to create: ALLOW `operation` on a resource to `principal` from any host.
func acl(resourceType kmsg.ACLResourceType, name string, pattern kmsg.ACLResourcePatternType,
	principal string, operation kmsg.ACLOperation) kmsg.CreateACLsRequestCreation {
	c := kmsg.NewCreateACLsRequestCreation()
	c.ResourceType = resourceType
	c.ResourceName = name
	c.ResourcePatternType = pattern
	c.Principal = principal
	c.Host = "*"
	c.Operation = operation
	c.PermissionType = kmsg.ACLPermissionTypeAllow
	return c
}

func createACLs(args []string) error {
	fs := flag.NewFlagSet("acls", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap servers, comma-separated")
	count := fs.Int("count", 10000, "ACLs of other principals to create")
	allowPrefix := fs.String("allow-prefix", "", "topic prefix this client is allowed every operation on")
	_ = fs.Parse(args)
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*bootstrap, ",")...), kgo.RequestTimeoutOverhead(120*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	const me = "User:ANONYMOUS"
	// The cluster's ACL first: with allow.everyone.if.no.acl.found, creating it needs none yet.
	batches := [][]kmsg.CreateACLsRequestCreation{
		{acl(kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLResourcePatternTypeLiteral, me, kmsg.ACLOperationAll)},
		{acl(kmsg.ACLResourceTypeTopic, *allowPrefix, kmsg.ACLResourcePatternTypePrefixed, me, kmsg.ACLOperationAll)},
	}
	var others []kmsg.CreateACLsRequestCreation
	for i := 0; i < *count; i++ {
		user := fmt.Sprintf("User:user-%d", i)
		switch i % 4 {
		case 0, 1:
			others = append(others, acl(kmsg.ACLResourceTypeTopic, fmt.Sprintf("%s-other-%d", *allowPrefix, i),
				kmsg.ACLResourcePatternTypeLiteral, user, kmsg.ACLOperationRead))
		case 2:
			others = append(others, acl(kmsg.ACLResourceTypeTopic, fmt.Sprintf("app-%d-", i),
				kmsg.ACLResourcePatternTypePrefixed, user, kmsg.ACLOperationWrite))
		default:
			others = append(others, acl(kmsg.ACLResourceTypeGroup, fmt.Sprintf("group-%d", i),
				kmsg.ACLResourcePatternTypeLiteral, user, kmsg.ACLOperationRead))
		}
	}
	// Bounded requests: 1,000 ACLs each.
	for first := 0; first < len(others); first += 1000 {
		batches = append(batches, others[first:min(first+1000, len(others))])
	}
	start := time.Now()
	created := 0
	for _, batch := range batches {
		req := kmsg.NewPtrCreateACLsRequest()
		req.Creations = batch
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		resp, err := req.RequestWith(ctx, cl)
		cancel()
		if err != nil {
			return err
		}
		for _, r := range resp.Results {
			if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
				return fmt.Errorf("CreateACLs: %w", err)
			}
			created++
		}
	}
	return emit(map[string]any{"acls": created, "seconds": time.Since(start).Seconds()})
}

// setShareGroupConfig sets one of a share group's configs (a GROUP config resource).
func setShareGroupConfig(ctx context.Context, cl *kgo.Client, group, name, value string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name = name
	cfg.Value = kmsg.StringPtr(value)
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return fmt.Errorf("setting %s on group %s: %w", name, group, err)
		}
	}
	return nil
}

func shareConsume(args []string) error {
	fs := flag.NewFlagSet("share", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "bootstrap servers, comma-separated")
	topic := fs.String("topic", "", "topic")
	group := fs.String("group", "", "share group")
	consumers := fs.Int("consumers", 4, "share consumers")
	records := fs.Int("records", 0, "records to read (and, with --rate, to send)")
	size := fs.Int("size", 1024, "value size in bytes (at least 8), with --rate")
	rate := fs.Float64("rate", 0, "send records at this rate and measure their latency")
	timeout := fs.Duration("timeout", 300*time.Second, "give up after this long")
	_ = fs.Parse(args)
	seeds := kgo.SeedBrokers(strings.Split(*bootstrap, ",")...)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	admin, err := kgo.NewClient(seeds)
	if err != nil {
		return err
	}
	defer admin.Close()
	// From the earliest offset: records sent before a consumer's first fetch are not skipped.
	if err := setShareGroupConfig(ctx, admin, *group, "share.auto.offset.reset", "earliest"); err != nil {
		return err
	}
	var mu sync.Mutex
	var n, bytes, probes int
	lat := make([]int64, 0, *records)
	done := make(chan struct{})
	var once sync.Once
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < *consumers; c++ {
		cl, err := kgo.NewClient(seeds, kgo.ConsumeTopics(*topic), kgo.ShareGroup(*group))
		if err != nil {
			return err
		}
		defer cl.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				fetches := cl.PollFetches(ctx)
				if ctx.Err() != nil {
					return
				}
				now := time.Now().UnixNano()
				mu.Lock()
				for _, e := range fetches.Errors() {
					if firstErr == nil && e.Err != nil && !errors.Is(e.Err, context.Canceled) {
						firstErr = e.Err
					}
				}
				fetches.EachRecord(func(r *kgo.Record) {
					if string(r.Value) == readyProbe {
						probes++
						return
					}
					// With --rate, only this run's records: a topic may start with smaller warm-up
					// records.
					if *rate > 0 && len(r.Value) != *size {
						return
					}
					n++
					bytes += len(r.Value) + len(r.Key)
					if *rate > 0 {
						lat = append(lat, (now-int64(binary.BigEndian.Uint64(r.Value)))/1000)
					}
				})
				if n >= *records {
					once.Do(func() { close(done) })
				}
				mu.Unlock()
			}
		}()
	}
	if *rate > 0 {
		// Timed sends start once the group reads every partition: a share group's members learn
		// their assignment on a heartbeat, which would otherwise show as latency.
		if err := sendProbes(ctx, seeds, *topic, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return probes >= readyProbes
		}); err != nil {
			return err
		}
		if err := sendTimestamped(ctx, seeds, *topic, *records, *size, *rate); err != nil {
			return err
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	elapsed := time.Since(start).Seconds()
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if n < *records {
		if firstErr != nil {
			return fmt.Errorf("read %d of %d records: %w", n, *records, firstErr)
		}
		return fmt.Errorf("read %d of %d records before the timeout", n, *records)
	}
	out := map[string]any{
		"records":       n,
		"seconds":       elapsed,
		"records_per_s": float64(n) / elapsed,
		"mb_per_s":      float64(bytes) / elapsed / 1e6,
		"client_cpu_s":  processCPUSeconds(),
	}
	if *rate > 0 {
		// The first records include the group's join and connection set-up.
		skip := len(lat) / 100
		if skip < 10 && len(lat) > 20 {
			skip = 10
		}
		for q, v := range percentiles(lat[skip:]) {
			out[q] = v
		}
	}
	return emit(out)
}

// readyProbe is the value of the records that tell a share benchmark its consumers are reading.
const readyProbe = "loadgen-ready"

// readyProbes is how many probe records are sent round-robin: several per partition of any
// benchmark topic.
const readyProbes = 64

// sendProbes sends the probe records, round-robin over the topic's partitions, and waits until
// ready says the consumers have them all.
func sendProbes(ctx context.Context, seeds kgo.Opt, topic string, ready func() bool) error {
	producer, err := kgo.NewClient(seeds, kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		return err
	}
	defer producer.Close()
	for i := 0; i < readyProbes; i++ {
		producer.Produce(ctx, &kgo.Record{Value: []byte(readyProbe)}, nil)
	}
	if err := producer.Flush(ctx); err != nil {
		return err
	}
	for !ready() {
		if ctx.Err() != nil {
			return errors.New("the share consumers never read the probe records")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// sendTimestamped sends n records of size bytes at rate records per second, each value starting with
// its send time, round-robin over the topic's partitions.
func sendTimestamped(ctx context.Context, seeds kgo.Opt, topic string, n, size int, rate float64) error {
	producer, err := kgo.NewClient(seeds, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		return err
	}
	defer producer.Close()
	pad := payloads(size)[0]
	p := pacer{start: time.Now(), rate: rate}
	var mu sync.Mutex
	var sendErr error
	for i := 0; i < n; i++ {
		p.wait(i)
		v := make([]byte, size)
		copy(v, pad)
		binary.BigEndian.PutUint64(v, uint64(time.Now().UnixNano()))
		producer.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				sendErr = err
				mu.Unlock()
			}
		})
	}
	if err := producer.Flush(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return sendErr
}
