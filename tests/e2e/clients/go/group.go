package main

// group-consume: a consumer group member that logs every processed record and every assignment change, so
// tests can check delivery guarantees across rebalances (output format in tests/e2e/README.md).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type groupOptions struct {
	bootstrap, group, topics, pattern, assignor, protocol, commit, out string
	maxPollIntervalMs, sessionTimeoutMs, stopAfter, stallAfter         int64
	idleS, stallS                                                      float64
}

func parseGroup(args []string) (groupOptions, error) {
	var o groupOptions
	fs := flag.NewFlagSet("group-consume", flag.ContinueOnError)
	fs.StringVar(&o.bootstrap, "bootstrap", "", "bootstrap servers")
	fs.StringVar(&o.group, "group", "", "group id")
	fs.StringVar(&o.topics, "topics", "", "comma-separated topics")
	fs.StringVar(&o.pattern, "pattern", "", "topic regex")
	fs.StringVar(&o.assignor, "assignor", "range", "range|roundrobin|sticky|cooperative-sticky")
	fs.StringVar(&o.protocol, "protocol", "classic", "classic|consumer")
	fs.StringVar(&o.commit, "commit", "auto", "auto|sync-after-processing|sync-on-revoke")
	fs.StringVar(&o.out, "out", "", "output file")
	fs.Int64Var(&o.maxPollIntervalMs, "max-poll-interval-ms", 300000, "rebalance timeout")
	fs.Int64Var(&o.sessionTimeoutMs, "session-timeout-ms", 45000, "session timeout")
	fs.Int64Var(&o.stopAfter, "stop-after", -1, "stop after this many records")
	fs.Int64Var(&o.stallAfter, "stall-after", -1, "stall once after this many records")
	fs.Float64Var(&o.idleS, "idle-s", -1, "stop after this long without records")
	fs.Float64Var(&o.stallS, "stall-s", 0, "stall duration")
	err := fs.Parse(args)
	return o, err
}

func balancerOf(name string) (kgo.GroupBalancer, error) {
	switch name {
	case "range":
		return kgo.RangeBalancer(), nil
	case "roundrobin":
		return kgo.RoundRobinBalancer(), nil
	case "sticky", "uniform":
		return kgo.StickyBalancer(), nil
	case "cooperative-sticky":
		return kgo.CooperativeStickyBalancer(), nil
	}
	return nil, fmt.Errorf("unknown assignor %q", name)
}

// member is the group-consume state shared by the poll loop and the rebalance callbacks.
type member struct {
	mu  sync.Mutex
	out *os.File
	cl  *kgo.Client
	// processed holds the next offset to commit per partition, for records processed since the last commit.
	processed map[string]map[int32]kgo.EpochOffset
	// activeSince starts the idle clock: the last record or assignment; zero until the first assignment.
	activeSince time.Time
}

func (m *member) write(format string, a ...any) {
	// Unbuffered: each line reaches the file as it happens, so a SIGKILL loses nothing written.
	fmt.Fprintf(m.out, format+"\n", a...)
}

func (m *member) who() string {
	id, gen := m.cl.GroupMetadata()
	return fmt.Sprintf("%s %d", id, gen)
}

func tpList(tps map[string][]int32) string {
	var parts []string
	for t, ps := range tps {
		for _, p := range ps {
			parts = append(parts, fmt.Sprintf("%s:%d", t, p))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// commitProcessed commits what was processed on the given partitions (all when tps is nil); the caller
// holds m.mu. A commit refused because the member left the group is logged: the next owner reprocesses.
func (m *member) commitProcessed(ctx context.Context, tps map[string][]int32) {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for t, ps := range m.processed {
		for p, eo := range ps {
			if tps != nil && !containsPartition(tps[t], p) {
				continue
			}
			if offsets[t] == nil {
				offsets[t] = map[int32]kgo.EpochOffset{}
			}
			offsets[t][p] = eo
			delete(ps, p)
		}
	}
	if len(offsets) == 0 {
		return
	}
	var commitErr error
	m.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			commitErr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && commitErr == nil {
					commitErr = err
				}
			}
		}
	})
	if commitErr != nil {
		m.write("commit-failed %v", strings.ReplaceAll(commitErr.Error(), "\n", " "))
		return
	}
	var parts []string
	for t, ps := range offsets {
		for p, eo := range ps {
			parts = append(parts, fmt.Sprintf("%s:%d=%d", t, p, eo.Offset))
		}
	}
	sort.Strings(parts)
	m.write("commit %s", strings.Join(parts, ","))
}

