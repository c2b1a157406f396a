// natsbench: NATS in agentwire bench's shapes, for scripts/peers/nats.sh.
//
// -pattern request (the default): N client connections each keep W requests in flight on
// subject "echo"; echo workers (one connection each) answer from the queue group "workers"
// with the request's payload.
//
// -pattern fanout|gather|stream|queue: agentwire bench's one-way patterns (one publisher to N
// subscribers, N senders to one aggregator, N sender-receiver pairs, N producers to N
// competing consumers of one work queue), each sender keeping W messages its pacing receiver
// (for a queue: any consumer) has not yet received; each body starts with its sender,
// sequence and send time, so every delivery's latency is read where it arrives. Fan-out,
// gather and stream use core NATS subjects; queue a JetStream stream with work-queue retention
// in memory (as agentwire's queue is the hub's, in memory), producers publishing to its subject
// without waiting for an acknowledgement (as agentwire's enqueue events), consumers sharing one
// durable pull consumer, each holding W tasks and acking every one (a redelivery is not counted
// again).
//
// After a warm-up it counts completed round trips (deliveries) and their latency for the
// measured window and prints one JSON line. Every loop stops by itself at the end of the
// window.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
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
	Pattern    string  `json:"pattern"`
	Server     string  `json:"server"`
	TLS        bool    `json:"tls"`
	Clients    int     `json:"clients"`
	Workers    int     `json:"workers"`
	Window     int     `json:"window"`
	Size       int     `json:"size"`
	DurationMs int64   `json:"duration_ms"`
	Completed  int64   `json:"completed"`
	Errors     int64   `json:"errors"`
	MsgPerSec  float64 `json:"msg_per_sec"`
	P50Ms      float64 `json:"p50_ms"`
	P90Ms      float64 `json:"p90_ms"`
	P99Ms      float64 `json:"p99_ms"`
	// ClientCPU is this process's CPU (clients and workers) during the measured window.
	ClientCPU float64 `json:"client_cpu_secs"`
}

