// Command franztool is the e2e client tool for franz-go: create-topic, produce, consume and group-consume
// with the suite's common CLI (see tests/e2e/README.md).
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

type genRecord struct {
	key       []byte
	value     []byte
	headers   []kgo.RecordHeader
	timestamp int64
}

// generate is the suite's deterministic record generator; Python and Java produce the same bytes.
func generate(seed, i int64) genRecord {
	prefix := fmt.Sprintf("fjord-e2e:%d:%d", seed, i)
	h0 := sha256.Sum256([]byte(prefix))
	valueLen := 10 + (int(h0[0])<<8|int(h0[1]))%291
	value := make([]byte, 0, valueLen+sha256.Size)
	for k := 0; len(value) < valueLen; k++ {
		block := sha256.Sum256([]byte(fmt.Sprintf("%s:%d", prefix, k)))
		value = append(value, block[:]...)
	}
	value = value[:valueLen]
	if i%3 == 0 {
		for j, b := range value {
			value[j] = 'a' + b%26
		}
	}
	var key []byte
	if i%17 != 5 {
		key = []byte(fmt.Sprintf("key-%d-%d", seed, i))
	}
	binLen := 1 + int(h0[2])%16
	bin := append([]byte(nil), h0[3:3+binLen]...)
	return genRecord{
		key:   key,
		value: value,
		headers: []kgo.RecordHeader{
			{Key: "idx", Value: []byte(strconv.FormatInt(i, 10))},
			{Key: "bin", Value: bin},
		},
		timestamp: seed + i,
	}
}

func codecOf(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.NoCompression(), fmt.Errorf("unknown codec %q", name)
}

type options struct {
	bootstrap, topic, codec, acks, out string
	partitions, count, seed, expect    int64
	idempotent                         bool
	transactionalID                    string
	timeoutS                           float64
	clientConfig                       string
}

func parse(cmd string, args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.StringVar(&o.bootstrap, "bootstrap", "", "bootstrap servers")
	fs.StringVar(&o.topic, "topic", "", "topic")
	fs.StringVar(&o.codec, "codec", "none", "none|gzip|snappy|lz4|zstd")
	fs.StringVar(&o.acks, "acks", "all", "all|1")
	fs.StringVar(&o.out, "out", "", "output file")
	fs.Int64Var(&o.partitions, "partitions", 1, "partition count")
	fs.Int64Var(&o.count, "count", 0, "records to produce")
	fs.Int64Var(&o.seed, "seed", 0, "generator seed")
	fs.Int64Var(&o.expect, "expect", 0, "records to consume")
	fs.BoolVar(&o.idempotent, "idempotent", false, "idempotent producer")
	fs.StringVar(&o.transactionalID, "transactional-id", "", "produce every record in one transaction with this id")
	fs.Float64Var(&o.timeoutS, "timeout-s", 60, "consume timeout in seconds")
	fs.StringVar(&o.clientConfig, "client-config", "", "client properties file (TLS)")
	err := fs.Parse(args)
	return o, err
}

func createTopic(o options) error {
	conn, err := connOpts(o)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(conn...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, int32(o.partitions), 1, nil, o.topic)
	if err != nil {
		return err
	}
	return resp.Err
}

