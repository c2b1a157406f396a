// jsbench: NATS JetStream as a durable work queue, in the shape of `agentwire queue bench`,
// for scripts/peers/jetstream.sh.
//
// A work-queue stream (file storage) on subject "jobs"; P producer connections each keep W
// publishes in flight, each waiting for the server's PubAck (the message is stored); C consumer
// connections pull from one durable consumer with explicit acks, each holding up to K messages,
// acking each one as it arrives. After a warm-up it counts PubAcks and acked messages over the
// measured window and prints one JSON line. Every loop stops by itself at the end.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type result struct {
	Server         string  `json:"server"`
	Mode           string  `json:"mode"`
	Producers      int     `json:"producers"`
	Window         int     `json:"window"`
	Consumers      int     `json:"consumers"`
	Credit         int     `json:"credit"`
	Size           int     `json:"size"`
	DurationMs     int64   `json:"duration_ms"`
	EnqueuedPerSec float64 `json:"enqueued_per_sec"`
	ConsumedPerSec float64 `json:"consumed_per_sec"`
	Redelivered    int64   `json:"redelivered"`
	Errors         int64   `json:"errors"`
	P50Us          int64   `json:"p50_us"`
	P90Us          int64   `json:"p90_us"`
	P99Us          int64   `json:"p99_us"`
	ClientCPU      float64 `json:"client_cpu_secs"`
}

func cpuSecs() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "jsbench: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	url := flag.String("url", "nats://127.0.0.1:4222", "server URL")
	ca := flag.String("ca", "", "CA certificate (PEM) to verify the server with; enables TLS")
	producers := flag.Int("producers", 4, "producer connections")
	window := flag.Int("window", 16, "publishes in flight per producer")
	consumers := flag.Int("consumers", 2, "consumer connections")
	credit := flag.Int("credit", 64, "messages each consumer holds at once")
	size := flag.Int("size", 1024, "payload bytes")
	warmup := flag.Duration("warmup", time.Second, "warm-up before measuring")
	duration := flag.Duration("duration", 5*time.Second, "measured window")
	timeout := flag.Duration("timeout", 5*time.Second, "per-publish timeout")
	mode := flag.String("mode", "default", "label for the server's sync setting")
	flag.Parse()

	var opts []nats.Option
	if *ca != "" {
		pem, err := os.ReadFile(*ca)
		if err != nil {
			fail("reading %s: %v", *ca, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			fail("%s holds no certificate", *ca)
		}
		opts = append(opts, nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}))
	}
	connect := func(name string) (*nats.Conn, jetstream.JetStream) {
		nc, err := nats.Connect(*url, append(opts, nats.Name(name))...)
		if err != nil {
			fail("connecting to %s: %v", *url, err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			fail("jetstream: %v", err)
		}
		return nc, js
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, js := connect("admin")
	_ = js.DeleteStream(ctx, "JOBS")
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      "JOBS",
		Subjects:  []string{"jobs"},
		Retention: jetstream.WorkQueuePolicy,
		Storage:   jetstream.FileStorage,
	}); err != nil {
		fail("creating the stream: %v", err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, "JOBS", jetstream.ConsumerConfig{
		Durable:       "workers",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: *consumers * *credit,
	}); err != nil {
		fail("creating the consumer: %v", err)
	}

	var measuring atomic.Bool
	var enqueued, consumed, redelivered, errors atomic.Int64
	stop := time.Now().Add(*warmup + *duration)
	var conns []*nats.Conn
	var consumeCtxs []jetstream.ConsumeContext
	for c := 0; c < *consumers; c++ {
		nc, cjs := connect(fmt.Sprintf("consumer-%d", c))
		conns = append(conns, nc)
		cons, err := cjs.Consumer(ctx, "JOBS", "workers")
		if err != nil {
			fail("binding the consumer: %v", err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			_ = m.Ack()
			if measuring.Load() {
				consumed.Add(1)
				if md, err := m.Metadata(); err == nil && md.NumDelivered > 1 {
					redelivered.Add(1)
				}
			}
		}, jetstream.PullMaxMessages(*credit))
		if err != nil {
			fail("consuming: %v", err)
		}
		consumeCtxs = append(consumeCtxs, cc)
	}
	payload := make([]byte, *size)
	var mu sync.Mutex
	var latencies []time.Duration
	var wg sync.WaitGroup
	for p := 0; p < *producers; p++ {
		nc, pjs := connect(fmt.Sprintf("producer-%d", p))
		conns = append(conns, nc)
		for w := 0; w < *window; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				local := make([]time.Duration, 0, 4096)
				for time.Now().Before(stop) {
					pctx, pcancel := context.WithTimeout(context.Background(), *timeout)
					start := time.Now()
					_, err := pjs.Publish(pctx, "jobs", payload)
					pcancel()
					if !measuring.Load() {
						continue
					}
					if err != nil {
						errors.Add(1)
						continue
					}
					enqueued.Add(1)
					local = append(local, time.Since(start))
				}
				mu.Lock()
				latencies = append(latencies, local...)
				mu.Unlock()
			}()
		}
	}
	time.Sleep(*warmup)
	cpu0 := cpuSecs()
	measuring.Store(true)
	began := time.Now()
	time.Sleep(*duration)
	measuring.Store(false)
	elapsed := time.Since(began).Seconds()
	clientCPU := cpuSecs() - cpu0
	wg.Wait()
	for _, cc := range consumeCtxs {
		cc.Stop()
	}
	for _, nc := range conns {
		nc.Close()
	}
	admin.Close()
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	pct := func(p float64) int64 {
		if len(latencies) == 0 {
			return 0
		}
		i := int(p * float64(len(latencies)-1))
		return latencies[i].Microseconds()
	}
	out, _ := json.Marshal(result{
		Server: "nats-server", Mode: *mode, Producers: *producers, Window: *window,
		Consumers: *consumers, Credit: *credit, Size: *size, DurationMs: duration.Milliseconds(),
		EnqueuedPerSec: float64(enqueued.Load()) / elapsed,
		ConsumedPerSec: float64(consumed.Load()) / elapsed,
		Redelivered:    redelivered.Load(), Errors: errors.Load(),
		P50Us: pct(0.50), P90Us: pct(0.90), P99Us: pct(0.99), ClientCPU: clientCPU,
	})
	fmt.Println(string(out))
}