// cpuSecs is this process's user+system CPU time so far.
func cpuSecs() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func main() {
	url := flag.String("url", "nats://127.0.0.1:4222", "server URL")
	ca := flag.String("ca", "", "CA certificate (PEM) to verify the server with; enables TLS")
	clients := flag.Int("clients", 10, "client connections")
	window := flag.Int("window", 16, "requests in flight per client connection")
	size := flag.Int("size", 1024, "payload bytes")
	workers := flag.Int("workers", 0, "echo workers (0: one per ten clients, at least one)")
	warmup := flag.Duration("warmup", time.Second, "warm-up before measuring")
	duration := flag.Duration("duration", 5*time.Second, "measured window")
	timeout := flag.Duration("timeout", 5*time.Second, "per-request timeout")
	pattern := flag.String("pattern", "request", "request, fanout, gather, stream or queue (JetStream)")
	flag.Parse()
	switch *pattern {
	case "request", "fanout", "gather", "stream", "queue":
	default:
		fail("-pattern %q: request, fanout, gather, stream or queue", *pattern)
	}
	if *workers == 0 {
		*workers = (*clients + 9) / 10
	}
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
	connect := func(name string) *nats.Conn {
		nc, err := nats.Connect(*url, append(opts, nats.Name(name))...)
		if err != nil {
			fail("connecting to %s: %v", *url, err)
		}
		return nc
	}
	if *pattern != "request" {
		oneWay(*pattern, connect, *clients, *window, *size, *warmup, *duration, *timeout, *url, *ca != "")
		return
	}
	var conns []*nats.Conn
	for i := 0; i < *workers; i++ {
		nc := connect(fmt.Sprintf("worker-%d", i))
		conns = append(conns, nc)
		if _, err := nc.QueueSubscribe("echo", "workers", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
			fail("subscribing: %v", err)
		}
		if err := nc.Flush(); err != nil {
			fail("flush: %v", err)
		}
	}
	payload := make([]byte, *size)
	var completed, errors atomic.Int64
	var measuring atomic.Bool
	var mu sync.Mutex
	var latencies []time.Duration
	stop := time.Now().Add(*warmup + *duration)
	var wg sync.WaitGroup
	for c := 0; c < *clients; c++ {
		nc := connect(fmt.Sprintf("client-%d", c))
		conns = append(conns, nc)
		for w := 0; w < *window; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				local := make([]time.Duration, 0, 4096)
				for time.Now().Before(stop) {
					ctx, cancel := context.WithTimeout(context.Background(), *timeout)
					start := time.Now()
					_, err := nc.RequestWithContext(ctx, "echo", payload)
					cancel()
					if !measuring.Load() {
						continue
					}
					if err != nil {
						errors.Add(1)
						continue
					}
					completed.Add(1)
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
	elapsed := time.Since(began)
	clientCPU := cpuSecs() - cpu0
	wg.Wait()
	for _, nc := range conns {
		nc.Close()
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	pct := func(p float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		i := int(p * float64(len(latencies)-1))
		return float64(latencies[i].Microseconds()) / 1000
	}
	r := result{
		Pattern: "request", Server: *url, TLS: *ca != "", Clients: *clients, Workers: *workers, Window: *window,
		Size: *size, DurationMs: elapsed.Milliseconds(), Completed: completed.Load(),
		Errors: errors.Load(), MsgPerSec: float64(completed.Load()) / elapsed.Seconds(),
		P50Ms: pct(0.50), P90Ms: pct(0.90), P99Ms: pct(0.99), ClientCPU: clientCPU,
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}

// oneWay: the one-way patterns, in agentwire bench's shape. fanout: one publisher, n
// subscribers of "fanout"; gather: n senders, one subscriber of "gather"; stream: n pairs,
// sender i publishing on "stream.i" to its own subscriber; queue: n producers publishing to
// "queue", the subject of a JetStream work queue (stream QUEUE, in memory), n consumers of its
// one durable consumer. Each sender keeps at most `window` messages its pacing receiver (the
// first subscriber, the aggregator, its own receiver, any consumer) has not yet received;
// deliveries of messages sent in the window are counted where they arrive.
func oneWay(pattern string, connect func(string) *nats.Conn, n, window, size int, warmup, duration, timeout time.Duration, url string, tls bool) {
	const header = 20 // sender (u32), sequence (u64), send time (u64 ns since base)
	if size < header {
		size = header
	}
	senders, receivers, fanout := n, n, int64(1)
	subject := func(sender int) string { return fmt.Sprintf("stream.%d", sender) }
	pacer := func(sender int) int { return sender } // -1: any receiver
	switch pattern {
	case "queue":
		subject = func(int) string { return "queue" }
		pacer = func(int) int { return -1 }
	case "fanout":
		senders, fanout = 1, int64(n)
		subject = func(int) string { return "fanout" }
		pacer = func(int) int { return 0 }
	case "gather":
		receivers = 1
		subject = func(int) string { return "gather" }
		pacer = func(int) int { return 0 }
	}
	base := time.Now()
	var measureStart, measureEnd atomic.Int64 // nanoseconds since base; nothing counts until set
	measureStart.Store(1 << 62)
	inWindow := func(ns int64) bool { return ns >= measureStart.Load() && ns < measureEnd.Load() }
	progress := make([]atomic.Int64, senders) // deliveries at each sender's pacing receiver
	wake := make([]chan struct{}, senders)
	for i := range wake {
		wake[i] = make(chan struct{}, 1)
	}
	var sent, delivered atomic.Int64
	var mu sync.Mutex
	var latencies []time.Duration
	var conns []*nats.Conn
	deliver := func(data []byte, me int) {
		if len(data) < header {
			return
		}
		s := int(binary.BigEndian.Uint32(data[0:4]))
		sentNs := int64(binary.BigEndian.Uint64(data[12:20]))
		if s < senders && (pacer(s) == me || pacer(s) < 0) {
			progress[s].Add(1)
			select {
			case wake[s] <- struct{}{}:
			default:
			}
		}
		if inWindow(sentNs) {
			took := time.Duration(time.Since(base).Nanoseconds() - sentNs)
			delivered.Add(1)
			mu.Lock()
			latencies = append(latencies, took)
			mu.Unlock()
		}
	}
	if pattern == "queue" {
		conns = append(conns, workQueue(connect, receivers, window, deliver)...)
	}
	for r := 0; r < receivers && pattern != "queue"; r++ {
		nc := connect(fmt.Sprintf("receiver-%d", r))
		conns = append(conns, nc)
		me := r
		subj := "fanout"
		switch pattern {
		case "gather":
			subj = "gather"
		case "stream":
			subj = subject(r)
		}
		_, err := nc.Subscribe(subj, func(m *nats.Msg) { deliver(m.Data, me) })
		if err != nil {
			fail("subscribing: %v", err)
		}
		if err := nc.Flush(); err != nil {
			fail("flush: %v", err)
		}
	}
	stop := base.Add(warmup + duration)
	var wg sync.WaitGroup
	for s := 0; s < senders; s++ {
		pub := connect(fmt.Sprintf("sender-%d", s))
		conns = append(conns, pub)
		wg.Add(1)
		go func(s int, pub *nats.Conn) {
			defer wg.Done()
			payload := make([]byte, size)
			binary.BigEndian.PutUint32(payload[0:4], uint32(s))
			var seq int64
			for time.Now().Before(stop) {
				for seq >= progress[s].Load()+int64(window) {
					select {
					case <-wake[s]:
					case <-time.After(timeout):
						return
					}
					if !time.Now().Before(stop) {
						return
					}
				}
				ns := time.Since(base).Nanoseconds()
				binary.BigEndian.PutUint64(payload[4:12], uint64(seq))
				binary.BigEndian.PutUint64(payload[12:20], uint64(ns))
				if err := pub.Publish(subject(s), payload); err != nil {
					return
				}
				if inWindow(ns) {
					sent.Add(1)
				}
				seq++
			}
			_ = pub.Flush()
		}(s, pub)
	}
	time.Sleep(warmup)
	measureStart.Store(time.Since(base).Nanoseconds())
	measureEnd.Store(measureStart.Load() + duration.Nanoseconds())
	cpu0 := cpuSecs()
	time.Sleep(duration)
	clientCPU := cpuSecs() - cpu0
	wg.Wait()
	// Drain: every message sent in the window, at every receiver it is for, or a second of quiet.
	expected := sent.Load() * fanout
	last, quiet := delivered.Load(), time.Now()
	for delivered.Load() < expected && time.Since(quiet) < time.Second {
		time.Sleep(10 * time.Millisecond)
		if d := delivered.Load(); d != last {
			last, quiet = d, time.Now()
		}
	}
	for _, nc := range conns {
		nc.Close()
	}
	got := delivered.Load()
	mu.Lock()
	defer mu.Unlock()
	r := result{
		Pattern: pattern, Server: url, TLS: tls, Clients: n, Window: window, Size: size,
		DurationMs: duration.Milliseconds(), Completed: got, Errors: expected - got,
		MsgPerSec: float64(got) / duration.Seconds(), ClientCPU: clientCPU,
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	pct := func(p float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		return float64(latencies[int(p*float64(len(latencies)-1))].Microseconds()) / 1000
	}
	r.P50Ms, r.P90Ms, r.P99Ms = pct(0.50), pct(0.90), pct(0.99)
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}

// workQueue makes the queue pattern's JetStream stream (work-queue retention, in memory) and its
// one durable consumer, and starts n consumer connections on it, each holding at most `window`
// unacknowledged tasks and acking every task; first deliveries go to `deliver`.
func workQueue(connect func(string) *nats.Conn, n, window int, deliver func([]byte, int)) []*nats.Conn {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := connect("admin")
	js, err := jetstream.New(admin)
	if err != nil {
		fail("jetstream: %v", err)
	}
	_ = js.DeleteStream(ctx, "QUEUE")
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      "QUEUE",
		Subjects:  []string{"queue"},
		Retention: jetstream.WorkQueuePolicy,
		Storage:   jetstream.MemoryStorage,
	}); err != nil {
		fail("creating the stream: %v", err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, "QUEUE", jetstream.ConsumerConfig{
		Durable:       "workers",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: n * window,
	}); err != nil {
		fail("creating the consumer: %v", err)
	}
	conns := []*nats.Conn{admin}
	for r := 0; r < n; r++ {
		nc := connect(fmt.Sprintf("consumer-%d", r))
		conns = append(conns, nc)
		cjs, err := jetstream.New(nc)
		if err != nil {
			fail("jetstream: %v", err)
		}
		cons, err := cjs.Consumer(ctx, "QUEUE", "workers")
		if err != nil {
			fail("binding the consumer: %v", err)
		}
		me := r
		if _, err := cons.Consume(func(m jetstream.Msg) {
			_ = m.Ack()
			if md, err := m.Metadata(); err == nil && md.NumDelivered > 1 {
				return
			}
			deliver(m.Data(), me)
		}, jetstream.PullMaxMessages(window)); err != nil {
			fail("consuming: %v", err)
		}
	}
	return conns
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "natsbench: "+format+"\n", args...)
	os.Exit(1)
}