// partitionCount asks for the topic's metadata until it is visible, since a new topic can lag briefly.
func partitionCount(cl *kgo.Client, topic string) (int64, error) {
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		details, err := adm.ListTopics(ctx, topic)
		cancel()
		if err == nil {
			if td, ok := details[topic]; ok && td.Err == nil && len(td.Partitions) > 0 {
				return int64(len(td.Partitions)), nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no metadata for topic %s: %v", topic, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func produce(o options) error {
	codec, err := codecOf(o.codec)
	if err != nil {
		return err
	}
	opts, err := connOpts(o)
	if err != nil {
		return err
	}
	opts = append(opts,
		kgo.DefaultProduceTopic(o.topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(codec),
		// No RecordDeliveryTimeout: franz-go measures it from Record.Timestamp, which here is the
		// generator's and not the enqueue time. produceCtx bounds the run instead.
		kgo.ProduceRequestTimeout(15*time.Second),
		kgo.ProducerLinger(5*time.Millisecond),
	)
	switch o.acks {
	case "all":
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()))
	default:
		return fmt.Errorf("unknown acks %q", o.acks)
	}
	// With --transactional-id, every record in one transaction, committed once all are
	// acknowledged.
	if o.transactionalID != "" {
		opts = append(opts, kgo.TransactionalID(o.transactionalID))
	} else if !o.idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if o.transactionalID != "" {
		if err := cl.BeginTransaction(); err != nil {
			return err
		}
	}
	partitions, err := partitionCount(cl, o.topic)
	if err != nil {
		return err
	}
	out, err := os.Create(o.out)
	if err != nil {
		return err
	}
	defer out.Close()

	// Long enough to ride out a broker restart in the kill -9 test.
	produceCtx, cancel := context.WithTimeout(context.Background(), 300*time.Second)
	defer cancel()
	var mu sync.Mutex
	var failed int64
	var firstErr, writeErr error
	for i := int64(0); i < o.count; i++ {
		g := generate(o.seed, i)
		rec := &kgo.Record{
			Key:       g.key,
			Value:     g.value,
			Headers:   g.headers,
			Timestamp: time.UnixMilli(g.timestamp),
			Partition: int32(i % partitions),
		}
		idx := i
		cl.Produce(produceCtx, rec, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			// Unbuffered: each acknowledged record reaches the file as its ack arrives.
			if _, werr := fmt.Fprintf(out, "%d %d %d\n", idx, r.Partition, r.Offset); werr != nil && writeErr == nil {
				writeErr = werr
			}
		})
	}
	if err := cl.Flush(produceCtx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	if writeErr != nil {
		return writeErr
	}
	if failed > 0 {
		return fmt.Errorf("%d records failed; first error: %w", failed, firstErr)
	}
	if o.transactionalID != "" {
		return cl.EndTransaction(produceCtx, kgo.TryCommit)
	}
	return nil
}

func hexOrDash(b []byte) string {
	if b == nil {
		return "-"
	}
	return hex.EncodeToString(b)
}

type line struct {
	partition int32
	offset    int64
	text      string
}

var errTimedOut = errors.New("timed out")

func consume(o options) error {
	offsets := map[int32]kgo.Offset{}
	for p := int32(0); int64(p) < o.partitions; p++ {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	conn, err := connOpts(o)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(conn,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{o.topic: offsets}))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(o.timeoutS*float64(time.Second)))
	defer cancel()
	var lines []line
	for int64(len(lines)) < o.expect && ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				fmt.Fprintf(os.Stderr, "consume: %s[%d]: %v\n", t, p, err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			hs := make([]string, 0, len(r.Headers))
			for _, h := range r.Headers {
				hs = append(hs, hex.EncodeToString([]byte(h.Key))+":"+hexOrDash(h.Value))
			}
			headers := strings.Join(hs, ",")
			if headers == "" {
				headers = "-"
			}
			text := fmt.Sprintf("%d %d %d %s %s %s", r.Partition, r.Offset, r.Timestamp.UnixMilli(),
				hexOrDash(r.Key), hexOrDash(r.Value), headers)
			lines = append(lines, line{r.Partition, r.Offset, text})
		})
	}
	sort.Slice(lines, func(a, b int) bool {
		if lines[a].partition != lines[b].partition {
			return lines[a].partition < lines[b].partition
		}
		return lines[a].offset < lines[b].offset
	})
	var sb strings.Builder
	for _, l := range lines {
		sb.WriteString(l.text)
		sb.WriteByte('\n')
	}
	if err := os.WriteFile(o.out, []byte(sb.String()), 0o644); err != nil {
		return err
	}
	if int64(len(lines)) < o.expect {
		return fmt.Errorf("%w with %d of %d records", errTimedOut, len(lines), o.expect)
	}
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: create-topic|produce|consume|group-consume --bootstrap B ...")
		os.Exit(64)
	}
	cmd := os.Args[1]
	if cmd == "txn-unadded-produce" || cmd == "txn-implicit-add" {
		run := unaddedProduce
		if cmd == "txn-implicit-add" {
			run = implicitAdd
		}
		if err := run(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", cmd, err)
			os.Exit(1)
		}
		return
	}
	if cmd == "group-consume" {
		o, err := parseGroup(os.Args[2:])
		if err != nil {
			os.Exit(64)
		}
		if err := groupConsume(o); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", cmd, err)
			os.Exit(1)
		}
		return
	}
	o, err := parse(cmd, os.Args[2:])
	if err != nil {
		os.Exit(64)
	}
	switch cmd {
	case "create-topic":
		err = createTopic(o)
	case "produce":
		err = produce(o)
	case "consume":
		err = consume(o)
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cmd, err)
		if errors.Is(err, errTimedOut) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

// seeds splits a comma-separated bootstrap list, as other clients take it.
// connOpts: the seed brokers, and what the properties file --client-config names asks for, in
// librdkafka's naming: TLS for security.protocol SSL or SASL_SSL (ssl.ca.location,
// ssl.certificate.location, ssl.key.location), SASL for SASL_PLAINTEXT or SASL_SSL
// (sasl.mechanism PLAIN or SCRAM-SHA-256/512 with sasl.username and sasl.password — a delegation
// token's id and HMAC with e2e.scram.tokenauth=true — or OAUTHBEARER with
// e2e.oauthbearer.token.file).
func connOpts(o options) ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(seeds(o.bootstrap)...)}
	if o.clientConfig == "" {
		return opts, nil
	}
	f, err := os.Open(o.clientConfig)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	props := map[string]string{}
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if k, v, ok := strings.Cut(scanner.Text(), "="); ok {
			props[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	protocol := props["security.protocol"]
	if protocol == "SASL_PLAINTEXT" || protocol == "SASL_SSL" {
		user, pass := props["sasl.username"], props["sasl.password"]
		token := props["e2e.scram.tokenauth"] == "true"
		switch mechanism := props["sasl.mechanism"]; mechanism {
		case "PLAIN":
			opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
		case "SCRAM-SHA-256":
			opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass, IsToken: token}.AsSha256Mechanism()))
		case "SCRAM-SHA-512":
			opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass, IsToken: token}.AsSha512Mechanism()))
		case "OAUTHBEARER":
			// The token the file e2e.oauthbearer.token.file holds, read at each authentication.
			path := props["e2e.oauthbearer.token.file"]
			opts = append(opts, kgo.SASL(oauth.Oauth(func(context.Context) (oauth.Auth, error) {
				token, err := os.ReadFile(path)
				return oauth.Auth{Token: strings.TrimSpace(string(token))}, err
			})))
		default:
			return nil, fmt.Errorf("sasl.mechanism %q is not wired up here", mechanism)
		}
	}
	if protocol != "SSL" && protocol != "SASL_SSL" {
		return opts, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca := props["ssl.ca.location"]; ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = x509.NewCertPool()
		cfg.RootCAs.AppendCertsFromPEM(pem)
	}
	if cert := props["ssl.certificate.location"]; cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, props["ssl.key.location"])
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return append(opts, kgo.DialTLSConfig(cfg)), nil
}

func seeds(bootstrap string) []string {
	return strings.Split(bootstrap, ",")
}
