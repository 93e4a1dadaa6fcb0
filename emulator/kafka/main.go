// Command kafka serves an in-process Kafka cluster (franz-go's kfake) on
// free 127.0.0.1 ports until it is sent SIGTERM or SIGINT, for tests and
// local development. It prints one line, "KAFKA_BROKERS=host:port,...",
// when the brokers accept connections; with -pid-file it writes its PID
// there too.
//
//	go run ./emulator/kafka -brokers 1
//
// With -control 127.0.0.1:0 it also serves kfake's fault injection over
// HTTP on that address (loopback only: it lets anyone fail the cluster's
// requests) and prints "KAFKA_CONTROL=host:port" before the brokers' line:
//
//	POST   /faults       {"request": "OffsetCommit", "group": "g", "topic": "",
//	                      "error": "NOT_COORDINATOR", "count": -1}
//	                     fails the next count requests of that kind (-1: until
//	                     deleted; default 1) for the entities the group and
//	                     topic select ("" selects all), answering them with
//	                     the Kafka error of that protocol name (default
//	                     UNKNOWN_SERVER_ERROR); answers {"id": n}
//	GET    /faults/{id}  answers {"hits": n}, the requests the fault failed
//	DELETE /faults/{id}  ends the fault
//
// A request is failed before the broker acts on it, except that an
// OffsetCommit or a Produce answered REQUEST_TIMED_OUT is applied first, as
// a real broker's can be.
//
// kfake is not Kafka: it keeps every record in memory (nothing survives the
// process), has no replication, acks or log truncation to model, and
// enforces no quotas. Its classic group coordinator can wedge for good when
// a group's leader dies between JoinGroup and SyncGroup, or when every
// member is killed at once, which a real broker survives: tests kill one
// member at a time while the group is stable.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("kafka", flag.ContinueOnError)
	brokers := fs.Int("brokers", 1, "number of brokers")
	partitions := fs.Int("partitions", 4, "partitions of a topic created without a count")
	minSession := fs.Duration("min-session-timeout", 100*time.Millisecond, "shortest session timeout a group member may ask for")
	pidFile := fs.String("pid-file", "", "write the process id to this file once serving")
	controlAddr := fs.String("control", "", "serve fault injection over HTTP on this loopback address (127.0.0.1:0 picks a port); empty: none")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *brokers < 1 || *partitions < 1 {
		fmt.Fprintln(os.Stderr, "kafka: -brokers and -partitions must be at least 1")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	c, err := kfake.NewCluster(
		kfake.NumBrokers(*brokers),
		kfake.DefaultNumPartitions(*partitions),
		kfake.AllowAutoTopicCreation(),
		kfake.GroupMinSessionTimeout(*minSession),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafka:", err)
		return 1
	}
	defer c.Close()
	if *controlAddr != "" {
		host, _, err := net.SplitHostPort(*controlAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			fmt.Fprintf(os.Stderr, "kafka: -control %q: must be a loopback address and port, such as 127.0.0.1:0\n", *controlAddr)
			return 2
		}
		ln, err := net.Listen("tcp", *controlAddr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kafka:", err)
			return 1
		}
		srv := &http.Server{Handler: newControl(c), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close() }()
		fmt.Printf("KAFKA_CONTROL=%s\n", ln.Addr())
	}
	if *pidFile != "" {
		if err := os.WriteFile(*pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "kafka:", err)
			return 1
		}
	}
	fmt.Printf("KAFKA_BROKERS=%s\n", strings.Join(c.ListenAddrs(), ","))
	<-ctx.Done()
	return 0
}