func containsPartition(ps []int32, p int32) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

func groupConsume(o groupOptions) error {
	if o.commit != "auto" && o.commit != "sync-after-processing" && o.commit != "sync-on-revoke" {
		return fmt.Errorf("unknown commit mode %q", o.commit)
	}
	balancer, err := balancerOf(o.assignor)
	if err != nil {
		return err
	}
	out, err := os.Create(o.out)
	if err != nil {
		return err
	}
	defer out.Close()
	m := &member{out: out, processed: map[string]map[int32]kgo.EpochOffset{}}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	opts := []kgo.Opt{
		kgo.SeedBrokers(seeds(o.bootstrap)...),
		kgo.ConsumerGroup(o.group),
		kgo.Balancers(balancer),
		kgo.SessionTimeout(time.Duration(o.sessionTimeoutMs) * time.Millisecond),
		kgo.HeartbeatInterval(time.Duration(max(100, o.sessionTimeoutMs/4)) * time.Millisecond),
		kgo.RebalanceTimeout(time.Duration(o.maxPollIntervalMs) * time.Millisecond),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Rebalances wait for the poll loop, so a revoked partition is never still being processed.
		kgo.BlockRebalanceOnPoll(),
		kgo.MetadataMinAge(time.Second),
		kgo.MetadataMaxAge(2 * time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, tps map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.write("assign %s %s", tpList(tps), m.who())
			m.activeSince = time.Now()
		}),
		kgo.OnPartitionsRevoked(func(rctx context.Context, _ *kgo.Client, tps map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.write("revoke %s %s", tpList(tps), m.who())
			if o.commit != "auto" {
				m.commitProcessed(rctx, tps)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, tps map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.write("lost %s %s", tpList(tps), m.who())
			for t, ps := range tps {
				for _, p := range ps {
					delete(m.processed[t], p)
				}
			}
		}),
	}
	if o.pattern != "" {
		if _, err := regexp.Compile(o.pattern); err != nil {
			return err
		}
		opts = append(opts, kgo.ConsumeTopics(o.pattern), kgo.ConsumeRegex())
	} else {
		opts = append(opts, kgo.ConsumeTopics(strings.Split(o.topics, ",")...))
	}
	if o.commit == "auto" {
		opts = append(opts, kgo.AutoCommitInterval(500*time.Millisecond))
	} else {
		opts = append(opts, kgo.DisableAutoCommit())
	}
	switch o.protocol {
	case "classic":
	case "consumer":
		opts = append(opts, kgo.ServerSideBalancer())
	default:
		return fmt.Errorf("unknown protocol %q", o.protocol)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	m.cl = cl

	var count int64
	stalled := false
	for (o.stopAfter < 0 || count < o.stopAfter) && ctx.Err() == nil {
		pollCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		fetches := cl.PollRecords(pollCtx, 100)
		cancel()
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				m.write("error %s %d %v", t, p, err)
			}
		})
		m.mu.Lock()
		n := 0
		fetches.EachRecord(func(r *kgo.Record) {
			idx := "-"
			for _, h := range r.Headers {
				if h.Key == "idx" {
					idx = string(h.Value)
				}
			}
			m.write("rec %s %d %d %s %s", r.Topic, r.Partition, r.Offset, idx, m.who())
			if m.processed[r.Topic] == nil {
				m.processed[r.Topic] = map[int32]kgo.EpochOffset{}
			}
			m.processed[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
			count++
			n++
		})
		if n > 0 {
			m.activeSince = time.Now()
			if o.commit == "sync-after-processing" {
				m.commitProcessed(ctx, nil)
			}
		}
		idle := n == 0 && o.idleS >= 0 && !m.activeSince.IsZero() &&
			time.Since(m.activeSince) > time.Duration(o.idleS*float64(time.Second))
		m.mu.Unlock()
		if !stalled && o.stallAfter >= 0 && count >= o.stallAfter {
			stalled = true
			m.write("stall %g", o.stallS)
			time.Sleep(time.Duration(o.stallS * float64(time.Second)))
			m.write("resume")
		}
		cl.AllowRebalance()
		if idle {
			break
		}
	}
	if ctx.Err() != nil {
		m.write("wakeup")
	}
	if o.commit != "auto" {
		m.mu.Lock()
		commitCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		m.commitProcessed(commitCtx, nil)
		cancel()
		m.mu.Unlock()
	}
	// Close leaves the group; with autocommit it first commits what was polled.
	cl.Close()
	m.write("closed %d", count)
	return nil
}
